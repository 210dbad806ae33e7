package workqueue

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// recorder is a MetricsProvider that remembers every event.
type recorder struct {
	mu       sync.Mutex
	name     string
	stats    func() Stats
	added    int
	retried  int
	waited   []time.Duration
	worked   []time.Duration
	shutDown int
}

func (r *recorder) NewQueueMetrics(name string, stats func() Stats) QueueMetrics {
	r.name, r.stats = name, stats
	return r
}
func (r *recorder) Added()   { r.mu.Lock(); r.added++; r.mu.Unlock() }
func (r *recorder) Retried() { r.mu.Lock(); r.retried++; r.mu.Unlock() }
func (r *recorder) Waited(d time.Duration) {
	r.mu.Lock()
	r.waited = append(r.waited, d)
	r.mu.Unlock()
}
func (r *recorder) Worked(d time.Duration) {
	r.mu.Lock()
	r.worked = append(r.worked, d)
	r.mu.Unlock()
}
func (r *recorder) ShutDown() { r.mu.Lock(); r.shutDown++; r.mu.Unlock() }

// adds reads the add counter under the lock: the timer's goroutine writes it.
func (r *recorder) adds() int { r.mu.Lock(); defer r.mu.Unlock(); return r.added }

func TestMetricsNeedNameAndProvider(t *testing.T) {
	r := &recorder{}
	q := NewWithConfig(Config[string]{Metrics: r})
	q.Add("a")
	require.Nil(t, r.stats, "a queue without a Name must not ask the provider for metrics")
	require.Zero(t, r.added)

	q = NewWithConfig(Config[string]{Name: "q", Metrics: r})
	require.Equal(t, "q", r.name)
	q.Add("a")
	require.Equal(t, 1, r.added)
}

// TestDefaultMetricsProvider checks SetDefaultMetricsProvider: a queue
// with a Name and no Config.Metrics reports through the default; an
// explicit Config.Metrics wins; no Name, no metrics; a second call replaces
// the default for the queues created after it, and the earlier queues keep
// theirs; nil turns it off. Not parallel: the default is process-wide, and
// parallel tests only start once this one has restored it.
func TestDefaultMetricsProvider(t *testing.T) {
	require.Nil(t, defaultMetrics.Load(), "a process that never sets a default keeps none")
	t.Cleanup(func() { SetDefaultMetricsProvider(nil) })

	plain := NewWithConfig(Config[string]{Name: "before"})
	require.Nil(t, plain.metrics, "without a default, a name alone gives no metrics")

	first := &recorder{}
	SetDefaultMetricsProvider(first)
	a := NewRateLimitingQueueWithConfig(nil, Config[string]{Name: "configmaps"})
	require.Equal(t, "configmaps", first.name, "a named queue without Config.Metrics reports through the default")
	a.Add("k")
	require.Equal(t, 1, first.adds())
	require.Nil(t, plain.metrics, "a queue made before the default was set stays without metrics")

	explicit := &recorder{}
	b := NewWithConfig(Config[string]{Name: "explicit", Metrics: explicit})
	b.Add("k")
	require.Equal(t, "explicit", explicit.name, "an explicit Config.Metrics wins")
	require.Equal(t, 1, explicit.adds())
	require.Equal(t, 1, first.adds(), "the default sees nothing of a queue with its own provider")

	unnamed := NewWithConfig(Config[string]{})
	unnamed.Add("k")
	require.Nil(t, unnamed.metrics, "a queue without a Name has no metrics, default or not")
	require.Equal(t, "configmaps", first.name, "and the default is not asked")

	second := &recorder{}
	SetDefaultMetricsProvider(second)
	c := NewWithConfig(Config[string]{Name: "secrets"})
	c.Add("k")
	require.Equal(t, "secrets", second.name, "a second call replaces the default for later queues")
	require.Equal(t, 1, second.adds())
	a.Add("k2")
	require.Equal(t, 2, first.adds(), "a queue keeps the provider it was built with")

	SetDefaultMetricsProvider(nil)
	d := NewWithConfig(Config[string]{Name: "off"})
	d.Add("k")
	require.Nil(t, d.metrics, "nil turns the default off")
	require.Equal(t, "secrets", second.name)
	require.Nil(t, defaultMetrics.Load(), "and keeps no state")
}

func TestMetricsEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{}
		q := NewWithConfig(Config[string]{Name: "q", Metrics: r})

		q.Add("a")
		time.Sleep(time.Second)
		q.Add("a") // duplicate: not an add
		require.Equal(t, 1, r.added, "a duplicate of a queued key is not an add")

		k, _ := q.Get()
		require.Equal(t, []time.Duration{time.Second}, r.waited, "queue latency runs from the first add")
		time.Sleep(2 * time.Second)
		s := r.stats()
		require.Equal(t, 2*time.Second, s.UnfinishedWork)
		require.Equal(t, 2*time.Second, s.LongestRunning)

		// Dirtied while processing: its next wait counts from this add.
		q.Add("a")
		require.Equal(t, 2, r.added, "an add of a processing key makes it dirty: an add")
		require.Equal(t, 1, r.stats().Dirty, "depth counts the processing+dirty key")
		time.Sleep(3 * time.Second)
		q.Done(k)
		require.Equal(t, []time.Duration{5 * time.Second}, r.worked)
		time.Sleep(time.Second)
		k, _ = q.Get()
		require.Equal(t, 4*time.Second, r.waited[1], "latency of a requeued key counts from the add during processing")
		q.Done(k)

		q.AddAfter("b", time.Second)
		q.AddAfter("c", 0)
		require.Equal(t, 2, r.retried, "every AddAfter is a retry, d <= 0 included")
		require.Equal(t, 3, r.adds(), "AddAfter(0) is an add; a delayed key is not yet")
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, 4, r.adds(), "a key whose deadline passes is an add")

		q.ShutDown()
		q.ShutDown()
		q.AddAfter("d", time.Second)
		q.Add("e")
		require.Equal(t, 1, r.shutDown, "ShutDown is reported once")
		require.Equal(t, 2, r.retried, "AddAfter after ShutDown is ignored, also by metrics")
		require.Equal(t, 4, r.adds())
	})
}

// TestMetricsAgesOutOfOrder checks the age gauges while runs end in any
// order and keys run again, which exercises the stale records of the
// processing set and their compaction.
func TestMetricsAgesOutOfOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{}
		q := NewWithConfig(Config[string]{Name: "q", Metrics: r})
		start := map[string]time.Time{}
		var running []string
		check := func() {
			t.Helper()
			now := time.Now()
			var sum, longest time.Duration
			for _, k := range running {
				age := now.Sub(start[k])
				sum += age
				longest = max(longest, age)
			}
			s := r.stats()
			require.Equal(t, len(running), s.Processing)
			require.Equal(t, sum, s.UnfinishedWork, "unfinished work is the sum of the ages")
			require.Equal(t, longest, s.LongestRunning, "longest running is the oldest age")
			require.LessOrEqual(t, q.procs.order.Len(), 2*len(running)+17, "stale records are bounded")
		}
		for round := range 200 {
			// Start two runs, then end one that is not the oldest.
			for range 2 {
				k := fmt.Sprint("k", round%7, "-", len(running))
				if _, busy := start[k]; busy {
					continue
				}
				q.Add(k)
				got, _ := q.Get()
				start[got] = time.Now()
				running = append(running, got)
				time.Sleep(time.Millisecond)
				check()
			}
			i := len(running) - 1 - round%len(running)
			if round%5 == 0 {
				i = 0
			}
			k := running[i]
			running = append(running[:i], running[i+1:]...)
			delete(start, k)
			q.Done(k)
			time.Sleep(time.Millisecond)
			check()
		}
	})
}

