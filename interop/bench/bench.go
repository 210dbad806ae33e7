// Package bench holds the workloads that compare our queue with client-go's
// util/workqueue (and, for priorities, controller-runtime's priority
// queue). Each workload is one pair of benchmark functions doing the same
// thing through each library, so that bench_test.go can run them with
// `go test -bench .` and cmd/compare can run them interleaved with
// testing.Benchmark and print the ratios.
package bench

import (
	"testing"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/internal/benchwork"
	clientworkqueue "k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// Workload is one comparison: the same work on our queue and on theirs.
type Workload struct {
	// Name identifies the workload in tables and benchmark names.
	Name string
	// Doc says what one op is.
	Doc string
	// Theirs names the library compared against.
	Theirs string
	// Goal is the largest ratio ours/theirs (ns/op) that the issues ask
	// for; zero means no goal.
	Goal float64
	// Bimodal marks a workload whose rounds fall into a fast and a slow
	// mode (contended locks): the table then also compares the slow
	// halves.
	Bimodal bool
	// RunOurs and RunTheirs are benchmark functions.
	RunOurs, RunTheirs func(b *testing.B)
	// Floors run the workload on floors (floor.go): the least work its
	// protocol needs, done in one or more ways. The best ratio to theirs
	// among them is the best any queue could score on this machine.
	Floors []Floor
}

// Floor is one floor of a workload.
type Floor struct {
	// Name tells floors of one workload apart; empty for a sole floor.
	Name string
	// Goal is the largest ratio ours/floor (ns/op) that the issues ask
	// for; zero means no goal.
	Goal float64
	Run  func(b *testing.B)
}

// floor is a workload's sole floor.
func floor(run func(b *testing.B)) []Floor { return []Floor{{Run: run}} }

const (
	clientGo          = "client-go"
	controllerRuntime = "controller-runtime"
)

// cycler is what the queue-only workloads drive: benchwork's, and
// ShutDown, which the workloads here call when they are done.
type cycler interface {
	benchwork.Cycler
	ShutDown()
}

func newOurs() cycler   { return workqueue.New[string]() }
func newTheirs() cycler { return clientworkqueue.NewTyped[string]() }

// Workloads returns every comparison, in the order of the table.
func Workloads() []Workload {
	ws := []Workload{
		{
			Name: "cycle", Doc: "one key in flight: Add, Get, Done", Theirs: clientGo, Goal: 0.6,
			RunOurs: func(b *testing.B) { cycle(b, newOurs()) }, RunTheirs: func(b *testing.B) { cycle(b, newTheirs()) },
			Floors: floor(func(b *testing.B) { cycle(b, benchwork.NewFloor()) }),
		},
		{
			Name: "cycle-metrics", Doc: "the cycle with a no-op metrics provider", Theirs: clientGo, Goal: 0.5,
			RunOurs: func(b *testing.B) {
				cycle(b, workqueue.NewWithConfig(workqueue.Config[string]{Name: "bench", Metrics: NoopMetrics{}}))
			},
			RunTheirs: func(b *testing.B) {
				cycle(b, clientworkqueue.NewTypedWithConfig(clientworkqueue.TypedQueueConfig[string]{
					Name: "bench", MetricsProvider: NoopClientMetrics{},
				}))
			},
			Floors: []Floor{{Name: "clock", Goal: 1.1, Run: func(b *testing.B) { cycle(b, benchwork.NewClockFloor()) }}},
		},
		{
			Name: "burst-1000", Doc: "1000 distinct adds, then 1000 Get/Done; per key", Theirs: clientGo, Goal: 0.7,
			RunOurs: func(b *testing.B) { burst(b, newOurs()) }, RunTheirs: func(b *testing.B) { burst(b, newTheirs()) },
			Floors: floor(func(b *testing.B) { burst(b, benchwork.NewFloor()) }),
		},
		{
			Name: "requeue-1000", Doc: "1000 keys queued; Get, Add of the key while processing, Done (it goes to the back)", Theirs: clientGo,
			RunOurs: func(b *testing.B) { requeue(b, newOurs()) }, RunTheirs: func(b *testing.B) { requeue(b, newTheirs()) },
		},
		{
			Name: "hot-key-x10", Doc: "ten Adds of one key, then Get, Done", Theirs: clientGo, Goal: 0.7,
			RunOurs: func(b *testing.B) { hotKey(b, newOurs()) }, RunTheirs: func(b *testing.B) { hotKey(b, newTheirs()) },
			Floors: floor(func(b *testing.B) { hotKey(b, benchwork.NewCoalescingFloor()) }),
		},
		{
			Name: "parallel-x1", Doc: "Add/Get/Done of a key of its own from GOMAXPROCS goroutines", Theirs: clientGo, Goal: 0.6,
			RunOurs: func(b *testing.B) { parallel(b, newOurs(), 1) }, RunTheirs: func(b *testing.B) { parallel(b, newTheirs(), 1) },
		},
		{
			Name: "parallel-x8", Doc: "Add/Get/Done of a key of its own from 8xGOMAXPROCS goroutines", Theirs: clientGo, Goal: 0.8,
			RunOurs: func(b *testing.B) { parallel(b, newOurs(), 8) }, RunTheirs: func(b *testing.B) { parallel(b, newTheirs(), 8) },
		},
		{
			Name: "addafter-10k", Doc: "AddAfter(1ms) of 10,000 keys, then drain; per key", Theirs: clientGo, Goal: 0.30,
			RunOurs: func(b *testing.B) { addAfter(b, workqueue.New[string]()) },
			RunTheirs: func(b *testing.B) {
				addAfter(b, clientworkqueue.NewTypedDelayingQueue[string]())
			},
			// Two floors: key state in slots reached through an index
			// (the leanest), and in a map of states as ours keeps it.
			Floors: []Floor{
				{Name: "slots", Run: func(b *testing.B) { addAfter(b, newFloorDelaying()) }},
				{Name: "map", Goal: 1.1, Run: func(b *testing.B) { addAfter(b, newFloorDelayingMap()) }},
			},
		},
		{
			Name: "ratelimited", Doc: "AddRateLimited (zero delay), Get, Forget, Done", Theirs: clientGo,
			RunOurs: func(b *testing.B) { rateLimited(b, workqueue.NewRateLimitingQueue[string](ZeroLimiter{})) },
			RunTheirs: func(b *testing.B) {
				rateLimited(b, clientworkqueue.NewTypedRateLimitingQueue[string](ZeroLimiter{}))
			},
		},
		{
			Name: "priority-1000", Doc: "1000 keys at 4 priorities, then drain by priority; per key", Theirs: controllerRuntime, Goal: 0.3,
			RunOurs: priorityOurs, RunTheirs: priorityTheirs,
		},
	}
	ws = append(ws, contentionWorkloads("int", intKeys)...)
	return append(ws, contentionWorkloads("string", stringKeys)...)
}

// cycle is a controller's steady state with one key in flight
// (benchwork.Cycle).
func cycle(b *testing.B, q cycler) {
	defer q.ShutDown()
	benchwork.Cycle(b, q)
}

// perKey runs batch(keys) over batches of at most len(keys) keys until b.N
// keys have been through, so that ns/op and allocs/op are per key.
func perKey(b *testing.B, keys []string, batch func(keys []string)) {
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(len(keys), b.N-done)
		batch(keys[:n])
		done += n
	}
}

