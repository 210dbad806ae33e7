package workqueue_test

// Tests of GetContext: cancellation, deadlines, shutdown, and that no key
// is lost when a cancelled getter was the one woken.

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
// GetContext.

type ctxResult struct {
	item string
	err  error
}

func goGetContext(ctx context.Context, q *workqueue.Queue[string]) <-chan ctxResult {
	ch := make(chan ctxResult, 1)
	go func() {
		item, err := q.GetContext(ctx)
		ch <- ctxResult{item, err}
	}()
	return ch
}

// TestGetContextCancelWhileBlocked checks that a blocked GetContext returns
// the context's error when it is cancelled, and takes nothing.
func TestGetContextCancelWhileBlocked(t *testing.T) {
	for _, cfg := range queueConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := cfg.new()
				ctx, cancel := context.WithCancel(context.Background())
				ch := goGetContext(ctx, q)
				synctest.Wait()
				require.Empty(t, ch, "GetContext must block while the queue is empty")
				cancel()
				synctest.Wait()
				require.Len(t, ch, 1, "GetContext must return when its context is cancelled")
				r := <-ch
				require.ErrorIs(t, r.err, context.Canceled, "GetContext must return the context's error")
				require.Zero(t, r.item, "GetContext must return the zero key with an error")
				q.Add("a")
				require.Equal(t, workqueue.Stats{Ready: 1, Dirty: 1}, trimStats(q.Stats()), "a later key must stay ready: the cancelled getter is gone")
			})
		})
	}
}

// TestGetContextDeadline checks that GetContext gives up exactly at its
// deadline with context.DeadlineExceeded.
func TestGetContextDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[string]()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		item, err := q.GetContext(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded, "GetContext must return the deadline error when nothing comes")
		require.Zero(t, item, "no key with an error")
		require.Equal(t, time.Minute, time.Since(start), "GetContext must return at the deadline, not before or after")
	})
}

// TestGetContextCancelledOnEntry checks that a context already done on
// entry makes GetContext return its error at once even with keys ready, and
// the keys stay ready.
func TestGetContextCancelledOnEntry(t *testing.T) {
	for _, cfg := range queueConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			q := cfg.new()
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := q.GetContext(ctx)
			require.ErrorIs(t, err, context.Canceled, "a cancelled context must be reported on an empty queue")
			q.Add("a")
			item, err := q.GetContext(ctx)
			require.ErrorIs(t, err, context.Canceled, "a cancelled context must be reported even when a key is ready")
			require.Zero(t, item, "no key with an error")
			require.Equal(t, workqueue.Stats{Ready: 1, Dirty: 1}, trimStats(q.Stats()), "the key must stay ready, not be half-taken")
			item, err = q.GetContext(context.Background())
			require.NoError(t, err, "a live context takes the ready key")
			require.Equal(t, "a", item, "the key that stayed ready")
			q.Done(item)
		})
	}
}

// TestGetContextReturnsKey checks that GetContext wakes on Add and hands the
// key out as Get does.
func TestGetContextReturnsKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[string]()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := goGetContext(ctx, q)
		synctest.Wait()
		require.Empty(t, ch, "GetContext must block while the queue is empty")
		q.Add("a")
		synctest.Wait()
		require.Equal(t, ctxResult{"a", nil}, <-ch, "GetContext must wake on Add and take the key")
		require.Equal(t, workqueue.Stats{Processing: 1}, trimStats(q.Stats()), "the key must be processing")
		q.Done("a")
		// context.Background has no Done channel: a separate path.
		ch = goGetContext(context.Background(), q)
		synctest.Wait()
		q.Add("b")
		synctest.Wait()
		require.Equal(t, ctxResult{"b", nil}, <-ch, "GetContext(Background) must wake on Add")
		q.Done("b")
	})
}

// TestGetContextShutDown checks ErrShutDown: returned after the ready keys
// are handed out, and to a GetContext blocked when ShutDown comes.
func TestGetContextShutDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[string]()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		blocked := goGetContext(ctx, q)
		blockedBg := goGetContext(context.Background(), q)
		synctest.Wait()
		q.ShutDown()
		synctest.Wait()
		for _, ch := range []<-chan ctxResult{blocked, blockedBg} {
			require.Len(t, ch, 1, "a blocked GetContext must wake on ShutDown")
			r := <-ch
			require.ErrorIs(t, r.err, workqueue.ErrShutDown, "a blocked GetContext woken by ShutDown must return ErrShutDown")
		}

		q2 := workqueue.New[string]()
		q2.Add("a")
		q2.ShutDown()
		item, err := q2.GetContext(ctx)
		require.NoError(t, err, "GetContext must hand out a key that was ready before ShutDown")
		require.Equal(t, "a", item, "the key that was ready")
		_, err = q2.GetContext(ctx)
		require.ErrorIs(t, err, workqueue.ErrShutDown, "GetContext must return ErrShutDown once nothing is ready after ShutDown")
		q2.Done("a")
	})
}