// TestMetricsLongestAfterRerun: a key whose earlier run ended out of order
// and that runs again must be aged from its new start, not its old one.
func TestMetricsLongestAfterRerun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{}
		q := NewWithConfig(Config[string]{Name: "q", Metrics: r})
		q.Add("a")
		q.Add("k")
		a, _ := q.Get()
		k, _ := q.Get()
		time.Sleep(time.Second)
		q.Done(k) // not the oldest run: its record goes stale
		q.Done(a)
		time.Sleep(time.Second)
		q.Add("k")
		k, _ = q.Get()
		time.Sleep(time.Second)
		s := r.stats()
		require.Equal(t, time.Second, s.LongestRunning, "k's new run started a second ago")
		require.Equal(t, time.Second, s.UnfinishedWork)
		q.Done(k)
		require.Equal(t, Stats{}, r.stats(), "nothing left to age")
	})
}

// prioRecorder is a PriorityMetricsProvider that keeps the functions it is
// given.
type prioRecorder struct {
	recorder
	byPriority func(map[int]int)
}

func (r *prioRecorder) NewPriorityQueueMetrics(name string, stats func() Stats, byPriority func(map[int]int)) QueueMetrics {
	r.byPriority = byPriority
	return r.NewQueueMetrics(name, stats)
}

func TestMetricsDirtyByPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		plain := &prioRecorder{}
		NewWithConfig(Config[string]{Name: "q", Metrics: plain})
		require.Nil(t, plain.byPriority, "a queue without a PriorityStore must not offer priorities")
		require.NotNil(t, plain.stats, "it must still ask for its metrics the usual way")

		r := &prioRecorder{}
		q := NewWithConfig(Config[string]{Name: "q", Metrics: r, Store: NewPriorityStore[string]()})
		require.NotNil(t, r.byPriority, "a priority queue must offer its priorities to a PriorityMetricsProvider")
		count := func() map[int]int {
			m := map[int]int{}
			r.byPriority(m)
			return m
		}
		require.Empty(t, count(), "an empty queue has no dirty key")

		q.Add("a")
		q.AddWithPriority("b", 5)
		q.AddWithPriority("c", -1)
		q.AddWithPriority("c", 5)                 // raised: counted at 5 only
		q.AddAfterWithPriority("w", time.Hour, 9) // waiting: not dirty
		require.Equal(t, map[int]int{0: 1, 5: 2}, count(), "ready keys by the priority of their run")

		k, p, _ := q.GetWithPriority()
		require.Equal(t, "b", k)
		require.Equal(t, 5, p)
		require.Equal(t, map[int]int{0: 1, 5: 1}, count(), "a key handed out is no longer dirty")
		q.AddWithPriority("b", 7) // processing+dirty: depth counts it, at 7
		require.Equal(t, map[int]int{0: 1, 5: 1, 7: 1}, count())
		require.Equal(t, 3, r.stats().Dirty, "byPriority must add up to Dirty")
	})
}

// TestDirtyByPriorityMatchesScan drives a priority queue with metrics by
// random operations and checks, after each, that the counts a provider gets
// (from the store's levels and the processing set) are those of a pass over
// the key table.
func TestDirtyByPriorityMatchesScan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for seed := range 200 {
			rng := rand.New(rand.NewPCG(uint64(seed), 0))
			r := &prioRecorder{}
			q := NewWithConfig(Config[int]{Name: "q", Metrics: r, Store: NewPriorityStore[int]()})
			var held []int
			for range 300 {
				k, p := rng.IntN(20), rng.IntN(5)-2
				switch rng.IntN(6) {
				case 0:
					q.Add(k)
				case 1:
					q.AddWithPriority(k, p)
				case 2:
					q.AddAfterWithPriority(k, time.Duration(rng.IntN(3))*time.Millisecond, p)
				case 3:
					if q.Len() > 0 {
						k, _ := q.Get()
						held = append(held, k)
					}
				case 4:
					if len(held) > 0 {
						i := rng.IntN(len(held))
						q.Done(held[i])
						held = slices.Delete(held, i, i+1)
					}
				case 5:
					time.Sleep(time.Millisecond)
					synctest.Wait()
				}
				got, want := map[int]int{}, map[int]int{}
				r.byPriority(got)
				q.mu.Lock()
				q.scanDirtyByPriority(want)
				q.mu.Unlock()
				require.Equal(t, want, got, "seed %d: dirty keys by priority", seed)
			}
			q.ShutDown()
		}
	})
}
