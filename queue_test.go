package workqueue_test

// Tests of the queue's contract through its exported API: the state table
// of one key (docs/protocol.md) row by row, the blocking behaviour of Get,
// GetContext and the ShutDown family under testing/synctest, the Store
// protocol, memory after a burst and the absence of goroutines.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/go-coalesce/workqueue"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// ---------------------------------------------------------------------------
// Queue configurations every state-table row runs against. They take
// different paths through the queue: the built-in ring, a Store given in
// Config (calls through the interface, Touch), and metrics (clock reads and
// the processing-time table).

type queueConfig struct {
	name string
	new  func() *workqueue.Queue[string]
}

var queueConfigs = []queueConfig{
	{"New", workqueue.New[string]},
	{"zero", func() *workqueue.Queue[string] { return new(workqueue.Queue[string]) }},
	{"Config{}", func() *workqueue.Queue[string] {
		return workqueue.NewWithConfig(workqueue.Config[string]{})
	}},
	{"FIFOStore", func() *workqueue.Queue[string] {
		return workqueue.NewWithConfig(workqueue.Config[string]{Store: workqueue.NewFIFOStore[string]()})
	}},
	{"metrics", func() *workqueue.Queue[string] {
		return workqueue.NewWithConfig(workqueue.Config[string]{Name: "test", Metrics: &countingMetrics{}})
	}},
}

// countingMetrics counts the events a queue reports.
type countingMetrics struct {
	added, retried, waited, worked, shutDown atomic.Int64
	stats                                    func() workqueue.Stats
}

func (m *countingMetrics) NewQueueMetrics(_ string, stats func() workqueue.Stats) workqueue.QueueMetrics {
	m.stats = stats
	return m
}
func (m *countingMetrics) Added()               { m.added.Add(1) }
func (m *countingMetrics) Retried()             { m.retried.Add(1) }
func (m *countingMetrics) Waited(time.Duration) { m.waited.Add(1) }
func (m *countingMetrics) Worked(time.Duration) { m.worked.Add(1) }
func (m *countingMetrics) ShutDown()            { m.shutDown.Add(1) }

// ---------------------------------------------------------------------------
// Helpers that must run inside a synctest bubble.

type getResult[T any] struct {
	item     T
	shutdown bool
}

// tryGet calls q.Get on a new goroutine and returns what it returned, or
// blocked == true if Get is durably blocked. A blocked Get is released with
// ShutDown (the caller fails the test anyway), so the bubble can end.
func tryGet[T comparable](q *workqueue.Queue[T]) (item T, shutdown, blocked bool) {
	ch := make(chan getResult[T], 1)
	go func() {
		item, shutdown := q.Get()
		ch <- getResult[T]{item, shutdown}
	}()
	synctest.Wait()
	select {
	case r := <-ch:
		return r.item, r.shutdown, false
	default:
		q.ShutDown()
		<-ch
		return item, false, true
	}
}

// step is one operation of a state-table row, with the checks that follow it.
type step func(t *testing.T, q *workqueue.Queue[string])

func opAdd(keys ...string) step {
	return func(t *testing.T, q *workqueue.Queue[string]) {
		for _, k := range keys {
			q.Add(k)
		}
	}
}

func opDone(keys ...string) step {
	return func(t *testing.T, q *workqueue.Queue[string]) {
		for _, k := range keys {
			require.NotPanics(t, func() { q.Done(k) }, "Done(%q) must never panic", k)
		}
	}
}

// get checks that Get hands out want, in this order, without blocking.
func expectGet(want ...string) step {
	return func(t *testing.T, q *workqueue.Queue[string]) {
		for i, w := range want {
			item, shutdown, blocked := tryGet(q)
			require.False(t, blocked, "Get #%d must not block: %q should be ready", i+1, w)
			require.False(t, shutdown, "Get #%d must hand out %q, not report shutdown", i+1, w)
			require.Equal(t, w, item, "Get #%d must hand out the keys in order %q", i+1, want)
		}
	}
}

