// Package otel reports the metrics of github.com/go-coalesce/workqueue
// queues through the OpenTelemetry metrics API
// (go.opentelemetry.io/otel/metric), to any MeterProvider: the SDK with an
// OTLP exporter, the SDK's Prometheus exporter, or a no-op.
//
// It measures what the Prometheus adapter
// (github.com/go-coalesce/workqueue/prometheus) measures, under
// OpenTelemetry names chosen so that OpenTelemetry's standard translation
// to Prometheus names (dots to underscores, the unit "s" as a _seconds
// suffix, _total on counters, {…} annotations dropped) gives back client-go's
// names exactly:
//
//	workqueue.depth                      async UpDownCounter  {item}  keys due for a run, not yet handed out by Get
//	workqueue.adds                       async Counter        {item}  adds that made a key due for a run
//	workqueue.queue.duration             Histogram            s       time from the first add to Get
//	workqueue.work.duration              Histogram            s       time from Get to Done
//	workqueue.unfinished_work            async UpDownCounter  s       sum of the ages of keys being processed
//	workqueue.longest_running_processor  async Gauge          s       age of the oldest key being processed
//	workqueue.retries                    async Counter        {item}  AddAfter calls (so every AddRateLimited)
//	workqueue.delayed_items              async UpDownCounter  {item}  keys waiting for an AddAfter deadline
//	workqueue.oldest_ready               async Gauge          s       per priority: how long the oldest ready key at that priority has been ready
//
// Every measurement has one attribute, name, set to Config.Name;
// workqueue.oldest_ready has a second, priority (PriorityKey), bounded as
// the Prometheus adapter bounds its label (see its package doc). The meter
// is named after this package's import path. The module README gives the
// reasons for each name, instrument kind and the histograms' bucket
// boundaries.
//
// The asynchronous instruments are observed by one callback per Provider
// when the MeterProvider collects: the gauges from the queues' Stats, so
// they are exact at that moment (also while a worker is stuck) and no
// goroutine refreshes them, and the counters from atomics that the queue's
// events increment. The histograms are recorded by the events.
//
// The package is named otel, after its import path; import it under another
// name where OpenTelemetry's otel package is also used:
//
//	import (
//		"go.opentelemetry.io/otel"
//		wqotel "github.com/go-coalesce/workqueue/otel"
//	)
package otel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/internal/metricsbook"
)

// ScopeName is the name of the Meter that a Provider takes from its
// MeterProvider: this package's import path, as OpenTelemetry asks of
// instrumentation libraries. Views that rename or re-bucket the workqueue
// metrics can select it with sdkmetric.Instrument{Scope: …}.
const ScopeName = "github.com/go-coalesce/workqueue/otel"

// NameKey is the attribute that names the queue: Config.Name.
const NameKey = attribute.Key("name")

// PriorityKey is the attribute of workqueue.oldest_ready that names a
// priority level: the priority in decimal, or "exceeded_cardinality_limit"
// for every priority of a name that has shown more than 25, as
// controller-runtime labels its depth.
const PriorityKey = attribute.Key("priority")

// The metric names, for views and for readers of the data (see the package
// doc for what each measures).
const (
	// DepthName: keys due for a run that Get has not handed out.
	DepthName = "workqueue.depth"
	// AddsName: adds that made a key due for a run.
	AddsName = "workqueue.adds"
	// QueueDurationName: time from the add that made a key due to Get.
	QueueDurationName = "workqueue.queue.duration"
	// WorkDurationName: time from Get to Done.
	WorkDurationName = "workqueue.work.duration"
	// UnfinishedWorkName: sum of the ages of the keys being processed.
	UnfinishedWorkName = "workqueue.unfinished_work"
	// LongestRunningProcessorName: age of the oldest key being processed.
	LongestRunningProcessorName = "workqueue.longest_running_processor"
	// RetriesName: AddAfter calls, and so every AddRateLimited.
	RetriesName = "workqueue.retries"
	// DelayedItemsName: keys waiting for an AddAfter deadline.
	DelayedItemsName = "workqueue.delayed_items"
	// OldestReadyName: per priority level, how long the key Get hands
	// out next at that priority has been ready (workqueue.Queue.ReadyAges).
	OldestReadyName = "workqueue.oldest_ready"
)

