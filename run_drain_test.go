package workqueue_test

// Tests of Run (helpers in run_test.go): draining, shutdown from
// elsewhere, bad arguments, errors, concurrency and logging.

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
