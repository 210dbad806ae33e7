package workqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// RunConfig configures Run. Its zero value works: retry failed keys without
// limit, as the queue's rate limiter paces them, log each failure through
// log/slog's default logger, and stop without draining when the context
// ends.
//
// It is a struct like Config, not a list of functional options, because the
// library has one configuration style. It is generic because OnError
// receives the key.
type RunConfig[T comparable] struct {
	// MaxRetries is how many times a failing key is retried before Run gives
	// up on it: a key is retried while the limiter's NumRequeues(key) is
	// below MaxRetries, so it is handled at most MaxRetries+1 times in a
	// row. Zero or less means no limit. The count is the rate limiter's, as
	// in client-go's controllers: a limiter that does not count per key
	// (a lone BucketRateLimiter) never reaches the limit.
	MaxRetries int

	// OnError, if not nil, is told of every failure of handle: the key, the
	// error (a *PanicError if handle panicked) and whether the key will be
	// retried. retry is false when MaxRetries was reached or the queue is
	// shutting down, which would drop the retry. Errors made by RequeueAfter
	// are not failures and are not reported.
	//
	// Nil means Run logs each failure through log/slog's default logger
	// (slog.Default(), read at each failure) at Error level, with the
	// attributes key, error and retry, so that failures are never silent by
	// default. Set OnError to report them elsewhere (or to drop them: an
	// OnError that does nothing).
	//
	// OnError runs on the worker's goroutine after the retry has been
	// scheduled and before Done, so calls for one key never overlap, but
	// calls for different keys may run concurrently.
	OnError func(key T, err error, retry bool)

	// Drain makes Run drain the queue when ctx ends: the workers go on
	// handling the keys that are already due (the queue is shut down, so no
	// new key arrives and no retry is scheduled) until none is ready or
	// processing (Queue.ShutDownWithDrainAll). The handle context stays alive
	// during the drain.
	Drain bool

	// DrainTimeout bounds the drain. When it passes, the handle context is
	// cancelled, no further key is taken, and Run returns an error once the
	// keys in flight have been handled. Zero or less means no bound.
	DrainTimeout time.Duration
}

// Run handles the keys of q with the given number of workers until ctx
// ends, doing what every controller's worker loop does: each worker takes a
// key with Get, calls handle(ctx, key), settles the key by the result and
// calls Done, whatever happened.
//
//   - nil: the key is forgotten by the rate limiter (Forget).
//   - an error made by RequeueAfter(d) with d > 0, or wrapping one: the key
//     is forgotten and added again after d (AddAfter). This is not a
//     failure: NumRequeues stays 0 and OnError is not called.
//   - RequeueAfter(d) with d <= 0: the key is requeued with AddRateLimited,
//     so that a handle that keeps asking for "again, now" is paced by the
//     limiter instead of spinning a worker. It counts toward MaxRetries
//     (once reached, the key is forgotten) but is not a failure: OnError is
//     not called and nothing is logged.
//   - any other error: the key is retried with AddRateLimited, unless
//     RunConfig.MaxRetries is reached, in which case it is forgotten. The
//     error is reported to RunConfig.OnError.
//   - a panic: recovered and turned into a *PanicError with the key and the
//     stack, then treated as an error. The worker goes on with the next key.
//
// handle is called with ctx itself (in drain mode, with a context that has
// ctx's values and ends when the drain ends). When ctx ends, a running
// handle should return soon; Run waits for it however long it takes, so
// no key is left half-handled and Done is always called.
//
// When ctx ends, Run shuts q down and the workers stop taking keys (with
// RunConfig.Drain they first take every key already due, see there). Run
// returns once every worker has returned: nil, or, if RunConfig.DrainTimeout
// passed before the drain was done, an error wrapping
// context.DeadlineExceeded, or, if q.ShutDown was called during the drain
// (which ends it, handle contexts included), an error wrapping
// ErrDrainInterrupted. Run also returns, with nil, if q is shut down
// by someone else and no ready key is left. It always leaves q shut down.
//
// Run panics at the call, with a message that names the argument, if q is
// nil or handle is nil (either would otherwise fail later inside a worker
// goroutine, where the caller cannot recover it), if workers < 1, since a
// Run without workers would wait for ctx doing nothing, or if it is given
// more than one RunConfig.
func Run[T comparable](ctx context.Context, q *RateLimitingQueue[T], workers int, handle func(context.Context, T) error, cfg ...RunConfig[T]) error {
	if q == nil || q.Queue == nil {
		panic("workqueue: Run: nil queue")
	}
	if workers < 1 {
		panic(fmt.Sprintf("workqueue: Run: %d workers, need at least 1", workers))
	}
	if handle == nil {
		panic("workqueue: Run: nil handle")
	}
	if len(cfg) > 1 {
		panic("workqueue: Run: more than one RunConfig")
	}
	r := &runner[T]{q: q, handle: handle}
	if len(cfg) == 1 {
		r.cfg = cfg[0]
	}

	// work is the context workers take keys with and pass to handle.
	// Without Drain it is ctx. With Drain the workers must go on taking
	// keys after ctx ends, so it keeps ctx's values but ends only when the
	// drain does.
	work, stopWork := ctx, context.CancelFunc(func() {})
	if r.cfg.Drain {
		work, stopWork = context.WithCancel(context.WithoutCancel(ctx))
		defer stopWork()
	}

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { r.work(work) })
	}
	exited := make(chan struct{})
	go func() {
		wg.Wait()
		close(exited)
	}()

	var err error
	select {
	case <-exited:
		// q was shut down elsewhere and is empty (or every handle
		// called runtime.Goexit); nothing is left to stop.
	case <-ctx.Done():
		if r.cfg.Drain {
			err = r.drain(ctx)
		}
		// Without Drain the workers are already leaving: GetContext
		// fails once ctx has ended. Shutting down now also drops the
		// retries that the handles still running would schedule.
		q.ShutDown()
		stopWork()
		<-exited
	}
	q.ShutDown()
	return err
}

