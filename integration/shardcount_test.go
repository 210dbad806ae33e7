package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	workqueue "github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/exclusion"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// TestShardCountChange changes a ring's shard count on the real API
// server, as a rolling update that changes Config.Shards does: a replica
// of the new count joins the ring of the old one, holds nothing, fills
// the share it will take and is Ready; once the replica of the old count
// leaves, the ring switches (shardcount.go) and the newcomer admits every
// shard. 16 → 32 and 32 → 16, the second replica started after the
// first or at the same time (one of them creates the ring's Lease). The
// old replica is told to leave with runs in flight that outlast its
// GracePeriod; every key's runs are checked for overlap throughout,
// and every ConfigMap is reconciled after the switch. A replica of
// another Field refuses.
func TestShardCountChange(t *testing.T) {
	admin, err := kubernetes.NewForConfig(server.restConfig())
	require.NoError(t, err)
	ns := createNamespace(t, admin, "shardcount")
	const objects = 100
	const slowRun = 1500 * time.Millisecond
	for i := range objects {
		_, err := admin.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	// One exclusion tracker per ring, shared by its replicas: runs of two
	// replicas of a ring in overlapping hash ranges (across the two
	// counts) are a violation. reconciled records the runs that ended well.
	var mu sync.Mutex // protects the maps below
	trackers := map[string]*exclusion.Tracker{}
	reconciled := map[string]int{}
	lastEnd := map[string]time.Time{} // ring/replica → when its last run ended
	trackerOf := func(ring string) *exclusion.Tracker {
		mu.Lock()
		defer mu.Unlock()
		if trackers[ring] == nil {
			trackers[ring] = &exclusion.Tracker{}
		}
		return trackers[ring]
	}

	type rep struct {
		id     string
		r      *sharding.Replica
		shards int
		cancel context.CancelFunc
		err    chan error
		done   chan struct{}
		// slow makes each run take slowRun instead of 10 ms.
		slow atomic.Bool
	}
	start := func(ring, id string, shards int, field string) *rep {
		cs, err := kubernetes.NewForConfig(server.restConfig())
		require.NoError(t, err)
		cms := cs.CoreV1().ConfigMaps(ns)
		q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
		r, err := sharding.New(sharding.Config{
			Client: cs, Namespace: ns, Name: ring, Identity: id, Shards: shards, Field: field,
			Object: &corev1.ConfigMap{},
			ListerWatcher: &cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return cms.List(ctx, o)
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return cms.Watch(ctx, o)
				},
			},
			Queue:         q,
			LeaseDuration: ringLeaseDuration, RenewDeadline: ringRenewDeadline, RetryPeriod: ringRetryPeriod, GracePeriod: ringGracePeriod,
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		p := &rep{id: id, r: r, shards: shards, cancel: cancel, err: make(chan error, 1), done: make(chan struct{})}
		track := trackerOf(ring)
		handle := func(ctx context.Context, key string) error {
			k := ring + "/" + key // the rings of the test share the ConfigMaps
			track.Enter(id, key, shardOf(r, shards, key))
			defer track.Exit(id, key)
			run := 10 * time.Millisecond // a run; not cancelled, as a handler that finishes its work
			if p.slow.Load() {
				run = slowRun
			}
			time.Sleep(run)
			mu.Lock()
			reconciled[k]++
			lastEnd[ring+"/"+id] = time.Now()
			mu.Unlock()
			return nil
		}
		var wg sync.WaitGroup
		wg.Go(func() { p.err <- r.Run(ctx) })
		wg.Go(func() { _ = workqueue.Run(context.WithoutCancel(ctx), q, 4, r.Handler(handle)) })
		go func() {
			<-ctx.Done()
			q.ShutDown() // the workers return once the replica has left
		}()
		go func() {
			wg.Wait()
			close(p.done)
		}()
		t.Cleanup(func() {
			cancel()
			<-p.done
		})
		return p
	}
	ready := func(p *rep, mode string) {
		t.Helper()
		require.Eventually(t, func() bool { return p.r.Ready(nil) == nil && p.r.Status().Mode == mode }, 20*time.Second, 20*time.Millisecond,
			"replica %s (Shards %d) not ready and %s: Ready %v, mode %q", p.id, p.shards, mode, p.r.Ready(nil), p.r.Status().Mode)
	}
	stop := func(p *rep) {
		t.Helper()
		p.cancel()
		select {
		case err := <-p.err:
			require.NoError(t, err, "replica %s left", p.id)
		case <-time.After(20 * time.Second):
			t.Fatalf("replica %s did not leave within 20 s", p.id)
		}
	}
	// switched waits until p admits every shard of its count, once the
	// old replica was stopped at since, and returns how long that took.
	switched := func(p *rep, since time.Time) time.Duration {
		t.Helper()
		require.Eventually(t, func() bool { return len(p.r.Shards()) == p.shards }, 20*time.Second, 5*time.Millisecond,
			"replica %s (Shards %d) holds %v after the ring's old replica left: %+v", p.id, p.shards, p.r.Shards(), p.r.Status().Mode)
		took := time.Since(since)
		st := p.r.Status()
		require.Equal(t, p.shards, st.RingShards, "the ring's count after the switch")
		require.Equal(t, "live", st.Mode)
		return took
	}
	allReconciled := func(ring string) {
		t.Helper()
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for i := range objects {
				if reconciled[fmt.Sprintf("%s/%s/cm-%03d", ring, ns, i)] == 0 {
					return false
				}
			}
			return true
		}, 20*time.Second, 50*time.Millisecond, "ring %s: not every ConfigMap reconciled after the switch", ring)
	}

	for _, c := range []struct {
		counts   [2]int
		together bool
	}{{[2]int{16, 32}, false}, {[2]int{32, 16}, false}, {[2]int{16, 32}, true}} {
		ring := fmt.Sprintf("change-%d-%d-%v", c.counts[0], c.counts[1], c.together)
		a := start(ring, "a", c.counts[0], "")
		if !c.together {
			ready(a, "live")
		}
		b := start(ring, "b", c.counts[1], "")
		old, next := a, b
		if c.together {
			require.Eventually(t, func() bool { return a.r.Status().RingShards != 0 && b.r.Status().RingShards != 0 }, 20*time.Second, 20*time.Millisecond)
			if a.r.Status().RingShards == b.shards {
				old, next = b, a
			}
		}
		ready(old, "live")
		ready(next, "waiting")
		require.Empty(t, next.r.Shards(), "a waiting replica admits nothing")
		require.Len(t, old.r.Shards(), old.shards, "the ring's replica holds every shard")
		// Every ConfigMap changes, so that the old replica has runs in
		// flight (each slowRun long, past its GracePeriod: the drain waits
		// for them) when it is told to leave, and the newcomer runs every
		// key in a few hundred milliseconds once it admits: had it admitted
		// before the old one's drain ended, it would run one of those keys
		// beside it.
		old.slow.Store(true)
		for i := range objects {
			cm, err := admin.CoreV1().ConfigMaps(ns).Get(t.Context(), fmt.Sprintf("cm-%03d", i), metav1.GetOptions{})
			require.NoError(t, err)
			cm.Data = map[string]string{"ring": ring}
			_, err = admin.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { return trackerOf(ring).InFlight() > 0 }, 10*time.Second, 5*time.Millisecond, "no run in flight on the old replica")
		mu.Lock()
		for k := range reconciled {
			delete(reconciled, k)
		}
		mu.Unlock()
		at := time.Now()
		stop(old)
		took := switched(next, at)
		mu.Lock()
		drained := lastEnd[ring+"/"+old.id].Sub(at)
		mu.Unlock()
		allReconciled(ring)
		t.Logf("FIGURES %s: %d → %d shards: the newcomer admitted every shard %v after the old replica was told to leave, %v after its drain ended (its last run returned)",
			ring, old.shards, next.shards, took.Round(time.Millisecond), (took - drained).Round(time.Millisecond))
		require.Less(t, took-drained, time.Second, "the switch's gap past the old replica's drain: a few Lease round trips")
		stop(next)
	}

	// The field cannot change online: a replica of another field refuses.
	ring := "field"
	a := start(ring, "a", 16, sharding.FieldUID)
	ready(a, "live")
	c := start(ring, "c", 16, sharding.FieldNamespace)
	select {
	case err := <-c.err:
		require.ErrorIs(t, err, sharding.ErrRingMismatch)
		require.Contains(t, err.Error(), "Config.Field "+sharding.FieldNamespace)
		require.ErrorIs(t, c.r.Ready(nil), sharding.ErrRingMismatch)
	case <-time.After(10 * time.Second):
		t.Fatal("a replica of another Field did not refuse within 10 s")
	}
	require.NoError(t, a.r.Ready(nil), "the ring's replica after a newcomer of another field refused")

	mu.Lock()
	defer mu.Unlock()
	for ring, tr := range trackers {
		require.Empty(t, tr.Violations(), "ring %s: runs of two replicas at once in overlapping hash ranges (%d runs)", ring, tr.Runs())
	}
}
