package workqueue_test

// Tests of the queue's contract through its exported API: the state table
// of one key (docs/protocol.md) row by row and the blocking behaviour of Get
// under testing/synctest. GetContext, the ShutDown family, Len and Stats,
// the Store protocol and resources have files of their own
// (get_context_test.go, shutdown_test.go, stats_test.go, resources_test.go).

import (
	"context"
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
	// Every key its own tenant, capped at 1: a key is never processing
	// twice, so the cap never holds one back, and one level of one-key
	// tenants taking turns is FIFO. The state table must read the same
	// through the store's hooks (handedOut, finished, remove) and its
	// wait bound.
	{"FairPriorityStore", func() *workqueue.Queue[string] {
		return workqueue.NewWithConfig(workqueue.Config[string]{Store: workqueue.NewFairPriorityStore(workqueue.FairPriority[string]{
			Tenant:      func(k string) string { return k },
			MaxWait:     time.Hour,
			MaxInFlight: 1,
		})})
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

// startGets calls q.Get on n new goroutines and returns the channel each
// sends what its Get returned to.
func startGets[T comparable](q *workqueue.Queue[T], n int) chan getResult[T] {
	ch := make(chan getResult[T], n)
	for range n {
		go func() {
			item, shutdown := q.Get()
			ch <- getResult[T]{item, shutdown}
		}()
	}
	return ch
}

// tryGet calls q.Get on a new goroutine and returns what it returned, or
// blocked == true if Get is durably blocked. A blocked Get is released with
// ShutDown (the caller fails the test anyway), so the bubble can end.
func tryGet[T comparable](q *workqueue.Queue[T]) (item T, shutdown, blocked bool) {
	ch := startGets(q, 1)
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
				ch := startGets(q, 1)
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

// requireGetsWakeOnShutDown starts getters Gets on q, which is empty, and
// checks that they block until ShutDown and then all report shutdown. It
// runs inside a synctest bubble.
func requireGetsWakeOnShutDown(t *testing.T, q *workqueue.Queue[string], getters int) {
	t.Helper()
	ch := startGets(q, getters)
	synctest.Wait()
	require.Empty(t, ch, "Get must block while the queue is empty")
	q.ShutDown()
	synctest.Wait()
	require.Len(t, ch, getters, "every blocked Get must wake on ShutDown")
	for range getters {
		require.Equal(t, getResult[string]{"", true}, <-ch, "a Get woken by ShutDown must report shutdown")
	}
}

// TestGetBlocksUntilShutDown checks that every Get waiting on an empty
// queue wakes on ShutDown and reports shutdown.
func TestGetBlocksUntilShutDown(t *testing.T) {
	for _, cfg := range queueConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { requireGetsWakeOnShutDown(t, cfg.new(), 5) })
		})
	}
}

// TestGetWakesOneGetterPerKey checks that N keys added to a queue with more
// blocked getters are taken by exactly N of them and the rest keep waiting.
func TestGetWakesOneGetterPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[int]()
		const getters, keys = 8, 3
		ch := startGets(q, getters)
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
