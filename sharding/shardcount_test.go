package sharding_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue/sharding"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The ring's shard count is fixed at its creation (shardcount.go): a
// replica of another count refuses, loudly, and the others go on. These
// tests run rings whose replicas are configured with different
// Config.Shards, started together and one after the other, in every
// order of identities, and check that no key is ever admitted by two
// replicas and that every key is reconciled by the replicas that stay.

const mixedObjects = 200

// ownerWatch samples, every 100 ms, which running replicas admit each key
// (Owns), and records every key admitted by two at once.
type ownerWatch struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	dup  []string
}

func watchOwners(rg *ring) *ownerWatch {
	w := &ownerWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			rg.mu.Lock()
			ms := make([]*member, 0, len(rg.members))
			for _, m := range rg.members {
				ms = append(ms, m)
			}
			rg.mu.Unlock()
			for _, name := range rg.names {
				key := objectsNS + "/" + name
				var by []string
				for _, m := range ms {
					if m.r.Owns(key) {
						by = append(by, m.id)
					}
				}
				if len(by) > 1 {
					w.mu.Lock()
					w.dup = append(w.dup, fmt.Sprintf("%v: %s admitted by %v", time.Now().Format("15:04:05.0"), key, by))
					w.mu.Unlock()
				}
			}
		}
	}()
	return w
}

func (w *ownerWatch) check(t *testing.T) {
	close(w.stop)
	<-w.done
	if len(w.dup) > 0 {
		t.Errorf("%d samples of a key admitted by two replicas, first: %v", len(w.dup), w.dup[:min(5, len(w.dup))])
	}
}

// stopRefused stops replica id, which must have refused the ring: its
// Run returned an error that wraps ErrRingMismatch and names both shard
// counts, Ready said why, and, unless it had joined before the ring was
// mixed, it never wrote a membership Lease.
func (rg *ring) stopRefused(t *testing.T, id string, mine, theirs int, joined bool) {
	rg.mu.Lock()
	m := rg.members[id]
	delete(rg.members, id)
	rg.mu.Unlock()
	ready := m.r.Ready(nil)
	m.cancel()
	<-m.done
	m.lw.Close()
	both := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "Config.Shards "+strconv.Itoa(mine)) &&
			strings.Contains(err.Error(), "Shards "+strconv.Itoa(theirs)+",")
	}
	if !errors.Is(m.leaveEr, sharding.ErrRingMismatch) || !both(m.leaveEr) {
		t.Errorf("%s (Shards %d) in a ring of %d: Run returned %v, want an error wrapping ErrRingMismatch that names both counts", id, mine, theirs, m.leaveEr)
	}
	if !errors.Is(ready, sharding.ErrRingMismatch) || !both(ready) {
		t.Errorf("%s (Shards %d) in a ring of %d: Ready returned %v, want the refusal", id, mine, theirs, ready)
	}
	if n := len(rg.renewedAt(id)); n > 0 && !joined {
		t.Errorf("%s (Shards %d) refused a ring of %d but wrote %d membership Leases", id, mine, theirs, n)
	}
}

// TestMixedShardCounts runs rings of two and three replicas configured
// with 16 and 32 shards, in every assignment of the counts to the
// identities (r-0 sorts first), started together or one after the other.
func TestMixedShardCounts(t *testing.T) {
	cases := [][]int{{16, 32}, {32, 16}}
	for a := 1; a < 7; a++ { // every mix of 16 and 32 over three replicas
		c := make([]int, 3)
		for i := range c {
			c[i] = 16 << (a >> i & 1)
		}
		cases = append(cases, c)
	}
	for _, counts := range cases {
		for _, together := range []bool{true, false} {
			name := fmt.Sprintf("%v/together=%v", counts, together)
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { mixedRing(t, counts, together) })
			})
		}
	}
}

