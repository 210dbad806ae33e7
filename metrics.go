package workqueue

import (
	"sync/atomic"
	"time"
)

// MetricsProvider makes the metrics of a queue. A queue asks for them once,
// in NewWithConfig, when Config.Name is not empty: from Config.Metrics, or,
// when that is nil, from the process-wide default that
// SetDefaultMetricsProvider set, if any. Config.Metrics always wins, so two
// queues (or two tests) can report to different places.
//
// The provider is told the queue's name and given a function that reads the
// queue's Stats. Gauges (depth, waiting keys, unfinished work, longest
// running processor) should be computed by calling it when they are
// scraped: the values are then exact at that moment, even while a worker is
// stuck, and no goroutine has to refresh them. Events that gauges cannot
// express (adds, retries, latencies) are reported through QueueMetrics.
type MetricsProvider interface {
	// NewQueueMetrics is called once per queue. Names need not be unique:
	// the provider decides how queues of one name combine. A nil result
	// means no metrics for this queue.
	//
	// stats is safe to call from any goroutine at any time, also after the
	// queue has shut down. It takes the queue's lock briefly; QueueMetrics
	// methods run without that lock, so they may call it, but it is too
	// slow for the hot path: call it when scraped.
	NewQueueMetrics(name string, stats func() Stats) QueueMetrics
}

// PriorityMetricsProvider is a MetricsProvider that also reports the depth
// of a queue by priority, as controller-runtime's priority queue does. When
// a queue's Store is a PriorityStore and its Config.Metrics implements this
// interface, NewWithConfig calls NewPriorityQueueMetrics instead of
// NewQueueMetrics; a queue with any other store calls NewQueueMetrics, and
// all its keys have priority 0.
type PriorityMetricsProvider interface {
	MetricsProvider
	// NewPriorityQueueMetrics is NewQueueMetrics with one more function,
	// byPriority, which adds to m, for each priority, the number of dirty
	// keys (those Stats counts in Dirty) whose pending run has that
	// priority; priorities without a dirty key are left out. Like stats it
	// is safe to call from any goroutine at any time and takes the
	// queue's lock briefly: with NewPriorityStore it costs
	// O(priorities + processing keys), with another PriorityStore one pass
	// over the queue's keys. Call it when scraped, never on the hot path.
	NewPriorityQueueMetrics(name string, stats func() Stats, byPriority func(m map[int]int)) QueueMetrics
}

// ReadyAgeMetricsProvider is a MetricsProvider that also reports, for each
// priority level of a queue, how long its oldest key by arrival (the oldest
// at the front of its FIFOs: see Queue.ReadyAges) has been ready: a level
// that Get does not serve (behind higher priorities, a tenant whose turn
// does not come, or a tenant at its cap) shows an age that keeps growing,
// so a starving level is visible on a dashboard before anyone asks. When a
// queue's provider implements it, NewWithConfig calls
// NewReadyAgeQueueMetrics instead of NewQueueMetrics and
// NewPriorityQueueMetrics; a provider that does not is called as before.
type ReadyAgeMetricsProvider interface {
	MetricsProvider
	// NewReadyAgeQueueMetrics is NewQueueMetrics with two more functions.
	// byPriority is NewPriorityQueueMetrics's for a queue whose Store is a
	// PriorityStore, and nil for any other queue (all its keys have
	// priority 0). readyAges is the queue's ReadyAges: it stores in m,
	// for each priority level with a ready key, that age, keeping the
	// larger where m already holds one for the priority (so the queues of
	// one name combine in one map). Like stats both are safe to call from
	// any goroutine at any time, take the queue's lock briefly and
	// compute their answer then, readyAges in O(priority levels) (O(tenants'
	// FIFOs) with NewFairPriorityStore); Add,
	// Get and Done do nothing for them. Call them when scraped.
	NewReadyAgeQueueMetrics(name string, stats func() Stats, byPriority func(m map[int]int), readyAges func(m map[int]time.Duration)) QueueMetrics
}

// QueueMetrics receives the events of one queue. Its methods are called
// from the goroutine that called the queue method, after the queue has
// released its lock, or, for the adds of keys whose AddAfter deadline
// passed, from the delay timer's goroutine while it still holds the lock,
// so that a key is counted before any worker can take it. They may run
// concurrently with each other, so they must be safe for concurrent use,
// and they must not call back into the queue. They are on the hot path, so
// they should be cheap, and they must not block.
type QueueMetrics interface {
	// Added reports that a key became dirty: it was not already due for a
	// run (duplicates of a queued key are not adds). client-go's
	// workqueue_adds_total.
	Added()
	// Retried reports an AddAfter call (and so every AddRateLimited),
	// counted as client-go counts workqueue_retries_total.
	Retried()
	// Waited reports how long a key was dirty before Get handed it out:
	// client-go's workqueue_queue_duration_seconds.
	Waited(d time.Duration)
	// Worked reports how long a key was processed, from Get to Done:
	// client-go's workqueue_work_duration_seconds.
	Worked(d time.Duration)
	// ShutDown reports that the queue has stopped accepting keys (by
	// ShutDown or a drain, before the drain waits); it is called once.
	// Keys may still be ready or processing, and Stats stays readable.
	ShutDown()
}

