package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/go-coalesce/workqueue"
)

// Tests of Run. Those where time matters run in a testing/synctest bubble,
// whose clock is fake and exact: a retry expected after 5ms happens at 5ms.
// synctest.Test also fails if a goroutine of the bubble is left blocked, so
// every bubbled test doubles as a leak test for Run.

// runLog collects what handles and hooks saw, from any goroutine.
type runLog[E any] struct {
	mu sync.Mutex
	es []E
}

func (l *runLog[E]) add(e E) {
	l.mu.Lock()
	l.es = append(l.es, e)
	l.mu.Unlock()
}

func (l *runLog[E]) get() []E {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]E(nil), l.es...)
}

// runCall is one call of handle: which key, when (since the test started).
type runCall struct {
	key string
	at  time.Duration
}

// runReport is one call of RunConfig.OnError.
type runReport struct {
	key   string
	err   error
	retry bool
}

func runMS(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// exponential5ms returns a queue whose retries wait 5ms, 10ms, 20ms, ….
func exponential5ms() *workqueue.RateLimitingQueue[string] {
	return workqueue.NewRateLimitingQueue(
		workqueue.NewItemExponentialFailureRateLimiter[string](runMS(5), time.Second))
}

// startRun runs Run in a goroutine and returns the channel its result
// arrives on.
func startRun(ctx context.Context, q *workqueue.RateLimitingQueue[string], workers int,
	handle func(context.Context, string) error, cfg ...workqueue.RunConfig[string],
) <-chan error {
	done := make(chan error, 1)
	go func() { done <- workqueue.Run(ctx, q, workers, handle, cfg...) }()
	return done
}

// requireRunning fails if Run has returned. Call it after synctest.Wait.
func requireRunning(t *testing.T, result <-chan error, why string) {
	t.Helper()
	select {
	case err := <-result:
		t.Fatalf("Run returned (%v), but %s", err, why)
	default:
	}
}

func TestRunRetriesFollowTheLimiter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := exponential5ms()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		start := time.Now()
		failures := map[string]int{"a": 4, "b": 2} // per key, before success
		var calls runLog[runCall]
		var mu sync.Mutex // guards tries, requeues
		tries := map[string]int{}
		requeues := map[string]int{}
		handle := func(_ context.Context, key string) error {
			calls.add(runCall{key, time.Since(start)})
			mu.Lock()
			defer mu.Unlock()
			tries[key]++
			if tries[key] <= failures[key] {
				return fmt.Errorf("try %d of %s fails", tries[key], key)
			}
			requeues[key] = q.NumRequeues(key)
			if len(requeues) == len(failures) {
				cancel()
			}
			return nil
		}
		q.Add("a")
		q.Add("b")
		require.NoError(t, workqueue.Run(ctx, q, 2, handle))

		byKey := map[string][]time.Duration{}
		for _, c := range calls.get() {
			byKey[c.key] = append(byKey[c.key], c.at)
		}
		require.Equal(t, []time.Duration{0, runMS(5), runMS(15), runMS(35), runMS(75)}, byKey["a"],
			"a is retried after 5ms, 10ms, 20ms, 40ms, as the limiter says")
		require.Equal(t, []time.Duration{0, runMS(5), runMS(15)}, byKey["b"],
			"b has its own count of failures")
		require.Equal(t, map[string]int{"a": 4, "b": 2}, requeues,
			"NumRequeues counts the failures until the success")
		require.Zero(t, q.NumRequeues("a"), "a success forgets the key")
		require.Zero(t, q.NumRequeues("b"), "a success forgets the key")
	})
}