// getShutdown checks that Get returns at once with shutdown == true.
func expectShutdown() step {
	return func(t *testing.T, q *workqueue.Queue[string]) {
		item, shutdown, blocked := tryGet(q)
		require.False(t, blocked, "Get must not block once the queue is shut down and nothing is ready")
		require.True(t, shutdown, "Get must report shutdown once nothing is ready after ShutDown; it returned %q", item)
		require.Zero(t, item, "Get must return the zero key with shutdown")
	}
}

// getBlocks checks that nothing is ready: a getter blocks until its context
// is cancelled, and then takes nothing.
func expectBlocked() step {
	return func(t *testing.T, q *workqueue.Queue[string]) {
		ctx, cancel := context.WithCancel(context.Background())
		type res struct {
			item string
			err  error
		}
		ch := make(chan res, 1)
		go func() {
			item, err := q.GetContext(ctx)
			ch <- res{item, err}
		}()
		synctest.Wait()
		select {
		case r := <-ch:
			cancel()
			require.Fail(t, "GetContext must block while no key is ready", "it returned %q, %v", r.item, r.err)
		default:
		}
		cancel()
		synctest.Wait()
		r := <-ch
		require.ErrorIs(t, r.err, context.Canceled, "a blocked GetContext must return the context's error when it is cancelled")
	}
}

func opShutDown() step {
	return func(t *testing.T, q *workqueue.Queue[string]) {
		q.ShutDown()
		require.True(t, q.ShuttingDown(), "ShuttingDown must report true after ShutDown")
	}
}

// counts checks Len and Stats: ready keys, processing keys and dirty keys
// (ready, or processing and added again). Nothing ever waits here.
func expectCounts(ready, processing, dirty int) step {
	return func(t *testing.T, q *workqueue.Queue[string]) {
		s := q.Stats()
		require.Equal(t, ready, q.Len(), "Len must count the ready keys")
		require.Equal(t, ready, s.Ready, "Stats.Ready must count the ready keys")
		require.Equal(t, processing, s.Processing, "Stats.Processing must count the keys handed out and not Done")
		require.Equal(t, dirty, s.Dirty, "Stats.Dirty must count ready keys plus processing keys added again")
		require.Zero(t, s.Waiting, "Stats.Waiting must be 0 without AddAfter")
	}
}

