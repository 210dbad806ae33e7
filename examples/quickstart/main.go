// Command quickstart shows, in well under a second, what the queue does for
// a controller: it prints each step as it happens.
//
//	go run ./examples/quickstart
//
// It needs nothing but this module (the standard library and
// golang.org/x/time), so the first command a newcomer types downloads
// almost nothing. The four parts:
//
//  1. Coalescing: ten events for one key give one run.
//  2. A key added while it is being processed is handed out once more
//     after Done, never to two workers at once.
//  3. Run, the worker loop: a handler that fails twice is retried with
//     exponential backoff from the queue's rate limiter, then succeeds.
//  4. Shutdown: when the context ends, Run without Drain stops taking keys;
//     with Drain it handles every key already queued before it returns.
//
// The program is written as run(w) so that its test can check the
// printed lines exactly (examples/quickstart/main_test.go runs it under
// testing/synctest, where time is virtual and the waits exact).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/go-coalesce/workqueue"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	coalescing(w)
	reAddWhileProcessing(w)
	if err := retries(w); err != nil {
		return err
	}
	return drain(w)
}

// coalescing: events become keys, and a key is queued at most once however
// many events arrive before a worker takes it.
func coalescing(w io.Writer) {
	fmt.Fprintln(w, "1. Coalescing: many Adds of one key, one run")
	q := workqueue.New[string]()
	for range 10 {
		q.Add("default/web") // ten update events for one Deployment
	}
	q.Add("default/db")
	fmt.Fprintf(w, "   11 Adds (10 of default/web, 1 of default/db): Len() = %d\n", q.Len())
	for q.Len() > 0 {
		key, _ := q.Get()
		fmt.Fprintf(w, "   run %s\n", key)
		q.Done(key) // always: a key not Done is never handed out again
	}
	q.ShutDown()
}

// reAddWhileProcessing: the key that changed while a worker had it is not
// handed to a second worker; Done queues it once more, so the change is
// never missed.
func reAddWhileProcessing(w io.Writer) {
	fmt.Fprintln(w, "2. A key added while it is processed runs once more after Done")
	q := workqueue.New[string]()
	q.Add("default/web")
	key, _ := q.Get()
	fmt.Fprintf(w, "   Get -> %s (processing)\n", key)
	q.Add(key) // the object changed while the worker was busy
	q.Add(key)
	fmt.Fprintf(w, "   2 Adds meanwhile: state %s, Len() = %d (no second worker gets it)\n", q.State(key), q.Len())
	q.Done(key)
	fmt.Fprintf(w, "   Done: state %s, Len() = %d\n", q.State(key), q.Len())
	key, _ = q.Get()
	fmt.Fprintf(w, "   Get -> %s again, with the latest state to read\n", key)
	q.Done(key)
	q.ShutDown()
}

// retries: Run is the worker loop every controller writes. A handler error
// requeues the key through the rate limiter (here 10ms, then 20ms: an
// exponential backoff); success makes the limiter forget the key.
func retries(w io.Writer) error {
	fmt.Fprintln(w, "3. Run: a handler that fails twice is retried with backoff")
	limiter := workqueue.NewItemExponentialFailureRateLimiter[string](10*time.Millisecond, time.Second)
	q := workqueue.NewRateLimitingQueue[string](limiter)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	start := time.Now()
	attempts := 0
	handle := func(ctx context.Context, key string) error {
		attempts++
		at := time.Since(start).Round(time.Millisecond)
		if attempts <= 2 {
			fmt.Fprintf(w, "   %4v  attempt %d for %s: fails\n", at, attempts, key)
			return errors.New("the API server said: conflict")
		}
		fmt.Fprintf(w, "   %4v  attempt %d for %s: synced\n", at, attempts, key)
		cancel() // done: end the example's Run
		return nil
	}
	q.Add("default/web")
	err := workqueue.Run(ctx, q, 1, handle, workqueue.RunConfig[string]{
		MaxRetries: 5,
		OnError: func(key string, err error, retry bool) {
			fmt.Fprintf(w, "         OnError(%s, %q, retry=%t): requeued after %v\n",
				key, err, retry, 10*time.Millisecond<<(q.NumRequeues(key)-1))
		},
	})
	if err != nil {
		return fmt.Errorf("retries: Run: %w", err)
	}
	fmt.Fprintf(w, "   Run returned; NumRequeues(default/web) = %d (forgotten on success)\n", q.NumRequeues("default/web"))
	return nil
}

// drain: when the context ends (a SIGTERM, in a real controller), Run shuts
// the queue down. Without Drain the workers stop taking keys at once and
// the keys still queued are left (a level-triggered controller's next
// replica resyncs them); with Drain, Run handles every key already queued
// and returns only when none is left and every handler has returned.
func drain(w io.Writer) error {
	fmt.Fprintln(w, "4. Shutdown: when the context ends, Run with Drain handles every queued key first")
	for _, withDrain := range []bool{false, true} {
		q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
		ctx, cancel := context.WithCancel(context.Background())
		keys := []string{"default/a", "default/b", "default/c", "default/d", "default/e"}
		for _, k := range keys {
			q.Add(k)
		}
		handled := 0
		handle := func(ctx context.Context, key string) error {
			handled++
			if handled == 1 {
				cancel() // the context ends while the first key is handled, as on SIGTERM
			}
			time.Sleep(5 * time.Millisecond) // the work of one sync
			return nil
		}
		// One worker, so that the counts are the same on every run.
		err := workqueue.Run(ctx, q, 1, handle, workqueue.RunConfig[string]{Drain: withDrain, DrainTimeout: 10 * time.Second})
		cancel()
		if err != nil {
			return fmt.Errorf("shutdown (Drain: %t): Run: %w", withDrain, err)
		}
		fmt.Fprintf(w, "   Drain: %-5t  context ended during the 1st key; Run returned: %d of %d keys handled, %d left queued\n",
			withDrain, handled, len(keys), q.Len())
	}
	return nil
}