func TestRunMaxRetries(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := exponential5ms()
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		var calls runLog[time.Duration]
		var reports runLog[runReport]
		errFail := errors.New("always fails")
		result := startRun(ctx, q, 3, func(context.Context, string) error {
			calls.add(time.Since(start))
			return errFail
		}, workqueue.RunConfig[string]{
			MaxRetries: 3,
			OnError: func(key string, err error, retry bool) {
				reports.add(runReport{key, err, retry})
			},
		})
		q.Add("a")
		time.Sleep(time.Hour) // in the bubble: returns once all is idle
		synctest.Wait()

		require.Equal(t, []time.Duration{0, runMS(5), runMS(15), runMS(35)}, calls.get(),
			"MaxRetries 3: the first try and three retries, then no more")
		require.Equal(t, []runReport{
			{"a", errFail, true}, {"a", errFail, true}, {"a", errFail, true},
			{"a", errFail, false},
		}, reports.get(), "every failure is reported; the last one is not retried")
		require.Zero(t, q.NumRequeues("a"), "a key given up on is forgotten")
		require.Equal(t, workqueue.Stats{}, q.Stats(), "nothing waits, nothing is processing")

		q.Add("a")
		synctest.Wait()
		require.Len(t, calls.get(), 5, "a key given up on can be added again")
		cancel()
		require.NoError(t, <-result)
	})
}

func TestRunRequeueAfter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := exponential5ms()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		start := time.Now()
		var calls runLog[runCall]
		var requeues runLog[int]
		var reports runLog[runReport]
		var n atomic.Int32
		handle := func(_ context.Context, key string) error {
			calls.add(runCall{key, time.Since(start)})
			requeues.add(q.NumRequeues(key))
			switch n.Add(1) {
			case 1:
				// Wrapped: Run must find it with errors.As.
				return fmt.Errorf("not ready yet: %w", workqueue.RequeueAfter(runMS(30)))
			case 2:
				return workqueue.RequeueAfter(0) // again, as the limiter allows
			default:
				cancel()
				return nil
			}
		}
		q.Add("a")
		require.NoError(t, workqueue.Run(ctx, q, 2, handle, workqueue.RunConfig[string]{
			OnError: func(key string, err error, retry bool) { reports.add(runReport{key, err, retry}) },
		}))
		require.Equal(t, []runCall{{"a", 0}, {"a", runMS(30)}, {"a", runMS(35)}}, calls.get(),
			"RequeueAfter(d) runs the key again after exactly d, not after the limiter's 5ms; RequeueAfter(0) after the limiter's 5ms")
		require.Equal(t, []int{0, 0, 1}, requeues.get(), "RequeueAfter(d > 0) is not a failure: NumRequeues stays 0; RequeueAfter(0) is a rate-limited requeue")
		require.Empty(t, reports.get(), "RequeueAfter is not reported")
	})
}

func TestRunRequeueAfterForgetsFailures(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := exponential5ms()
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		var calls runLog[time.Duration]
		var n atomic.Int32
		result := startRun(ctx, q, 1, func(_ context.Context, key string) error {
			calls.add(time.Since(start))
			switch n.Add(1) {
			case 1, 2:
				return errors.New("fails")
			case 3:
				return workqueue.RequeueAfter(runMS(100))
			default:
				return errors.New("fails again")
			}
		})
		q.Add("a")
		time.Sleep(runMS(200))
		synctest.Wait()
		cancel()
		require.NoError(t, <-result)
		// Failures at 0 and 5ms, RequeueAfter at 15ms, so the next try is
		// at 115ms; it fails, and since RequeueAfter forgot the earlier
		// failures its retry is 5ms later, not 20ms.
		require.Equal(t, []time.Duration{0, runMS(5), runMS(15), runMS(115), runMS(120), runMS(130), runMS(150), runMS(190)}, calls.get())
	})
}

