// Package benchwork holds the benchmark workloads that both the core
// module's own benchmarks (bench_test.go) and interop's side-by-side
// comparison with client-go (interop/bench, which generates
// docs/performance.md) run, and the floors they are measured against, so
// that the two measure the same work and cannot drift apart.
//
// A workload drives a Cycler: a queue of either library, or a floor. The
// workloads do not shut the queue down; a caller whose queue needs it does.
//
// It imports the standard library only: the core's benchmarks are in
// package workqueue, which this package therefore cannot import.
package benchwork

import (
	"strconv"
	"sync"
	"testing"
)

// Cycler is the slice of the queue API that the workloads drive.
type Cycler interface {
	Add(string)
	Get() (string, bool)
	Done(string)
}

// Keys returns n distinct keys shaped like a controller's namespace/name.
func Keys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "default/deployment-" + strconv.Itoa(i)
	}
	return keys
}

// Cycle is a controller's steady state with one key in flight: one event,
// one sync. One op is an Add, a Get and a Done.
func Cycle(b *testing.B, q Cycler) {
	key := "default/web"
	b.ReportAllocs()
	for b.Loop() {
		q.Add(key)
		k, _ := q.Get()
		q.Done(k)
	}
}

// HotKey is a key that gets ten events before a worker takes it: they
// coalesce into one sync. One op is ten Adds, a Get and a Done.
func HotKey(b *testing.B, q Cycler) {
	key := "default/web"
	b.ReportAllocs()
	for b.Loop() {
		for range 10 {
			q.Add(key)
		}
		k, _ := q.Get()
		q.Done(k)
	}
}

// Burst is one batch of a resync: keys (distinct) are added, then drained
// with Get and Done. The caller decides what an op is (a batch, or a key).
func Burst(q Cycler, keys []string) {
	for _, k := range keys {
		q.Add(k)
	}
	for range keys {
		k, _ := q.Get()
		q.Done(k)
	}
}

// Parallel is contention on the queue's one lock: mult*GOMAXPROCS
// goroutines each adding, getting and finishing a key of their own. One op
// is an Add, a Get and a Done.
func Parallel(b *testing.B, q Cycler, mult int) {
	keys := Keys(1 << 12)
	var mu sync.Mutex
	next := 0
	b.SetParallelism(mult)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		key := keys[next%len(keys)]
		next++
		mu.Unlock()
		for pb.Next() {
			q.Add(key)
			k, _ := q.Get()
			q.Done(k)
		}
		// Get may hand this goroutine another's key, and an Add of a key
		// still queued coalesces, so a goroutine can be owed a key that
		// nobody adds any more. Each one that leaves adds a key of its
		// own, so the last one in Get always finds one.
		q.Add("exit/" + key)
	})
}