// DurationBoundaries returns, in a new slice, the bucket boundaries in
// seconds that both histograms advise (a View may replace them). They are
// the boundaries OpenTelemetry's semantic conventions give for request and
// processing durations (0.005 … 10 s), extended down to 10 µs, where a key
// handed to an idle worker lands, and up to a minute, where a backed-up
// queue or a stuck reconcile lands; client-go's buckets below 10 µs (10 ns,
// 100 ns, 1 µs) stay empty on real machines and are left out.
func DurationBoundaries() []float64 {
	return []float64{
		0.00001, 0.0001, 0.001,
		0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
		30, 60,
	}
}

// Provider makes the OpenTelemetry metrics of queues: set it as
// workqueue.Config.Metrics, together with a Config.Name. One Provider serves
// any number of queues, with one set of instruments and one callback,
// registered in NewProvider, that observes the counters and gauges of all
// of them.
//
// Queues are told apart by their name, the value of the name attribute. Two
// queues with the same name are reported as one: their counters and
// histograms are shared (as in client-go), workqueue.depth,
// workqueue.delayed_items and workqueue.unfinished_work report the sum over
// both queues, and workqueue.longest_running_processor the larger of the
// two. (One callback for all queues is what makes this possible: two
// callbacks each observing the same attribute set would be the duplicate
// observations the OpenTelemetry API asks callbacks not to make.)
//
// A name's points stay for as long as the Provider is registered, as
// client-go's series do: its counters and histograms keep counting across
// queues of the name, as cumulative sums should, and its gauges are
// observed at 0 when no queue of the name has keys ready, waiting or
// processing, also once every queue of it has shut down. A queue that has
// shut down keeps adding to its name's gauges while it still has keys
// ready, waiting or being processed (a drain, or a stuck worker, stays
// visible); the first collection that finds it shut down with none releases
// it, so a process that makes and discards queues does not keep them
// reachable. A queue that is never shut down is reported, and kept
// reachable by the Provider, for as long as the Provider is registered;
// Unregister releases them all.
//
// The zero value is not usable; use NewProvider. A Provider is safe for
// concurrent use.
type Provider struct {
	// Set in NewProvider, read-only afterwards.
	adds         metric.Int64ObservableCounter
	retries      metric.Int64ObservableCounter
	queueLatency metric.Float64Histogram
	workDuration metric.Float64Histogram
	depth        metric.Int64ObservableUpDownCounter
	delayed      metric.Int64ObservableUpDownCounter
	unfinished   metric.Float64ObservableUpDownCounter
	longest      metric.Float64ObservableGauge
	oldestReady  metric.Float64ObservableGauge
	reg          metric.Registration

	// The queues whose gauges are observed, by name: the rules above
	// (sums, the larger longest, when a shut-down queue goes, a name's
	// gauges at 0 once none is left) are the Book's. Unregister closes
	// it.
	book metricsbook.Book[*nameState]
	// names holds the state (counters included) of every name a queue
	// has had, in the order the names first appeared; byName indexes it.
	// Names are never forgotten, as cumulative counters must not be: the
	// set grows with the number of distinct names, which is small and
	// fixed in practice.
	names metricsbook.Keys[*nameState]

	mu     sync.Mutex // protects byName
	byName map[string]*nameState

	// ages holds the queues that report workqueue.oldest_ready, by name,
	// and each name's priorities (bounded as the Ages say).
	ages metricsbook.Ages[string]
}

// nameState is what all queues of one name share: the attribute option,
// built once so that neither events nor collections build attribute sets,
// and the counters.
//
// The counters are atomics observed by the callback, not synchronous
// OpenTelemetry Counters: an event is then one atomic add, where the SDK's
// Counter.Add resolves the attribute set and looks it up in a map on every
// call (about ten times the cost; see "Cost" in the module README). The
// exported data are the same: a monotonic Sum per name, exact at every
// collection, cumulative or turned into deltas by the SDK.
type nameState struct {
	attr          metric.MeasurementOption // WithAttributeSet of the name
	adds, retries atomic.Int64
}

// queueMetrics receives the events of one queue. The attribute option is
// built once per name and kept in a one-element slice, so that an event
// passes it to the histogram without allocating: a variadic call with an
// existing slice builds nothing.
type queueMetrics struct {
	p          *Provider
	name       *nameState
	recordOpts []metric.RecordOption
	live       *metricsbook.Queue[*nameState]
	aged       *metricsbook.Queue[metricsbook.AgeSource[string]] // nil without ready ages
}

var (
	_ workqueue.MetricsProvider         = (*Provider)(nil)
	_ workqueue.ReadyAgeMetricsProvider = (*Provider)(nil)
)

