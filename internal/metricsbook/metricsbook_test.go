package metricsbook_test

import (
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/internal/metricsbook"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake is a queue's Stats as a test sets them; reads counts the calls.
type fake struct {
	mu    sync.Mutex
	s     workqueue.Stats
	reads int
	// during, if set, runs inside the next read, after the Stats are
	// taken: what happens to the queue while a scrape reads it.
	during func()
}

func (f *fake) set(s workqueue.Stats) {
	f.mu.Lock()
	f.s = s
	f.mu.Unlock()
}

func (f *fake) stats() workqueue.Stats {
	f.mu.Lock()
	s := f.s
	f.reads++
	during := f.during
	f.during = nil
	f.mu.Unlock()
	if during != nil {
		during()
	}
	return s
}

// Queues of one name add up depth, delayed keys and unfinished work and
// report the larger longest run; names come in the order of their first
// queue, and each queue is read once per scrape.
func TestTotalsCombineByKey(t *testing.T) {
	var b metricsbook.Book[string]
	a1 := &fake{s: workqueue.Stats{Dirty: 2, Waiting: 1, UnfinishedWork: 3 * time.Second, LongestRunning: 2 * time.Second}}
	z := &fake{s: workqueue.Stats{Dirty: 7}}
	a2 := &fake{s: workqueue.Stats{Dirty: 5, Waiting: 4, UnfinishedWork: 10 * time.Second, LongestRunning: time.Second}}
	b.Add("a", a1.stats)
	b.Add("z", z.stats)
	b.Add("a", a2.stats)

	totals, ok := metricsbook.Totals(&b)
	require.True(t, ok)
	require.Equal(t, []metricsbook.Total[string]{
		{Key: "a", Gauges: metricsbook.Gauges{Depth: 7, Delayed: 5, Unfinished: 13 * time.Second, Longest: 2 * time.Second}},
		{Key: "z", Gauges: metricsbook.Gauges{Depth: 7}},
	}, totals, "sums, the larger longest, in the order of each name's first queue")
	for _, f := range []*fake{a1, z, a2} {
		require.Equal(t, 1, f.reads, "one Stats read per queue per scrape")
	}

	// The larger longest wins whichever queue has it.
	a2.set(workqueue.Stats{Processing: 1, LongestRunning: 9 * time.Second})
	totals, _ = metricsbook.Totals(&b)
	require.Equal(t, 9*time.Second, totals[0].Longest)
}

// A queue is forgotten at the first scrape that finds it shut down with
// nothing ready, waiting or processing; not before, and not while it has
// any of the three.
func TestShutDownQueueForgottenOnceEmpty(t *testing.T) {
	var b metricsbook.Book[string]
	idle := &fake{}
	b.Add("idle", idle.stats) // never shut down: kept though empty
	busy := &fake{}
	q := b.Add("q", busy.stats)
	q.ShutDown()

	for _, s := range []workqueue.Stats{{Ready: 1, Dirty: 1}, {Waiting: 1}, {Processing: 1}} {
		busy.set(s)
		totals, _ := metricsbook.Totals(&b)
		require.Len(t, totals, 2, "a shut-down queue with %+v is still reported", s)
		require.Equal(t, 2, b.Len())
	}

	busy.set(workqueue.Stats{})
	totals, _ := metricsbook.Totals(&b)
	require.Equal(t, []metricsbook.Total[string]{{Key: "idle"}}, totals, "the drained queue reports nothing")
	require.Equal(t, 1, b.Len(), "and is forgotten")
	reads := busy.reads
	metricsbook.Totals(&b)
	require.Equal(t, reads, busy.reads, "a forgotten queue is not read again")
}

// The shut-down flag is read before the Stats: a queue read empty while
// running, which then shuts down (with keys taken meanwhile), is kept until
// a scrape reads it after the shutdown.
func TestShutDownReadBeforeStats(t *testing.T) {
	var b metricsbook.Book[string]
	f := &fake{}
	q := b.Add("q", f.stats)
	f.during = q.ShutDown // shuts down just after this read's Stats

	totals, _ := metricsbook.Totals(&b)
	require.Len(t, totals, 1, "read before the shutdown, so reported")
	require.Equal(t, 1, b.Len(), "and not forgotten on Stats from before the shutdown")

	totals, _ = metricsbook.Totals(&b)
	require.Empty(t, totals)
	require.Zero(t, b.Len(), "the next scrape sees it shut down and empty")
}

// Forgetting keeps the other queues in order and drops the Book's
// references, so the queues can be collected.
func TestForgottenQueueCollectable(t *testing.T) {
	var b metricsbook.Book[string]
	gone := func(name string) weak.Pointer[fake] {
		f := &fake{}
		b.Add(name, f.stats).ShutDown()
		return weak.Make(f)
	}
	live := []*fake{{}, {}}
	b.Add("a", live[0].stats)
	middle := gone("middle")
	b.Add("b", live[1].stats)
	last := gone("last")

	totals, _ := metricsbook.Totals(&b)
	var keys []string
	for _, g := range totals {
		keys = append(keys, g.Key)
	}
	require.Equal(t, []string{"a", "b"}, keys, "the others stay, in order")
	runtime.GC()
	runtime.GC()
	require.Nil(t, middle.Value(), "the Book keeps no reference to a forgotten queue")
	require.Nil(t, last.Value(), "not even in its slice's spare capacity")
	totals, _ = metricsbook.Totals(&b)
	require.Len(t, totals, 2)
}

// Close forgets every queue and every later one, and scrapes report that
// the Book is closed.
func TestClose(t *testing.T) {
	var b metricsbook.Book[string]
	f := &fake{}
	b.Add("a", f.stats)
	b.Close()
	require.Zero(t, b.Len())
	later := b.Add("b", f.stats)
	require.NotNil(t, later, "Add after Close still gives the queue its handle")
	require.Zero(t, b.Len(), "but does not keep it")
	totals, ok := metricsbook.Totals(&b)
	require.False(t, ok)
	require.Empty(t, totals)
	require.Zero(t, f.reads, "a closed Book reads no queue")
}

// Each holds no lock of the Book while it reads Stats or calls f: both may
// use the Book.
func TestEachHoldsNoLock(t *testing.T) {
	var b metricsbook.Book[string]
	f := &fake{}
	f.during = func() { b.Add("added while read", (&fake{}).stats) }
	b.Add("q", f.stats)
	var seen []string
	b.Each(func(q *metricsbook.Queue[string], _ workqueue.Stats) {
		seen = append(seen, q.Meta)
		require.Equal(t, 2, b.Len())
	})
	require.Equal(t, []string{"q"}, seen, "a queue added during a scrape is read from the next one")
	require.Equal(t, 2, b.Len())
}

// Scrapes, adds and shutdowns from several goroutines at once, for the
// race detector: every queue ends up forgotten once shut down and empty.
func TestConcurrent(t *testing.T) {
	var b metricsbook.Book[int]
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 100 {
				f := &fake{}
				q := b.Add(g*1000+i, f.stats)
				metricsbook.Totals(&b)
				q.ShutDown()
			}
		})
	}
	wg.Wait()
	metricsbook.Totals(&b)
	require.Zero(t, b.Len(), "every queue is shut down and empty")
}