// burst is a resync: many distinct keys added, then drained
// (benchwork.Burst); one op is one key.
func burst(b *testing.B, q cycler) {
	defer q.ShutDown()
	perKey(b, benchwork.Keys(1000), func(keys []string) { benchwork.Burst(q, keys) })
}

// requeue keeps 1000 keys queued and cycles them through processing+dirty:
// each key is added again while it runs, so Done puts it at the back. It
// is the shape of a busy controller whose objects change while they
// reconcile, and for our plain queue the path that moves a key's entry to
// the tail of its ordered table and compacts the dead entries left behind.
func requeue(b *testing.B, q cycler) {
	defer q.ShutDown()
	for _, k := range benchwork.Keys(1000) {
		q.Add(k)
	}
	b.ReportAllocs()
	for b.Loop() {
		k, _ := q.Get()
		q.Add(k)
		q.Done(k)
	}
}

// hotKey is a key that gets ten events before a worker takes it
// (benchwork.HotKey).
func hotKey(b *testing.B, q cycler) {
	defer q.ShutDown()
	benchwork.HotKey(b, q)
}

// parallel is contention: mult*GOMAXPROCS goroutines each adding, getting
// and finishing a key of their own (benchwork.Parallel).
func parallel(b *testing.B, q cycler, mult int) {
	defer q.ShutDown()
	benchwork.Parallel(b, q, mult)
}

// delayer is what the AddAfter workload drives.
type delayer interface {
	cycler
	AddAfter(string, time.Duration)
}

// addAfter gives 10,000 keys a run after 1ms, then drains them as they
// become ready. The 1ms wait is part of each batch: at most 100 ns per key
// for either queue, less when adding the keys takes longer than 1ms.
func addAfter(b *testing.B, q delayer) {
	defer q.ShutDown()
	perKey(b, benchwork.Keys(10000), func(keys []string) {
		for _, k := range keys {
			q.AddAfter(k, time.Millisecond)
		}
		for range keys {
			k, _ := q.Get()
			q.Done(k)
		}
	})
}

