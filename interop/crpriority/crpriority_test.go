package crpriority_test

import (
	"context"
	"math"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/crpriority"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/types"
	clientworkqueue "k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAddWithOpts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := crpriority.New[string](workqueue.NewItemExponentialFailureRateLimiter[string](time.Second, time.Hour), workqueue.Config[string]{})
		defer q.ShutDown()
		hi, lo := 10, -1
		q.AddWithOpts(priorityqueue.AddOpts{}, "plain")
		q.AddWithOpts(priorityqueue.AddOpts{Priority: &lo}, "low")
		q.AddWithOpts(priorityqueue.AddOpts{Priority: &hi}, "high-1", "high-2")
		q.AddWithOpts(priorityqueue.AddOpts{After: time.Minute, Priority: &hi}, "later")
		// Rate limited: the limiter says 1s, smaller than After's 1h.
		q.AddWithOpts(priorityqueue.AddOpts{After: time.Hour, RateLimited: true}, "retry")
		for _, want := range []struct {
			key  string
			prio int
		}{{"high-1", 10}, {"high-2", 10}, {"plain", 0}, {"low", -1}} {
			k, p, _ := q.GetWithPriority()
			require.Equal(t, want.key, k)
			require.Equal(t, want.prio, p)
			q.Done(k)
		}
		require.Equal(t, 2, q.Stats().Waiting)
		time.Sleep(time.Second)
		synctest.Wait()
		k, _, _ := q.GetWithPriority()
		require.Equal(t, "retry", k, "the limiter's 1s is smaller than After's 1h")
		require.Equal(t, 1, q.NumRequeues("retry"))
		q.Done(k)
		time.Sleep(time.Minute)
		synctest.Wait()
		k, p, _ := q.GetWithPriority()
		require.Equal(t, "later", k)
		require.Equal(t, 10, p, "a delayed key becomes ready with its priority")
		q.Done(k)

		q.ShutDown()
		q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, "gone")
		require.Zero(t, q.NumRequeues("gone"), "no failure is counted after ShutDown")
	})
}

// TestControllerKeepsPriorities runs a controller-runtime controller on the
// adapter and checks that it is used as a priority queue: a request added
// with a high priority is reconciled before the low-priority ones queued
// ahead of it.
func TestControllerKeepsPriorities(t *testing.T) {
	var (
		mu    sync.Mutex
		order []string
		isPQ  atomic.Bool
	)
	gateTaken, release, allDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	req := func(name string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: name}}
	}
	c, err := controller.NewTypedUnmanaged("crpriority", controller.TypedOptions[reconcile.Request]{
		MaxConcurrentReconciles: 1,
		SkipNameValidation:      new(true),
		Reconciler: reconcile.TypedFunc[reconcile.Request](func(ctx context.Context, r reconcile.Request) (reconcile.Result, error) {
			if r.Name == "gate" {
				close(gateTaken)
				<-release // hold the only worker while the others queue up
			}
			mu.Lock()
			defer mu.Unlock()
			if order = append(order, r.Name); len(order) == 4 {
				close(allDone)
			}
			return reconcile.Result{}, nil
		}),
		NewQueue: func(name string, rl clientworkqueue.TypedRateLimiter[reconcile.Request]) clientworkqueue.TypedRateLimitingInterface[reconcile.Request] {
			return crpriority.New[reconcile.Request](rl, workqueue.Config[reconcile.Request]{})
		},
	})
	require.NoError(t, err)
	fed := make(chan struct{})
	src := source.TypedFunc[reconcile.Request](func(ctx context.Context, q clientworkqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
		isPQ.Store(ok)
		q.Add(req("gate"))
		go func() {
			defer close(fed)
			<-gateTaken
			if ok {
				low, high := -100, 100
				pq.AddWithOpts(priorityqueue.AddOpts{Priority: &low}, req("low-1"), req("low-2"))
				pq.AddWithOpts(priorityqueue.AddOpts{Priority: &high}, req("high"))
			} else {
				q.Add(req("low-1"))
				q.Add(req("low-2"))
				q.Add(req("high"))
			}
			close(release)
		}()
		return nil
	})
	require.NoError(t, c.Watch(src))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Start(ctx) }()
	<-fed
	<-allDone
	cancel()
	require.NoError(t, <-done)
	require.True(t, isPQ.Load(), "controller-runtime hands sources our queue as a priority queue")
	require.Equal(t, []string{"gate", "high", "low-1", "low-2"}, order, "the high-priority request jumped the queue")
}

