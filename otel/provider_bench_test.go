package otel_test

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/go-coalesce/workqueue"
	wqotel "github.com/go-coalesce/workqueue/otel"
	wqprom "github.com/go-coalesce/workqueue/prometheus"
)

// The providers compared: none, this package's on the OpenTelemetry SDK
// with a ManualReader (what a periodic OTLP export or a Prometheus exporter
// sits on), and the Prometheus adapter, all in one binary so that the
// ratios come from one run on one machine.
var benchProviders = []struct {
	name    string
	metrics func(b *testing.B) workqueue.MetricsProvider
}{
	{"metrics=none", func(*testing.B) workqueue.MetricsProvider { return nil }},
	{"metrics=prometheus", func(*testing.B) workqueue.MetricsProvider {
		return wqprom.NewProvider(prometheus.NewRegistry())
	}},
	{"metrics=otel", func(b *testing.B) workqueue.MetricsProvider {
		p, _ := newSDKProvider(b)
		return p
	}},
	// The same, with both histograms dropped by a View: what the
	// counters and gauges cost on their own.
	{"metrics=otel-nohist", func(b *testing.B) workqueue.MetricsProvider {
		p, _ := newSDKProvider(b, dropHistograms...)
		return p
	}},
}

// dropHistograms are Views that drop both histograms.
var dropHistograms = []sdkmetric.View{
	sdkmetric.NewView(sdkmetric.Instrument{Name: wqotel.QueueDurationName},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationDrop{}}),
	sdkmetric.NewView(sdkmetric.Instrument{Name: wqotel.WorkDurationName},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationDrop{}}),
}

// newSDKProvider returns a Provider on an SDK MeterProvider with views,
// read by a ManualReader, shut down when tb ends.
func newSDKProvider(tb testing.TB, views ...sdkmetric.View) (*wqotel.Provider, *sdkmetric.ManualReader) {
	tb.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(views...))
	tb.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	p, err := wqotel.NewProvider(mp)
	if err != nil {
		tb.Fatal(err)
	}
	return p, reader
}

// BenchmarkAddGetDone is one Add, Get and Done of a key per operation: the
// metrics-on cycle of the Prometheus adapter's benchmark, with each
// provider.
func BenchmarkAddGetDone(b *testing.B) {
	for _, c := range benchProviders {
		b.Run(c.name, func(b *testing.B) {
			q := workqueue.NewWithConfig(workqueue.Config[int]{Name: "bench", Metrics: c.metrics(b)})
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
// goroutines at once, each on its own keys (shared keys could coalesce and
// leave a Get with nothing to take).
func BenchmarkAddGetDoneParallel(b *testing.B) {
	for _, c := range benchProviders {
		b.Run(c.name, func(b *testing.B) {
			q := workqueue.NewWithConfig(workqueue.Config[int]{Name: "bench", Metrics: c.metrics(b)})
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

// BenchmarkEvents is the adapter's own share of one Add/Get/Done cycle
// (event=cycle: the three events the queue reports, without the queue), and
// of each kind of event alone: an add is a counter, a wait a histogram.
func BenchmarkEvents(b *testing.B) {
	events := []struct {
		name string
		do   func(workqueue.QueueMetrics)
	}{
		{"cycle", func(m workqueue.QueueMetrics) {
			m.Added()
			m.Waited(time.Millisecond)
			m.Worked(50 * time.Millisecond)
		}},
		{"added", func(m workqueue.QueueMetrics) { m.Added() }},
		{"waited", func(m workqueue.QueueMetrics) { m.Waited(time.Millisecond) }},
	}
	for _, e := range events {
		for _, c := range benchProviders[1:] {
			b.Run("event="+e.name+"/"+c.name, func(b *testing.B) {
				m := c.metrics(b).NewQueueMetrics("bench", func() workqueue.Stats { return workqueue.Stats{} })
				b.ReportAllocs()
				for b.Loop() {
					e.do(m)
				}
			})
		}
	}
}

// BenchmarkCollect is one collection of a MeterProvider with 100 queues.
func BenchmarkCollect(b *testing.B) {
	p, reader := newSDKProvider(b)
	for i := range 100 {
		q := workqueue.NewWithConfig(workqueue.Config[int]{Name: "q" + strconv.Itoa(i), Metrics: p})
		defer q.ShutDown()
		q.Add(1)
	}
	var rm metricdata.ResourceMetrics
	b.ReportAllocs()
	for b.Loop() {
		if err := reader.Collect(context.Background(), &rm); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCycleRatio measures the cost ratio of the metrics-on cycle with
// this Provider to the cycle with the Prometheus adapter in a way that
// shared, loaded machines cannot skew: each round runs a burst of cycles on
// each queue, back to back in an order that rotates, and the ratio of each
// round is kept; the metrics reported are the medians of those ratios.
// (Separate benchmarks run seconds apart, and the load of other processes
// changes in between.) One op is one round. With goroutines=N, each burst
// is shared by N goroutines, each on its own keys, as in
// BenchmarkAddGetDoneParallel.
func BenchmarkCycleRatio(b *testing.B) {
	for _, goroutines := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run("goroutines="+strconv.Itoa(goroutines), func(b *testing.B) {
			cycleRatio(b, goroutines)
		})
	}
}

func cycleRatio(b *testing.B, goroutines int) {
	const burst = 500 // cycles per goroutine per round
	newQ := func(p workqueue.MetricsProvider) *workqueue.Queue[int] {
		q := workqueue.NewWithConfig(workqueue.Config[int]{Name: "bench", Metrics: p})
		b.Cleanup(q.ShutDown)
		return q
	}
	op, _ := newSDKProvider(b)
	np, _ := newSDKProvider(b, dropHistograms...)
	queues := []*workqueue.Queue[int]{
		newQ(wqprom.NewProvider(prometheus.NewRegistry())),
		newQ(op),
		newQ(np),
	}
	cycles := func(q *workqueue.Queue[int], base int) {
		for i := range burst {
			q.Add(base | i&1023)
			k, _ := q.Get()
			q.Done(k)
		}
	}
	run := func(q *workqueue.Queue[int]) time.Duration {
		start := time.Now()
		if goroutines == 1 {
			cycles(q, 0)
			return time.Since(start)
		}
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() { cycles(q, (g+1)<<20) })
		}
		wg.Wait()
		return time.Since(start)
	}
	for _, q := range queues { // warm up: maps, attribute sets, SDK entries
		run(q)
	}
	var otelRatio, nohistRatio []float64
	var d [3]time.Duration
	b.ReportAllocs()
	for round := 0; b.Loop(); round++ {
		for j := range queues {
			k := (round + j) % len(queues)
			d[k] = run(queues[k])
		}
		otelRatio = append(otelRatio, float64(d[1])/float64(d[0]))
		nohistRatio = append(nohistRatio, float64(d[2])/float64(d[0]))
	}
	b.ReportMetric(median(otelRatio), "otel/prom")
	b.ReportMetric(median(nohistRatio), "otel-nohist/prom")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