// stateTable holds the rows of the state table in docs/protocol.md that do not involve
// waiting, plus the Done and ShutDown rules below it. Every row ends by
// checking that nothing is left over (no duplicate entry, no stale state).
var stateTable = []struct {
	name  string
	steps []step
}{
	{"absent/Add: ready, pushed", []step{
		expectCounts(0, 0, 0), expectBlocked(),
		opAdd("a"), expectCounts(1, 0, 1),
		expectGet("a"), expectCounts(0, 1, 0),
		opDone("a"), expectCounts(0, 0, 0), expectBlocked(),
	}},
	{"absent/Done: ignored", []step{
		opDone("a", "a"), expectCounts(0, 0, 0), expectBlocked(),
		opAdd("a"), expectCounts(1, 0, 1), expectGet("a"), opDone("a"), expectCounts(0, 0, 0), expectBlocked(),
	}},
	{"ready/Add: duplicates collapse and keep the first add's place", []step{
		opAdd("a", "b", "a", "c", "b", "a", "a"), expectCounts(3, 0, 3),
		expectGet("a", "b", "c"), expectCounts(0, 3, 0), expectBlocked(),
		opDone("a", "b", "c"), expectCounts(0, 0, 0), expectBlocked(),
	}},
	{"ready/Get: processing", []step{
		opAdd("a", "b"), expectGet("a"), expectCounts(1, 1, 1),
		expectGet("b"), expectCounts(0, 2, 0), expectBlocked(),
		opDone("b"), expectCounts(0, 1, 0), opDone("a"), expectCounts(0, 0, 0),
	}},
	{"ready/Done: ignored", []step{
		opAdd("a", "b"), opDone("a", "a", "b"), expectCounts(2, 0, 2),
		expectGet("a", "b"), expectCounts(0, 2, 0), expectBlocked(),
		opDone("a", "b"), expectCounts(0, 0, 0), expectBlocked(),
	}},
	{"processing/Add: processing+dirty, not ready", []step{
		opAdd("a"), expectGet("a"), opAdd("a"), expectCounts(0, 1, 1), expectBlocked(),
		opDone("a"), expectCounts(1, 0, 1),
		expectGet("a"), expectCounts(0, 1, 0), opDone("a"), expectCounts(0, 0, 0), expectBlocked(),
	}},
	{"processing/Done: absent", []step{
		opAdd("a"), expectGet("a"), opDone("a"), expectCounts(0, 0, 0), expectBlocked(),
		opAdd("a"), expectCounts(1, 0, 1), expectGet("a"), opDone("a"), expectCounts(0, 0, 0),
	}},
	{"processing/Done twice: second Done ignored", []step{
		opAdd("a"), expectGet("a"), opDone("a", "a"), expectCounts(0, 0, 0), expectBlocked(),
		opAdd("a"), expectCounts(1, 0, 1), expectGet("a"), expectCounts(0, 1, 0),
		opDone("a", "a"), expectCounts(0, 0, 0), expectBlocked(),
	}},
	{"processing+dirty/Add: no change", []step{
		opAdd("a"), expectGet("a"), opAdd("a", "a", "a"), expectCounts(0, 1, 1),
		opDone("a"), expectCounts(1, 0, 1),
		expectGet("a"), expectCounts(0, 1, 0), expectBlocked(), opDone("a"), expectCounts(0, 0, 0),
	}},
	{"processing+dirty/Done: ready at the tail", []step{
		opAdd("a"), expectGet("a"), opAdd("a", "b", "c"), expectCounts(2, 1, 3),
		opDone("a"), expectCounts(3, 0, 3),
		expectGet("b", "c", "a"), expectBlocked(), opDone("a", "b", "c"), expectCounts(0, 0, 0),
	}},
	{"processing+dirty/Done twice: queued once", []step{
		opAdd("a"), expectGet("a"), opAdd("a"), opDone("a", "a"), expectCounts(1, 0, 1),
		expectGet("a"), expectBlocked(), opDone("a", "a"), expectCounts(0, 0, 0), expectBlocked(),
	}},
	{"processing+dirty/Done then Add: ready key not duplicated", []step{
		opAdd("a"), expectGet("a"), opAdd("a"), opDone("a"), opAdd("a", "b", "a"), expectCounts(2, 0, 2),
		expectGet("a", "b"), expectBlocked(), opDone("a", "b"), expectCounts(0, 0, 0),
	}},
	{"two keys processing, each re-added", []step{
		opAdd("a", "b"), expectGet("a", "b"), opAdd("b", "a"), expectCounts(0, 2, 2),
		opDone("a"), expectCounts(1, 1, 2), opDone("b"), expectCounts(2, 0, 2),
		expectGet("a", "b"), opDone("b", "a"), expectCounts(0, 0, 0),
	}},
	{"ShutDown: adds ignored, ready keys handed out, then shutdown", []step{
		opAdd("a", "b", "c"), expectGet("a"), opShutDown(),
		opAdd("d", "a", "b"), expectCounts(2, 1, 2),
		expectGet("b", "c"), expectCounts(0, 3, 0), expectShutdown(), expectShutdown(),
		opDone("a", "b", "c"), expectCounts(0, 0, 0), expectShutdown(),
		opAdd("a"), expectCounts(0, 0, 0), expectShutdown(),
	}},
	{"ShutDown: processing+dirty key handed out after Done", []step{
		opAdd("a", "b"), expectGet("a"), opAdd("a"), opShutDown(), expectCounts(1, 1, 2),
		expectGet("b"), expectShutdown(),
		opDone("a"), expectCounts(1, 1, 1),
		expectGet("a"), expectShutdown(), opDone("a", "b"), expectCounts(0, 0, 0), expectShutdown(),
	}},
	{"ShutDown: twice is harmless", []step{
		opAdd("a"), opShutDown(), opShutDown(), expectGet("a"), expectShutdown(), opDone("a"), expectCounts(0, 0, 0),
	}},
}

