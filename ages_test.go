package workqueue

import (
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// ageRecorder is a ReadyAgeMetricsProvider that keeps the functions it is
// given.
type ageRecorder struct {
	prioRecorder
	asked     bool
	readyAges func(map[int]time.Duration)
}

func (r *ageRecorder) NewReadyAgeQueueMetrics(name string, stats func() Stats, byPriority func(map[int]int), readyAges func(map[int]time.Duration)) QueueMetrics {
	r.asked, r.byPriority, r.readyAges = true, byPriority, readyAges
	return r.NewQueueMetrics(name, stats)
}

// ages reads q.ReadyAges into a new map and checks what it reports.
func ages(t *testing.T, q interface {
	ReadyAges(map[int]time.Duration) bool
}, measured bool) map[int]time.Duration {
	t.Helper()
	m := map[int]time.Duration{}
	require.Equal(t, measured, q.ReadyAges(m), "whether the queue measures ready ages")
	return m
}

func TestReadyAgesProvider(t *testing.T) {
	plain := &ageRecorder{}
	NewWithConfig(Config[string]{Name: "q", Metrics: plain})
	require.True(t, plain.asked, "a ReadyAgeMetricsProvider is asked through its own method")
	require.Nil(t, plain.byPriority, "a queue without a PriorityStore offers no priorities")
	require.NotNil(t, plain.readyAges)
	require.NotNil(t, plain.stats)

	prio := &ageRecorder{}
	NewWithConfig(Config[string]{Name: "q", Metrics: prio, Store: NewPriorityStore[string]()})
	require.NotNil(t, prio.byPriority, "a priority queue offers its priorities too")
	require.NotNil(t, prio.readyAges)

	old := &prioRecorder{}
	NewWithConfig(Config[string]{Name: "q", Metrics: old, Store: NewPriorityStore[string]()})
	require.NotNil(t, old.byPriority, "a PriorityMetricsProvider is asked as before")
}

// TestReadyAgesFIFO checks a plain queue: the age of its first ready key,
// at priority 0, from the Add that made it ready; waiting and removed keys
// before it are passed over; a key added again while processing counts from
// that Add.
func TestReadyAgesFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &ageRecorder{}
		q := NewWithConfig(Config[string]{Name: "q", Metrics: r})
		require.Empty(t, ages(t, q, true), "an empty queue has no ready level")

		q.AddAfter("w", time.Hour) // a waiting entry ahead of the ready ones
		q.Add("gone")
		time.Sleep(time.Second)
		q.Add("a")
		time.Sleep(time.Second)
		q.AddWithPriority("b", 7) // a FIFO's priorities are no order: priority 0
		time.Sleep(time.Second)
		require.Equal(t, map[int]time.Duration{0: 3 * time.Second}, ages(t, q, true))
		require.True(t, q.Remove("gone"))
		require.Equal(t, map[int]time.Duration{0: 2 * time.Second}, ages(t, q, true), "the next key after a removed one")

		m := map[int]time.Duration{0: time.Hour, 5: time.Minute}
		q.ReadyAges(m)
		require.Equal(t, map[int]time.Duration{0: time.Hour, 5: time.Minute}, m, "a larger age already in m is kept")
		m[0] = time.Second
		r.readyAges(m)
		require.Equal(t, 2*time.Second, m[0], "a smaller one is replaced; the provider's function is ReadyAges")

		k, _ := q.Get()
		require.Equal(t, "a", k)
		require.Equal(t, map[int]time.Duration{0: time.Second}, ages(t, q, true))
		q.Add("a") // processing+dirty: not ready
		time.Sleep(time.Second)
		require.Equal(t, map[int]time.Duration{0: 2 * time.Second}, ages(t, q, true))
		k, _ = q.Get()
		require.Equal(t, "b", k)
		require.Empty(t, ages(t, q, true), "no key is ready")
		time.Sleep(time.Second)
		q.Done("a") // ready again, its run due since the Add two seconds ago
		require.Equal(t, map[int]time.Duration{0: 2 * time.Second}, ages(t, q, true))
		q.ShutDown()
	})
}

// TestReadyAgesLevels checks NewPriorityStore: each level's front, so a low
// level passed over by a stream of higher keys shows a growing age while the
// served level's stays small.
func TestReadyAgesLevels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewWithConfig(Config[int]{Name: "q", Metrics: &ageRecorder{}, Store: NewPriorityStore[int]()})
		for k := range 3 {
			q.AddWithPriority(-100-k, -100) // the initial list
		}
		q.Add(0)
		for i := range 10 {
			// One priority-0 key ready at each moment: the stream that
			// keeps the -100 level waiting.
			time.Sleep(time.Second)
			q.Add(i + 1)
			k, _ := q.Get()
			require.Equal(t, i, k, "priority 0 goes first")
			q.Done(k)
		}
		got := ages(t, q, true)
		require.Equal(t, map[int]time.Duration{-100: 10 * time.Second, 0: 0}, got,
			"the -100 level's front has waited since the start; priority 0 is served, its front just added")

		q.AddWithPriority(-100, 5) // raised: the back of level 5, its due time kept
		q.AddWithPriority(-101, 5)
		require.Equal(t, map[int]time.Duration{-100: 10 * time.Second, 0: 0, 5: 10 * time.Second}, ages(t, q, true))
		k, _ := q.Get()
		require.Equal(t, -100, k)
		require.Equal(t, map[int]time.Duration{-100: 10 * time.Second, 0: 0, 5: 10 * time.Second}, ages(t, q, true),
			"level 5 hands out -101 next")
		q.ShutDown()
	})
}

// orderStore is a FIFO Store that names its front, as NewFairPriorityStore
// does for each of its levels.
type orderStore[T comparable] struct{ items []T }

