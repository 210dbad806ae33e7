// Package hostmetrics reports the metrics of github.com/go-coalesce/workqueue
// queues into the workqueue_* families that a host framework has already
// registered for client-go's queues, so that a controller moved onto our
// queue keeps its series (same names, labels, buckets and help) on the
// host's /metrics, next to those of the client-go queues in the same
// process, with no second registration.
//
// Its subpackages hold the one line of setup per host:
//
//	crmetrics.Provider()   // controller-runtime: sigs.k8s.io/controller-runtime/pkg/metrics.Registry
//	kubemetrics.Provider() // component-base binaries (kube-controller-manager): legacyregistry
//
// This package is the mechanism they share; a host whose families live on
// a Prometheus registry can use it directly through New.
//
// # How the families are shared
//
// Counters and histograms are the host's own: workqueue_adds_total,
// workqueue_retries_total, workqueue_queue_duration_seconds and
// workqueue_work_duration_seconds are updated through the host's children
// for the queue's labels, exactly as the host's client-go provider updates
// them, so buckets and native-histogram settings are the host's by
// construction.
//
// The host's gauges (workqueue_depth, workqueue_unfinished_work_seconds,
// workqueue_longest_running_processor_seconds) are push-style: client-go
// calls Inc, Dec and Set on them, and refreshes the two age gauges every
// 500 ms from a goroutine per queue. Ours are exact at scrape time instead,
// read from the queue's Stats when the host's registry is gathered. To put
// both in one family, New takes each host gauge collector off the registry
// and registers in its place a collector that reports the host's series
// plus ours: a series of one of our queues is the host's series for the
// same labels (kept in existence through the host's own vector, at 0,
// exactly as a client-go queue creates it) with the queue's current value
// added, or for the longest running processor the larger of the two. So a
// client-go queue and one of ours with the same name report as one queue,
// as two client-go queues of one name do, and nothing is registered twice.
// The trade-off: the host's gauge collectors are replaced on the registry
// (their values and series are all still reported, and the host keeps
// writing to them), which is why New is called once per registry, by the
// subpackages, and never for a registry where the families are absent; and
// a scrape that runs while New swaps a family may miss that family once.
//
// One scrape is one cut through the queues' history, as far as a reader can
// tell: the host's counters and histograms (Host.Events) are taken off the
// registry too and collected by the same collector, their values written,
// before the gauges read the queues. A
// registry collects its collectors concurrently, so with the families
// apart a scrape could read the age gauges before a worker's Done and
// workqueue_work_duration_seconds after it, and show every run counted with
// one still running (a longest running processor of a few ms "after all
// work is done"). Collected in this order, a run counted in a scrape's
// work_duration has ended in that scrape's gauges, as with the Prometheus
// adapter, whose one collector reads them in the same order.
//
// # The ready age, ours
//
// The host has no family for how long a priority level's next key has been
// ready (workqueue.Queue.ReadyAges), which is what shows a starving level.
// Given the host's label names (Host.LabelNames), New registers it beside
// the host's families, in the same collector (so it is read in the same
// cut, after the gauges): workqueue_oldest_ready_seconds, with the name
// and help of the Prometheus adapter's, the host's labels of a queue plus
// priority, and the adapter's rules: a series per priority level that has
// had a ready key (from the first scrape that finds one, then at 0 while
// the level has none), the larger age for queues with the same labels, and
// at most 25 priorities for one queue's labels, then the single priority
// "exceeded_cardinality_limit" with the largest age. Only queues that
// measure the ages report it: a plain FIFO (at priority 0), or a
// NewPriorityStore or NewFairPriorityStore one.
//
// A queue that has shut down and has nothing ready, waiting or processing
// stops contributing (its series stay, at the value the host holds, 0),
// and is forgotten by the Provider: the rule of the Prometheus and
// OpenTelemetry adapters, kept for all three in one place
// (github.com/go-coalesce/workqueue/internal/metricsbook).
package hostmetrics

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/internal/metricsbook"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// Counter is a host counter child: Inc is all a queue needs.
type Counter interface{ Inc() }

// Observer is a host histogram child.
type Observer interface{ Observe(float64) }

// GaugeFamily is one of the host's gauge families.
type GaugeFamily struct {
	// Collector is the host's gauge vector, as registered on
	// Host.Registerer. Its Describe must yield exactly one Desc.
	Collector prometheus.Collector
	// Touch makes the host's series for the label values exist (at 0 if
	// new), through the host's own vector, as a client-go queue's
	// constructor does.
	Touch func(labelValues ...string)
}

