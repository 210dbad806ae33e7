package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

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

func TestRunDrain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := exponential5ms()
		type key struct{} // a value only the test's ctx carries
		ctx, cancel := context.WithCancel(context.WithValue(t.Context(), key{}, "v"))
		release := make(chan struct{})
		var calls runLog[string]
		var reports runLog[runReport]
		started := make(chan struct{})
		errC := errors.New("c fails")
		result := startRun(ctx, q, 1, func(ctx context.Context, k string) error {
			calls.add(k)
			if ctx.Err() != nil || ctx.Value(key{}) != "v" {
				return errors.New("handle ctx must live during the drain and keep ctx's values")
			}
			switch k {
			case "a":
				close(started)
				<-release
			case "c":
				return errC
			}
			return nil
		}, workqueue.RunConfig[string]{
			Drain: true,
			OnError: func(key string, err error, retry bool) {
				reports.add(runReport{key, err, retry})
			},
		})
		q.Add("a")
		<-started
		q.Add("b")
		q.Add("c")
		q.AddAfter("d", time.Hour) // waiting, not due: dropped by the drain

		cancel()
		synctest.Wait()
		requireRunning(t, result, "a is in flight and b, c are ready")
		require.True(t, q.ShuttingDown())
		close(release)
		require.NoError(t, <-result)
		require.Equal(t, []string{"a", "b", "c"}, calls.get(), "the drain handles the ready keys, in order")
		require.Equal(t, []runReport{{"c", errC, false}}, reports.get(),
			"a failure during the drain is not retried: the queue has shut down")
		require.Equal(t, workqueue.Stats{}, q.Stats(), "the queue is empty")
	})
}

func TestRunDrainTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := exponential5ms()
		ctx, cancel := context.WithCancel(t.Context())
		started := make(chan struct{})
		var calls runLog[string]
		var stoppedAt atomic.Int64
		var cancelled time.Time
		result := startRun(ctx, q, 1, func(hctx context.Context, k string) error {
			calls.add(k)
			close(started)
			<-hctx.Done() // stuck until Run gives up on the drain
			stoppedAt.Store(int64(time.Since(cancelled)))
			return nil
		}, workqueue.RunConfig[string]{Drain: true, DrainTimeout: runMS(50)})
		q.Add("a")
		<-started
		q.Add("b")
		cancelled = time.Now()
		cancel()

		err := <-result
		require.ErrorIs(t, err, context.DeadlineExceeded, "the drain did not finish")
		require.True(t, strings.HasPrefix(err.Error(), "workqueue: "), err.Error())
		require.Equal(t, runMS(50), time.Since(cancelled), "Run gives up after DrainTimeout")
		require.Equal(t, int64(runMS(50)), stoppedAt.Load(), "the handle context ends with the drain")
		require.Equal(t, []string{"a"}, calls.get(), "no key is taken after the drain gave up")
		require.Equal(t, workqueue.Stats{Ready: 1, Dirty: 1}, q.Stats(), "b is left ready")
	})
}

func TestRunReturnsWhenQueueShutDownElsewhere(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := exponential5ms()
		var calls runLog[string]
		result := startRun(t.Context(), q, 2, func(_ context.Context, k string) error {
			calls.add(k)
			return nil
		})
		q.Add("a")
		q.Add("b")
		q.ShutDownWithDrain()
		require.NoError(t, <-result, "Run ends with the queue, without ctx ending")
		require.ElementsMatch(t, []string{"a", "b"}, calls.get())
	})
}

func TestRunCtxDoneOnEntry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := exponential5ms()
		q.Add("a")
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		var calls atomic.Int32
		require.NoError(t, workqueue.Run(ctx, q, 3, func(context.Context, string) error {
			calls.Add(1)
			return nil
		}))
		require.Zero(t, calls.Load(), "no key is taken with ctx already done")
		require.True(t, q.ShuttingDown())
	})
}

func TestRunBadArguments(t *testing.T) {
	t.Parallel()
	q := exponential5ms()
	h := func(context.Context, string) error { return nil }
	require.PanicsWithValue(t, "workqueue: Run: 0 workers, need at least 1", func() {
		_ = workqueue.Run(t.Context(), q, 0, h)
	})
	require.PanicsWithValue(t, "workqueue: Run: -1 workers, need at least 1", func() {
		_ = workqueue.Run(t.Context(), q, -1, h)
	})
	require.PanicsWithValue(t, "workqueue: Run: nil queue", func() {
		_ = workqueue.Run[string](t.Context(), nil, 1, h)
	}, "a nil queue panics at the call, not in a worker")
	require.PanicsWithValue(t, "workqueue: Run: nil queue", func() {
		_ = workqueue.Run(t.Context(), &workqueue.RateLimitingQueue[string]{}, 1, h)
	}, "so does a zero RateLimitingQueue, which has no queue")
	require.PanicsWithValue(t, "workqueue: Run: nil handle", func() {
		_ = workqueue.Run(t.Context(), q, 1, nil)
	})
	require.PanicsWithValue(t, "workqueue: Run: more than one RunConfig", func() {
		_ = workqueue.Run(t.Context(), q, 1, h, workqueue.RunConfig[string]{}, workqueue.RunConfig[string]{})
	})
	require.False(t, q.ShuttingDown(), "a Run that panics on its arguments leaves the queue alone")
}