func mixedRing(t *testing.T, counts []int, together bool) {
	rg := newRing(t, counts[0], mixedObjects)
	defer rg.stopAll()
	shardsOf := map[string]int{}
	rg.config = func(id string, cfg *sharding.Config) {
		n, _ := strconv.Atoi(strings.TrimPrefix(id, "r-"))
		cfg.Shards = counts[n]
		shardsOf[id] = counts[n]
	}
	ow := watchOwners(rg)
	rg.start(false)
	if !together {
		rg.waitBalanced(leaseDuration)
	}
	for range counts[1:] {
		rg.start(false)
	}
	go rg.churn(3 * retryPeriod)
	time.Sleep(leaseDuration + 4*maxPeriod)

	// The count the ring was created with wins; every replica of the
	// other refused.
	var winners, losers []string
	for _, id := range rg.ids() {
		r := rg.members[id].r
		if err := r.Ready(nil); err != nil {
			if !errors.Is(err, sharding.ErrRingMismatch) {
				t.Fatalf("%s (Shards %d): Ready returned %v, want nil or a refusal", id, shardsOf[id], err)
			}
			losers = append(losers, id)
			continue
		}
		winners = append(winners, id)
	}
	if len(winners) == 0 {
		t.Fatalf("every replica refused the ring")
	}
	won := shardsOf[winners[0]]
	if !together && won != counts[0] {
		t.Errorf("the ring was started by r-0 (Shards %d), but Shards %d won", counts[0], won)
	}
	for _, id := range winners {
		if shardsOf[id] != won {
			t.Errorf("%s (Shards %d) runs in a ring of %d", id, shardsOf[id], won)
		}
	}
	for _, id := range rg.ids() {
		if shardsOf[id] != won && !containsString(losers, id) {
			t.Errorf("%s (Shards %d) did not refuse a ring of %d", id, shardsOf[id], won)
		}
	}
	for _, id := range losers {
		rg.stopRefused(t, id, shardsOf[id], won, false)
	}
	// The replicas that stay hold every shard and reconcile every key.
	rg.shards = won
	rg.update(50)
	if t.Failed() { // a mixed ring runs: quiet's balance check cannot read it
		time.Sleep(leaseDuration + 2*maxPeriod + time.Second)
		if behind, _ := rg.tr.behind(); len(behind) > 0 {
			t.Errorf("%d of %d keys never reconciled at their latest version", len(behind), mixedObjects)
		}
	} else {
		rg.quiet()
	}
	ow.check(t)
	rg.checkExclusive()
}

func containsString(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// TestMixedOutsideProtocol mixes a ring as only a hand (or a replica of a
// version that did not record the count) can: the ring's Lease is deleted
// while the ring runs. A newcomer of another count still refuses, from
// the shard Leases it sees held; and once a shard Lease of another count
// is held by a live member, every replica that sees it leaves the ring
// with the refusal.
func TestMixedOutsideProtocol(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rg := newRing(t, 16, mixedObjects)
		defer rg.stopAll()
		admin := rg.leases.Clientset("admin").CoordinationV1().Leases("ring")
		ctx := context.Background()
		a, b := rg.start(false), rg.start(false)
		rg.waitBalanced(leaseDuration)
		if err := admin.Delete(ctx, "ctl-ring", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting the ring's Lease: %v", err)
		}
		rg.config = func(id string, cfg *sharding.Config) { cfg.Shards = 32 }
		c := rg.start(false)
		time.Sleep(2 * maxPeriod)
		rg.stopRefused(t, c, 32, 16, false)
		for _, id := range []string{a, b} {
			if err := rg.members[id].r.Ready(nil); err != nil {
				t.Errorf("%s, of the ring's count, is not ready once a newcomer of another refused: %v", id, err)
			}
		}

		// A live member of another count holding a shard.
		now := metav1.NewMicroTime(time.Now())
		holder, session, secs := "x", "sx", int32(15)
		for _, l := range []*coordinationv1.Lease{
			{ObjectMeta: metav1.ObjectMeta{Name: "ctl-member-x", Labels: map[string]string{sharding.LabelRing: "ctl", sharding.LabelRole: "member"},
				Annotations: map[string]string{sharding.AnnotationSession: session, sharding.AnnotationShards: "64"}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}},
			{ObjectMeta: metav1.ObjectMeta{Name: "ctl-shard-40", Labels: map[string]string{sharding.LabelRing: "ctl", sharding.LabelRole: "shard"},
				Annotations: map[string]string{sharding.AnnotationSession: session, sharding.AnnotationShards: "64"}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}},
		} {
			if _, err := admin.Create(ctx, l, metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating %s: %v", l.Name, err)
			}
		}
		time.Sleep(gracePeriod + 2*maxPeriod)
		for _, id := range []string{a, b} {
			if got := rg.members[id].r.Shards(); len(got) > 0 {
				t.Errorf("%s still admits shards %v beside a holder of another count", id, got)
			}
			rg.stopRefused(t, id, 16, 64, true)
		}
	})
}

