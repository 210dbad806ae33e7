package workqueue_test

// Tests of ShutDown and the ShutDownWithDrain family, and of
// Config.GetStopsAtShutDown.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/go-coalesce/workqueue"
)

// ---------------------------------------------------------------------------
// ShutDownWithDrain.

// TestShutDownWithDrain checks client-go's rule: every concurrent drainer
// returns once no key is processing, keys still ready stay ready, and Get
// keeps handing them out; a key re-added while processing is ready, not
// dropped, when the drain returns.
func TestShutDownWithDrain(t *testing.T) {
	for _, cfg := range queueConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := cfg.new()
				q.Add("a")
				q.Add("b")
				q.Add("c")
				a, _ := q.Get()
				b, _ := q.Get()
				q.Add("a") // processing+dirty

				const drainers = 3
				var returned atomic.Int64
				var wg sync.WaitGroup
				for range drainers {
					wg.Go(func() {
						q.ShutDownWithDrain()
						returned.Add(1)
					})
				}
				synctest.Wait()
				require.True(t, q.ShuttingDown(), "ShutDownWithDrain must shut the queue down at once")
				q.Add("d")
				require.Equal(t, 1, q.Len(), "Add after ShutDownWithDrain must be ignored")

				q.Done(b)
				synctest.Wait()
				require.Zero(t, returned.Load(), "no drainer may return while a is processing")
				q.Done(a) // a is ready again
				synctest.Wait()
				require.Equal(t, int64(drainers), returned.Load(), "every drainer must return once no key is processing, keys ready or not")
				wg.Wait()
				require.Equal(t, workqueue.Stats{Ready: 2, Dirty: 2}, trimStats(q.Stats()), "the ready keys stay queued, none dropped")
				expectGet("c")(t, q)
				expectGet("a")(t, q)
				q.Done("c")
				q.Done("a")
				expectShutdown()(t, q)
				q.ShutDownWithDrain() // already empty: returns at once
			})
		})
	}
}

// TestShutDownWithDrainAfterWorkersStop is the shape that hung on the
// earlier rule (ShutDownWithDrainAll's): workers that stop on their context
// while keys are still queued, then a drain on exit. It must return, and the
// keys left must still be there for Get.
func TestShutDownWithDrainAfterWorkersStop(t *testing.T) {
	for _, cfg := range queueConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := cfg.new()
				ctx, cancel := context.WithCancel(context.Background())
				var handled atomic.Int64
				var workers sync.WaitGroup
				for range 2 {
					workers.Go(func() {
						for ctx.Err() == nil {
							key, shutdown := q.Get()
							if shutdown {
								return
							}
							time.Sleep(time.Millisecond) // the work
							handled.Add(1)
							q.Done(key)
						}
					})
				}
				const keys = 200
				for i := range keys {
					q.Add(fmt.Sprint(i))
				}
				time.Sleep(50 * time.Millisecond)
				cancel()
				workers.Wait()
				left := q.Len()
				require.Positive(t, left, "the workers must have stopped with keys still queued")

				drained := make(chan struct{})
				go func() {
					q.ShutDownWithDrain()
					close(drained)
				}()
				synctest.Wait()
				select {
				case <-drained:
				default:
					t.Fatalf("ShutDownWithDrain hangs with %d keys ready and no worker", left)
				}
				require.Equal(t, left, q.Len(), "no ready key may be dropped by the drain")
				require.Equal(t, int64(keys), handled.Load()+int64(left), "every key is handled or still queued")
			})
		})
	}
}