func TestRequeueAfterError(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("wrapped: %w", workqueue.RequeueAfter(time.Minute))
	var ra *workqueue.RequeueAfterError
	require.ErrorAs(t, err, &ra)
	require.Equal(t, time.Minute, ra.After)
	require.Equal(t, "workqueue: requeue after 1m0s", ra.Error())
}

func TestPanicErrorUnwrap(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	require.ErrorIs(t, &workqueue.PanicError{Value: errBoom}, errBoom, "a panic(err) unwraps to err")
	require.NoError(t, (&workqueue.PanicError{Value: "boom"}).Unwrap(), "a panic with a non-error value unwraps to nil")
}

// TestRunPanicWithRequeueAfterIsAFailure: a panic whose value is a
// RequeueAfter error is still a panic: retried by the limiter and reported.
func TestRunPanicWithRequeueAfterIsAFailure(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := exponential5ms()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		start := time.Now()
		var calls runLog[time.Duration]
		var reports runLog[runReport]
		var n atomic.Int32
		q.Add("a")
		require.NoError(t, workqueue.Run(ctx, q, 1, func(context.Context, string) error {
			calls.add(time.Since(start))
			if n.Add(1) == 1 {
				panic(workqueue.RequeueAfter(time.Hour))
			}
			cancel()
			return nil
		}, workqueue.RunConfig[string]{
			OnError: func(key string, err error, retry bool) { reports.add(runReport{key, err, retry}) },
		}))
		require.Equal(t, []time.Duration{0, runMS(5)}, calls.get(), "retried by the limiter, not after an hour")
		rs := reports.get()
		require.Len(t, rs, 1, "the panic is reported")
		var pe *workqueue.PanicError
		require.ErrorAs(t, rs[0].err, &pe)
		require.True(t, rs[0].retry)
	})
}

// TestRunConcurrent runs many workers on real time, checking that no key is
// handled by two workers at once, that every key added is handled, and that
// Run leaves no goroutine behind. It is not parallel, so that goleak sees
// only this test's goroutines.
func TestRunConcurrent(t *testing.T) {
	const keys, workers = 200, 8
	q := workqueue.NewRateLimitingQueue(
		workqueue.NewItemExponentialFailureRateLimiter[int](time.Microsecond, time.Millisecond))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		inFlight   [keys]atomic.Int32
		tries      [keys]atomic.Int32
		overlaps   atomic.Int32
		successes  atomic.Int32
		reAdds     atomic.Int32
		retryFalse atomic.Int32
	)
	handle := func(_ context.Context, k int) error {
		if inFlight[k].Add(1) != 1 {
			overlaps.Add(1)
		}
		defer inFlight[k].Add(-1)
		switch tries[k].Add(1) {
		case 1:
			// Added again while processing: handled once more after Done.
			q.Add(k)
			reAdds.Add(1)
			return nil
		case 2:
			return errors.New("fails once")
		case 3:
			panic("and panics once")
		case 4:
			if successes.Add(1) == keys {
				cancel()
			}
		}
		return nil
	}
	for k := range keys {
		q.Add(k)
	}
	require.NoError(t, workqueue.Run(ctx, q, workers, handle, workqueue.RunConfig[int]{
		OnError: func(_ int, _ error, retry bool) {
			if !retry {
				retryFalse.Add(1)
			}
		},
	}))
	require.Zero(t, overlaps.Load(), "a key was handled by two workers at once")
	require.EqualValues(t, keys, successes.Load(), "every key reached its fourth try")
	require.EqualValues(t, keys, reAdds.Load())
	require.Zero(t, retryFalse.Load(), "every failure was retried")
	goleak.VerifyNone(t)
}

// TestRunDrainInterruptedByShutDown checks the second signal of "drain on
// the first, force on the second": a ShutDown of the queue while Run
// drains ends the drain at once, cancels the handle context of the key in
// flight, takes no further key, and Run says the drain was interrupted.
func TestRunDrainInterruptedByShutDown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := exponential5ms()
		ctx, cancel := context.WithCancel(t.Context())
		started := make(chan struct{})
		var calls runLog[string]
		result := startRun(ctx, q, 1, func(hctx context.Context, k string) error {
			calls.add(k)
			close(started)
			<-hctx.Done() // stuck until the drain is forced to end
			return nil
		}, workqueue.RunConfig[string]{Drain: true})
		q.Add("a")
		<-started
		q.Add("b")
		cancel()
		synctest.Wait()
		requireRunning(t, result, "the drain waits for a and b")

		q.ShutDown() // the second signal
		err := <-result
		require.ErrorIs(t, err, workqueue.ErrDrainInterrupted, "Run must say the drain was cut short")
		require.True(t, strings.HasPrefix(err.Error(), "workqueue: "), err.Error())
		require.Equal(t, []string{"a"}, calls.get(), "no key is taken after the drain was interrupted")
		require.Equal(t, workqueue.Stats{Ready: 1, Dirty: 1}, q.Stats(), "b is left ready")
	})
}

