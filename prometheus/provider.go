// Package prometheus reports the metrics of github.com/go-coalesce/workqueue
// queues to Prometheus, under the names, types, label and buckets that
// Kubernetes registers for client-go's workqueue
// (k8s.io/component-base/metrics/prometheus/workqueue), so dashboards and
// alerts written for client-go controllers keep working:
//
//	workqueue_depth                              gauge      keys due for a run, not yet handed out by Get
//	workqueue_adds_total                         counter    adds that made a key due for a run
//	workqueue_queue_duration_seconds             histogram  time from the first add to Get
//	workqueue_work_duration_seconds              histogram  time from Get to Done
//	workqueue_unfinished_work_seconds            gauge      sum of the ages of keys being processed
//	workqueue_longest_running_processor_seconds  gauge      age of the oldest key being processed
//	workqueue_retries_total                      counter    AddAfter calls (so every AddRateLimited)
//	workqueue_delayed_items                      gauge      keys waiting for an AddAfter deadline
//	workqueue_oldest_ready_seconds               gauge      per priority: how long the oldest ready key at that priority has been ready
//
// Every metric has one label, name, set to Config.Name. Both histograms use
// the buckets 1e-8, 1e-7, …, 10 seconds (ExponentialBuckets(10e-9, 10, 10)).
// workqueue_delayed_items is not in client-go: it is the name proposed for
// the same gauge in kubernetes/kubernetes#135543, so that it will line up if
// Kubernetes adds it.
//
// workqueue_oldest_ready_seconds is ours (see workqueue.Queue.ReadyAges):
// it has a second label, priority, and a series per priority level that has
// had a ready key, so a level that Get passes over (a low priority starved
// by a steady stream of higher ones) shows an age that keeps growing. The
// priority label is bounded as controller-runtime bounds its depth's: once
// a name has shown more than 25 distinct priorities, its ages are reported
// under the single value "exceeded_cardinality_limit" (the largest age).
// Only queues that measure the ages report it: a plain FIFO, or a
// NewPriorityStore or NewFairPriorityStore one.
//
// The gauges are computed when they are scraped, from the queue's Stats, so
// they are exact at that moment (also while a worker is stuck) and no
// goroutine refreshes them. Counters and histograms are updated by the
// queue's events.
//
// The package is named prometheus, after its import path; import it under
// another name where client_golang's prometheus package is also used:
//
//	import (
//		"github.com/prometheus/client_golang/prometheus"
//		wqprom "github.com/go-coalesce/workqueue/prometheus"
//	)
package prometheus