// TestStateTable runs every row of the state table (without waiting keys)
// against every queue configuration.
func TestStateTable(t *testing.T) {
	for _, row := range stateTable {
		for _, cfg := range queueConfigs {
			t.Run(row.name+"/"+cfg.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					q := cfg.new()
					for _, s := range row.steps {
						s(t, q)
					}
				})
			})
		}
	}
}

// TestReaddedKeysQueueInDoneOrder checks, over many keys, that re-added
// processing keys join the tail in the order of their Done, after every key
// that was ready when Done was called.
func TestReaddedKeysQueueInDoneOrder(t *testing.T) {
	q := workqueue.New[int]()
	const n = 100
	for i := range n {
		q.Add(i)
	}
	// Take the first half, re-add them, and add the second half again.
	for i := range n / 2 {
		k, _ := q.Get()
		require.Equal(t, i, k, "Get must hand out keys in Add order")
		q.Add(k)
	}
	for i := n / 2; i < n; i++ {
		q.Add(i) // duplicates of ready keys: no change
	}
	require.Equal(t, n/2, q.Len(), "re-added processing keys must not be ready before Done")
	// Done in reverse order: they queue in that order, behind the second half.
	for i := n/2 - 1; i >= 0; i-- {
		q.Done(i)
	}
	var got []int
	for q.Len() > 0 {
		k, _ := q.Get()
		got = append(got, k)
		q.Done(k)
	}
	var want []int
	for i := n / 2; i < n; i++ {
		want = append(want, i)
	}
	for i := n/2 - 1; i >= 0; i-- {
		want = append(want, i)
	}
	require.Equal(t, want, got, "the second half keeps its first place; re-added keys follow in Done order")
}

// TestMetricsCountsAdds checks that only a key becoming dirty counts as an
// add: duplicates do not, a re-add of a processing key does once.
func TestMetricsCountsAdds(t *testing.T) {
	m := &countingMetrics{}
	q := workqueue.NewWithConfig(workqueue.Config[string]{Name: "q", Metrics: m})
	q.Add("a")
	q.Add("a")
	q.Add("b")
	k, _ := q.Get() // a
	q.Add("a")
	q.Add("a")
	q.Done(k)
	q.Done(k) // ignored
	require.Equal(t, int64(3), m.added.Load(), "adds: a, b, and a again while processing; duplicates are not adds")
	require.Equal(t, int64(1), m.waited.Load(), "one Get, one queue-latency observation")
	require.Equal(t, int64(1), m.worked.Load(), "one Done of a processing key, one work-duration observation; the second Done is ignored")
	q.ShutDown()
	q.ShutDown()
	require.Equal(t, int64(1), m.shutDown.Load(), "ShutDown is reported once")
	require.Equal(t, workqueue.Stats{Ready: 2, Dirty: 2}, m.stats(), "the provider's stats function must read the queue")
}

// ---------------------------------------------------------------------------
// Blocking Get.

// TestGetBlocksUntilAdd checks that a Get waiting on an empty queue wakes on
// Add and takes the key.
func TestGetBlocksUntilAdd(t *testing.T) {
	for _, cfg := range queueConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := cfg.new()
				ch := make(chan getResult[string], 1)
				go func() {
					item, shutdown := q.Get()
					ch <- getResult[string]{item, shutdown}
				}()
				synctest.Wait()
				require.Empty(t, ch, "Get must block while the queue is empty")
				q.Add("a")
				synctest.Wait()
				require.Len(t, ch, 1, "a blocked Get must wake on Add")
				r := <-ch
				require.Equal(t, getResult[string]{"a", false}, r, "the woken Get must take the added key")
				require.Equal(t, workqueue.Stats{Processing: 1}, trimStats(q.Stats()), "the key must be processing")
				q.Done("a")
			})
		})
	}
}