// TestRunRequeueAfterNowDoesNotSpin: RequeueAfter(0) and RequeueAfter(-1)
// returned every time must not run the key in a hot loop. With the default
// limiter (5ms doubling) a simulated second allows 0, 5, 15, 35, 75, 155,
// 315 and 635ms: 8 runs. It spun at tens of thousands before.
func TestRunRequeueAfterNowDoesNotSpin(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, -1} {
		t.Run(d.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				defer cancel()
				var calls atomic.Int64
				var reports atomic.Int64
				q.Add("a")
				require.NoError(t, workqueue.Run(ctx, q, 2, func(context.Context, string) error {
					if calls.Add(1) == 1000 {
						cancel() // spinning: the fake clock would never move
					}
					return workqueue.RequeueAfter(d)
				}, workqueue.RunConfig[string]{
					OnError: func(string, error, bool) { reports.Add(1) },
				}))
				require.Equal(t, int64(8), calls.Load(), "RequeueAfter(%v) is paced by the limiter", d)
				require.Zero(t, reports.Load(), "RequeueAfter(%v) is not a failure", d)
			})
		})
	}
}

// TestRunRequeueAfterNowCountsTowardMaxRetries: RequeueAfter(0) is a
// rate-limited requeue, so MaxRetries bounds it like failures.
func TestRunRequeueAfterNowCountsTowardMaxRetries(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := exponential5ms()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var calls atomic.Int64
		result := startRun(ctx, q, 1, func(context.Context, string) error {
			if calls.Add(1) == 1000 {
				cancel() // spinning: the fake clock would never move
			}
			return workqueue.RequeueAfter(0)
		}, workqueue.RunConfig[string]{MaxRetries: 3, OnError: func(string, error, bool) {}})
		q.Add("a")
		time.Sleep(time.Second)
		synctest.Wait()
		cancel()
		require.NoError(t, <-result)
		require.Equal(t, int64(4), calls.Load(), "handled once and retried MaxRetries times")
		require.Zero(t, q.NumRequeues("a"), "then forgotten")
	})
}

// recordHandler is a slog.Handler that keeps every record it is given.
type recordHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// TestRunLogsFailuresWithoutOnError: without OnError, each failure goes to
// slog's default logger at Error level with key, error and retry; with
// OnError, nothing is logged. Not parallel: it swaps slog's default logger.
func TestRunLogsFailuresWithoutOnError(t *testing.T) {
	h := &recordHandler{}
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(old) })

	errFail := errors.New("fails")
	run := func(cfg workqueue.RunConfig[string]) {
		synctest.Test(t, func(t *testing.T) {
			q := exponential5ms()
			ctx, cancel := context.WithCancel(t.Context())
			var n atomic.Int32
			result := startRun(ctx, q, 1, func(_ context.Context, key string) error {
				switch n.Add(1) {
				case 1:
					return errFail
				case 2:
					panic("boom")
				default:
					return nil
				}
			}, cfg)
			q.Add("a")
			time.Sleep(time.Second)
			synctest.Wait()
			cancel()
			require.NoError(t, <-result)
		})
	}
	run(workqueue.RunConfig[string]{MaxRetries: 1})
	h.mu.Lock()
	records := h.records
	h.records = nil
	h.mu.Unlock()
	require.Len(t, records, 2, "each failure is logged once")
	type attrs struct {
		key   string
		err   error
		retry bool
	}
	var got []attrs
	for _, r := range records {
		require.Equal(t, slog.LevelError, r.Level, "failures are logged at Error level")
		var a attrs
		r.Attrs(func(at slog.Attr) bool {
			switch at.Key {
			case "key":
				a.key, _ = at.Value.Any().(string)
			case "error":
				a.err, _ = at.Value.Any().(error)
			case "retry":
				a.retry = at.Value.Bool()
			}
			return true
		})
		got = append(got, a)
	}
	require.Equal(t, "a", got[0].key)
	require.ErrorIs(t, got[0].err, errFail)
	require.True(t, got[0].retry, "the first failure is retried")
	require.Equal(t, "a", got[1].key)
	var pe *workqueue.PanicError
	require.ErrorAs(t, got[1].err, &pe, "the panic is logged as a *PanicError")
	require.False(t, got[1].retry, "MaxRetries 1: the second failure is not retried")

	run(workqueue.RunConfig[string]{OnError: func(string, error, bool) {}})
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Empty(t, h.records, "with OnError, Run logs nothing")
}