// runner is the state that Run's workers share; it is read-only.
type runner[T comparable] struct {
	q      *RateLimitingQueue[T]
	handle func(context.Context, T) error
	cfg    RunConfig[T]
}

// drain shuts the queue down and waits, at most DrainTimeout, until the
// workers have handled every key already due. A ShutDown of the queue by
// anyone else during the drain ends it at once.
func (r *runner[T]) drain(ctx context.Context) error {
	dctx := context.WithoutCancel(ctx)
	if r.cfg.DrainTimeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(dctx, r.cfg.DrainTimeout)
		defer cancel()
	}
	err := r.q.ShutDownWithDrainAll(dctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrDrainInterrupted):
		// Somebody called ShutDown during the drain: the second signal
		// of "drain on the first, force on the second".
		return fmt.Errorf("workqueue: Run: %w", err)
	default:
		return fmt.Errorf("workqueue: Run: drain not finished after %v: %w", r.cfg.DrainTimeout, err)
	}
}

// work is one worker: it handles keys until GetContext fails, because ctx
// ended or the queue shut down and is empty.
func (r *runner[T]) work(ctx context.Context) {
	for {
		key, err := r.q.GetContext(ctx)
		if err != nil {
			return
		}
		r.process(ctx, key)
	}
}

// process handles one key and settles it. Done is deferred so that it runs
// even if OnError panics or handle calls runtime.Goexit.
func (r *runner[T]) process(ctx context.Context, key T) {
	defer r.q.Done(key)
	err := r.call(ctx, key)
	// A panic is a failure even if its value is a RequeueAfter error,
	// which PanicError.Unwrap would let errors.As find.
	_, panicked := err.(*PanicError)
	var ra *RequeueAfterError
	switch {
	case err == nil:
		r.q.Forget(key)
	case !panicked && errors.As(err, &ra) && ra.After > 0:
		r.q.Forget(key)
		r.q.AddAfter(key, ra.After)
	case !panicked && ra != nil:
		// RequeueAfter(0) or less: "again, now". AddAfter(key, 0) would
		// make it ready at once, and a handle that returns this every
		// time would spin its worker; the limiter paces it instead.
		if r.retries(key) {
			r.q.AddRateLimited(key)
		} else {
			r.q.Forget(key)
		}
	default:
		// The retry is scheduled before Done, as client-go's controllers
		// do: the key is then waiting, and Done leaves it waiting.
		// AddRateLimited ignores a queue that is shutting down by itself;
		// checking here too makes retry tell OnError the truth and lets
		// the limiter forget the key.
		retry := r.retries(key)
		if retry {
			r.q.AddRateLimited(key)
		} else {
			r.q.Forget(key)
		}
		if r.cfg.OnError != nil {
			r.cfg.OnError(key, err, retry)
		} else {
			slog.Default().LogAttrs(ctx, slog.LevelError, "workqueue: Run: handle failed",
				slog.Any("key", key), slog.Any("error", err), slog.Bool("retry", retry))
		}
	}
}

// retries reports whether a key whose handle failed (or asked to run again
// at once) is to be retried: MaxRetries is not reached and the queue is not
// shutting down, which would drop the retry.
func (r *runner[T]) retries(key T) bool {
	return (r.cfg.MaxRetries <= 0 || r.q.NumRequeues(key) < r.cfg.MaxRetries) &&
		!r.q.ShuttingDown()
}

// call runs handle, turning a panic into a *PanicError.
func (r *runner[T]) call(ctx context.Context, key T) (err error) {
	defer func() {
		// recover returns nil for runtime.Goexit, which is let through;
		// since Go 1.21, panic(nil) recovers a *runtime.PanicNilError.
		if v := recover(); v != nil {
			err = &PanicError{Key: key, Value: v, Stack: debug.Stack()}
		}
	}()
	return r.handle(ctx, key)
}

// RequeueAfter returns an error that tells Run to handle the key again
// after d: Run forgets the key's failures and calls AddAfter(key, d), so
// NumRequeues stays 0 and nothing is reported. It is for work that is not
// failing but has to be looked at again later (polling, an expiry). d <= 0
// means as soon as the rate limiter allows: Run calls AddRateLimited, so the
// key is not handled again in a hot loop (it counts toward MaxRetries, and
// is still not reported). Run recognizes the error with errors.As, so it may
// be wrapped.
func RequeueAfter(d time.Duration) error { return &RequeueAfterError{After: d} }

// RequeueAfterError is the error made by RequeueAfter.
type RequeueAfterError struct {
	// After is how long the key waits before it is handled again.
	After time.Duration
}

// Error returns "workqueue: requeue after " and the duration.
func (e *RequeueAfterError) Error() string {
	return "workqueue: requeue after " + e.After.String()
}

// PanicError is the error Run reports, through RunConfig.OnError or its
// log, when handle panics.
type PanicError struct {
	// Key is the key handle was called with.
	Key any
	// Value is the value handle panicked with.
	Value any
	// Stack is the stack of the panicking goroutine, from
	// runtime/debug.Stack, taken where the panic was recovered: the
	// frames of the panic site are in it.
	Stack []byte
}

// Error returns one line, "workqueue: panic in handler for key K: V", so
// that one logged error is one log line; the stack is in Stack, for who
// wants it (log it as its own attribute).
func (e *PanicError) Error() string {
	return fmt.Sprintf("workqueue: panic in handler for key %v: %v", e.Key, e.Value)
}

// Unwrap returns Value if it is an error, so that errors.Is and errors.As
// see through a panic(err); otherwise nil.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