// TestGetBlocksUntilShutDown checks that every Get waiting on an empty
// queue wakes on ShutDown and reports shutdown.
func TestGetBlocksUntilShutDown(t *testing.T) {
	for _, cfg := range queueConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := cfg.new()
				const getters = 5
				ch := make(chan getResult[string], getters)
				for range getters {
					go func() {
						item, shutdown := q.Get()
						ch <- getResult[string]{item, shutdown}
					}()
				}
				synctest.Wait()
				require.Empty(t, ch, "Get must block while the queue is empty")
				q.ShutDown()
				synctest.Wait()
				require.Len(t, ch, getters, "every blocked Get must wake on ShutDown")
				for range getters {
					require.Equal(t, getResult[string]{"", true}, <-ch, "a Get woken by ShutDown must report shutdown")
				}
			})
		})
	}
}

// TestGetWakesOneGetterPerKey checks that N keys added to a queue with more
// blocked getters are taken by exactly N of them and the rest keep waiting.
func TestGetWakesOneGetterPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[int]()
		const getters, keys = 8, 3
		ch := make(chan getResult[int], getters)
		for range getters {
			go func() {
				item, shutdown := q.Get()
				ch <- getResult[int]{item, shutdown}
			}()
		}
		synctest.Wait()
		for k := range keys {
			q.Add(k)
		}
		synctest.Wait()
		require.Len(t, ch, keys, "each added key must wake exactly one getter")
		seen := map[int]bool{}
		for range keys {
			r := <-ch
			require.False(t, r.shutdown, "no shutdown yet")
			seen[r.item] = true
		}
		require.Len(t, seen, keys, "each key must be handed to one getter only")
		q.ShutDown()
		synctest.Wait()
		require.Len(t, ch, getters-keys, "ShutDown must release the remaining getters")
	})
}

// trimStats drops the duration fields, which depend on the clock.
func trimStats(s workqueue.Stats) workqueue.Stats {
	s.UnfinishedWork, s.LongestRunning = 0, 0
	return s
}

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

// ---------------------------------------------------------------------------
// Len, Stats, zero value.

// TestLenCountsReadyOnly checks that Len counts neither processing,
// processing+dirty nor waiting keys, and that Stats counts each.
func TestLenCountsReadyOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[string]()
		q.Add("ready")
		q.Add("proc")
		q.Add("procdirty")
		// Hand out proc and procdirty, leave ready: take all three and
		// put "ready" back through Done+Add.
		for range 3 {
			k, _ := q.Get()
			if k == "ready" {
				q.Done(k)
				q.Add(k)
			}
		}
		q.Add("procdirty")
		q.AddAfter("waiting", time.Hour)
		require.Equal(t, 1, q.Len(), "Len counts only the ready key")
		require.Equal(t, workqueue.Stats{Ready: 1, Waiting: 1, Processing: 2, Dirty: 2}, trimStats(q.Stats()),
			"Stats: one ready, one waiting, two processing, two dirty (ready + processing+dirty)")
		q.ShutDown() // drops the waiting key and stops its timer
		require.Equal(t, workqueue.Stats{Ready: 1, Processing: 2, Dirty: 2}, trimStats(q.Stats()), "ShutDown drops the waiting key only")
	})
}

// TestStatsDurations checks that with metrics the ages of runs in progress
// are exact at the moment Stats is called.
func TestStatsDurations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.NewWithConfig(workqueue.Config[string]{Name: "q", Metrics: &countingMetrics{}})
		q.Add("a")
		q.Add("b")
		q.Get()
		time.Sleep(time.Second) // synctest's clock: instant
		q.Get()
		time.Sleep(time.Second)
		s := q.Stats()
		require.Equal(t, 3*time.Second, s.UnfinishedWork, "unfinished work is 2s (a) + 1s (b)")
		require.Equal(t, 2*time.Second, s.LongestRunning, "the oldest run (a) is 2s old")
		q.Done("a")
		q.Done("b")
		s = q.Stats()
		require.Zero(t, s.UnfinishedWork, "nothing is running")
		require.Zero(t, s.LongestRunning, "nothing is running")

		// Runs that end out of order, and a key run again.
		q.Add("a")
		q.Add("b")
		q.Add("c")
		q.Get() // a at 0s
		time.Sleep(time.Second)
		q.Get() // b at 1s
		time.Sleep(time.Second)
		q.Get() // c at 2s
		time.Sleep(time.Second)
		q.Done("b") // not the oldest
		s = q.Stats()
		require.Equal(t, 4*time.Second, s.UnfinishedWork, "a (3s) + c (1s) after b ended out of order")
		require.Equal(t, 3*time.Second, s.LongestRunning, "a is the oldest run")
		q.Add("b")
		get := func() string { k, _ := q.Get(); return k }
		require.Equal(t, "b", get(), "b runs again, at 3s")
		time.Sleep(time.Second)
		q.Done("a")
		s = q.Stats()
		require.Equal(t, 3*time.Second, s.UnfinishedWork, "c (2s) + b's second run (1s)")
		require.Equal(t, 2*time.Second, s.LongestRunning, "c is the oldest run; b's first run has ended")
		time.Sleep(time.Second)
		q.Done("c")
		s = q.Stats()
		require.Equal(t, 2*time.Second, s.UnfinishedWork, "b's second run only")
		require.Equal(t, 2*time.Second, s.LongestRunning, "b's second run, not its first")
		q.Done("b")
		require.Equal(t, workqueue.Stats{}, q.Stats(), "nothing left, durations zero")
	})
}