// TestShutDownWithDrainAll checks that every concurrent drainer returns only
// once no key is ready and none is processing, including a key re-added
// while processing that becomes ready again at its Done.
func TestShutDownWithDrainAll(t *testing.T) {
	for _, cfg := range queueConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := cfg.new()
				q.Add("a")
				q.Add("b")
				q.Add("c")
				a, _ := q.Get()
				q.Add("a") // processing+dirty

				const drainers = 3
				var returned atomic.Int64
				var wg sync.WaitGroup
				for range drainers {
					wg.Go(func() {
						if q.ShutDownWithDrainAll(context.Background()) == nil {
							returned.Add(1)
						}
					})
				}
				synctest.Wait()
				require.True(t, q.ShuttingDown(), "ShutDownWithDrainAll must shut the queue down at once")
				q.Add("d")
				require.Equal(t, 2, q.Len(), "Add after ShutDownWithDrainAll must be ignored")

				steps := []struct {
					what string
					do   func()
				}{
					{"b handed out (c ready, a and b processing)", func() { expectGet("b")(t, q) }},
					{"b done (c ready, a processing)", func() { q.Done("b") }},
					{"a done, pushed again (c and a ready)", func() { q.Done(a) }},
					{"c handed out (a ready)", func() { expectGet("c")(t, q) }},
					{"c done (a ready)", func() { q.Done("c") }},
					{"a handed out (a processing)", func() { expectGet("a")(t, q) }},
				}
				for _, s := range steps {
					s.do()
					synctest.Wait()
					require.Zero(t, returned.Load(), "no drainer may return while work is left: %s", s.what)
				}
				q.Done("a")
				synctest.Wait()
				require.Equal(t, int64(drainers), returned.Load(), "every drainer must return once nothing is ready or processing")
				wg.Wait()
				expectShutdown()(t, q)
				require.NoError(t, q.ShutDownWithDrainAll(context.Background()), "already empty: returns at once")
			})
		})
	}
}

// TestShutDownWithDrainWithWorkers drains a queue that workers empty on
// their own, with several ShutDownWithDrainAll drainers.
func TestShutDownWithDrainWithWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[int]()
		var processed atomic.Int64
		var workers sync.WaitGroup
		for range 3 {
			workers.Go(func() {
				for {
					k, shutdown := q.Get()
					if shutdown {
						return
					}
					if k < 50 {
						q.Add(k + 50) // work that makes more work, before shutdown
					}
					processed.Add(1)
					q.Done(k)
				}
			})
		}
		for k := range 50 {
			q.Add(k)
		}
		synctest.Wait()
		var drainers sync.WaitGroup
		for range 4 {
			drainers.Go(func() { _ = q.ShutDownWithDrainAll(context.Background()) })
		}
		drainers.Wait()
		require.Equal(t, workqueue.Stats{}, trimStats(q.Stats()), "drain must return with nothing ready or processing")
		workers.Wait()
		require.Equal(t, int64(100), processed.Load(), "every key added before the drain is processed")
	})
}

