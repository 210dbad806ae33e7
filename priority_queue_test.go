package workqueue_test

import (
	"math"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/stretchr/testify/require"
)

func newPriorityQueue() *workqueue.Queue[string] {
	return workqueue.NewWithConfig(workqueue.Config[string]{Store: workqueue.NewPriorityStore[string]()})
}

// drain takes every ready key, in order, marking each Done.
func drain(q *workqueue.Queue[string]) []string {
	var got []string
	for q.Len() > 0 {
		k, _ := q.Get()
		q.Done(k)
		got = append(got, k)
	}
	return got
}

func TestPriorityQueueOrder(t *testing.T) {
	q := newPriorityQueue()
	q.Add("resync-1")
	q.AddWithPriority("hot-1", 10)
	q.Add("resync-2")
	q.AddWithPriority("warm", 5)
	q.AddWithPriority("hot-2", 10)
	q.AddWithPriority("cold", -1)
	require.Equal(t, []string{"hot-1", "hot-2", "warm", "resync-1", "resync-2", "cold"}, drain(q),
		"higher priority first, FIFO within a priority, plain Add at 0")
}

func TestPriorityQueueMerge(t *testing.T) {
	q := newPriorityQueue()
	q.AddWithPriority("a", 5)
	q.AddWithPriority("b", 5)
	q.Add("c")
	q.AddWithPriority("c", 5) // raised: to the back of level 5
	q.AddWithPriority("a", 1) // lower: no demotion, keeps its place
	q.Add("b")                // plain duplicate: keeps its place
	require.Equal(t, []string{"a", "b", "c"}, drain(q))
	require.Equal(t, workqueue.Stats{}, q.Stats())
}

// A plain Add is a run at priority 0, so it raises a key that is ready
// below 0 (the duplicate-Add fast path must not take it for a duplicate).
func TestPriorityQueuePlainAddRaisesNegative(t *testing.T) {
	q := newPriorityQueue()
	q.AddWithPriority("listed", -100)
	q.AddWithPriority("cold", -100)
	q.Add("event-1")
	q.Add("listed")  // raised to 0: to the back of level 0
	q.Add("event-1") // a plain duplicate
	q.Add("event-2")
	require.Equal(t, []string{"event-1", "listed", "event-2", "cold"}, drain(q))
}

func TestPriorityQueueKeepsPriorityThroughProcessing(t *testing.T) {
	q := newPriorityQueue()
	q.Add("a")
	k, _ := q.Get()
	q.AddWithPriority("a", 7) // processing+dirty at 7
	q.Add("a")                // a lower request does not demote it
	q.Add("x")
	q.AddWithPriority("y", 3)
	q.Done(k)
	require.Equal(t, []string{"a", "y", "x"}, drain(q),
		"a key re-added with a priority while processing keeps it when Done requeues it")
}

func TestPriorityQueueDelayed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newPriorityQueue()
		q.AddAfterWithPriority("late", time.Second, 9)
		q.AddAfterWithPriority("merged", 2*time.Second, 1)
		q.AddAfterWithPriority("merged", 3*time.Second, 8) // later: deadline stays, priority rises
		q.Add("plain")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		require.Equal(t, []string{"late", "merged", "plain"}, drain(q),
			"a delayed key becomes ready with its priority; merging keeps the earliest time and the highest priority")

		q.AddAfterWithPriority("w", time.Hour, 6)
		q.Add("first")
		q.Add("w") // ready now, keeping priority 6
		require.Equal(t, []string{"w", "first"}, drain(q))
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		require.Zero(t, q.Len(), "the waiting entry was merged into the earlier run")
	})
}

// A run due later keeps its own priority when its deadline passes, a
// negative one included: controller-runtime adds the objects of an
// informer's initial list at a low priority, some of them with a delay.
// Before, the timer merged the run with priority 0, which lifted a
// negative run above the keys it was meant to follow.
func TestPriorityQueueDelayedKeepsNegativePriority(t *testing.T) {
	for name, store := range map[string]func() workqueue.PriorityStore[string]{
		"built-in": workqueue.NewPriorityStore[string],
		"other":    func() workqueue.PriorityStore[string] { return otherStore{workqueue.NewPriorityStore[string]()} },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := workqueue.NewWithConfig(workqueue.Config[string]{Store: store()})
				q.AddAfterWithPriority("initial-list", time.Second, -100)
				time.Sleep(time.Second)
				synctest.Wait()
				q.Add("event")
				k, p, _ := q.GetWithPriority()
				require.Equal(t, "event", k, "a fired run at -100 goes after a run at 0")
				require.Equal(t, 0, p)
				q.Done(k)
				k, p, _ = q.GetWithPriority()
				require.Equal(t, "initial-list", k)
				require.Equal(t, -100, p, "the fired run keeps its priority")
				q.Done(k)
			})
		})
	}
}