import (
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/internal/metricsbook"
	prom "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// The label that names the queue, as in client-go.
const nameLabel = "name"

// Provider makes the Prometheus metrics of queues: set it as
// workqueue.Config.Metrics, together with a Config.Name. One Provider serves
// any number of queues; it is also a prometheus.Collector that reports all
// of them, and it is registered once, in NewProvider.
//
// Queues are told apart by their name, which is the value of the name label.
// Two queues with the same name are reported as one: their counters and
// histograms are shared (as in client-go), workqueue_depth,
// workqueue_delayed_items and workqueue_unfinished_work_seconds report the
// sum over both queues, and workqueue_longest_running_processor_seconds the
// larger of the two.
//
// A name's series stay for as long as the Provider is, as client-go's do
// (component-base's provider and controller-runtime's never delete one): its
// counters and histograms keep counting across queues of the name, and its
// gauges read 0 when no queue of the name has keys ready, waiting or
// processing, also once every queue of it has shut down. A queue that has
// shut down keeps adding to its name's gauges while it still has keys
// ready, waiting or being processed (a drain, or a stuck worker, stays
// visible); the first scrape that finds it shut down with none releases it,
// so a process that makes and discards queues does not keep them
// reachable. What stays per name (its series and the name itself) is what
// its counters already cost. A queue that is never shut down is reported,
// and kept reachable by the Provider, for as long as the Provider is.
//
// The zero value is not usable; use NewProvider. A Provider is safe for
// concurrent use.
type Provider struct {
	// Set in NewProvider, read-only afterwards.
	adds         *prom.CounterVec
	retries      *prom.CounterVec
	queueLatency *prom.HistogramVec
	workDuration *prom.HistogramVec
	depth        *prom.Desc
	delayed      *prom.Desc
	unfinished   *prom.Desc
	longest      *prom.Desc
	oldestReady  *prom.Desc

	// The queues whose gauges are reported, by name, and every name that
	// has had one: the rules above (sums, the larger longest, when a
	// shut-down queue goes, a name's gauges at 0 once none is left) are
	// the Book's.
	book  metricsbook.Book[string]
	names metricsbook.Keys[string]
	// ages holds the queues that report workqueue_oldest_ready_seconds,
	// and the priority labels of each name (bounded as the Ages say).
	ages metricsbook.Ages[string]
}

// queueMetrics receives the events of one queue. The children of the vecs
// are looked up once, in NewQueueMetrics, so that each event is a single
// atomic update with no label lookup.
type queueMetrics struct {
	adds         prom.Counter
	retries      prom.Counter
	queueLatency prom.Observer
	workDuration prom.Observer
	live         *metricsbook.Queue[string]
	aged         *metricsbook.Queue[metricsbook.AgeSource[string]] // nil without ready ages
}

var (
	_ workqueue.MetricsProvider         = (*Provider)(nil)
	_ workqueue.ReadyAgeMetricsProvider = (*Provider)(nil)
	_ prom.Collector                    = (*Provider)(nil)
)

// NewProvider returns a Provider registered with reg. Like
// prometheus.MustRegister it panics if registration fails; the likely cause
// is a second Provider on the same registry, since both would report the
// same metric names. A process needs only one Provider per registry.
//
// A nil reg registers nothing (as promauto.With(nil) does), which gives the
// error-returning variant:
//
//	p := wqprom.NewProvider(nil)
//	if err := reg.Register(p); err != nil {
//		// A prometheus.AlreadyRegisteredError holds the Provider
//		// already registered in its ExistingCollector.
//	}
func NewProvider(reg prom.Registerer) *Provider {
	// Names, help strings and buckets as Kubernetes registers them for
	// client-go's workqueue; the subsystem is spelled out in each name.
	buckets := prom.ExponentialBuckets(10e-9, 10, 10)
	labels := []string{nameLabel}
	p := &Provider{
		adds: prom.NewCounterVec(prom.CounterOpts{
			Name: "workqueue_adds_total",
			Help: "Total number of adds handled by workqueue",
		}, labels),
		retries: prom.NewCounterVec(prom.CounterOpts{
			Name: "workqueue_retries_total",
			Help: "Total number of retries handled by workqueue",
		}, labels),
		queueLatency: prom.NewHistogramVec(prom.HistogramOpts{
			Name:    "workqueue_queue_duration_seconds",
			Help:    "How long in seconds an item stays in workqueue before being requested.",
			Buckets: buckets,
		}, labels),
		workDuration: prom.NewHistogramVec(prom.HistogramOpts{
			Name:    "workqueue_work_duration_seconds",
			Help:    "How long in seconds processing an item from workqueue takes.",
			Buckets: buckets,
		}, labels),
		depth: prom.NewDesc("workqueue_depth",
			"Current depth of workqueue",
			labels, nil),
		delayed: prom.NewDesc("workqueue_delayed_items",
			"Current number of items in workqueue waiting for a delay "+
				"(AddAfter, AddRateLimited) to pass before they are added.",
			labels, nil),
		unfinished: prom.NewDesc("workqueue_unfinished_work_seconds",
			"How many seconds of work has done that is in progress and "+
				"hasn't been observed by work_duration. Large values indicate "+
				"stuck threads. One can deduce the number of stuck threads by "+
				"observing the rate at which this increases.",
			labels, nil),
		longest: prom.NewDesc("workqueue_longest_running_processor_seconds",
			"How many seconds has the longest running processor for "+
				"workqueue been running.",
			labels, nil),
		// Name and help shared with interop/hostmetrics.
		oldestReady: prom.NewDesc(metricsbook.OldestReadyName, metricsbook.OldestReadyHelp,
			[]string{nameLabel, metricsbook.PriorityLabel}, nil),
	}
	if reg != nil {
		reg.MustRegister(p)
	}
	return p
}

// NewQueueMetrics implements workqueue.MetricsProvider. The queue calls it
// once, from NewWithConfig; the series of its name (counters and gauges at
// zero) appear from then on, and stay.
func (p *Provider) NewQueueMetrics(name string, stats func() workqueue.Stats) workqueue.QueueMetrics {
	p.names.Add(name) // before the Book's Add: see metricsbook.KeptTotals
	return &queueMetrics{
		adds:         p.adds.WithLabelValues(name),
		retries:      p.retries.WithLabelValues(name),
		queueLatency: p.queueLatency.WithLabelValues(name),
		workDuration: p.workDuration.WithLabelValues(name),
		live:         p.book.Add(name, stats),
	}
}

// NewReadyAgeQueueMetrics implements workqueue.ReadyAgeMetricsProvider:
// NewQueueMetrics, and the queue's ready ages in
// workqueue_oldest_ready_seconds. byPriority is not used: depth has no
// priority label here.
func (p *Provider) NewReadyAgeQueueMetrics(name string, stats func() workqueue.Stats, _ func(map[int]int), readyAges func(map[int]time.Duration)) workqueue.QueueMetrics {
	m := p.NewQueueMetrics(name, stats).(*queueMetrics)
	m.aged = p.ages.Add(name, stats, readyAges)
	return m
}

// Describe implements prometheus.Collector.
func (p *Provider) Describe(ch chan<- *prom.Desc) {
	p.adds.Describe(ch)
	p.retries.Describe(ch)
	p.queueLatency.Describe(ch)
	p.workDuration.Describe(ch)
	ch <- p.depth
	ch <- p.delayed
	ch <- p.unfinished
	ch <- p.longest
	ch <- p.oldestReady
}

// Collect implements prometheus.Collector. It reads the Stats of every live
// queue, so a scrape costs one brief lock of each queue.
//
// A scrape is one cut through the queues' history, as far as a reader can
// tell: the counters and histograms are written first, then the gauges read
// the queues, so a run counted in workqueue_work_duration_seconds (its Done
// has returned) has ended in the gauges of the same scrape; a reader that
// waits for every run to be counted reads a longest running processor of 0
// in that scrape. The values are written here, not left to the registry: a
// vector's children are live, and a registry writes them when it gets to
// them, which may be after the gauges have read the queues.
func (p *Provider) Collect(ch chan<- prom.Metric) {
	collectWritten(p.adds, ch)
	collectWritten(p.retries, ch)
	collectWritten(p.queueLatency, ch)
	collectWritten(p.workDuration, ch)
	p.collectGauges(ch)
	for _, a := range p.ages.Series() {
		ch <- prom.MustNewConstMetric(p.oldestReady, prom.GaugeValue, a.Age.Seconds(), a.Key, a.Priority)
	}
}

// collectWritten collects c into ch with each metric's value written at
// once.
func collectWritten(c prom.Collector, ch chan<- prom.Metric) {
	mc := make(chan prom.Metric, 16)
	go func() {
		c.Collect(mc)
		close(mc)
	}()
	for metric := range mc {
		d := &dto.Metric{}
		if err := metric.Write(d); err != nil {
			ch <- metric // the registry reports the error
			continue
		}
		ch <- written{desc: metric.Desc(), m: d}
	}
}

// written is a metric whose value was written when it was collected.
type written struct {
	desc *prom.Desc
	m    *dto.Metric
}

func (w written) Desc() *prom.Desc { return w.desc }

func (w written) Write(out *dto.Metric) error {
	proto.Reset(out)
	proto.Merge(out, w.m)
	return nil
}

// collectGauges reports the gauges of every name that has had a queue:
// summed (and the longest the larger) over the live queues of that name, 0
// for a name with none left.
func (p *Provider) collectGauges(ch chan<- prom.Metric) {
	totals, _ := metricsbook.KeptTotals(&p.book, &p.names)
	for _, g := range totals {
		ch <- prom.MustNewConstMetric(p.depth, prom.GaugeValue, float64(g.Depth), g.Key)
		ch <- prom.MustNewConstMetric(p.delayed, prom.GaugeValue, float64(g.Delayed), g.Key)
		ch <- prom.MustNewConstMetric(p.unfinished, prom.GaugeValue, g.Unfinished.Seconds(), g.Key)
		ch <- prom.MustNewConstMetric(p.longest, prom.GaugeValue, g.Longest.Seconds(), g.Key)
	}
}

// Added implements workqueue.QueueMetrics.
func (m *queueMetrics) Added() { m.adds.Inc() }

// Retried implements workqueue.QueueMetrics.
func (m *queueMetrics) Retried() { m.retries.Inc() }

// Waited implements workqueue.QueueMetrics.
func (m *queueMetrics) Waited(d time.Duration) { m.queueLatency.Observe(d.Seconds()) }

// Worked implements workqueue.QueueMetrics.
func (m *queueMetrics) Worked(d time.Duration) { m.workDuration.Observe(d.Seconds()) }

// ShutDown implements workqueue.QueueMetrics. It only marks the queue: the
// next scrapes decide, from Stats, when it is released (see Provider).
func (m *queueMetrics) ShutDown() {
	m.live.ShutDown()
	if m.aged != nil {
		m.aged.ShutDown()
	}
}