// TestShutDownWithDrainContext checks that a drain gives up with the
// context's error (deadline and cancel), that the queue stays shut down,
// and that other drainers are not released by it.
func TestShutDownWithDrainContext(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := workqueue.New[string]()
			q.Add("a")
			q.Add("b")
			a, _ := q.Get()
			var plainReturned atomic.Bool
			var wg sync.WaitGroup
			wg.Go(func() {
				q.ShutDownWithDrain()
				plainReturned.Store(true)
			})
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := q.ShutDownWithDrainContext(ctx)
			require.ErrorIs(t, err, context.DeadlineExceeded, "the drain must give up with the context's error")
			require.Equal(t, time.Second, time.Since(start), "the drain must give up at the deadline")
			synctest.Wait()
			require.False(t, plainReturned.Load(), "a drainer without deadline must keep waiting")
			require.True(t, q.ShuttingDown(), "the queue must stay shut down")
			q.Add("c")
			require.Equal(t, workqueue.Stats{Ready: 1, Processing: 1, Dirty: 1}, trimStats(q.Stats()), "Add must be ignored; the queue keeps its keys")
			expectGet("b")(t, q)
			q.Done("b")
			q.Done(a)
			wg.Wait()
			require.True(t, plainReturned.Load(), "the other drainer returns once the queue is empty")
			require.NoError(t, q.ShutDownWithDrainContext(ctx), "a drain of an empty queue succeeds even with an ended context")
		})
	})
	t.Run("cancel", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := workqueue.New[string]()
			q.Add("a")
			q.Add("b")
			expectGet("a")(t, q)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- q.ShutDownWithDrainContext(ctx) }()
			synctest.Wait()
			require.Empty(t, errc, "the drain must wait while a key is processing")
			cancel()
			synctest.Wait()
			require.Len(t, errc, 1, "the drain must return when its context is cancelled")
			require.ErrorIs(t, <-errc, context.Canceled, "with the context's error")
			require.True(t, q.ShuttingDown(), "the queue must stay shut down")
			expectGet("b")(t, q)
			expectShutdown()(t, q)
			q.Done("a")
			q.Done("b")
		})
	})
	t.Run("already cancelled", func(t *testing.T) {
		q := workqueue.New[string]()
		q.Add("a")
		q.Add("b")
		a, _ := q.Get()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, q.ShutDownWithDrainContext(ctx), context.Canceled, "an ended context with work left gives up at once")
		require.True(t, q.ShuttingDown(), "and the queue is shut down")
		require.Equal(t, 1, q.Len(), "the ready key is left for the workers")
		require.ErrorIs(t, q.ShutDownWithDrainAll(ctx), context.Canceled, "ShutDownWithDrainAll too")
		q.Done(a)
		require.ErrorIs(t, q.ShutDownWithDrainAll(ctx), context.Canceled, "ShutDownWithDrainAll waits for the ready key")
		require.NoError(t, q.ShutDownWithDrainContext(ctx), "ShutDownWithDrainContext does not")
	})
	t.Run("success", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := workqueue.New[string]()
			q.Add("a")
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- q.ShutDownWithDrainContext(ctx) }()
			synctest.Wait()
			expectGet("a")(t, q)
			q.Done("a")
			synctest.Wait()
			require.Len(t, errc, 1, "the drain must return once the queue is empty, before its deadline")
			require.NoError(t, <-errc, "a drain that completes returns nil")
		})
	})
}

// drainable is what the drain tests need of a queue.
type drainable interface {
	Add(string)
	Get() (string, bool)
	Done(string)
	ShutDown()
	ShutDownWithDrain()
	ShutDownWithDrainContext(context.Context) error
	ShutDownWithDrainAll(context.Context) error
	ShuttingDown() bool
}

// drainTarget is one entry point that shuts a queue down and drains it.
type drainTarget struct {
	name string
	new  func() drainable
}

func drainTargets() []drainTarget {
	var ts []drainTarget
	for _, cfg := range queueConfigs {
		ts = append(ts, drainTarget{cfg.name, func() drainable { return cfg.new() }})
	}
	return append(ts, drainTarget{"RateLimitingQueue", func() drainable {
		return workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
	}})
}

// TestShutDownEndsDrain is client-go's "drain on the first signal, force on
// the second": a worker holds a key and never calls Done, a drain waits for
// it, and ShutDown must make every waiting drainer return at once (plain
// drains return, context drains return ErrDrainInterrupted), leaving the
// key to its worker.
func TestShutDownEndsDrain(t *testing.T) {
	for _, tg := range drainTargets() {
		t.Run(tg.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := tg.new()
				q.Add("a")
				q.Add("b")
				a, _ := q.Get() // never Done until the end

				var plain atomic.Int64
				errc := make(chan error, 4)
				var wg sync.WaitGroup
				wg.Go(func() {
					q.ShutDownWithDrain()
					plain.Add(1)
				})
				wg.Go(func() {
					q.ShutDownWithDrain() // a second drain: it must not end the first
					plain.Add(1)
				})
				for range 2 {
					wg.Go(func() { errc <- q.ShutDownWithDrainContext(context.Background()) })
					wg.Go(func() { errc <- q.ShutDownWithDrainAll(context.Background()) })
				}
				synctest.Wait()
				require.True(t, q.ShuttingDown(), "the drains shut the queue down")
				require.Zero(t, plain.Load(), "drains wait while a key is processing and one is ready")
				require.Empty(t, errc, "context drains wait too")

				q.ShutDown()
				synctest.Wait()
				require.Equal(t, int64(2), plain.Load(), "ShutDown must end every waiting ShutDownWithDrain")
				require.Len(t, errc, 4, "ShutDown must end every waiting ShutDownWithDrainContext and ShutDownWithDrainAll")
				for range 4 {
					require.ErrorIs(t, <-errc, workqueue.ErrDrainInterrupted, "an interrupted drain says so")
				}
				wg.Wait()

				// The keys are left to the workers, as after any ShutDown.
				expectGetFrom(t, q, "b")
				q.Done("b")
				q.Done(a)
				_, shutdown := q.Get()
				require.True(t, shutdown, "the queue is empty and shut down")
			})
		})
	}
}