// ZeroLimiter never delays and counts nothing. It satisfies both
// libraries' limiter interfaces, so the ratelimited workload measures only
// the queues.
type ZeroLimiter struct{}

// When returns 0.
func (ZeroLimiter) When(string) time.Duration { return 0 }

// Forget does nothing.
func (ZeroLimiter) Forget(string) {}

// NumRequeues returns 0.
func (ZeroLimiter) NumRequeues(string) int { return 0 }

// rateLimiter is what the ratelimited workload drives.
type rateLimiter interface {
	cycler
	AddRateLimited(string)
	Forget(string)
}

// rateLimited is a worker that fails and retries through the limiter.
func rateLimited(b *testing.B, q rateLimiter) {
	defer q.ShutDown()
	key := "default/web"
	b.ReportAllocs()
	for b.Loop() {
		q.AddRateLimited(key)
		k, _ := q.Get()
		q.Forget(k)
		q.Done(k)
	}
}

// priorityOurs drains 1000 keys added at priorities 0..3 through our queue
// on a priority store.
func priorityOurs(b *testing.B) {
	q := workqueue.NewWithConfig(workqueue.Config[string]{Store: workqueue.NewPriorityStore[string]()})
	defer q.ShutDown()
	perKey(b, benchwork.Keys(1000), func(keys []string) {
		for i, k := range keys {
			q.AddWithPriority(k, i%4)
		}
		for range keys {
			k, _ := q.Get()
			q.Done(k)
		}
	})
}

// priorityTheirs is priorityOurs on controller-runtime's priority queue,
// without metrics (an empty name), as ours runs.
func priorityTheirs(b *testing.B) {
	q := priorityqueue.New[string]("")
	defer q.ShutDown()
	prios := [4]int{0, 1, 2, 3}
	perKey(b, benchwork.Keys(1000), func(keys []string) {
		for i, k := range keys {
			q.AddWithOpts(priorityqueue.AddOpts{Priority: &prios[i%4]}, k)
		}
		for range keys {
			k, _, _ := q.GetWithPriority()
			q.Done(k)
		}
	})
}

// NoopMetrics is a workqueue.MetricsProvider whose metrics do nothing: the
// cost of having metrics on, without the cost of any metrics library.
type NoopMetrics struct{}

// NewQueueMetrics returns metrics that do nothing.
func (NoopMetrics) NewQueueMetrics(string, func() workqueue.Stats) workqueue.QueueMetrics {
	return noopQueueMetrics{}
}

type noopQueueMetrics struct{}

func (noopQueueMetrics) Added()               {}
func (noopQueueMetrics) Retried()             {}
func (noopQueueMetrics) Waited(time.Duration) {}
func (noopQueueMetrics) Worked(time.Duration) {}
func (noopQueueMetrics) ShutDown()            {}

// NoopClientMetrics is a client-go MetricsProvider whose metrics do
// nothing. client-go recognizes only its own unexported no-op provider as
// "no metrics", so with this one it does all its metrics bookkeeping, as it
// would with Prometheus, minus Prometheus.
type NoopClientMetrics struct{}

type noopClientMetric struct{}

func (noopClientMetric) Inc()            {}
func (noopClientMetric) Dec()            {}
func (noopClientMetric) Set(float64)     {}
func (noopClientMetric) Observe(float64) {}

// NewDepthMetric returns a metric that does nothing.
func (NoopClientMetrics) NewDepthMetric(string) clientworkqueue.GaugeMetric {
	return noopClientMetric{}
}

// NewAddsMetric returns a metric that does nothing.
func (NoopClientMetrics) NewAddsMetric(string) clientworkqueue.CounterMetric {
	return noopClientMetric{}
}

// NewLatencyMetric returns a metric that does nothing.
func (NoopClientMetrics) NewLatencyMetric(string) clientworkqueue.HistogramMetric {
	return noopClientMetric{}
}

// NewWorkDurationMetric returns a metric that does nothing.
func (NoopClientMetrics) NewWorkDurationMetric(string) clientworkqueue.HistogramMetric {
	return noopClientMetric{}
}

// NewUnfinishedWorkSecondsMetric returns a metric that does nothing.
func (NoopClientMetrics) NewUnfinishedWorkSecondsMetric(string) clientworkqueue.SettableGaugeMetric {
	return noopClientMetric{}
}

// NewLongestRunningProcessorSecondsMetric returns a metric that does nothing.
func (NoopClientMetrics) NewLongestRunningProcessorSecondsMetric(string) clientworkqueue.SettableGaugeMetric {
	return noopClientMetric{}
}

// NewRetriesMetric returns a metric that does nothing.
func (NoopClientMetrics) NewRetriesMetric(string) clientworkqueue.CounterMetric {
	return noopClientMetric{}
}
