package crpriority_test

import (
	"context"
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