// TestReshardByProcedure changes a ring's count as docs/operate.md says: stop
// every replica, delete the ring's Leases, start the replicas with the
// new count. And a ring left by a version that did not record the count
// (its shard Leases released, no ring's Lease): the new count takes the
// old count's free shard Leases over, with no AlreadyExists loop.
func TestReshardByProcedure(t *testing.T) {
	for _, deleteAll := range []bool{true, false} {
		t.Run(fmt.Sprintf("delete all=%v", deleteAll), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rg := newRing(t, 16, mixedObjects)
				defer rg.stopAll()
				admin := rg.leases.Clientset("admin").CoordinationV1().Leases("ring")
				ctx := context.Background()
				rg.start(false)
				rg.start(false)
				rg.waitBalanced(leaseDuration)
				for _, id := range rg.ids() {
					rg.stop(id)
				}
				l, err := admin.List(ctx, metav1.ListOptions{LabelSelector: sharding.LabelRing + "=ctl"})
				if err != nil {
					t.Fatalf("listing the ring's Leases: %v", err)
				}
				for _, le := range l.Items {
					if deleteAll || le.Name == "ctl-ring" {
						if err := admin.Delete(ctx, le.Name, metav1.DeleteOptions{}); err != nil {
							t.Fatalf("deleting %s: %v", le.Name, err)
						}
					}
				}
				rg.shards = 32
				ow := watchOwners(rg)
				for range 3 {
					rg.start(false)
				}
				rg.waitBalanced(leaseDuration + 4*maxPeriod)
				rg.update(50)
				rg.quiet()
				ow.check(t)
				rg.checkExclusive()
				for _, id := range rg.ids() {
					if err := rg.members[id].r.Ready(nil); err != nil {
						t.Errorf("%s: Ready: %v", id, err)
					}
				}
			})
		})
	}
}

// TestObjectsWithoutUID checks that objects without a UID, sharded by
// UID, are counted (Metrics.WithoutUID, ObjectsWithoutUID) instead of
// silently sharing one shard.
func TestObjectsWithoutUID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rg := newRing(t, 16, 20) // these have UIDs
		defer rg.stopAll()
		g := &lastGauge{}
		rg.config = func(id string, cfg *sharding.Config) { cfg.Metrics.WithoutUID = g }
		id := rg.start(false)
		rg.waitBalanced(leaseDuration)
		r := rg.members[id].r
		if n := r.ObjectsWithoutUID(); n != 0 {
			t.Errorf("ObjectsWithoutUID is %d with every object's UID set, want 0", n)
		}
		for i := range 3 {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: objectsNS, Name: fmt.Sprintf("no-uid-%d", i)}}
			if _, err := rg.objs.AppsV1().Deployments(objectsNS).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating %s: %v", d.Name, err)
			}
		}
		time.Sleep(time.Second)
		if n := r.ObjectsWithoutUID(); n != 3 {
			t.Errorf("ObjectsWithoutUID is %d after 3 objects without a UID were created, want 3", n)
		}
		if v, _ := g.get(); v != 3 {
			t.Errorf("Metrics.WithoutUID is %v, want 3", v)
		}
	})
}

// TestWritesAtMinRetryPeriod checks the write bound New's floor gives: a
// quiet ring at MinRetryPeriod writes at most one membership Lease per
// replica per period, 5 a second.
func TestWritesAtMinRetryPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rg := newRing(t, 16, 20)
		defer rg.stopAll()
		rg.timing.RetryPeriod = sharding.MinRetryPeriod
		rg.timing.RenewDeadline = 2 * time.Second
		rg.timing.LeaseDuration = 3 * time.Second
		rg.timing.GracePeriod = time.Second
		for range 3 {
			rg.start(false)
		}
		rg.waitBalanced(10 * time.Second)
		time.Sleep(time.Second)
		before := rg.leases.TotalWrites()
		window := 10 * time.Second
		time.Sleep(window)
		w := rg.leases.TotalWrites() - before
		if limit := int64(3 * window / sharding.MinRetryPeriod); w > limit {
			t.Errorf("%d Lease writes in %v by 3 replicas at RetryPeriod %v, limit %d", w, window, sharding.MinRetryPeriod, limit)
		}
		t.Logf("FIGURES %.1f Lease writes/s per replica at RetryPeriod %v", float64(w)/3/window.Seconds(), sharding.MinRetryPeriod)
	})
}
