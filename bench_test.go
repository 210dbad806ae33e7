package workqueue

import (
	"strconv"
	"testing"
	"time"

	"github.com/go-coalesce/workqueue/internal/benchwork"
)

// The benchmarks compare the queue against a floor (benchwork.Floor): the
// work that the protocol cannot avoid. Every call takes one lock; Add, Get
// and Done each update one map entry; ready keys go through a FIFO.
// Whatever the queue spends beyond that is its own overhead.
// impl=floor+clock adds the three clock reads that exact queue latency and
// work duration need, so floor+clock / floor is the least that metrics can
// cost relative to no metrics on this machine, whatever the queue does
// (compare it with queue+metrics / queue). The workloads and floors are
// internal/benchwork's, shared with the side-by-side comparison with
// client-go in the interop module, which may import it.

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

func impls() []struct {
	name string
	make func() benchwork.Cycler
} {
	return []struct {
		name string
		make func() benchwork.Cycler
	}{
		{"impl=queue", func() benchwork.Cycler { return New[string]() }},
		{"impl=floor", func() benchwork.Cycler { return benchwork.NewFloor() }},
		{"impl=queue+metrics", func() benchwork.Cycler {
			return NewWithConfig(Config[string]{Name: "bench", Metrics: nopProvider{}})
		}},
		{"impl=floor+clock", func() benchwork.Cycler { return benchwork.NewClockFloor() }},
	}
}

// BenchmarkAddGetDone is the steady state of a controller with one key in
// flight: one event, one sync (benchwork.Cycle).
func BenchmarkAddGetDone(b *testing.B) {
	for _, im := range impls() {
		b.Run(im.name, func(b *testing.B) { benchwork.Cycle(b, im.make()) })
	}
}

// BenchmarkDuplicateAdds is a hot key: ten events arrive before a worker
// takes it, and coalesce into one sync (benchwork.HotKey). impl=floor is
// benchwork.CoalescingFloor, whose Add does nothing for a key it holds:
// one lock and one map lookup per duplicate, what interop's hot-key-x10
// row calls its floor.
func BenchmarkDuplicateAdds(b *testing.B) {
	for _, im := range []struct {
		name string
		make func() benchwork.Cycler
	}{
		{"impl=queue", func() benchwork.Cycler { return New[string]() }},
		{"impl=floor", func() benchwork.Cycler { return benchwork.NewCoalescingFloor() }},
	} {
		b.Run(im.name, func(b *testing.B) { benchwork.HotKey(b, im.make()) })
	}
}

// BenchmarkBurst is a resync: many distinct keys are added, then drained
// (benchwork.Burst); one op is the whole batch.
func BenchmarkBurst(b *testing.B) {
	for _, n := range []int{1000} {
		keys := benchwork.Keys(n)
		for _, im := range impls() {
			b.Run("keys="+strconv.Itoa(n)+"/"+im.name, func(b *testing.B) {
				q := im.make()
				b.ReportAllocs()
				for b.Loop() {
					benchwork.Burst(q, keys)
				}
			})
		}
	}
}

// BenchmarkParallel is many goroutines each adding, getting and finishing
// its own key: contention on the one lock (benchwork.Parallel).
func BenchmarkParallel(b *testing.B) {
	for _, mult := range []int{1, 8} {
		for _, im := range impls() {
			b.Run("goroutines=GOMAXPROCSx"+strconv.Itoa(mult)+"/"+im.name, func(b *testing.B) {
				benchwork.Parallel(b, im.make(), mult)
			})
		}
	}
}