// TestShutDownEndsDrain checks "drain on the first signal, force on the
// second" through the controller-runtime adapter: a drain waits for a key
// in flight, and ShutDown ends it at once.
func TestShutDownEndsDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := crpriority.New[string](nil, workqueue.Config[string]{})
		q.AddWithOpts(priorityqueue.AddOpts{}, "a")
		a, _, _ := q.GetWithPriority() // never Done until the end
		drained := make(chan struct{})
		go func() {
			q.ShutDownWithDrain()
			close(drained)
		}()
		synctest.Wait()
		select {
		case <-drained:
			t.Fatal("the drain must wait while a key is processing")
		default:
		}
		q.ShutDown()
		synctest.Wait()
		select {
		case <-drained:
		default:
			t.Fatal("ShutDown must end the waiting drain")
		}
		q.Done(a)
	})
}

// Each test below runs the same calls on crpriority and on
// controller-runtime's own priority queue (unnamed, so it reports no
// metrics), and asserts the same answer from both: where controller-runtime
// and the core queue differ, crpriority takes controller-runtime's side.

// bothQueues returns crpriority's queue and controller-runtime's, by name.
func bothQueues() map[string]priorityqueue.PriorityQueue[string] {
	return map[string]priorityqueue.PriorityQueue[string]{
		"crpriority":         crpriority.New[string](nil, workqueue.Config[string]{}),
		"controller-runtime": priorityqueue.New[string](""),
	}
}

// TestGetAfterShutDown: once the queue is shut down, Get hands out nothing,
// even with keys ready, so a stopped controller does not reconcile its
// backlog with a cancelled context. (The core queue keeps handing them out,
// for a drain.)
func TestGetAfterShutDown(t *testing.T) {
	for name, q := range bothQueues() {
		t.Run(name, func(t *testing.T) {
			q.AddWithOpts(priorityqueue.AddOpts{}, "a", "b")
			require.Equal(t, 2, q.Len())
			q.ShutDown()
			k, shutdown := q.Get()
			require.True(t, shutdown, "Get after ShutDown reports shutdown (got key %q)", k)
			_, _, shutdown = q.GetWithPriority()
			require.True(t, shutdown, "so does GetWithPriority")
		})
	}
}

// TestGetBlockedAtShutDown: a Get that waits on an empty queue returns
// shutdown when the queue shuts down.
func TestGetBlockedAtShutDown(t *testing.T) {
	for name, q := range bothQueues() {
		t.Run(name, func(t *testing.T) {
			got := make(chan bool)
			go func() {
				_, shutdown := q.Get()
				got <- shutdown
			}()
			q.ShutDown()
			require.True(t, <-got, "the blocked Get reports shutdown")
		})
	}
}

// TestLenCountsKeyAddedWhileProcessing: a key added again while it is
// processing is due (it runs after its Done), and Len counts it; a key
// waiting for an After is not counted.
func TestLenCountsKeyAddedWhileProcessing(t *testing.T) {
	for name, q := range bothQueues() {
		t.Run(name, func(t *testing.T) {
			defer q.ShutDown()
			q.AddWithOpts(priorityqueue.AddOpts{}, "a")
			k, _ := q.Get()
			require.Equal(t, "a", k)
			require.Zero(t, q.Len())
			q.AddWithOpts(priorityqueue.AddOpts{}, "a")
			require.Equal(t, 1, q.Len(), "the key re-added while processing is counted")
			q.AddWithOpts(priorityqueue.AddOpts{After: time.Hour}, "later")
			require.Equal(t, 1, q.Len(), "a waiting key is not")
			q.Done("a")
			require.Equal(t, 1, q.Len(), "after Done the key is ready, counted once")
		})
	}
}

// TestFullRangePriorities: priorities are ints, and every int orders: ones
// beyond int32 (which the queue once clamped, merging 1<<40 and MaxInt into
// one level) come out in order. Keys are added lowest first, so merged
// levels would hand them out in the wrong order.
func TestFullRangePriorities(t *testing.T) {
	prios := []int{math.MinInt, math.MinInt32 - 1, math.MinInt32, -1, 0, math.MaxInt32, math.MaxInt32 + 1, 1 << 40, math.MaxInt - 1, math.MaxInt}
	for name, q := range bothQueues() {
		t.Run(name, func(t *testing.T) {
			defer q.ShutDown()
			for _, p := range prios {
				q.AddWithOpts(priorityqueue.AddOpts{Priority: &p}, strconv.Itoa(p))
			}
			for i := len(prios) - 1; i >= 0; i-- {
				k, p, _ := q.GetWithPriority()
				require.Equal(t, strconv.Itoa(prios[i]), k, "highest priority first")
				require.Equal(t, prios[i], p, "the priority comes back unchanged")
				q.Done(k)
			}
		})
	}
}

