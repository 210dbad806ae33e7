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
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
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
//
// The floor is what no OpenTelemetry adapter can avoid: a queue with no
// metrics provider, and with each cycle exactly the SDK work that the
// cycle's events need, done the cheapest way the API allows and with no
// adapter code around it: one atomic add for the add (what the Provider
// observes at collection time; a synchronous Counter.Add costs more), and
// the two Float64Histogram.Records, with an attribute set built once, on
// an SDK MeterProvider with a ManualReader. It is below what any adapter
// can reach, since it skips even the queue's own work for metrics (the
// clock reads that time each key, the calls through the QueueMetrics
// interface), which the Prometheus adapter's cycle pays too. So floor/prom
// above 1.1 means the goal of issue #15, at most 1.1 times the Prometheus
// adapter's cycle, is out of reach through the OpenTelemetry SDK.
//
// To split otel/floor, the rounds also time the floor's SDK work as a bare
// QueueMetrics on a queue with metrics on (bare: otel/bare is this
// Provider's own code), and a queue with no metrics (none). The floor and
// the bare adapter are checked, after the rounds, to have recorded every
// cycle.
func BenchmarkCycleRatio(b *testing.B) {
	for _, goroutines := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run("goroutines="+strconv.Itoa(goroutines), func(b *testing.B) {
			cycleRatio(b, goroutines)
		})
	}
}

// burst is the number of cycles per goroutine per round of
// BenchmarkCycleRatio.
const burst = 500

// cycles runs one burst of Add/Get/Done cycles on q, on keys in base's
// range.
func cycles(q *workqueue.Queue[int], base int) {
	for i := range burst {
		q.Add(base | i&1023)
		k, _ := q.Get()
		q.Done(k)
	}
}

// otelFloor is the floor of BenchmarkCycleRatio: a queue without metrics,
// and the SDK work of the cycle's three events done by hand. It is also the
// bare QueueMetrics of the same work (bareProvider), to tell the queue's own
// share of the metrics-on cycle from this Provider's.
type otelFloor struct {
	q              *workqueue.Queue[int]
	adds           atomic.Int64
	waited, worked metric.Float64Histogram
	opts           []metric.RecordOption // WithAttributeSet, built once
	reader         *sdkmetric.ManualReader
}

// newOTelFloor returns the floor, on its own SDK MeterProvider with a
// ManualReader, with histograms made as the Provider makes them (name,
// unit, advised boundaries: what the SDK's aggregation depends on), and its
// queue made with metrics.
func newOTelFloor(b *testing.B, metrics func(*otelFloor) workqueue.MetricsProvider) *otelFloor {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m := mp.Meter(wqotel.ScopeName)
	f := &otelFloor{
		opts:   []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(wqotel.NameKey.String("bench")))},
		reader: reader,
	}
	var err error
	if f.waited, err = m.Float64Histogram(wqotel.QueueDurationName, metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(wqotel.DurationBoundaries()...)); err != nil {
		b.Fatal(err)
	}
	if f.worked, err = m.Float64Histogram(wqotel.WorkDurationName, metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(wqotel.DurationBoundaries()...)); err != nil {
		b.Fatal(err)
	}
	f.q = workqueue.NewWithConfig(workqueue.Config[int]{Name: "bench", Metrics: metrics(f)})
	b.Cleanup(f.q.ShutDown)
	return f
}

// cycles is cycles on the floor's queue, with each event's SDK work where
// the queue would report the event. The durations recorded are constants in
// the first bucket, where a cycle's real ones fall; the SDK's work does not
// depend on the value beyond a search of the boundaries.
func (f *otelFloor) cycles(base int) {
	ctx := context.Background()
	for i := range burst {
		f.q.Add(base | i&1023)
		f.adds.Add(1)
		k, _ := f.q.Get()
		f.waited.Record(ctx, 0.000_000_5, f.opts...)
		f.q.Done(k)
		f.worked.Record(ctx, 0.000_000_5, f.opts...)
	}
}