// TestZeroValueQueue checks that a Queue declared as a variable works:
// Add, a blocking Get, GetContext, Done, ShutDown and drain.
func TestZeroValueQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var q workqueue.Queue[string]
		require.Equal(t, 0, q.Len(), "an empty zero queue")
		q.Done("x") // not processing: ignored
		ch := make(chan getResult[string], 1)
		go func() {
			item, shutdown := q.Get()
			ch <- getResult[string]{item, shutdown}
		}()
		synctest.Wait()
		require.Empty(t, ch, "Get on an empty zero queue must block")
		q.Add("a")
		synctest.Wait()
		require.Equal(t, getResult[string]{"a", false}, <-ch, "a blocked Get on a zero queue must wake on Add")
		q.Add("a")
		q.Add("b")
		q.Done("a")
		item, err := q.GetContext(context.Background())
		require.NoError(t, err, "GetContext on a zero queue")
		require.Equal(t, "b", item, "b was ready before a's Done pushed a")
		q.Done("b")
		done := make(chan struct{})
		go func() {
			q.ShutDownWithDrain()
			close(done)
		}()
		synctest.Wait()
		require.True(t, q.ShuttingDown(), "the drain shuts the zero queue down")
		require.Equal(t, 1, q.Len(), "a is still ready")
		expectGet("a")(t, &q)
		q.Done("a")
		synctest.Wait()
		<-done
		item, shutdown := q.Get()
		require.True(t, shutdown, "Get after ShutDown on a drained zero queue reports shutdown")
		require.Zero(t, item, "with the zero key")
	})
}

// ---------------------------------------------------------------------------
// Store protocol.

// recordingStore is a FIFO Store that logs every call the queue makes and
// records violations of the Store invariants.
type recordingStore struct {
	fifo       workqueue.Store[string]
	in         map[string]bool
	log        []string
	violations []string
}

func newRecordingStore() *recordingStore {
	return &recordingStore{fifo: workqueue.NewFIFOStore[string](), in: map[string]bool{}}
}

func (s *recordingStore) Push(item string) {
	s.log = append(s.log, "push "+item)
	if s.in[item] {
		s.violations = append(s.violations, "Push of "+item+", already in the store")
	}
	s.in[item] = true
	s.fifo.Push(item)
}

func (s *recordingStore) Pop() string {
	if s.fifo.Len() == 0 {
		s.violations = append(s.violations, "Pop of an empty store")
		return ""
	}
	item := s.fifo.Pop()
	delete(s.in, item)
	s.log = append(s.log, "pop "+item)
	return item
}

func (s *recordingStore) Len() int { return s.fifo.Len() }

func (s *recordingStore) Touch(item string) {
	s.log = append(s.log, "touch "+item)
	if !s.in[item] {
		s.violations = append(s.violations, "Touch of "+item+", not in the store")
	}
	s.fifo.Touch(item)
}