func (s *orderStore[T]) Push(item T) { s.items = append(s.items, item) }
func (s *orderStore[T]) Pop() T {
	item := s.items[0]
	s.items = s.items[1:]
	return item
}
func (s *orderStore[T]) Len() int { return len(s.items) }
func (s *orderStore[T]) Touch(T)  {}
func (s *orderStore[T]) fronts(yield func(prio int, item T) bool) {
	if len(s.items) > 0 {
		yield(3, s.items[0])
	}
}

// TestReadyAgesStores checks the other sources: a frontStore's fronts (a
// ghost Remove left at its front is no ready key), and none for a Store
// that cannot name its next key, or for a queue without metrics.
func TestReadyAgesStores(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewWithConfig(Config[string]{Name: "q", Metrics: &ageRecorder{}, Store: &orderStore[string]{}})
		q.Add("ghost")
		time.Sleep(time.Second)
		q.Add("a")
		time.Sleep(time.Second)
		require.Equal(t, map[int]time.Duration{3: 2 * time.Second}, ages(t, q, true))
		require.True(t, q.Remove("ghost"))
		require.Empty(t, ages(t, q, true), "a ghost is not the front of a level")

		tenant := func(s string) string { return s[:1] }
		fp := NewWithConfig(Config[string]{Name: "q", Metrics: &ageRecorder{}, Store: NewFairPriorityStore(FairPriority[string]{Tenant: tenant})})
		fp.Add("a1")
		fp.AddWithPriority("c1", -100)
		time.Sleep(time.Second)
		fp.Add("a2")
		time.Sleep(time.Second)
		fp.Add("b1")
		require.Equal(t, map[int]time.Duration{0: 2 * time.Second, -100: 2 * time.Second}, ages(t, fp, true))
		k, _ := fp.Get()
		require.Equal(t, "a1", k)
		require.Equal(t, map[int]time.Duration{0: time.Second, -100: 2 * time.Second}, ages(t, fp, true),
			"level 0's oldest key by arrival is a2, though its round hands out b1 next, which has just become ready")

		fair := NewWithConfig(Config[string]{Name: "q", Metrics: &ageRecorder{}, Store: NewFairStore(func(s string) string { return s })})
		fair.Add("a")
		require.Empty(t, ages(t, fair, false), "a Store whose order the queue cannot see reports nothing")

		for _, q := range []*Queue[string]{New[string](), NewWithConfig(Config[string]{Store: NewPriorityStore[string]()})} {
			q.Add("a")
			require.Empty(t, ages(t, q, false), "a queue without metrics keeps no times")
		}
	})
}

// TestReadyAgesMatchScan drives queues with metrics by random operations
// and checks, after each, that ReadyAges is the age of the first ready key
// of each level in the order Get takes them (a pass over the key table).
func TestReadyAgesMatchScan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for seed := range 100 {
			rng := rand.New(rand.NewPCG(uint64(seed), 0))
			leveled := seed%2 == 0
			cfg := Config[int]{Name: "q", Metrics: &ageRecorder{}}
			if leveled {
				cfg.Store = NewPriorityStore[int]()
			}
			q := NewWithConfig(cfg)
			var held []int
			for range 300 {
				k, p := rng.IntN(20), rng.IntN(5)-2
				switch rng.IntN(7) {
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
					q.Remove(k)
				case 6:
					time.Sleep(time.Millisecond)
					synctest.Wait()
				}
				got := ages(t, q, true)
				want := map[int]time.Duration{}
				q.mu.Lock()
				now, tab := q.now(), &q.tab
				tab.eachReady(func(item int) bool {
					_, _, pos := tab.find(item)
					prio := 0
					if leveled {
						prio = tab.prioAt(pos)
					}
					if _, ok := want[prio]; !ok {
						want[prio] = time.Duration(now - tab.at[pos])
					}
					return true
				})
				q.mu.Unlock()
				require.Equal(t, want, got, "seed %d: ready ages", seed)
			}
			q.ShutDown()
		}
	})
}

// TestReadyAgesHeldByCap checks that a level whose keys wait behind a
// tenant's MaxInFlight cap shows its age, growing while the cap holds it,
// as ReadyAges and metrics.go say: the level's only tenant at its cap, a
// held tenant beside an available one, and the age gone once the level is
// empty. MeasureOnly is the provider: it keeps the times without a metrics
// library.
func TestReadyAgesHeldByCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tenant := func(s string) string { return s[:1] }
		q := NewWithConfig(Config[string]{Name: "q", Metrics: MeasureOnly{}, Store: NewFairPriorityStore(FairPriority[string]{Tenant: tenant, MaxInFlight: 1})})
		q.AddWithPriority("a1", -100)
		q.AddWithPriority("a2", -100)
		k, _ := q.Get()
		require.Equal(t, "a1", k)
		time.Sleep(3 * time.Second)
		require.Equal(t, map[int]time.Duration{-100: 3 * time.Second}, ages(t, q, true),
			"a2 waits behind a's cap: its level shows its age")
		q.Add("b1")
		time.Sleep(time.Second)
		require.Equal(t, map[int]time.Duration{0: time.Second, -100: 4 * time.Second}, ages(t, q, true),
			"the held level's age keeps growing beside an available one")
		q.AddWithPriority("b2", -100)
		time.Sleep(time.Second)
		require.Equal(t, map[int]time.Duration{0: 2 * time.Second, -100: 5 * time.Second}, ages(t, q, true),
			"a held tenant's front is older than the available one's: the level shows the older")
		q.Done("a1")
		for range 3 {
			k, _ := q.Get()
			q.Done(k)
		}
		require.Empty(t, ages(t, q, true), "no key is ready: no age")
		require.Zero(t, q.Len())
	})
}
