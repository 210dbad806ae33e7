package workqueue

import (
	"strconv"
	"sync"
	"testing"
	"time"
)

// The benchmarks compare the queue against floorQueue: the work that the
// protocol cannot avoid. Every call takes one lock; Add, Get and Done each
// update one map entry; ready keys go through a ring. Whatever the queue
// spends beyond that is its own overhead. impl=floor+clock adds the three
// clock reads that exact queue latency and work duration need, so
// floor+clock / floor is the least that metrics can cost relative to no
// metrics on this machine, whatever the queue does (compare it with
// queue+metrics / queue). The side-by-side comparison with
// client-go lives in the interop module, which may import it.

// cycler is the slice of the API the benchmarks drive, so the same loop runs
// on the queue and on the floor.
type cycler interface {
	Add(string)
	Get() (string, bool)
	Done(string)
}

type floorQueue struct {
	mu   sync.Mutex
	keys map[string]floorKey
	ring ring[string]
	// clock makes the floor read the clock where a queue with metrics
	// must: when a key becomes dirty (queue latency starts), at Get (it
	// ends, and work starts) and at Done (work ends). With it, the floor
	// is the least that metrics with exact durations can cost.
	clock  bool
	origin time.Time
	sink   int64
}

type floorKey struct {
	state uint8
	at    int64
}

func newFloor() *floorQueue { return &floorQueue{keys: map[string]floorKey{}} }

func newClockFloor() *floorQueue {
	f := newFloor()
	f.clock, f.origin = true, time.Now()
	return f
}

func (f *floorQueue) now() int64 {
	if !f.clock {
		return 0
	}
	return int64(time.Since(f.origin))
}

func (f *floorQueue) Add(k string) {
	f.mu.Lock()
	f.keys[k] = floorKey{1, f.now()}
	f.ring.Push(k)
	f.mu.Unlock()
}

// Get and Done look the key up first only with the clock: the start times
// are what metrics add, and the plain floor overwrites or deletes the entry
// with one hash.
func (f *floorQueue) Get() (string, bool) {
	f.mu.Lock()
	k := f.ring.Pop()
	st := floorKey{state: 2}
	if f.clock {
		st.at = f.now()
		f.sink += st.at - f.keys[k].at
	}
	f.keys[k] = st
	f.mu.Unlock()
	return k, false
}

func (f *floorQueue) Done(k string) {
	f.mu.Lock()
	if f.clock {
		f.sink += f.now() - f.keys[k].at
	}
	delete(f.keys, k)
	f.mu.Unlock()
}

// nopProvider is a MetricsProvider whose metrics do nothing: what is left
// is the queue's own cost of measuring (clock reads, start times).
type nopProvider struct{}

func (nopProvider) NewQueueMetrics(string, func() Stats) QueueMetrics { return nopMetrics{} }

type nopMetrics struct{}

func (nopMetrics) Added()               {}
func (nopMetrics) Retried()             {}
func (nopMetrics) Waited(time.Duration) {}
func (nopMetrics) Worked(time.Duration) {}
func (nopMetrics) ShutDown()            {}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "default/deployment-" + strconv.Itoa(i)
	}
	return keys
}

func impls() []struct {
	name string
	make func() cycler
} {
	return []struct {
		name string
		make func() cycler
	}{
		{"impl=queue", func() cycler { return New[string]() }},
		{"impl=floor", func() cycler { return newFloor() }},
		{"impl=queue+metrics", func() cycler {
			return NewWithConfig(Config[string]{Name: "bench", Metrics: nopProvider{}})
		}},
		{"impl=floor+clock", func() cycler { return newClockFloor() }},
	}
}

// BenchmarkAddGetDone is the steady state of a controller with one key in
// flight: one event, one sync.
func BenchmarkAddGetDone(b *testing.B) {
	for _, im := range impls() {
		b.Run(im.name, func(b *testing.B) {
			q := im.make()
			key := "default/web"
			b.ReportAllocs()
			for b.Loop() {
				q.Add(key)
				k, _ := q.Get()
				q.Done(k)
			}
		})
	}
}

// BenchmarkDuplicateAdds is a hot key: ten events arrive before a worker
// takes it, and coalesce into one sync. impl=floor is floorQueue whose Add
// does nothing for a key it holds: one lock and one map lookup per
// duplicate, what interop's hot-key-x10 row calls its floor.
func BenchmarkDuplicateAdds(b *testing.B) {
	for _, im := range []struct {
		name string
		make func() cycler
	}{
		{"impl=queue", func() cycler { return New[string]() }},
		{"impl=floor", func() cycler { return &coalescingFloor{*newFloor()} }},
	} {
		b.Run(im.name, func(b *testing.B) {
			q := im.make()
			key := "default/web"
			b.ReportAllocs()
			for b.Loop() {
				for range 10 {
					q.Add(key)
				}
				k, _ := q.Get()
				q.Done(k)
			}
		})
	}
}

// coalescingFloor is floorQueue whose Add looks the key up first and leaves
// a key it holds alone.
type coalescingFloor struct{ floorQueue }

func (f *coalescingFloor) Add(k string) {
	f.mu.Lock()
	if _, ok := f.keys[k]; !ok {
		f.keys[k] = floorKey{state: 1}
		f.ring.Push(k)
	}
	f.mu.Unlock()
}

// BenchmarkBurst is a resync: many distinct keys are added, then drained.
func BenchmarkBurst(b *testing.B) {
	for _, n := range []int{1000} {
		keys := benchKeys(n)
		for _, im := range impls() {
			b.Run("keys="+strconv.Itoa(n)+"/"+im.name, func(b *testing.B) {
				q := im.make()
				b.ReportAllocs()
				for b.Loop() {
					for _, k := range keys {
						q.Add(k)
					}
					for range keys {
						k, _ := q.Get()
						q.Done(k)
					}
				}
			})
		}
	}
}

// BenchmarkParallel is many goroutines each adding, getting and finishing
// its own key: contention on the one lock.
func BenchmarkParallel(b *testing.B) {
	for _, mult := range []int{1, 8} {
		for _, im := range impls() {
			b.Run("goroutines=GOMAXPROCSx"+strconv.Itoa(mult)+"/"+im.name, func(b *testing.B) {
				q := im.make()
				keys := benchKeys(1 << 12)
				var next sync.Mutex
				i := 0
				b.SetParallelism(mult)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					next.Lock()
					key := keys[i%len(keys)]
					i++
					next.Unlock()
					for pb.Next() {
						q.Add(key)
						k, _ := q.Get()
						q.Done(k)
					}
					// Get may hand this goroutine another's key, and an
					// Add of a key still queued coalesces, so a goroutine
					// can end up owed a key nobody will add. Each one that
					// leaves adds a key of its own for such a Get: the
					// last goroutine in Get always finds a key, as it
					// added one just before.
					q.Add("exit/" + key)
				})
			})
		}
	}
}
