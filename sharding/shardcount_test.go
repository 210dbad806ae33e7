package sharding_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue/sharding"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A ring has one shard count at a time, recorded in its Lease; a
// replica of another count waits, holding nothing, and the ring switches
// to its count once no replica of the ring's count remains
// (shardcount.go). These tests run rings whose replicas are configured
// with different Config.Shards, started together and one after the
// other, in every order of identities, then stop the replicas of the
// ring's count as a rollout's old pods are stopped, and check that no key
// is ever admitted by two replicas, that the ring switches, and that
// every key is reconciled by the replicas of the new count.

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
// Run returned an error that wraps ErrRingMismatch and contains each of
// want, Ready said why, and, unless it had joined before the ring was
// mixed, it never wrote a membership Lease.
func (rg *ring) stopRefused(t *testing.T, id string, joined bool, want ...string) {
	rg.mu.Lock()
	m := rg.members[id]
	delete(rg.members, id)
	rg.mu.Unlock()
	ready := m.r.Ready(nil)
	m.cancel()
	<-m.done
	m.lw.Close()
	names := func(err error) bool {
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				return false
			}
		}
		return err != nil
	}
	if !errors.Is(m.leaveEr, sharding.ErrRingMismatch) || !names(m.leaveEr) {
		t.Errorf("%s: Run returned %v, want an error wrapping ErrRingMismatch that names %q", id, m.leaveEr, want)
	}
	if !errors.Is(ready, sharding.ErrRingMismatch) || !names(ready) {
		t.Errorf("%s: Ready returned %v, want the refusal", id, ready)
	}
	if n := len(rg.renewedAt(id)); n > 0 && !joined {
		t.Errorf("%s refused the ring but wrote %d membership Leases", id, n)
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

// coverage reports, for a ring of shards shards, whether every shard is
// admitted by exactly one replica and only replicas in of admit any, and
// why not.
func (rg *ring) coverage(shards int, of map[string]bool) (bool, string) {
	h := make([][]string, shards)
	rg.mu.Lock()
	for id, m := range rg.members {
		for _, s := range m.r.Shards() {
			if !of[id] || s >= shards {
				rg.mu.Unlock()
				return false, fmt.Sprintf("%s admits shard %d", id, s)
			}
			h[s] = append(h[s], id)
		}
	}
	rg.mu.Unlock()
	for i, ids := range h {
		if len(ids) != 1 {
			return false, fmt.Sprintf("shard %d of %d admitted by %v", i, shards, ids)
		}
	}
	return true, ""
}

func mixedRing(t *testing.T, counts []int, together bool) {
	rg := newRing(t, counts[0], mixedObjects)
	defer rg.stopAll()
	shardsOf := map[string]int{}
	mismatch := map[string]*lastGauge{}
	rg.config = func(id string, cfg *sharding.Config) {
		n, _ := strconv.Atoi(strings.TrimPrefix(id, "r-"))
		cfg.Shards = counts[n]
		shardsOf[id] = counts[n]
		mismatch[id] = &lastGauge{}
		cfg.Metrics.Mismatch = mismatch[id]
	}
	// From blocking on, the handlers of the ring's count run until
	// cancelled (stopping a replica cancels them), and return a second
	// later: the old replicas' drain ends then, and a replica of the new
	// count that ran one of those keys before would be caught by the
	// tracker.
	rg.retDly = time.Second
	var blocking atomic.Int64 // the ring's count, 0: none
	var mu sync.Mutex
	rg.blocks = func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return int64(shardsOf[id]) == blocking.Load()
	}
	rg.config = func(id string, cfg *sharding.Config) {
		n, _ := strconv.Atoi(strings.TrimPrefix(id, "r-"))
		mu.Lock()
		defer mu.Unlock()
		cfg.Shards = counts[n]
		shardsOf[id] = counts[n]
		mismatch[id] = &lastGauge{}
		cfg.Metrics.Mismatch = mismatch[id]
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

	// The ring keeps the count it was created with; the replicas of the
	// other count hold nothing, wait, and are ready once they have filled
	// the share they will take.
	st0 := rg.members["r-0"].r.Status()
	ring, gen := st0.RingShards, st0.Generation
	if !together && ring != counts[0] {
		t.Errorf("the ring was started by r-0 (Shards %d), but has Shards %d", counts[0], ring)
	}
	old, next := map[string]bool{}, map[string]bool{}
	other := 0
	for _, id := range rg.ids() {
		st := rg.members[id].r.Status()
		if st.RingShards != ring || st.Target != 0 || st.Generation != 0 {
			t.Errorf("%s sees the ring at Shards %d, target %d, generation %d; r-0 sees %d, none, 0", id, st.RingShards, st.Target, st.Generation, ring)
		}
		want, gauge := "live", 0.0
		if shardsOf[id] == ring {
			old[id] = true
		} else {
			next[id], other, want, gauge = true, shardsOf[id], "waiting", 1
		}
		if st.Mode != want {
			t.Errorf("%s (Shards %d) in a ring of %d: mode %q, want %q", id, shardsOf[id], ring, st.Mode, want)
		}
		if g, _ := mismatch[id].get(); g != gauge {
			t.Errorf("%s (Shards %d) in a ring of %d: Metrics.Mismatch %v, want %v", id, shardsOf[id], ring, g, gauge)
		}
		if err := rg.members[id].r.Ready(nil); err != nil {
			t.Errorf("%s (Shards %d) in a ring of %d: Ready: %v", id, shardsOf[id], ring, err)
		}
	}
	if ok, why := rg.coverage(ring, old); !ok {
		t.Errorf("the ring of %d before the switch: %s", ring, why)
	}
	rg.update(20)
	time.Sleep(2 * time.Second)
	if behind, _ := rg.tr.behind(); len(behind) > 0 {
		t.Errorf("%d of %d keys not reconciled before the switch", len(behind), mixedObjects)
	}

	// The replicas of the ring's count leave together, as a rollout's old
	// pods do once the new ones are available: the ring switches. Every
	// key is in flight on them when they are stopped.
	blocking.Store(int64(ring))
	for i, name := range rg.names {
		if i%20 == 19 {
			synctest.Wait() // the fake's watch channels hold 100 events
		}
		rg.bump(name)
	}
	time.Sleep(time.Second)
	start := time.Now()
	var wg sync.WaitGroup
	for id := range old {
		wg.Go(func() { rg.stop(id) })
	}
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		rg.churn(2 * retryPeriod)
	}()
	deadline := start.Add(leaseDuration)
	for {
		if ok, _ := rg.coverage(other, next); ok {
			break
		}
		if time.Now().After(deadline) {
			_, why := rg.coverage(other, next)
			t.Fatalf("the ring has not switched from %d to %d shards %v after its replicas of %d left: %s", ring, other, leaseDuration, ring, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	wg.Wait()
	t.Logf("FIGURES switch %d → %d shards (%d replicas): every shard admitted again %v after the old replicas were stopped (their runs returned %v after)", ring, other, len(next), took, rg.retDly)
	if took < rg.retDly || took > rg.retDly+time.Second {
		t.Errorf("the switch took %v: want the drain (the runs returned after %v) and at most a second", took, rg.retDly)
	}
	for id := range next {
		st := rg.members[id].r.Status()
		if st.RingShards != other || st.Mode != "live" || st.Generation != gen+1 {
			t.Errorf("%s after the switch: ring Shards %d, generation %d, mode %q; want %d, %d, live", id, st.RingShards, st.Generation, st.Mode, other, gen+1)
		}
		if g, _ := mismatch[id].get(); g != 0 {
			t.Errorf("%s after the switch: Metrics.Mismatch %v, want 0", id, g)
		}
	}
	rg.shards = other
	<-churned
	rg.update(50)
	rg.quiet()
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

// TestSwitchWithoutTarget starts a switch of the count that no replica
// is configured for (a rollout of a new count rolled back once the switch
// began; here written by hand into the ring's Lease): the replicas of the
// ring's count release every shard sealed, the switch completes, and,
// with no replica of its count in the ring, the ring switches back. The
// replicas that hold shards while the switch waits for them keep none.
func TestSwitchWithoutTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rg := newRing(t, 16, mixedObjects)
		defer rg.stopAll()
		admin := rg.leases.Clientset("admin").CoordinationV1().Leases("ring")
		ctx := context.Background()
		var mu sync.Mutex
		var writes []string // the ring Lease's states, as written
		rg.onWrite = func(id, verb string, l *coordinationv1.Lease, err error) {
			if err == nil && l != nil && l.Name == "ctl-ring" {
				mu.Lock()
				writes = append(writes, fmt.Sprintf("%s:%s/%s/%s", id, l.Annotations[sharding.AnnotationShards],
					cmp.Or(l.Annotations[sharding.AnnotationGeneration], "0"), cmp.Or(l.Annotations[sharding.AnnotationTarget], "-")))
				mu.Unlock()
			}
		}
		ow := watchOwners(rg)
		rg.start(false)
		rg.start(false)
		rg.waitBalanced(leaseDuration)
		churned := make(chan struct{})
		go func() {
			defer close(churned)
			rg.churn(4 * retryPeriod)
		}()
		l, err := admin.Get(ctx, "ctl-ring", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading the ring's Lease: %v", err)
		}
		l.Annotations[sharding.AnnotationTarget] = "32"
		if _, err := admin.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("writing the ring's target: %v", err)
		}
		start := time.Now()
		for {
			st := rg.members["r-0"].r.Status()
			if st.RingShards == 16 && st.Generation == 2 && st.Target == 0 {
				if ok, _ := rg.balanced(); ok {
					break
				}
			}
			if time.Since(start) > leaseDuration {
				_, why := rg.balanced()
				mu.Lock()
				t.Fatalf("the ring is at Shards %d, generation %d, target %d %v after a switch to 32 began, want back at 16 in generation 2, balanced (%s); the ring's Lease was written %v",
					st.RingShards, st.Generation, st.Target, leaseDuration, why, writes)
			}
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		t.Logf("FIGURES a switch to a count no replica has: back to 16 shards, balanced, %v after it began; the ring's Lease was written %v", time.Since(start), writes)
		// created, the target by hand, switched to 32, a switch back, switched to 16
		if want := []string{"16/0/-", "16/0/32", "32/1/-", "32/1/16", "16/2/-"}; len(writes) != len(want) {
			t.Errorf("the ring's Lease was written %v, want the states %v", writes, want)
		} else {
			for i, w := range writes {
				if _, st, _ := strings.Cut(w, ":"); st != want[i] {
					t.Errorf("write %d of the ring's Lease: %s, want %s", i, w, want[i])
				}
			}
		}
		mu.Unlock()
		<-churned
		rg.update(50)
		rg.quiet()
		ow.check(t)
		rg.checkExclusive()
	})
}

// TestMixedOutsideProtocol mixes a ring as only a hand can: the ring's
// Lease is deleted while the ring runs. A newcomer of another count
// refuses, from the shard Leases it sees held (it cannot tell the ring's
// count); and once a shard Lease of another count is held by a live
// member, every replica that sees it leaves the ring with the refusal.
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
		rg.stopRefused(t, c, false, "Config.Shards 32", "is of Shards 16")
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
			{ObjectMeta: metav1.ObjectMeta{Name: "ctl-shard-40-of-64", Labels: map[string]string{sharding.LabelRing: "ctl", sharding.LabelRole: "shard"},
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
			rg.stopRefused(t, id, true, "Config.Shards 16", "is of Shards 64")
		}
	})
}

// TestReshardByProcedure runs the offline procedure docs/operate.md gives
// for a change of Field (stop every replica, delete the ring's Leases,
// start the replicas with the new configuration), here with a new count:
// the new ring starts clean. And with only the ring's Lease deleted: the
// old count's released shard Leases are left alone (another count's
// names), and the new ring starts as clean.
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