// cancelCtx is a context whose cancellation the test controls in two
// steps: cancel makes Done closed and Err non-nil, fire later runs the
// functions registered by context.AfterFunc. That reproduces, without
// timing luck, the moment inside a real cancellation when a getter already
// sees ctx.Err() != nil but the queue's AfterFunc broadcast has not run:
// the getter must then not swallow a wake-up meant for another getter.
type cancelCtx struct {
	context.Context // Background: deadline and values
	done            chan struct{}
	mu              sync.Mutex
	err             error
	funcs           []*afterFunc
}

type afterFunc struct {
	f       func()
	stopped bool
	ran     bool
}

func newCancelCtx() *cancelCtx {
	return &cancelCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *cancelCtx) Done() <-chan struct{} { return c.done }

func (c *cancelCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *cancelCtx) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = context.Canceled
		close(c.done)
	}
}

// AfterFunc makes context.AfterFunc hand the function to this context
// instead of starting a goroutine that watches Done.
func (c *cancelCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := &afterFunc{f: f}
	c.funcs = append(c.funcs, a)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if a.ran || a.stopped {
			return false
		}
		a.stopped = true
		return true
	}
}

// fire runs the registered functions that were not stopped.
func (c *cancelCtx) fire() {
	c.mu.Lock()
	var run []func()
	for _, a := range c.funcs {
		if !a.stopped && !a.ran {
			a.ran = true
			run = append(run, a.f)
		}
	}
	c.mu.Unlock()
	for _, f := range run {
		f()
	}
}

// TestGetContextCancelledGetterPassesWakeUp checks that a key is not lost
// when Add's wake-up reaches a getter whose context has just ended: the
// cancelled getter returns its error, and a plain getter waiting behind it
// must still be woken and take the key, before any other event (such as
// the context's AfterFunc broadcast or a ShutDown) could rescue it.
func TestGetContextCancelledGetterPassesWakeUp(t *testing.T) {
	for _, cancelled := range []int{1, 3} {
		t.Run(fmt.Sprintf("cancelled=%d", cancelled), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := workqueue.New[string]()
				ctxs := make([]*cancelCtx, cancelled)
				chs := make([]<-chan ctxResult, cancelled)
				for i := range ctxs {
					// One at a time, so they wait in this order, ahead
					// of the plain getter: a Signal reaches them first.
					ctxs[i] = newCancelCtx()
					chs[i] = goGetContext(ctxs[i], q)
					synctest.Wait()
				}
				plain := make(chan getResult[string], 1)
				go func() {
					item, shutdown := q.Get()
					plain <- getResult[string]{item, shutdown}
				}()
				synctest.Wait()
				for _, c := range ctxs {
					c.cancel() // Err is set; the AfterFunc has not run
				}
				q.Add("k")
				synctest.Wait()
				got := len(plain)
				for _, c := range ctxs {
					c.fire() // the late broadcast, if still wanted
				}
				synctest.Wait()
				for i, ch := range chs {
					r := <-ch
					require.ErrorIs(t, r.err, context.Canceled, "cancelled getter %d must return its context's error, not take the key", i)
				}
				require.Equal(t, 1, got, "the ready key must reach the plain getter although the wake-up went to a cancelled getter first (lost wake-up)")
				r := <-plain
				require.Equal(t, getResult[string]{"k", false}, r, "the plain getter must take the key")
				q.Done("k")
				require.Equal(t, workqueue.Stats{}, trimStats(q.Stats()), "nothing left")
			})
		})
	}
}

// TestGetContextNeverLosesKeys runs many GetContext callers whose contexts
// are cancelled while keys are added, next to one plain getter: every key
// must be handed out, to exactly one getter, before the queue shuts down.
func TestGetContextNeverLosesKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[int]()
		const ctxGetters, keys = 20, 200
		var got sync.Map // key -> count, from any getter
		var dup atomic.Int64
		record := func(k int) {
			if _, loaded := got.LoadOrStore(k, true); loaded {
				dup.Add(1)
			}
			q.Done(k)
		}
		var wg sync.WaitGroup
		cancels := make([]context.CancelFunc, ctxGetters)
		for i := range ctxGetters {
			ctx, cancel := context.WithCancel(context.Background())
			cancels[i] = cancel
			wg.Go(func() {
				for {
					k, err := q.GetContext(ctx)
					if err != nil {
						return
					}
					record(k)
				}
			})
		}
		wg.Go(func() {
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				record(k)
			}
		})
		synctest.Wait()
		for k := range keys {
			if k%(keys/ctxGetters) == 0 {
				cancels[k/(keys/ctxGetters)]()
			}
			q.Add(k)
		}
		synctest.Wait()
		n := 0
		got.Range(func(any, any) bool { n++; return true })
		require.Equal(t, workqueue.Stats{}, trimStats(q.Stats()), "no key may be left ready (or processing) while a getter is idle")
		require.Equal(t, keys, n, "every key must be handed out before ShutDown")
		require.Zero(t, dup.Load(), "no key may be handed out twice")
		q.ShutDown()
		wg.Wait()
	})
}