// NewProvider returns a Provider whose instruments come from
// mp.Meter(ScopeName), with its callback registered. Use
// otel.GetMeterProvider() for the global MeterProvider.
//
// It returns an error if mp is nil or if mp refuses an instrument or the
// callback; with the SDK and these fixed, valid names that does not happen.
// Two Providers on one MeterProvider are allowed, but each observes only its
// own queues, so the same name on both would make duplicate observations:
// a process needs one Provider per MeterProvider.
func NewProvider(mp metric.MeterProvider) (*Provider, error) {
	if mp == nil {
		return nil, errors.New("workqueue/otel: NewProvider: nil MeterProvider")
	}
	m := mp.Meter(ScopeName)
	bounds := DurationBoundaries()
	p := &Provider{byName: make(map[string]*nameState)}
	var err error
	fail := func(what string, e error) error {
		return fmt.Errorf("workqueue/otel: NewProvider: %s: %w", what, e)
	}

	// Descriptions follow client-go's help strings where they fit.
	if p.adds, err = m.Int64ObservableCounter(AddsName,
		metric.WithUnit("{item}"),
		metric.WithDescription("Number of adds handled by the workqueue: keys that became due for a run.")); err != nil {
		return nil, fail(AddsName, err)
	}
	if p.retries, err = m.Int64ObservableCounter(RetriesName,
		metric.WithUnit("{item}"),
		metric.WithDescription("Number of retries handled by the workqueue: AddAfter and AddRateLimited calls.")); err != nil {
		return nil, fail(RetriesName, err)
	}
	if p.queueLatency, err = m.Float64Histogram(QueueDurationName,
		metric.WithUnit("s"),
		metric.WithDescription("How long an item stays in the workqueue, from the add that made it due until Get hands it out."),
		metric.WithExplicitBucketBoundaries(bounds...)); err != nil {
		return nil, fail(QueueDurationName, err)
	}
	if p.workDuration, err = m.Float64Histogram(WorkDurationName,
		metric.WithUnit("s"),
		metric.WithDescription("How long processing an item from the workqueue takes, from Get to Done."),
		metric.WithExplicitBucketBoundaries(bounds...)); err != nil {
		return nil, fail(WorkDurationName, err)
	}
	if p.depth, err = m.Int64ObservableUpDownCounter(DepthName,
		metric.WithUnit("{item}"),
		metric.WithDescription("Current depth of the workqueue: items due for a run that Get has not handed out.")); err != nil {
		return nil, fail(DepthName, err)
	}
	if p.delayed, err = m.Int64ObservableUpDownCounter(DelayedItemsName,
		metric.WithUnit("{item}"),
		metric.WithDescription("Current number of items in the workqueue waiting for a delay (AddAfter, AddRateLimited) to pass before they are added.")); err != nil {
		return nil, fail(DelayedItemsName, err)
	}
	if p.unfinished, err = m.Float64ObservableUpDownCounter(UnfinishedWorkName,
		metric.WithUnit("s"),
		metric.WithDescription("How many seconds of work is in progress and has not been observed by workqueue.work.duration. Large values indicate stuck workers; the rate at which it grows is the number of stuck workers.")); err != nil {
		return nil, fail(UnfinishedWorkName, err)
	}
	if p.longest, err = m.Float64ObservableGauge(LongestRunningProcessorName,
		metric.WithUnit("s"),
		metric.WithDescription("How long the longest running item of the workqueue has been processed.")); err != nil {
		return nil, fail(LongestRunningProcessorName, err)
	}
	if p.oldestReady, err = m.Float64ObservableGauge(OldestReadyName,
		metric.WithUnit("s"),
		metric.WithDescription("How long the oldest ready item at each priority of the workqueue has been waiting, also behind a tenant's cap. A value that keeps growing means the priority is not being served.")); err != nil {
		return nil, fail(OldestReadyName, err)
	}
	if p.reg, err = m.RegisterCallback(p.observe,
		p.adds, p.retries, p.depth, p.delayed, p.unfinished, p.longest, p.oldestReady); err != nil {
		return nil, fail("RegisterCallback", err)
	}
	return p, nil
}

// Unregister removes the Provider's callback from its MeterProvider: from
// the next collection on, no counters or gauges of its queues are observed,
// and the Provider drops its references to them, so neither it nor the
// MeterProvider keeps them reachable. Histograms keep recording the events
// of queues already made, and of queues made afterwards.
func (p *Provider) Unregister() error {
	err := p.reg.Unregister()
	p.book.Close()
	p.ages.Close()
	return err
}