// TestStoreProtocol checks which Store calls the queue makes for each row
// of the state table: Push once per newly ready key, Touch only for a
// duplicate Add of a ready key (not of a processing key), Pop only when
// Len() > 0.
func TestStoreProtocol(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRecordingStore()
		q := workqueue.NewWithConfig(workqueue.Config[string]{Store: s})
		expect := func(what string, want ...string) {
			t.Helper()
			if want == nil {
				want = []string{}
			}
			require.Equal(t, want, append([]string{}, s.log...), "store calls for %s", what)
			s.log = s.log[:0]
		}
		q.Add("a")
		q.Add("b")
		expect("two new keys", "push a", "push b")
		q.Add("a")
		q.Add("a")
		expect("duplicate adds of a ready key", "touch a", "touch a")
		expectGet("a")(t, q)
		expect("Get", "pop a")
		q.Add("a")
		q.Add("a")
		expect("adds of a processing key: neither Touch nor Push")
		q.Done("x")
		q.Done("b")
		expect("Done of keys that are not processing")
		q.Done("a")
		expect("Done of a processing+dirty key", "push a")
		q.Done("a")
		expect("second Done")
		expectGet("b", "a")(t, q)
		expect("two Gets", "pop b", "pop a")
		q.Done("a")
		q.Done("b")
		expect("Done of clean processing keys")
		expectBlocked()(t, q)
		q.ShutDown()
		expectShutdown()(t, q)
		q.Add("c")
		expect("Get after ShutDown with nothing ready, Add after ShutDown")
		require.Empty(t, s.violations, "the queue must keep the Store invariants")
	})
}

// ---------------------------------------------------------------------------
// Resources: goroutines, garbage, memory.

// TestNoGoroutines checks that a plain queue starts no goroutine, named or
// not, for any of its operations (besides AfterFunc for a cancellable
// context, which is the context's).
func TestNoGoroutines(t *testing.T) {
	goleak.VerifyNone(t) // a quiet baseline
	before := runtime.NumGoroutine()
	q := workqueue.New[int]()
	var z workqueue.Queue[int]
	for _, q := range []*workqueue.Queue[int]{q, &z} {
		for i := range 100 {
			q.Add(i)
			q.Add(i)
		}
		for range 50 {
			k, _ := q.Get()
			q.Add(k)
			q.Done(k)
		}
		k, err := q.GetContext(context.Background())
		require.NoError(t, err, "a key is ready")
		q.Done(k)
		_ = q.Len()
		_ = q.Stats()
		require.Equal(t, before, runtime.NumGoroutine(), "Add, Get, GetContext and Done must start no goroutine")
		q.ShutDown()
		for {
			k, shutdown := q.Get()
			if shutdown {
				break
			}
			q.Done(k)
		}
		q.ShutDownWithDrain()
		require.Equal(t, before, runtime.NumGoroutine(), "ShutDown and drain must start no goroutine")
	}
	goleak.VerifyNone(t)
}

// waitCollected runs the garbage collector until done is closed, a bounded
// number of times, and reports whether it was.
func waitCollected(done <-chan struct{}) bool {
	for range 50 {
		runtime.GC()
		runtime.Gosched()
		select {
		case <-done:
			return true
		default:
		}
	}
	return false
}

type payload struct{ buf [64]byte }