// otherStore hides the built-in priority store behind a type the queue does
// not know, so that the queue calls it as it would any PriorityStore.
type otherStore struct {
	workqueue.PriorityStore[string]
}

func TestPriorityIgnoredByFIFO(t *testing.T) {
	q := workqueue.New[string]()
	q.AddWithPriority("a", 1)
	q.AddWithPriority("b", 9)
	q.AddWithPriority("a", 9)
	require.Equal(t, []string{"a", "b"}, drain(q), "with a store without priorities, AddWithPriority is Add")
}

func TestGetWithPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newPriorityQueue()
		q.Add("plain")
		q.AddWithPriority("hot", 10)
		q.AddWithPriority("hot", 3) // lower: the run keeps 10
		q.AddAfterWithPriority("late", time.Second, 7)
		k, p, shutdown := q.GetWithPriority()
		require.False(t, shutdown)
		require.Equal(t, "hot", k)
		require.Equal(t, 10, p, "the highest priority asked for")
		q.AddWithPriority("hot", 2) // dirty while processing, at 2
		q.Done(k)
		time.Sleep(time.Second)
		synctest.Wait()
		for _, want := range []struct {
			key  string
			prio int
		}{{"late", 7}, {"hot", 2}, {"plain", 0}} {
			k, p, _ := q.GetWithPriority()
			require.Equal(t, want.key, k)
			require.Equal(t, want.prio, p, "priority of %s's run", k)
			q.Done(k)
		}
		q.ShutDown()
		_, _, shutdown = q.GetWithPriority()
		require.True(t, shutdown)
	})
}

// otherPriorityStore hides the built-in priority store behind another type,
// so that the queue keeps only the flags in its key table and asks the
// store for the order, as with any PriorityStore.
type otherPriorityStore struct {
	workqueue.PriorityStore[string]
}

// TestPriorityQueueFullIntRange checks that every int is a priority of its
// own in each way the queue keeps priorities: the leveled table (the
// built-in store), the same with the keys passing through a delay or
// Debounce, and another PriorityStore keeping the order. Keys
// are added lowest first, so priorities merged into one level (as an int32
// once merged 1<<40 and MaxInt) would come out in the wrong order, and the
// priority handed back must be the one asked for.
func TestPriorityQueueFullIntRange(t *testing.T) {
	prios := []int{math.MinInt, math.MinInt32 - 1, math.MinInt32, -1, 0, math.MaxInt32, math.MaxInt32 + 1, 1 << 40, math.MaxInt - 1, math.MaxInt}
	for _, tc := range []struct {
		name string
		cfg  func() workqueue.Config[string]
		add  func(q *workqueue.Queue[string], k string, p int)
	}{
		{"leveled", func() workqueue.Config[string] {
			return workqueue.Config[string]{Store: workqueue.NewPriorityStore[string]()}
		}, (*workqueue.Queue[string]).AddWithPriority},
		{"leveled, after a delay", func() workqueue.Config[string] {
			return workqueue.Config[string]{Store: workqueue.NewPriorityStore[string]()}
		}, func(q *workqueue.Queue[string], k string, p int) { q.AddAfterWithPriority(k, time.Second, p) }},
		{"debounced", func() workqueue.Config[string] {
			return workqueue.Config[string]{Store: workqueue.NewPriorityStore[string](), Debounce: workqueue.Debounce{Quiet: time.Second, MaxWait: time.Second}}
		}, (*workqueue.Queue[string]).AddWithPriority},
		{"another PriorityStore", func() workqueue.Config[string] {
			return workqueue.Config[string]{Store: otherPriorityStore{workqueue.NewPriorityStore[string]()}}
		}, (*workqueue.Queue[string]).AddWithPriority},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := workqueue.NewWithConfig(tc.cfg())
				defer q.ShutDown()
				for _, p := range prios {
					tc.add(q, strconv.Itoa(p), p)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				require.Equal(t, len(prios), q.Len())
				for i := len(prios) - 1; i >= 0; i-- {
					k, p, _ := q.GetWithPriority()
					require.Equal(t, strconv.Itoa(prios[i]), k, "highest priority first")
					require.Equal(t, prios[i], p, "the priority comes back as asked")
					q.Done(k)
				}
			})
		})
	}
}