// nameState returns the state shared by the queues named name, making it
// the first time. p.mu must be held.
func (p *Provider) nameState(name string) *nameState {
	n, ok := p.byName[name]
	if !ok {
		n = &nameState{attr: metric.WithAttributeSet(attribute.NewSet(NameKey.String(name)))}
		p.byName[name] = n
		p.names.Add(n) // before its queue joins the Book: see metricsbook.KeptTotals
	}
	return n
}

// NewQueueMetrics implements workqueue.MetricsProvider. The queue calls it
// once, from NewWithConfig; its counters (at zero) and gauges are observed
// from the next collection on, and its histograms appear with their first
// event (the OpenTelemetry SDK reports no point for an attribute set never
// recorded).
func (p *Provider) NewQueueMetrics(name string, stats func() workqueue.Stats) workqueue.QueueMetrics {
	p.mu.Lock()
	n := p.nameState(name)
	p.mu.Unlock()
	return &queueMetrics{
		p:          p,
		name:       n,
		recordOpts: []metric.RecordOption{n.attr},
		live:       p.book.Add(n, stats), // kept unless Unregister has run
	}
}

// NewReadyAgeQueueMetrics implements workqueue.ReadyAgeMetricsProvider:
// NewQueueMetrics, and the queue's ready ages in workqueue.oldest_ready.
// byPriority is not used: depth has no priority attribute here.
func (p *Provider) NewReadyAgeQueueMetrics(name string, stats func() workqueue.Stats, _ func(map[int]int), readyAges func(map[int]time.Duration)) workqueue.QueueMetrics {
	m := p.NewQueueMetrics(name, stats).(*queueMetrics)
	m.aged = p.ages.Add(name, stats, readyAges)
	return m
}

// observe is the Provider's callback: it reads the Stats of every live
// queue and observes, for every name a queue has had, in the order the
// names first had one, the counters and the gauges (0 for a name with no
// live queue left).
func (p *Provider) observe(_ context.Context, o metric.Observer) error {
	totals, ok := metricsbook.KeptTotals(&p.book, &p.names)
	if !ok {
		// Unregister has run, and the SDK may still be running this
		// callback: observe nothing from then on.
		return nil
	}
	for _, g := range totals {
		n := g.Key
		attr := n.attr
		o.ObserveInt64(p.adds, n.adds.Load(), attr)
		o.ObserveInt64(p.retries, n.retries.Load(), attr)
		o.ObserveInt64(p.depth, int64(g.Depth), attr)
		o.ObserveInt64(p.delayed, int64(g.Delayed), attr)
		o.ObserveFloat64(p.unfinished, g.Unfinished.Seconds(), attr)
		o.ObserveFloat64(p.longest, g.Longest.Seconds(), attr)
	}
	// A collection is rare beside the events: the attribute sets of the
	// age series, at most 26 per name, are built here each time.
	for _, a := range p.ages.Series() {
		o.ObserveFloat64(p.oldestReady, a.Age.Seconds(), metric.WithAttributes(NameKey.String(a.Key), PriorityKey.String(a.Priority)))
	}
	return nil
}

// Added implements workqueue.QueueMetrics.
func (m *queueMetrics) Added() { m.name.adds.Add(1) }

// Retried implements workqueue.QueueMetrics.
func (m *queueMetrics) Retried() { m.name.retries.Add(1) }

// Histogram events carry no context: the queue has none to give, and a
// background context records no exemplar, which is right for events that
// belong to no request.
//
// A Record on the SDK costs several times a Prometheus Observe even when a
// View drops the histogram (the SDK resolves the attribute set before it
// finds nothing to update), so Enabled is asked first: a program that drops
// the histograms pays one interface call for each event instead.

// Waited implements workqueue.QueueMetrics.
func (m *queueMetrics) Waited(d time.Duration) {
	ctx := context.Background()
	if h := m.p.queueLatency; h.Enabled(ctx) {
		h.Record(ctx, d.Seconds(), m.recordOpts...)
	}
}

// Worked implements workqueue.QueueMetrics.
func (m *queueMetrics) Worked(d time.Duration) {
	ctx := context.Background()
	if h := m.p.workDuration; h.Enabled(ctx) {
		h.Record(ctx, d.Seconds(), m.recordOpts...)
	}
}

// ShutDown implements workqueue.QueueMetrics. It only marks the queue: the
// next collections decide, from Stats, when it is released (see Provider).
func (m *queueMetrics) ShutDown() {
	m.live.ShutDown()
	if m.aged != nil {
		m.aged.ShutDown()
	}
}
