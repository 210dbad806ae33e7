package interop

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	clientworkqueue "k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// TestControllerRuntimeRunsOnOurQueue builds a controller-runtime controller
// whose NewQueue option returns our RateLimitingQueue, without a manager and
// without an API server: controller.NewTypedUnmanaged needs neither, and a
// source.TypedFunc feeds requests straight into the queue (a Kind source
// would need a cache, and so a cluster). It then checks that Reconcile runs
// for every request, that a failing request is retried through our
// AddRateLimited, that RequeueAfter goes through our AddAfter, that a
// request is never reconciled twice at once, and that stopping the
// controller shuts our queue down.
func TestControllerRuntimeRunsOnOurQueue(t *testing.T) {
	t.Parallel()
	req := func(name string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: name}}
	}
	var (
		mu       sync.Mutex
		calls    = map[string]int{}
		inFlight = map[string]bool{}
		overlap  atomic.Bool           // a request reconciled by two workers at once
		allDone  = make(chan struct{}) // closed once every request has its calls
		doneOnce sync.Once
	)
	// want: calls per request once the controller has settled.
	want := map[string]int{"plain": 1, "flaky": 2, "later": 2}
	reconciler := reconcile.Func(func(ctx context.Context, r reconcile.Request) (reconcile.Result, error) {
		mu.Lock()
		if inFlight[r.Name] {
			overlap.Store(true)
		}
		inFlight[r.Name] = true
		calls[r.Name]++
		n := calls[r.Name]
		mu.Unlock()
		defer func() {
			mu.Lock()
			inFlight[r.Name] = false
			done := true
			for k, v := range want {
				done = done && calls[k] >= v
			}
			if done {
				doneOnce.Do(func() { close(allDone) })
			}
			mu.Unlock()
		}()
		switch {
		case r.Name == "flaky" && n == 1:
			return reconcile.Result{}, errors.New("transient")
		case r.Name == "later" && n == 1:
			return reconcile.Result{RequeueAfter: 5 * time.Millisecond}, nil
		}
		return reconcile.Result{}, nil
	})

	var (
		ours        *workqueue.RateLimitingQueue[reconcile.Request]
		gotLimiter  clientworkqueue.TypedRateLimiter[reconcile.Request]
		newQueueRan int
	)
	skip := true
	c, err := controller.NewTypedUnmanaged("ours", controller.TypedOptions[reconcile.Request]{
		Reconciler:              reconciler,
		MaxConcurrentReconciles: 3,
		SkipNameValidation:      &skip,
		NewQueue: func(name string, rl clientworkqueue.TypedRateLimiter[reconcile.Request]) clientworkqueue.TypedRateLimitingInterface[reconcile.Request] {
			newQueueRan++
			gotLimiter = rl
			// controller-runtime's limiter, a client-go type, drives our
			// queue as it is: it is a workqueue.RateLimiter.
			ours = workqueue.NewRateLimitingQueue[reconcile.Request](rl)
			return ours
		},
	})
	require.NoError(t, err)
	require.NoError(t, c.Watch(source.TypedFunc[reconcile.Request](func(ctx context.Context, q clientworkqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		for _, name := range []string{"plain", "flaky", "later", "plain", "plain"} {
			q.Add(req(name)) // the duplicates of plain coalesce (or rerun once if plain is in flight)
		}
		return nil
	})))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- c.Start(ctx) }()

	select {
	case <-allDone:
	case err := <-started:
		t.Fatalf("controller stopped early: %v", err)
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("Reconcile was not called as expected; calls so far: %v", calls)
	}
	cancel()
	require.NoError(t, <-started, "Start returns nil once its context ends")

	require.Equal(t, 1, newQueueRan, "controller-runtime asks for the queue once, at Start")
	require.NotNil(t, gotLimiter, "NewQueue is given controller-runtime's default limiter")
	require.False(t, overlap.Load(), "no request was reconciled by two workers at once")
	mu.Lock()
	require.Equal(t, 2, calls["flaky"], "the failed request was retried once, through AddRateLimited")
	require.Equal(t, 2, calls["later"], "RequeueAfter brought the request back, through AddAfter")
	require.GreaterOrEqual(t, calls["plain"], 1)
	require.LessOrEqual(t, calls["plain"], 2, "three adds of plain ran at most twice")
	mu.Unlock()
	require.Equal(t, 0, ours.NumRequeues(req("flaky")), "success made controller-runtime call our Forget")
	require.True(t, ours.ShuttingDown(), "stopping the controller shut our queue down")

	// Our queue is not a controller-runtime PriorityQueue (it has no
	// AddWithOpts or GetWithPriority), so controller-runtime wraps it and
	// every request runs at priority 0: see docs/controller-runtime.md.
	_, isPQ := any(ours).(priorityqueue.PriorityQueue[reconcile.Request])
	require.False(t, isPQ, "docs/controller-runtime.md says our queue is wrapped, not used as a PriorityQueue")
}