// TestDifferenceReAddOrder shows the one place where crpriority and
// controller-runtime's priority queue still differ (interop/README.md): a
// key added again while it is processing. controller-runtime files it,
// locked, by when it was added again, so at Done it comes before keys
// added after that; crpriority makes it ready at Done, at the back of its
// priority, as the core queue and client-go do.
func TestDifferenceReAddOrder(t *testing.T) {
	want := map[string][]string{
		"crpriority":         {"b", "a"},
		"controller-runtime": {"a", "b"},
	}
	for name, q := range bothQueues() {
		t.Run(name, func(t *testing.T) {
			defer q.ShutDown()
			q.AddWithOpts(priorityqueue.AddOpts{}, "a")
			k, _ := q.Get()
			require.Equal(t, "a", k)
			q.AddWithOpts(priorityqueue.AddOpts{}, "a") // again, while processing
			q.AddWithOpts(priorityqueue.AddOpts{}, "b")
			q.Done("a")
			var got []string
			for range 2 {
				k, _ := q.Get()
				got = append(got, k)
				q.Done(k)
			}
			require.Equal(t, want[name], got)
		})
	}
}

// TestStoppedControllerLeavesBacklog runs the newcomer's trial: a
// controller-runtime controller with one worker holds a request while 100
// more queue up, and is stopped. On controller-runtime's own queue, Start
// returns after the request in hand, and none of the 100 is reconciled;
// so it must be on crpriority (it once reconciled all 100, each with a
// cancelled context, before Start returned).
func TestStoppedControllerLeavesBacklog(t *testing.T) {
	queues := map[string]func() clientworkqueue.TypedRateLimitingInterface[reconcile.Request]{
		"crpriority": func() clientworkqueue.TypedRateLimitingInterface[reconcile.Request] {
			return crpriority.New[reconcile.Request](nil, workqueue.Config[reconcile.Request]{})
		},
		"controller-runtime": func() clientworkqueue.TypedRateLimitingInterface[reconcile.Request] {
			return priorityqueue.New[reconcile.Request]("")
		},
	}
	for name, newQueue := range queues {
		t.Run(name, func(t *testing.T) {
			var cancelled atomic.Int64
			gateTaken, release := make(chan struct{}), make(chan struct{})
			req := func(name string) reconcile.Request {
				return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: name}}
			}
			var q clientworkqueue.TypedRateLimitingInterface[reconcile.Request]
			c, err := controller.NewTypedUnmanaged("backlog", controller.TypedOptions[reconcile.Request]{
				MaxConcurrentReconciles: 1,
				SkipNameValidation:      new(true),
				Reconciler: reconcile.TypedFunc[reconcile.Request](func(ctx context.Context, r reconcile.Request) (reconcile.Result, error) {
					if r.Name == "gate" {
						close(gateTaken)
						<-release
						return reconcile.Result{}, nil
					}
					if ctx.Err() != nil {
						cancelled.Add(1)
					}
					return reconcile.Result{}, nil
				}),
				NewQueue: func(string, clientworkqueue.TypedRateLimiter[reconcile.Request]) clientworkqueue.TypedRateLimitingInterface[reconcile.Request] {
					q = newQueue()
					return q
				},
			})
			require.NoError(t, err)
			require.NoError(t, c.Watch(source.TypedFunc[reconcile.Request](func(ctx context.Context, q clientworkqueue.TypedRateLimitingInterface[reconcile.Request]) error {
				q.Add(req("gate"))
				return nil
			})))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- c.Start(ctx) }()
			<-gateTaken
			for i := range 100 {
				q.Add(req(strconv.Itoa(i)))
			}
			require.Equal(t, 100, q.Len(), "the backlog is queued")
			cancel()
			for !q.ShuttingDown() {
				runtime.Gosched() // Start shuts the queue down when ctx ends
			}
			close(release)
			require.NoError(t, <-done)
			require.Zero(t, cancelled.Load(), "no request of the backlog is reconciled with a cancelled context")
		})
	}
}

// A full drain of a crpriority queue returns once the key in flight is Done,
// with keys still ready: Get refuses them after ShutDown, so waiting for
// them to run would wait for ever. They stay in the queue.
func TestDrainAllReturnsWithReadyKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := crpriority.New[string](nil, workqueue.Config[string]{})
		q.Add("a")
		q.Add("b")
		key, _ := q.Get()
		drained := make(chan error, 1)
		go func() { drained <- q.ShutDownWithDrainAll(t.Context()) }()
		synctest.Wait()
		select {
		case err := <-drained:
			t.Fatalf("the drain returned (%v) while %q was processing", err, key)
		default:
		}
		q.Done(key)
		synctest.Wait()
		select {
		case err := <-drained:
			require.NoError(t, err)
		default:
			t.Fatal("the drain still waits after the last Done, for a ready key that Get refuses")
		}
		require.Equal(t, 1, q.Len(), "the ready key stays in the queue")
	})
}