// TestKeyCollectedAfterDone checks that the queue keeps no reference to a
// key once it has been handed out and Done, whichever way it went.
func TestKeyCollectedAfterDone(t *testing.T) {
	for _, path := range []string{"Add-Get-Done", "re-added while processing", "Done twice", "shut down"} {
		t.Run(path, func(t *testing.T) {
			q := workqueue.New[*payload]()
			collected := make(chan struct{})
			func() {
				p := &payload{}
				runtime.AddCleanup(p, func(c chan struct{}) { close(c) }, collected)
				for i := range 20 { // other keys around it, so the ring wraps
					q.Add(&payload{buf: [64]byte{byte(i)}})
				}
				q.Add(p)
				for range 20 {
					k, _ := q.Get()
					q.Done(k)
				}
				k, _ := q.Get()
				switch path {
				case "re-added while processing":
					q.Add(k)
					q.Done(k)
					k, _ = q.Get()
				case "Done twice":
					q.Done(k)
				case "shut down":
					q.ShutDown()
				}
				q.Done(k)
			}()
			require.True(t, waitCollected(collected), "a key handed out and Done must not be kept alive by the queue")
			runtime.KeepAlive(q)
		})
	}
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// burstMemory queues n distinct keys on q, drains them in the given order,
// and returns how much the heap grew with the keys queued and how much of
// that is still held once they are drained.
func burstMemory(q *workqueue.Queue[int], n int, order string) (grew, kept uint64) {
	before := heapInUse()
	for i := range n {
		q.Add(i)
	}
	peak := heapInUse()
	switch order {
	case "get-done":
		for range n {
			k, _ := q.Get()
			q.Done(k)
		}
	case "get-all-then-done":
		for range n {
			q.Get()
		}
		for i := range n {
			q.Done(i)
		}
	}
	after := heapInUse()
	if peak > before {
		grew = peak - before
	}
	if after > before {
		kept = after - before
	}
	return grew, kept
}

// TestMemoryAfterBurst queues and drains 1M distinct keys and checks that
// the queue then keeps at most 10% of the heap it grew: the key table and
// the ring give their memory back (a Go map never shrinks on its own). It
// checks a second burst on the same queue too: memory follows the live key
// count, not the peak of the bursts before. Under -race, where 1M keys take
// several seconds, it uses 64K keys: the property does not depend on the
// count once it is far above the sizes below which the queue does not
// bother to shrink.
func TestMemoryAfterBurst(t *testing.T) {
	n := 1 << 20
	if workqueue.RaceBuild() {
		n = 1 << 16
	}
	check := func(t *testing.T, grew, kept uint64, what string) {
		t.Helper()
		require.Greater(t, grew, uint64(n), "queueing %d keys must grow the heap", n)
		require.LessOrEqual(t, kept, grew/10,
			"after draining %d keys (%s) the queue keeps %d of the %d bytes it grew; at most 10%% allowed", n, what, kept, grew)
		// Memory follows the live key count, which is now zero: what an
		// idle queue holds must not grow with the size of past bursts.
		const idleMax = 1 << 20
		require.LessOrEqual(t, kept, uint64(idleMax),
			"after draining %d keys (%s) the idle queue keeps %d bytes; at most %d allowed, whatever the burst size", n, what, kept, idleMax)
	}
	t.Run("get-done twice", func(t *testing.T) {
		q := workqueue.New[int]()
		grew, kept := burstMemory(q, n, "get-done")
		check(t, grew, kept, "first burst")
		grew, kept = burstMemory(q, n, "get-done")
		check(t, grew, kept, "second burst of the same size")
		require.Equal(t, workqueue.Stats{}, trimStats(q.Stats()), "the queue is empty")
		runtime.KeepAlive(q)
	})
	t.Run("get-all-then-done", func(t *testing.T) {
		// All keys processing at once: the key table peaks with
		// processing entries rather than ready ones.
		q := workqueue.New[int]()
		grew, kept := burstMemory(q, n, "get-all-then-done")
		check(t, grew, kept, "all processing, then all Done")
		require.Equal(t, workqueue.Stats{}, trimStats(q.Stats()), "the queue is empty")
		runtime.KeepAlive(q)
	})
}

// TestErrShutDown checks the error's identity and message prefix.
func TestErrShutDown(t *testing.T) {
	require.True(t, errors.Is(workqueue.ErrShutDown, workqueue.ErrShutDown), "ErrShutDown is a sentinel")
	require.Contains(t, workqueue.ErrShutDown.Error(), "workqueue:", "errors start with the package name")
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
		q := workqueue.NewWithConfig(workqueue.Config[string]{GetStopsAtShutDown: true})
		ch := make(chan getResult[string], 1)
		go func() {
			item, shutdown := q.Get()
			ch <- getResult[string]{item, shutdown}
		}()
		synctest.Wait()
		require.Empty(t, ch, "Get must block while the queue is empty")
		q.ShutDown()
		synctest.Wait()
		require.Equal(t, getResult[string]{"", true}, <-ch, "a Get woken by ShutDown must report shutdown")
	})
}
