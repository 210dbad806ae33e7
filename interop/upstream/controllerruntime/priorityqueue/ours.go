//go:build !crupstream

package priorityqueue

import (
	"sync"
	"sync/atomic"
	"time"

	ours "github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/crpriority"
	"github.com/go-coalesce/workqueue/interop/upstream/controllerruntime/internal/metrics"
	"k8s.io/client-go/util/workqueue"
)

// backend names the queue under test in skip lists and logs.
const backend = "crpriority"

// New is controller-runtime's constructor over crpriority.New: the same
// default limiter, and metrics only when the queue has a name, as
// controller-runtime has them. A name without Opts.MetricProvider gets
// none here (controller-runtime would use its global provider, which only
// the hostmetrics/crmetrics tests cover).
func New[T comparable](name string, o ...Opt[T]) PriorityQueue[T] {
	opts := &Opts[T]{}
	for _, f := range o {
		f(opts)
	}
	q := newWrapper(opts)
	cfg := ours.Config[T]{}
	if name != "" && opts.MetricProvider != nil {
		b := &metricsBridge{mp: opts.MetricProvider, last: map[int]int{}}
		cfg.Name, cfg.Metrics = name, b
		q.after, q.afterGet = b.sync, b.syncTaken
	}
	q.PriorityQueue = crpriority.New[T](fieldLimiter[T]{q}, cfg)
	return q
}

// metricsBridge reports our queue's metrics to a client-go MetricsProvider
// that may also make a depth gauge by priority, as controller-runtime's
// queue does. Our queue's metrics are counted where they happen (adds,
// retries, latencies) or read when asked (depth by priority, the age
// gauges), while controller-runtime's tests read a gauge that the queue
// moves with Inc and Dec. So sync reads the depth by priority from the
// queue and moves the gauge by the difference from the last reading: after
// each call through the wrapper, and, for keys made ready by the timer,
// from a goroutine started by Added (which the timer calls under the
// queue's lock, where reading the queue would deadlock).
type metricsBridge struct {
	mp workqueue.MetricsProvider

	adds, retries                  workqueue.CounterMetric
	latency, workDuration          workqueue.HistogramMetric
	unfinishedWork, longestRunning workqueue.SettableGaugeMetric
	depth                          workqueue.GaugeMetric           // when mp has no priorities
	depthByPriority                metrics.DepthMetricWithPriority // when it has
	stats                          func() ours.Stats
	byPriority                     func(map[int]int)

	pending atomic.Bool // a reading started by Added has not begun yet

	mu   sync.Mutex  // serializes sync
	last map[int]int // the depth by priority the gauge shows
}

func (b *metricsBridge) NewQueueMetrics(name string, stats func() ours.Stats) ours.QueueMetrics {
	return b.NewPriorityQueueMetrics(name, stats, nil)
}

func (b *metricsBridge) NewPriorityQueueMetrics(name string, stats func() ours.Stats, byPriority func(map[int]int)) ours.QueueMetrics {
	b.stats, b.byPriority = stats, byPriority
	b.adds, b.retries = b.mp.NewAddsMetric(name), b.mp.NewRetriesMetric(name)
	b.latency, b.workDuration = b.mp.NewLatencyMetric(name), b.mp.NewWorkDurationMetric(name)
	b.unfinishedWork = b.mp.NewUnfinishedWorkSecondsMetric(name)
	b.longestRunning = b.mp.NewLongestRunningProcessorSecondsMetric(name)
	if p, ok := b.mp.(metrics.MetricsProviderWithPriority); ok {
		b.depthByPriority = p.NewDepthMetricWithPriority(name)
	} else {
		b.depth = b.mp.NewDepthMetric(name)
	}
	return b
}

// Added counts an add and starts a reading, unless one is already due to
// start: a burst of adds makes one or two readings, not a goroutine each.
func (b *metricsBridge) Added() {
	b.adds.Inc()
	if b.pending.CompareAndSwap(false, true) {
		go func() {
			b.pending.Store(false) // adds from now on need a reading after this one
			b.sync()
		}()
	}
}

// syncTaken moves the gauge after a Get took a key of priority p: one
// fewer at p. It does not read the queue, since a reading costs
// O(processing keys) too, and the upstream tests that Get thousands of keys
// without Done would make that quadratic. A key that became ready (by the
// timer) and was taken between two readings was never shown: a gauge moved
// by Inc and Dec shows it came and went, and so does this one. The next
// reading corrects any difference.
func (b *metricsBridge) syncTaken(p int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last[p] > 0 {
		b.last[p]--
		if b.last[p] == 0 {
			delete(b.last, p)
		}
	} else {
		b.move(p, 1)
	}
	b.move(p, -1)
}

func (b *metricsBridge) Retried()               { b.retries.Inc() }
func (b *metricsBridge) Waited(d time.Duration) { b.latency.Observe(d.Seconds()) }
func (b *metricsBridge) Worked(d time.Duration) { b.workDuration.Observe(d.Seconds()) }
func (b *metricsBridge) ShutDown()              {}

// maxFollowed bounds the priorities the bridge follows. A reading costs
// O(priorities), and the upstream fuzz test (TestFuzzPriorityQueue) keeps
// thousands of random priorities queued and makes tens of thousands of
// calls: following each would take it from 0.1 s to 40 s. Past this many
// priorities, before and after, the gauge keeps its last reading (never
// negative: it follows counts), and catches up once the queue has fewer.
// The tests that assert depths use a handful of priorities.
const maxFollowed = 64

// sync moves the depth gauge to the queue's depth by priority, and sets
// the age gauges. q.mu must not be held.
func (b *metricsBridge) sync() {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats()
	b.unfinishedWork.Set(s.UnfinishedWork.Seconds())
	b.longestRunning.Set(s.LongestRunning.Seconds())
	if s.Dirty > maxFollowed && len(b.last) > maxFollowed {
		return // see maxFollowed; the dirty keys bound the priorities
	}
	now := map[int]int{}
	if b.byPriority != nil {
		b.byPriority(now)
	} else {
		now[0] = s.Dirty
	}
	for p, n := range now {
		b.move(p, n-b.last[p])
	}
	for p, n := range b.last {
		if _, ok := now[p]; !ok {
			b.move(p, -n)
		}
	}
	b.last = now
}

func (b *metricsBridge) move(p, d int) {
	for ; d > 0; d-- {
		if b.depthByPriority != nil {
			b.depthByPriority.Inc(p)
		} else {
			b.depth.Inc()
		}
	}
	for ; d < 0; d++ {
		if b.depthByPriority != nil {
			b.depthByPriority.Dec(p)
		} else {
			b.depth.Dec()
		}
	}
}