func TestRunRecoversPanics(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := exponential5ms()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		start := time.Now()
		var calls runLog[runCall]
		var reports runLog[runReport]
		var panicked atomic.Bool
		handle := func(_ context.Context, key string) error {
			calls.add(runCall{key, time.Since(start)})
			if key == "a" && !panicked.Swap(true) {
				panic("boom")
			}
			if len(calls.get()) == 3 {
				cancel()
			}
			return nil
		}
		q.Add("a")
		q.Add("b")
		// One worker: the worker that recovered the panic handles b and
		// the retry of a.
		require.NoError(t, workqueue.Run(ctx, q, 1, handle, workqueue.RunConfig[string]{
			OnError: func(key string, err error, retry bool) { reports.add(runReport{key, err, retry}) },
		}))

		require.Equal(t, []runCall{{"a", 0}, {"b", 0}, {"a", runMS(5)}}, calls.get(),
			"the worker survives the panic, and a is retried as after an error")
		rs := reports.get()
		require.Len(t, rs, 1, "the panic is reported once")
		require.Equal(t, "a", rs[0].key)
		require.True(t, rs[0].retry, "a panic is retried like an error")
		var pe *workqueue.PanicError
		require.ErrorAs(t, rs[0].err, &pe, "a panic is reported as a *PanicError")
		require.Equal(t, "boom", pe.Value)
		require.Contains(t, string(pe.Stack), "TestRunRecoversPanics",
			"the stack shows where handle panicked")
		require.Equal(t, "a", pe.Key, "the key is in the error")
		require.Equal(t, "workqueue: panic in handler for key a: boom", pe.Error(), "one line, with key and value; the stack is in Stack")
		require.Zero(t, q.NumRequeues("a"), "the successful retry forgot a")
	})
}

func TestRunCallsDoneAfterPanic(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// Retries an hour later: only an Add can run the key again soon.
		q := workqueue.NewRateLimitingQueue(
			workqueue.NewItemExponentialFailureRateLimiter[string](time.Hour, time.Hour))
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		var calls runLog[time.Duration]
		var n atomic.Int32
		result := startRun(ctx, q, 1, func(context.Context, string) error {
			calls.add(time.Since(start))
			if n.Add(1) == 1 {
				panic(errors.New("boom"))
			}
			return nil
		})
		q.Add("a")
		synctest.Wait()
		require.Equal(t, workqueue.Stats{Waiting: 1}, q.Stats(),
			"after the panic a is Done and waits for its retry")

		// Had Done not been called, a would still be processing and this
		// Add would only mark it dirty.
		q.Add("a")
		synctest.Wait()
		require.Equal(t, []time.Duration{0, 0}, calls.get(), "a is handled again at once")
		require.Equal(t, workqueue.Stats{}, q.Stats())
		cancel()
		require.NoError(t, <-result)
	})
}

func TestRunGracefulStop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := exponential5ms()
		ctx, cancel := context.WithCancel(t.Context())
		started := make(chan string, 10)
		release := make(chan struct{})
		var reports runLog[runReport]
		result := startRun(ctx, q, 1, func(ctx context.Context, key string) error {
			started <- key
			<-release
			return ctx.Err()
		}, workqueue.RunConfig[string]{
			OnError: func(key string, err error, retry bool) { reports.add(runReport{key, err, retry}) },
		})
		q.Add("a")
		require.Equal(t, "a", <-started)
		q.Add("b") // ready; the only worker is busy with a

		cancel()
		synctest.Wait()
		requireRunning(t, result, "a's handle has not returned yet")
		require.True(t, q.ShuttingDown(), "Run shuts the queue down when ctx ends")

		close(release)
		require.NoError(t, <-result, "a clean stop")
		require.Empty(t, started, "no key is taken after ctx ended")
		require.Equal(t, []runReport{{"a", context.Canceled, false}}, reports.get(),
			"the in-flight key finished; its failure is not retried by a queue that shut down")
		require.Equal(t, workqueue.Stats{Ready: 1, Dirty: 1}, q.Stats(),
			"a is Done and its retry dropped; b was left ready, as without Drain")
	})
}

func TestRunWaitsForHandleThatWatchesCtx(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := exponential5ms()
		ctx, cancel := context.WithCancel(t.Context())
		started := make(chan struct{})
		var returned atomic.Bool
		result := startRun(ctx, q, 4, func(ctx context.Context, key string) error {
			close(started)
			<-ctx.Done() // handle gets the caller's ctx
			time.Sleep(time.Second)
			returned.Store(true)
			return nil
		})
		q.Add("a")
		<-started
		cancel()
		require.NoError(t, <-result)
		require.True(t, returned.Load(), "Run returned before the handle did")
	})
}
