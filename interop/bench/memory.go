package bench

import (
	"runtime"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/internal/benchwork"
	clientworkqueue "k8s.io/client-go/util/workqueue"
)

// MemResult is the heap that one queue grew for a burst of keys and what it
// kept once they were drained, both measured after a GC and not counting
// the keys themselves.
type MemResult struct {
	Peak, Kept uint64 // bytes
}

// MemWorkload is one memory comparison: a burst of distinct keys on one
// configuration of our queue, against client-go's plain queue with the same
// keys.
type MemWorkload struct {
	// Name identifies the workload in tables.
	Name string
	// Doc says what the configuration is.
	Doc string
	// Goal is the largest ratio of peak growth ours/theirs that the issues
	// ask for; zero means no goal.
	Goal float64
	// RunOurs and RunTheirs add n distinct keys to a new queue, drain them
	// and report the heap grown and kept.
	RunOurs, RunTheirs func(n int) MemResult
	// RunFloor, if set, does the same on the plain floor (floorCond: a Go
	// map of one flag per key and a ring), the least any queue built on a
	// Go map and a separate FIFO can hold.
	RunFloor func(n int) MemResult
}

// MemWorkloads returns the memory comparisons, in the order of the table.
func MemWorkloads() []MemWorkload {
	return append(memWorkloads("int", func(n int) []int {
		keys := make([]int, n)
		for i := range keys {
			keys[i] = i
		}
		return keys
	}), memWorkloads("string", benchwork.Keys)...)
}

func memWorkloads[T comparable](suffix string, keys func(n int) []T) []MemWorkload {
	theirs := func(n int) MemResult {
		return memoryAfterBurst(keys(n), func() typedQueue[T] { return clientworkqueue.NewTyped[T]() })
	}
	ours := func(cfg func() workqueue.Config[T]) func(n int) MemResult {
		return func(n int) MemResult {
			return memoryAfterBurst(keys(n), func() typedQueue[T] { return workqueue.NewWithConfig(cfg()) })
		}
	}
	lowOurs := func(cfg func() workqueue.Config[T]) func(n int) MemResult {
		return func(n int) MemResult {
			return memoryAfterBurst(keys(n), func() typedQueue[T] { return lowPriority[T]{workqueue.NewWithConfig(cfg())} })
		}
	}
	return []MemWorkload{
		{
			Name: "memory-plain-" + suffix, Doc: "plain queue, " + suffix + " keys", Goal: 0.8,
			RunOurs: ours(func() workqueue.Config[T] { return workqueue.Config[T]{} }), RunTheirs: theirs,
			RunFloor: func(n int) MemResult {
				return memoryAfterBurst(keys(n), func() typedQueue[T] { return newFloorCond[T](false) })
			},
		},
		{
			Name: "memory-metrics-" + suffix, Doc: "metrics on (no-op provider), " + suffix + " keys, against client-go without metrics", Goal: 1.0,
			RunOurs: ours(func() workqueue.Config[T] {
				return workqueue.Config[T]{Name: "bench", Metrics: NoopMetrics{}}
			}), RunTheirs: theirs,
		},
		{
			Name: "memory-priority-" + suffix, Doc: "priority store, " + suffix + " keys added with Add, against client-go's plain queue", Goal: 1.0,
			RunOurs: ours(func() workqueue.Config[T] {
				return workqueue.Config[T]{Store: workqueue.NewPriorityStore[T]()}
			}), RunTheirs: theirs,
		},
		{
			Name: "memory-priority-low-" + suffix, Goal: 1.0,
			Doc: "priority store, " + suffix + " keys added at priority -100 " +
				"(controller-runtime's initial list), against client-go's plain queue",
			RunOurs: lowOurs(func() workqueue.Config[T] {
				return workqueue.Config[T]{Store: workqueue.NewPriorityStore[T]()}
			}),
			RunTheirs: theirs,
		},
		{
			// Both at once: no goal of its own; see the notes in PERF.md.
			Name: "memory-priority-metrics-" + suffix,
			Doc: "priority store and metrics on, " + suffix + " keys added at priority -100, " +
				"against client-go's plain queue",
			RunOurs: lowOurs(func() workqueue.Config[T] {
				return workqueue.Config[T]{Name: "bench", Metrics: NoopMetrics{}, Store: workqueue.NewPriorityStore[T]()}
			}),
			RunTheirs: theirs,
		},
	}
}

// lowPriority is a queue whose Add adds at priority -100, as
// controller-runtime adds the objects of an informer's initial list.
type lowPriority[T comparable] struct{ *workqueue.Queue[T] }

func (q lowPriority[T]) Add(k T) { q.AddWithPriority(k, -100) }

// MemoryAfterBurst adds n distinct string keys to a new queue (ours when
// ours is true, else client-go's), measures the heap, drains them with Get
// and Done, and measures it again while the queue is still reachable.
func MemoryAfterBurst(n int, ours bool) MemResult {
	if ours {
		return memoryAfterBurst(benchwork.Keys(n), func() typedQueue[string] { return workqueue.New[string]() })
	}
	return memoryAfterBurst(benchwork.Keys(n), func() typedQueue[string] { return clientworkqueue.NewTyped[string]() })
}

func memoryAfterBurst[T comparable](keys []T, newQueue func() typedQueue[T]) MemResult {
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := heap()
	q := newQueue()
	for _, k := range keys {
		q.Add(k)
	}
	peak := heap()
	for range keys {
		k, _ := q.Get()
		q.Done(k)
	}
	kept := heap()
	runtime.KeepAlive(q)
	runtime.KeepAlive(keys)
	q.ShutDown()
	sub := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return MemResult{Peak: sub(peak, base), Kept: sub(kept, base)}
}