// check fails b unless the floor's adds and both its histograms counted
// want cycles: the floor must have done the SDK work it stands for.
func (f *otelFloor) check(b *testing.B, name string, want int) {
	b.Helper()
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &rm); err != nil {
		b.Fatal(err)
	}
	got := map[string]uint64{"adds": uint64(f.adds.Load())}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && len(h.DataPoints) == 1 {
				got[m.Name] = h.DataPoints[0].Count
			}
		}
	}
	for _, what := range []string{"adds", wqotel.QueueDurationName, wqotel.WorkDurationName} {
		if got[what] != uint64(want) {
			b.Fatalf("%s: %s counted %d, want %d cycles", name, what, got[what], want)
		}
	}
}

// bareProvider gives its queue the floor's SDK work as its QueueMetrics,
// with nothing around it: the least an adapter can do on a queue with
// metrics on (which reads the clock to time each key).
type bareProvider struct{ f *otelFloor }

func (p bareProvider) NewQueueMetrics(string, func() workqueue.Stats) workqueue.QueueMetrics {
	return p
}
func (p bareProvider) Added()   { p.f.adds.Add(1) }
func (p bareProvider) Retried() {}
func (p bareProvider) Waited(d time.Duration) {
	p.f.waited.Record(context.Background(), d.Seconds(), p.f.opts...)
}
func (p bareProvider) Worked(d time.Duration) {
	p.f.worked.Record(context.Background(), d.Seconds(), p.f.opts...)
}
func (p bareProvider) ShutDown() {}

func cycleRatio(b *testing.B, goroutines int) {
	newQ := func(p workqueue.MetricsProvider) *workqueue.Queue[int] {
		q := workqueue.NewWithConfig(workqueue.Config[int]{Name: "bench", Metrics: p})
		b.Cleanup(q.ShutDown)
		return q
	}
	op, _ := newSDKProvider(b)
	np, _ := newSDKProvider(b, dropHistograms...)
	promQ, otelQ, nohistQ := newQ(wqprom.NewProvider(prometheus.NewRegistry())), newQ(op), newQ(np)
	noneQ := newQ(nil)
	fl := newOTelFloor(b, func(*otelFloor) workqueue.MetricsProvider { return nil })
	bare := newOTelFloor(b, func(f *otelFloor) workqueue.MetricsProvider { return bareProvider{f} })
	// The bursts timed each round, in this order in round 0; d[i] is the
	// time of bursts[i].
	const prom, otel, nohist, floor, bareQ, none = 0, 1, 2, 3, 4, 5
	bursts := []func(base int){
		prom:   func(base int) { cycles(promQ, base) },
		otel:   func(base int) { cycles(otelQ, base) },
		nohist: func(base int) { cycles(nohistQ, base) },
		floor:  fl.cycles,
		bareQ:  func(base int) { cycles(bare.q, base) },
		none:   func(base int) { cycles(noneQ, base) },
	}
	run := func(cycles func(base int)) time.Duration {
		start := time.Now()
		if goroutines == 1 {
			cycles(0)
			return time.Since(start)
		}
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() { cycles((g + 1) << 20) })
		}
		wg.Wait()
		return time.Since(start)
	}
	for _, cycles := range bursts { // warm up: maps, attribute sets, SDK entries
		run(cycles)
	}
	ratios := make(map[string][]float64)
	ratio := func(unit string, num, den time.Duration) {
		ratios[unit] = append(ratios[unit], float64(num)/float64(den))
	}
	d := make([]time.Duration, len(bursts))
	b.ReportAllocs()
	for round := 0; b.Loop(); round++ {
		for j := range bursts {
			k := (round + j) % len(bursts)
			d[k] = run(bursts[k])
		}
		ratio("otel/prom", d[otel], d[prom])
		ratio("otel-nohist/prom", d[nohist], d[prom])
		ratio("floor/prom", d[floor], d[prom])
		ratio("otel/floor", d[otel], d[floor])
		ratio("bare/prom", d[bareQ], d[prom])
		ratio("otel/bare", d[otel], d[bareQ])
		ratio("none/prom", d[none], d[prom])
	}
	for unit, rs := range ratios {
		b.ReportMetric(median(rs), unit)
	}
	b.StopTimer()
	// Each queue ran the warm-up round and every timed one.
	cyclesRun := (len(ratios["otel/prom"]) + 1) * burst * goroutines
	fl.check(b, "floor", cyclesRun)
	bare.check(b, "bare adapter", cyclesRun)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
