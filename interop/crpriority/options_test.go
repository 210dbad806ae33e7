package crpriority_test

import (
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/crpriority"
)

// starvation runs 4 workers, each reconcile taking 100ms, on a queue made
// with opts: 100 keys of an initial list at controller-runtime's
// LowPriority, then priority-0 keys arriving every 20ms (1.25 times what
// the workers finish) for two minutes. It returns how long each low key
// waited until a worker took it, in the order they were taken, and how
// many were taken while the stream lasted.
func starvation(t *testing.T, opts ...crpriority.Option) (waits []time.Duration, duringStream int) {
	const (
		workers = 4
		work    = 100 * time.Millisecond
		every   = 20 * time.Millisecond
		stream  = 2 * time.Minute
		initial = 100
	)
	q := crpriority.New[reconcile.Request](nil, workqueue.Config[reconcile.Request]{}, opts...)
	req := func(ns, name string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
	}
	start := time.Now()
	low := handler.LowPriority
	for i := range initial {
		q.AddWithOpts(priorityqueue.AddOpts{Priority: &low}, req("initial", strconv.Itoa(i)))
	}
	// A first priority-0 key for each worker, so that the stream is
	// there before the first Get.
	for i := range workers {
		q.AddWithOpts(priorityqueue.AddOpts{}, req("events", "first-"+strconv.Itoa(i)))
	}
	var (
		mu        sync.Mutex
		streaming = true
		wg        sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for {
				r, prio, shutdown := q.GetWithPriority()
				if shutdown {
					return
				}
				if prio == low {
					mu.Lock()
					waits = append(waits, time.Since(start))
					if streaming {
						duringStream++
					}
					mu.Unlock()
				}
				time.Sleep(work)
				q.Done(r)
			}
		})
	}
	for i := 0; time.Since(start) < stream; i++ {
		q.AddWithOpts(priorityqueue.AddOpts{}, req("events", strconv.Itoa(i)))
		time.Sleep(every)
	}
	mu.Lock()
	streaming = false
	mu.Unlock()
	// Let the backlog run out, then stop.
	for q.Len() > 0 {
		time.Sleep(time.Second)
	}
	q.ShutDown()
	wg.Wait()
	return waits, duringStream
}

// TestMaxWaitServesStarvedKeys is controller-runtime's starvation: with the
// default order, no key of the initial list is reconciled while priority-0
// keys keep coming; WithMaxWait serves each within the bound plus the
// time to hand out the low keys ahead of it.
func TestMaxWaitServesStarvedKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, during := starvation(t)
		require.Zero(t, during, "strict priority: the initial list waits for the stream to end")
	})
	synctest.Test(t, func(t *testing.T) {
		const maxWait = 30 * time.Second
		waits, during := starvation(t, crpriority.WithMaxWait(maxWait))
		require.Len(t, waits, 100)
		require.Equal(t, 100, during, "every key of the initial list is reconciled while the stream goes on")
		// The i-th low key waits for the bound, then for the low keys
		// before it, 4 at a time, and for a worker to finish a run.
		for i, w := range waits {
			bound := maxWait + time.Duration(i/4+1)*100*time.Millisecond
			require.LessOrEqual(t, w, bound, "low key %d waited past the bound", i)
		}
		require.GreaterOrEqual(t, waits[0], maxWait, "below the bound the order is strict priority")
		t.Logf("-100 keys served after %v (first) to %v (last), bound %v", waits[0], slices.Max(waits), maxWait)
	})
}

// TestOptions checks what the options build: no option is today's
// strict order; WithFairness takes turns between namespaces within a
// priority; WithMaxInFlight needs WithFairness; a tenant function of
// another key type is refused.
func TestOptions(t *testing.T) {
	req := func(ns, name string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
	}
	order := func(q *crpriority.Queue[reconcile.Request]) []string {
		var out []string
		for q.Len() > 0 {
			r, _ := q.Get()
			out = append(out, r.String())
			q.Done(r)
		}
		return out
	}
	fill := func(q *crpriority.Queue[reconcile.Request]) {
		hi := 1
		q.Add(req("a", "1"))
		q.Add(req("a", "2"))
		q.Add(req("b", "1"))
		q.AddWithOpts(priorityqueue.AddOpts{Priority: &hi}, req("c", "1"))
	}

	plain := crpriority.New[reconcile.Request](nil, workqueue.Config[reconcile.Request]{})
	fill(plain)
	require.Equal(t, []string{"c/1", "a/1", "a/2", "b/1"}, order(plain), "no option: strict priority, FIFO within one")

	fair := crpriority.New[reconcile.Request](nil, workqueue.Config[reconcile.Request]{}, crpriority.WithFairness(crpriority.Namespace, nil))
	fill(fair)
	require.Equal(t, []string{"c/1", "a/1", "b/1", "a/2"}, order(fair), "namespaces take turns within a priority")

	require.PanicsWithValue(t, "crpriority: WithMaxInFlight needs WithFairness, which says whose keys are whose", func() {
		crpriority.New[reconcile.Request](nil, workqueue.Config[reconcile.Request]{}, crpriority.WithMaxInFlight(2))
	})
	require.Panics(t, func() {
		crpriority.New[string](nil, workqueue.Config[string]{}, crpriority.WithFairness(crpriority.Namespace, nil))
	}, "a tenant function for reconcile.Request on a queue of strings")
}