// Host describes where a host registered its workqueue families and how a
// queue named name is labelled in them.
type Host struct {
	// Registerer holds the three gauge families; New replaces them there.
	Registerer prometheus.Registerer
	// Labels returns the label values of a queue named name, in the order
	// of the families' label names; depth's priority label, when the host
	// has one, is not included.
	Labels func(name string) []string
	// Priority tells that depth has one more label, last: the priority of
	// the pending runs it counts, as in controller-runtime's priority
	// queue. A queue without a PriorityStore reports all its keys at
	// priority 0.
	Priority bool
	// The host's counter and histogram children for the given label values.
	Adds, Retries         func(labelValues ...string) Counter
	Latency, WorkDuration func(labelValues ...string) Observer
	// The host's gauge families.
	Depth, Unfinished, Longest GaugeFamily
	// LabelNames are the names of the label values that Labels returns,
	// in order. Optional: with them New also reports
	// workqueue_oldest_ready_seconds, labelled by them and priority (see
	// the package doc); without, it does not.
	LabelNames []string
	// Events are the host's counter and histogram collectors (adds,
	// retries, queue and work durations), as registered on Registerer.
	// New takes them off it with the gauges and collects them (the same
	// series, their values written at once) before the gauges, so that a
	// scrape is one cut (see the package doc). Optional: those left out are collected by the registry as
	// before, apart from the gauges.
	Events []prometheus.Collector
}

// MaxPriorities bounds the priority label values of one name, as
// controller-runtime does: once a name has shown more distinct priorities,
// its depth is reported under the single value PriorityOverflow.
const (
	MaxPriorities    = 25
	PriorityOverflow = "exceeded_cardinality_limit"
)

// Provider reports queues into a host's families: set it as
// workqueue.Config.Metrics, together with a Config.Name. One Provider serves
// any number of queues. The zero value is not usable; use New (or a
// subpackage). A Provider is safe for concurrent use.
type Provider struct {
	host Host // set in New, read-only afterwards

	// The queues whose gauges are reported: when a shut-down queue goes
	// is the Book's rule.
	book metricsbook.Book[*liveQueue]
	// ages holds the queues that report workqueue_oldest_ready_seconds,
	// by their label values joined with labelSep, and the priority labels
	// each has shown; unused without Host.LabelNames.
	ages metricsbook.Ages[string]

	mu    sync.Mutex          // protects prios
	prios map[string]prioSeen // by queue name: the priority labels its depth has shown
}

// prioSeen is the set of priority labels shown for one name; overflow is
// set once there were more than MaxPriorities.
type prioSeen struct {
	labels   map[string]struct{}
	overflow bool
}

// liveQueue is what a Provider needs to report one queue, besides its
// Stats.
type liveQueue struct {
	labels     []string          // Host.Labels(name)
	byPriority func(map[int]int) // nil without a PriorityStore
	name       string
	// added is set by the queue's first Added, for a queue without a
	// PriorityStore on a host whose depth has a priority label: its
	// depth series (priority 0) exists from then on, as
	// controller-runtime's priority queue makes a priority's series at
	// the first add at it. Unused otherwise.
	added atomic.Bool
}

var (
	_ workqueue.MetricsProvider         = (*Provider)(nil)
	_ workqueue.PriorityMetricsProvider = (*Provider)(nil)
	_ workqueue.ReadyAgeMetricsProvider = (*Provider)(nil)
)

// Must returns p, and panics if err is not nil: a subpackage's Provider
// panics where its families are not as expected, as every scrape would
// otherwise miss the queues' series silently.
func Must(p *Provider, err error) *Provider {
	if err != nil {
		panic(err)
	}
	return p
}

// New returns a Provider for h. It takes the host's three gauge collectors
// and its Events off h.Registerer and registers in their place one
// collector that reports the host's counters and histograms as they are,
// then the host's gauge series and the queues', then, with h.LabelNames,
// the queues' workqueue_oldest_ready_seconds (see the package doc). It
// fails, leaving the registry as it was, if one of them is not registered
// there. Call it once per registry: a second call would wrap the wrappers.
func New(h Host) (*Provider, error) {
	p := &Provider{host: h, prios: map[string]prioSeen{}}
	fams := []struct {
		f    GaugeFamily
		kind gaugeKind
	}{{h.Depth, depthGauge}, {h.Unfinished, unfinishedGauge}, {h.Longest, longestGauge}}
	m := &merged{events: h.Events}
	if h.LabelNames != nil {
		m.ages = &p.ages
		m.oldest = prometheus.NewDesc(metricsbook.OldestReadyName, metricsbook.OldestReadyHelp,
			append(h.LabelNames[:len(h.LabelNames):len(h.LabelNames)], metricsbook.PriorityLabel), nil)
	}
	for _, f := range fams {
		desc, err := onlyDesc(f.f.Collector)
		if err != nil {
			return nil, err
		}
		m.gauges = append(m.gauges, &mergedGauge{p: p, host: f.f, desc: desc, kind: f.kind})
	}
	var taken []prometheus.Collector
	undo := func() {
		for _, c := range taken {
			_ = h.Registerer.Register(c)
		}
	}
	for _, c := range m.hostCollectors() {
		if !h.Registerer.Unregister(c) {
			undo()
			return nil, fmt.Errorf("hostmetrics: %s is not registered where the host's workqueue metrics should be", describe(c))
		}
		taken = append(taken, c)
	}
	if err := h.Registerer.Register(m); err != nil {
		undo()
		return nil, fmt.Errorf("hostmetrics: registering the merged workqueue metrics: %w", err)
	}
	return p, nil
}