// TestShutDownBeforeDrainDoesNotEndIt checks that only a ShutDown that
// finds a drain waiting ends it: a drain that starts after ShutDown (or
// after an earlier drain was interrupted) still waits for the queue to
// empty.
func TestShutDownBeforeDrainDoesNotEndIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[string]()
		q.Add("a")
		q.Add("b")
		q.ShutDown()
		errc := make(chan error, 1)
		go func() { errc <- q.ShutDownWithDrainAll(context.Background()) }()
		synctest.Wait()
		require.Empty(t, errc, "a drain after ShutDown waits for the ready keys")
		q.ShutDown()
		synctest.Wait()
		require.ErrorIs(t, <-errc, workqueue.ErrDrainInterrupted, "a ShutDown while it waits ends it")

		go func() { errc <- q.ShutDownWithDrainAll(context.Background()) }()
		synctest.Wait()
		require.Empty(t, errc, "a new drain after the interruption waits again")
		expectGet("a")(t, q)
		q.Done("a")
		expectGet("b")(t, q)
		q.Done("b")
		synctest.Wait()
		require.NoError(t, <-errc, "the new drain returns nil once the queue is empty")
	})
}

// expectGetFrom is expectGet for any queue with Get.
func expectGetFrom(t *testing.T, q interface{ Get() (string, bool) }, want string) {
	t.Helper()
	got, shutdown := q.Get()
	require.False(t, shutdown, "Get must hand out %q, not report shutdown", want)
	require.Equal(t, want, got, "Get must hand out the next ready key")
}

// TestGetStopsAtShutDown checks Config.GetStopsAtShutDown: once ShutDown
// (or a drain) has been called, Get, GetWithPriority and GetContext report
// shutdown although keys are ready, the keys stay ready, and a key already
// processing can still be Done. Without the option the ready keys are
// handed out (TestGetContextShutDown).
func TestGetStopsAtShutDown(t *testing.T) {
	for _, store := range []struct {
		name string
		new  func() workqueue.Store[string]
	}{
		{"fifo", func() workqueue.Store[string] { return nil }},
		{"priority", func() workqueue.Store[string] { return workqueue.NewPriorityStore[string]() }},
		{"fair", func() workqueue.Store[string] { return workqueue.NewFairStore(func(string) string { return "t" }) }},
	} {
		t.Run(store.name, func(t *testing.T) {
			q := workqueue.NewWithConfig(workqueue.Config[string]{Store: store.new(), GetStopsAtShutDown: true})
			q.Add("a")
			q.Add("b")
			k, shutdown := q.Get()
			require.False(t, shutdown, "Get hands out keys before ShutDown")
			require.Equal(t, "a", k)
			q.ShutDown()
			_, shutdown = q.Get()
			require.True(t, shutdown, "Get must report shutdown once ShutDown was called, with a key still ready")
			_, _, shutdown = q.GetWithPriority()
			require.True(t, shutdown, "GetWithPriority must report shutdown once ShutDown was called")
			_, err := q.GetContext(context.Background())
			require.ErrorIs(t, err, workqueue.ErrShutDown, "GetContext must return ErrShutDown once ShutDown was called")
			require.Equal(t, 1, q.Len(), "the ready key stays in the queue")
			q.Done(k)
			require.Equal(t, workqueue.Stats{Ready: 1, Dirty: 1}, q.Stats(), "Done still works after ShutDown")
		})
	}
	// A Get blocked on an empty queue wakes on ShutDown and reports it, as
	// without the option.
	synctest.Test(t, func(t *testing.T) {
		requireGetsWakeOnShutDown(t, workqueue.NewWithConfig(workqueue.Config[string]{GetStopsAtShutDown: true}), 1)
	})
}