// The no-op default is the nil QueueMetrics: a queue without metrics checks
// for nil once per call instead of calling empty methods through an
// interface, and skips the clock reads that only metrics need.

// defaultMetrics is the provider that SetDefaultMetricsProvider set, boxed
// because an atomic.Pointer holds a pointer, not an interface; nil until
// then. NewWithConfig reads it once per queue with a name and no
// Config.Metrics; Add, Get and Done never read it.
var defaultMetrics atomic.Pointer[metricsBox]

type metricsBox struct{ p MetricsProvider }

// SetDefaultMetricsProvider sets the process-wide default MetricsProvider:
// a queue created afterwards (by NewWithConfig or a constructor built on
// it) whose Config.Name is not empty and whose Config.Metrics is nil
// reports through p. It is what client-go's SetProvider is for components
// that name their queues and expect the name to be enough: the mechanical
// translation of client-go's TypedRateLimitingQueueConfig{Name: "x"} is
// Config{Name: "x"}, and with a default set it reports under that name as
// client-go's does.
//
// It is opt-in: a process that never calls it keeps no provider, and a
// named queue without Config.Metrics then has no metrics. An explicit
// Config.Metrics always wins over the default. A later call replaces the
// default for the queues created after it (unlike client-go's SetProvider,
// where the first call wins and later ones are silently ignored); a queue
// keeps the provider it was built with. A nil p turns the default off.
// Safe for concurrent use.
//
// A host package can set it for its side effect when imported, as
// k8s.io/component-base/metrics/prometheus/workqueue does for client-go:
// see interop/hostmetrics/kubemetrics/register.
func SetDefaultMetricsProvider(p MetricsProvider) {
	if p == nil {
		defaultMetrics.Store(nil)
		return
	}
	defaultMetrics.Store(&metricsBox{p})
}

// newMetrics asks mp, the queue's provider, for the queue's metrics,
// through the richest of the provider interfaces that mp implements and
// the queue can serve: ready ages and priorities, priorities, or the
// plain one. q's Store must be set.
func (q *Queue[T]) newMetrics(name string, mp MetricsProvider) QueueMetrics {
	prioritized := q.prio != nil || q.tab.leveled
	if ap, ok := mp.(ReadyAgeMetricsProvider); ok {
		var byPriority func(map[int]int)
		if prioritized {
			byPriority = q.dirtyByPriority
		}
		return ap.NewReadyAgeQueueMetrics(name, q.Stats, byPriority, func(m map[int]time.Duration) { q.ReadyAges(m) })
	}
	if pm, ok := mp.(PriorityMetricsProvider); ok && prioritized {
		return pm.NewPriorityQueueMetrics(name, q.Stats, q.dirtyByPriority)
	}
	return mp.NewQueueMetrics(name, q.Stats)
}

// metricsFor returns the provider a queue named name with Config.Metrics m
// reports through: m, else the default if name is not empty; nil for none.
func metricsFor(name string, m MetricsProvider) MetricsProvider {
	if name == "" {
		return nil
	}
	if m != nil {
		return m
	}
	if b := defaultMetrics.Load(); b != nil {
		return b.p
	}
	return nil
}

// MeasureOnly is a MetricsProvider that exports nothing: a queue given it
// (as Config.Metrics, with a Config.Name, or as the default through
// SetDefaultMetricsProvider) keeps the times its metrics would, so that
// what reads them works without a metrics library: Queue.ReadyAges (the
// age of each priority level, also of one held back by a tenant's cap),
// Stats' UnfinishedWork and LongestRunning, Inspect's Started and the
// debug page's ages. It costs what metrics cost a queue (clock reads on
// Add, Get and Done) and no more. The zero value is ready to use.
type MeasureOnly struct{}

// NewQueueMetrics returns a QueueMetrics that records nothing.
func (MeasureOnly) NewQueueMetrics(string, func() Stats) QueueMetrics { return measureOnly{} }

type measureOnly struct{}

func (measureOnly) Added()               {}
func (measureOnly) Retried()             {}
func (measureOnly) Waited(time.Duration) {}
func (measureOnly) Worked(time.Duration) {}
func (measureOnly) ShutDown()            {}