// describe names a collector's families, for errors.
func describe(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc, 8)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var names []string
	for d := range ch {
		names = append(names, d.String())
	}
	return strings.Join(names, ", ")
}

func onlyDesc(c prometheus.Collector) (*prometheus.Desc, error) {
	ch := make(chan *prometheus.Desc, 4)
	c.Describe(ch)
	close(ch)
	var descs []*prometheus.Desc
	for d := range ch {
		descs = append(descs, d)
	}
	if len(descs) != 1 {
		return nil, errors.New("hostmetrics: a host gauge collector must describe exactly one family")
	}
	return descs[0], nil
}

// NewQueueMetrics implements workqueue.MetricsProvider. The queue's series
// exist from then on, as a client-go queue's do from its constructor: depth,
// the two age gauges, and the counters and histograms at zero. Where the
// host labels depth by priority (controller-runtime), depth at priority 0
// exists from the queue's first add instead, as controller-runtime's
// priority queue makes it. The series stay, at 0 once the queue is idle,
// also after it shuts down, as the host's own do.
func (p *Provider) NewQueueMetrics(name string, stats func() workqueue.Stats) workqueue.QueueMetrics {
	return p.newQueueMetrics(name, stats, nil)
}

// NewPriorityQueueMetrics implements workqueue.PriorityMetricsProvider: a
// queue with a PriorityStore reports its depth by priority where the host
// labels depth with it (and its total depth otherwise). Its depth series
// appear from the first scrape that finds a key at a priority, as
// controller-runtime's appear at the first add at that priority.
func (p *Provider) NewPriorityQueueMetrics(name string, stats func() workqueue.Stats, byPriority func(map[int]int)) workqueue.QueueMetrics {
	return p.newQueueMetrics(name, stats, byPriority)
}

// NewReadyAgeQueueMetrics implements workqueue.ReadyAgeMetricsProvider:
// NewPriorityQueueMetrics (NewQueueMetrics when byPriority is nil), and,
// where the Provider reports it (Host.LabelNames), the queue's ready ages
// in workqueue_oldest_ready_seconds. Its series appear from the first
// scrape that finds a ready key at a priority.
func (p *Provider) NewReadyAgeQueueMetrics(name string, stats func() workqueue.Stats, byPriority func(map[int]int), readyAges func(map[int]time.Duration)) workqueue.QueueMetrics {
	m := p.newQueueMetrics(name, stats, byPriority)
	if p.host.LabelNames != nil {
		m.aged = p.ages.Add(strings.Join(p.host.Labels(name), labelSep), stats, readyAges)
	}
	return m
}

func (p *Provider) newQueueMetrics(name string, stats func() workqueue.Stats, byPriority func(map[int]int)) *queueMetrics {
	h := &p.host
	lvs := h.Labels(name)
	live := &liveQueue{labels: lvs, name: name}
	m := &queueMetrics{
		adds:         h.Adds(lvs...),
		retries:      h.Retries(lvs...),
		queueLatency: h.Latency(lvs...),
		workDuration: h.WorkDuration(lvs...),
	}
	switch {
	case !h.Priority:
		// Depth exists from the constructor, as client-go's does.
		h.Depth.Touch(lvs...)
	case byPriority == nil:
		// Depth at priority 0 exists from the first add, as
		// controller-runtime's priority queue makes it: the queue's
		// series at idle are its series.
		depth0 := withPriority(lvs, "0")
		m.firstAdd = func() { h.Depth.Touch(depth0...) }
		m.added = &live.added
	default:
		live.byPriority = byPriority
	}
	h.Unfinished.Touch(lvs...)
	h.Longest.Touch(lvs...)
	m.live = p.book.Add(live, stats)
	return m
}

