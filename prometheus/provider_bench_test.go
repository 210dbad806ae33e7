package prometheus_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-coalesce/workqueue"
	wqprom "github.com/go-coalesce/workqueue/prometheus"
)

// noopProvider makes metrics that do nothing: the cost of the queue's
// metrics bookkeeping alone, without Prometheus.
type noopProvider struct{}

func (noopProvider) NewQueueMetrics(string, func() workqueue.Stats) workqueue.QueueMetrics {
	return noopMetrics{}
}

type noopMetrics struct{}

func (noopMetrics) Added()               {}
func (noopMetrics) Retried()             {}
func (noopMetrics) Waited(time.Duration) {}
func (noopMetrics) Worked(time.Duration) {}
func (noopMetrics) ShutDown()            {}

// BenchmarkAddGetDone is one Add, Get and Done of a key per operation, on a
// queue without metrics, with metrics that do nothing, and with this
// package's Prometheus metrics.
func BenchmarkAddGetDone(b *testing.B) {
	cases := []struct {
		name    string
		metrics func() workqueue.MetricsProvider
	}{
		{"metrics=none", func() workqueue.MetricsProvider { return nil }},
		{"metrics=noop", func() workqueue.MetricsProvider { return noopProvider{} }},
		{"metrics=prometheus", func() workqueue.MetricsProvider {
			return wqprom.NewProvider(prometheus.NewRegistry())
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			q := workqueue.NewWithConfig(workqueue.Config[int]{Name: "bench", Metrics: c.metrics()})
			defer q.ShutDown()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				q.Add(i & 1023)
				k, _ := q.Get()
				q.Done(k)
			}
		})
	}
}

// BenchmarkAddGetDoneParallel is BenchmarkAddGetDone from GOMAXPROCS
// goroutines at once. Each goroutine adds its own keys: were they shared, an
// Add could coalesce with another goroutine's and leave a Get with no key to
// take, and the benchmark would hang.
func BenchmarkAddGetDoneParallel(b *testing.B) {
	cases := []struct {
		name    string
		metrics func() workqueue.MetricsProvider
	}{
		{"metrics=none", func() workqueue.MetricsProvider { return nil }},
		{"metrics=prometheus", func() workqueue.MetricsProvider {
			return wqprom.NewProvider(prometheus.NewRegistry())
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			q := workqueue.NewWithConfig(workqueue.Config[int]{Name: "bench", Metrics: c.metrics()})
			defer q.ShutDown()
			b.ReportAllocs()
			var goroutines atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				base := int(goroutines.Add(1)) << 20
				for i := 0; pb.Next(); i++ {
					q.Add(base | i&1023)
					k, _ := q.Get()
					q.Done(k)
				}
			})
		})
	}
}

// BenchmarkScrape is one Gather of a registry with 100 queues.
func BenchmarkScrape(b *testing.B) {
	reg := prometheus.NewRegistry()
	p := wqprom.NewProvider(reg)
	for i := range 100 {
		q := workqueue.NewWithConfig(workqueue.Config[int]{Name: "q" + strconv.Itoa(i), Metrics: p})
		defer q.ShutDown()
		q.Add(1)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEvents is the adapter's own share of one Add/Get/Done cycle: the
// three events the queue reports for it, on the real counter and histogram
// children.
func BenchmarkEvents(b *testing.B) {
	p := wqprom.NewProvider(prometheus.NewRegistry())
	m := p.NewQueueMetrics("bench", func() workqueue.Stats { return workqueue.Stats{} })
	b.ReportAllocs()
	for b.Loop() {
		m.Added()
		m.Waited(time.Millisecond)
		m.Worked(50 * time.Millisecond)
	}
}