// KeptTotals reports every key that has had a queue, in the order of their
// first queue: the live queues' gauges combined, and zero gauges for a key
// whose queues are all forgotten, which stays at zero.
func TestKeptTotalsKeepForgottenKeysAtZero(t *testing.T) {
	var (
		b    metricsbook.Book[string]
		keys metricsbook.Keys[string]
	)
	add := func(key string, f *fake) *metricsbook.Queue[string] {
		keys.Add(key)
		return b.Add(key, f.stats)
	}
	gone := &fake{s: workqueue.Stats{Processing: 1, UnfinishedWork: time.Second, LongestRunning: time.Second}}
	live := &fake{s: workqueue.Stats{Dirty: 2, Ready: 2}}
	q := add("gone", gone)
	add("live", live)
	add("live", &fake{s: workqueue.Stats{Dirty: 1, Ready: 1}})

	totals, ok := metricsbook.KeptTotals(&b, &keys)
	require.True(t, ok)
	require.Equal(t, []metricsbook.Total[string]{
		{Key: "gone", Gauges: metricsbook.Gauges{Unfinished: time.Second, Longest: time.Second}},
		{Key: "live", Gauges: metricsbook.Gauges{Depth: 3}},
	}, totals)

	q.ShutDown()
	gone.set(workqueue.Stats{})
	for range 2 { // the scrape that forgets it, and the one after
		totals, ok = metricsbook.KeptTotals(&b, &keys)
		require.True(t, ok)
		require.Equal(t, []metricsbook.Total[string]{
			{Key: "gone"},
			{Key: "live", Gauges: metricsbook.Gauges{Depth: 3}},
		}, totals, "a key whose queues are forgotten stays, at zero")
		require.Equal(t, 2, b.Len(), "while its queue is forgotten")
	}
	require.Equal(t, []string{"gone", "live"}, keys.All(), "each key once, in the order of its first queue")

	b.Close()
	totals, ok = metricsbook.KeptTotals(&b, &keys)
	require.False(t, ok)
	require.Empty(t, totals)
}