// queueMetrics receives the events of one queue; the host's children are
// looked up once, so each event is one update with no label lookup.
type queueMetrics struct {
	adds, retries              Counter
	queueLatency, workDuration Observer
	live                       *metricsbook.Queue[*liveQueue]
	aged                       *metricsbook.Queue[metricsbook.AgeSource[string]] // nil without ready ages
	// firstAdd, if not nil, makes the depth series of a queue whose
	// depth the host labels by priority but which has no PriorityStore;
	// added (the liveQueue's) tells it has run.
	firstAdd func()
	added    *atomic.Bool
}

// Added implements workqueue.QueueMetrics. The first one of a queue whose
// depth series is made by its first add (see newQueueMetrics) makes it:
// once per queue, one atomic load per add after that.
func (m *queueMetrics) Added() {
	m.adds.Inc()
	if m.firstAdd != nil && !m.added.Load() && !m.added.Swap(true) {
		m.firstAdd()
	}
}

// Retried implements workqueue.QueueMetrics.
func (m *queueMetrics) Retried() { m.retries.Inc() }

// Waited implements workqueue.QueueMetrics.
func (m *queueMetrics) Waited(d time.Duration) { m.queueLatency.Observe(d.Seconds()) }

// Worked implements workqueue.QueueMetrics.
func (m *queueMetrics) Worked(d time.Duration) { m.workDuration.Observe(d.Seconds()) }

// ShutDown implements workqueue.QueueMetrics. It marks the queue: the next
// scrapes decide, from Stats, when it stops contributing.
func (m *queueMetrics) ShutDown() {
	m.live.ShutDown()
	if m.aged != nil {
		m.aged.ShutDown()
	}
}

type gaugeKind int

const (
	depthGauge gaugeKind = iota
	unfinishedGauge
	longestGauge
)

// merged stands on the registry in place of the host's gauge collectors and
// its Events, and reports the ready ages beside them.
type merged struct {
	events []prometheus.Collector // the host's, collected first
	gauges []*mergedGauge         // depth, unfinished work, longest running
	// The ready ages, reported last; oldest is nil without
	// Host.LabelNames.
	oldest *prometheus.Desc
	ages   *metricsbook.Ages[string]
}

// labelSep joins the label values of a queue into one key. No label value
// contains it: Prometheus label values are valid UTF-8, and it is not.
const labelSep = "\xff"

// hostCollectors are the host's collectors that m replaces.
func (m *merged) hostCollectors() []prometheus.Collector {
	cs := append([]prometheus.Collector(nil), m.events...)
	for _, g := range m.gauges {
		cs = append(cs, g.host.Collector)
	}
	return cs
}

// Describe implements prometheus.Collector with the host's Descs, so the
// registry checks our series against the host's families as before.
func (m *merged) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.events {
		c.Describe(ch)
	}
	for _, g := range m.gauges {
		g.Describe(ch)
	}
	if m.oldest != nil {
		ch <- m.oldest
	}
}

// Collect implements prometheus.Collector: the host's counters and
// histograms first, their values written now, then the gauges, which read
// the queues' Stats only after that, then the ready ages. A run counted in
// the histograms has ended in the Stats read after them.
func (m *merged) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.events {
		collectWritten(c, ch)
	}
	for _, g := range m.gauges {
		g.Collect(ch)
	}
	if m.oldest == nil {
		return
	}
	for _, a := range m.ages.Series() {
		lvs := append(strings.Split(a.Key, labelSep), a.Priority)
		ch <- prometheus.MustNewConstMetric(m.oldest, prometheus.GaugeValue, a.Age.Seconds(), lvs...)
	}
}

// collectWritten collects c into ch with each metric's value written at
// once. A vector's children are live: the registry writes their values
// when it gets to them, which may be after the gauges collected next have
// read the queues, and would make the cut of Collect no cut. The
// Prometheus adapter (prometheus/provider.go) has the same helper; they are
// kept apart because this module must not require the adapter's.
func collectWritten(c prometheus.Collector, ch chan<- prometheus.Metric) {
	mc := make(chan prometheus.Metric, 16)
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
	desc *prometheus.Desc
	m    *dto.Metric
}

func (w written) Desc() *prometheus.Desc { return w.desc }

func (w written) Write(out *dto.Metric) error {
	proto.Reset(out)
	proto.Merge(out, w.m)
	return nil
}

// mergedGauge reports one host gauge family, with our queues' values.
type mergedGauge struct {
	p    *Provider
	host GaugeFamily
	desc *prometheus.Desc // the host's
	kind gaugeKind
}

// Describe yields the host's Desc.
func (m *mergedGauge) Describe(ch chan<- *prometheus.Desc) { ch <- m.desc }

// Collect reports the host's series, with the
// current values of our queues combined into those of the same labels, and
// our series the host does not have yet (which it is then told to keep).
func (m *mergedGauge) Collect(ch chan<- prometheus.Metric) {
	// Key our series as the host's come: by their labels sorted by name,
	// which is how a written metric carries them.
	ours := map[string]*value{}
	for _, v := range m.p.values(m.kind) {
		var d dto.Metric
		if err := prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, 0, v.labels...).Write(&d); err == nil {
			ours[labelKey(d.GetLabel())] = v
		}
	}

	hostCh := make(chan prometheus.Metric, 16)
	go func() {
		m.host.Collector.Collect(hostCh)
		close(hostCh)
	}()
	for metric := range hostCh {
		var d dto.Metric
		if err := metric.Write(&d); err != nil {
			ch <- metric // let the registry report it
			continue
		}
		key := labelKey(d.GetLabel())
		v, ok := ours[key]
		if !ok {
			ch <- metric
			continue
		}
		delete(ours, key)
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, m.combine(d.GetGauge().GetValue(), v.of(m.kind)), v.labels...)
	}
	for _, v := range ours {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, v.of(m.kind), v.labels...)
		m.host.Touch(v.labels...) // the host keeps the series from now on, as for its own queues
	}
}

func (m *mergedGauge) combine(host, ours float64) float64 {
	if m.kind == longestGauge {
		return max(host, ours)
	}
	return host + ours
}

// value is one series of our queues: label values (in the family's order)
// and the gauges of every queue with them, combined.
type value struct {
	labels []string
	g      metricsbook.Gauges
}

// of is the value of the family kind.
func (v *value) of(kind gaugeKind) float64 {
	switch kind {
	case unfinishedGauge:
		return v.g.Unfinished.Seconds()
	case longestGauge:
		return v.g.Longest.Seconds()
	}
	return float64(v.g.Depth)
}

// values returns our queues' series of one gauge family. It reads every
// live queue's Stats (and priorities, for depth), so a scrape costs one
// brief lock of each queue per family, and forgets the queues that have
// shut down with nothing left.
func (p *Provider) values(kind gaugeKind) []*value {
	byKey := make(map[string]*value)
	var out []*value
	series := func(lvs []string) *value {
		k := strings.Join(lvs, labelSep)
		v, ok := byKey[k]
		if !ok {
			v = &value{labels: lvs}
			byKey[k] = v
			out = append(out, v)
		}
		return v
	}
	p.book.Each(func(bq *metricsbook.Queue[*liveQueue], s workqueue.Stats) {
		q := bq.Meta
		if kind != depthGauge || !p.host.Priority {
			series(q.labels).g.Add(s)
			return
		}
		if q.byPriority == nil {
			// From the first add on; a scrape may run between an Add
			// and its Added event, and then finds the key dirty.
			if q.added.Load() || s.Dirty > 0 {
				series(withPriority(q.labels, "0")).g.Add(s)
			}
			return
		}
		counts := map[int]int{}
		q.byPriority(counts)
		overflow := p.seePriorities(q.name, counts)
		for prio, n := range counts {
			l := PriorityOverflow
			if !overflow {
				l = strconv.Itoa(prio)
			}
			series(withPriority(q.labels, l)).g.Depth += n
		}
	})
	return out
}

// seePriorities records the priorities of counts as shown in the depth of
// queues named name, and reports whether that name is past MaxPriorities,
// so that its depth goes under PriorityOverflow from now on (as in
// controller-runtime; the per-priority series stay, at the host's value).
func (p *Provider) seePriorities(name string, counts map[int]int) (overflow bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.prios[name]
	if s.overflow {
		return true
	}
	for prio := range counts {
		if s.labels == nil {
			s.labels = map[string]struct{}{}
			p.prios[name] = s
		}
		s.labels[strconv.Itoa(prio)] = struct{}{}
	}
	if len(s.labels) > MaxPriorities {
		p.prios[name] = prioSeen{overflow: true}
		return true
	}
	return false
}

func withPriority(lvs []string, prio string) []string {
	return append(lvs[:len(lvs):len(lvs)], prio)
}

// labelKey names a series of a family by its label values, in the order
// of their names, as a written metric lists them.
func labelKey(pairs []*dto.LabelPair) string {
	vs := make([]string, len(pairs))
	for i, lp := range pairs {
		vs[i] = lp.GetValue()
	}
	return strings.Join(vs, labelSep)
}
