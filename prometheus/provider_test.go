package prometheus_test

import (
	"errors"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"weak"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/go-coalesce/workqueue"
	wqprom "github.com/go-coalesce/workqueue/prometheus"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The metric names, in the order a registry sorts them.
const (
	adds         = "workqueue_adds_total"
	delayed      = "workqueue_delayed_items"
	depth        = "workqueue_depth"
	longest      = "workqueue_longest_running_processor_seconds"
	queueLatency = "workqueue_queue_duration_seconds"
	retries      = "workqueue_retries_total"
	unfinished   = "workqueue_unfinished_work_seconds"
	workDuration = "workqueue_work_duration_seconds"
)

var gaugeNames = []string{delayed, depth, longest, unfinished}

func newQueue(p *wqprom.Provider, name string) *workqueue.Queue[string] {
	return workqueue.NewWithConfig(workqueue.Config[string]{Name: name, Metrics: p})
}

// find gathers reg and returns the sample of metric whose name label is
// queue, or nil if there is none.
func find(t *testing.T, reg prometheus.Gatherer, metric, queue string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err, "the registry must gather without error")
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == queue {
					return m
				}
			}
		}
	}
	return nil
}

// value returns the value of a gauge or counter sample.
func value(t *testing.T, reg prometheus.Gatherer, metric, queue string) float64 {
	t.Helper()
	m := find(t, reg, metric, queue)
	require.NotNil(t, m, "%s{name=%q} must be reported", metric, queue)
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	}
	t.Fatalf("%s is neither a gauge nor a counter", metric)
	return 0
}

// histogram returns the sample count and sum of a histogram sample.
func histogram(t *testing.T, reg prometheus.Gatherer, metric, queue string) (uint64, float64) {
	t.Helper()
	m := find(t, reg, metric, queue)
	require.NotNil(t, m, "%s{name=%q} must be reported", metric, queue)
	require.NotNil(t, m.Histogram, "%s must be a histogram", metric)
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// values reads several gauges or counters of one queue, for one require.
func values(t *testing.T, reg prometheus.Gatherer, queue string, metrics ...string) map[string]float64 {
	t.Helper()
	v := make(map[string]float64, len(metrics))
	for _, m := range metrics {
		v[m] = value(t, reg, m, queue)
	}
	return v
}

// TestExposition checks names, types, help and label of every metric, as a
// scrape shows them for a queue that has seen no event.
func TestExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	q := newQueue(wqprom.NewProvider(reg), "q")
	defer q.ShutDown()

	const want = `
# HELP workqueue_adds_total Total number of adds handled by workqueue
# TYPE workqueue_adds_total counter
workqueue_adds_total{name="q"} 0
# HELP workqueue_delayed_items Current number of items in workqueue waiting for a delay (AddAfter, AddRateLimited) to pass before they are added.
# TYPE workqueue_delayed_items gauge
workqueue_delayed_items{name="q"} 0
# HELP workqueue_depth Current depth of workqueue
# TYPE workqueue_depth gauge
workqueue_depth{name="q"} 0
# HELP workqueue_longest_running_processor_seconds How many seconds has the longest running processor for workqueue been running.
# TYPE workqueue_longest_running_processor_seconds gauge
workqueue_longest_running_processor_seconds{name="q"} 0
# HELP workqueue_retries_total Total number of retries handled by workqueue
# TYPE workqueue_retries_total counter
workqueue_retries_total{name="q"} 0
# HELP workqueue_unfinished_work_seconds How many seconds of work has done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.
# TYPE workqueue_unfinished_work_seconds gauge
workqueue_unfinished_work_seconds{name="q"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		adds, delayed, depth, longest, retries, unfinished),
		"gauges and counters must be exposed as Kubernetes names them")

	mfs, err := reg.Gather()
	require.NoError(t, err)
	help := map[string]string{
		queueLatency: "How long in seconds an item stays in workqueue before being requested.",
		workDuration: "How long in seconds processing an item from workqueue takes.",
	}
	seen := 0
	for _, mf := range mfs {
		h, ok := help[mf.GetName()]
		if !ok {
			continue
		}
		seen++
		require.Equal(t, dto.MetricType_HISTOGRAM, mf.GetType(), "%s must be a histogram", mf.GetName())
		require.Equal(t, h, mf.GetHelp(), "%s help", mf.GetName())
		require.Len(t, mf.GetMetric(), 1)
		m := mf.GetMetric()[0]
		require.Len(t, m.GetLabel(), 1, "%s has only the name label", mf.GetName())
		require.Equal(t, "name", m.GetLabel()[0].GetName())
		require.Equal(t, "q", m.GetLabel()[0].GetValue())
		bs := m.GetHistogram().GetBucket()
		require.Len(t, bs, 10, "%s has the 10 buckets 1e-8 … 10", mf.GetName())
		for i, b := range bs {
			want := math.Pow(10, float64(i-8))
			require.InEpsilon(t, want, b.GetUpperBound(), 1e-12, "%s bucket %d", mf.GetName(), i)
		}
		require.Equal(t, prometheus.ExponentialBuckets(10e-9, 10, 10), upperBounds(bs),
			"%s buckets must be exactly client-go's", mf.GetName())
	}
	require.Equal(t, 2, seen, "both histograms must be exposed")
}

func upperBounds(bs []*dto.Bucket) []float64 {
	var ub []float64
	for _, b := range bs {
		ub = append(ub, b.GetUpperBound())
	}
	return ub
}

func TestLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	q := newQueue(wqprom.NewProvider(reg), "q")
	defer q.ShutDown()
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems, "the metrics must pass promlint")
}

func TestAddGetDone(t *testing.T) {
	reg := prometheus.NewRegistry()
	q := newQueue(wqprom.NewProvider(reg), "q")
	defer q.ShutDown()

	q.Add("a")
	q.Add("b")
	q.Add("a") // already ready: not an add
	require.Equal(t, map[string]float64{adds: 2, depth: 2, delayed: 0, retries: 0},
		values(t, reg, "q", adds, depth, delayed, retries), "after Add a, b, a")

	a, _ := q.Get()
	require.Equal(t, "a", a)
	require.Equal(t, map[string]float64{adds: 2, depth: 1},
		values(t, reg, "q", adds, depth), "after Get a")
	n, _ := histogram(t, reg, queueLatency, "q")
	require.Equal(t, uint64(1), n, "Get observes the queue latency once")

	q.Add("a") // processing: due once more, an add, counted in depth
	q.Add("a")
	require.Equal(t, map[string]float64{adds: 3, depth: 2},
		values(t, reg, "q", adds, depth), "after Add of processing a")

	q.Done("a") // a is ready again: no add
	require.Equal(t, map[string]float64{adds: 3, depth: 2},
		values(t, reg, "q", adds, depth), "after Done a")
	n, _ = histogram(t, reg, workDuration, "q")
	require.Equal(t, uint64(1), n, "Done observes the work duration once")

	q.Done("a") // not processing: nothing
	n, _ = histogram(t, reg, workDuration, "q")
	require.Equal(t, uint64(1), n, "Done of a key that is not processing observes nothing")

	for range 2 {
		k, _ := q.Get()
		q.Done(k)
	}
	require.Equal(t, map[string]float64{adds: 3, depth: 0, unfinished: 0, longest: 0},
		values(t, reg, "q", adds, depth, unfinished, longest), "after all is done")
	n, _ = histogram(t, reg, queueLatency, "q")
	require.Equal(t, uint64(3), n, "three Gets")
	n, _ = histogram(t, reg, workDuration, "q")
	require.Equal(t, uint64(3), n, "three Dones")
}

func TestAddAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		q := newQueue(wqprom.NewProvider(reg), "q")
		defer q.ShutDown()

		q.AddAfter("x", time.Minute)
		q.AddAfter("x", 2*time.Minute) // merged: the earlier deadline stays
		q.AddAfter("y", time.Hour)
		require.Equal(t, map[string]float64{retries: 3, delayed: 2, depth: 0, adds: 0},
			values(t, reg, "q", retries, delayed, depth, adds), "after three AddAfter")

		time.Sleep(time.Minute)
		synctest.Wait()
		require.Equal(t, map[string]float64{retries: 3, delayed: 1, depth: 1, adds: 1},
			values(t, reg, "q", retries, delayed, depth, adds), "after x's deadline")

		q.AddAfter("z", 0) // d <= 0 is Add, and still a retry as in client-go
		require.Equal(t, map[string]float64{retries: 4, delayed: 1, depth: 2, adds: 2},
			values(t, reg, "q", retries, delayed, depth, adds), "after AddAfter(z, 0)")

		q.Add("y") // waiting y becomes ready now
		require.Equal(t, map[string]float64{retries: 4, delayed: 0, depth: 3, adds: 3},
			values(t, reg, "q", retries, delayed, depth, adds), "after Add of waiting y")

		k, _ := q.Get()
		require.Equal(t, "x", k)
		count, sum := histogram(t, reg, queueLatency, "q")
		require.Equal(t, uint64(1), count)
		require.Zero(t, sum, "x waited from its deadline, not from AddAfter")
		q.Done(k)
	})
}

func TestRateLimitingQueueRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		q := workqueue.NewRateLimitingQueueWithConfig(
			workqueue.NewItemExponentialFailureRateLimiter[string](time.Second, time.Minute),
			workqueue.Config[string]{Name: "rl", Metrics: wqprom.NewProvider(reg)})
		defer q.ShutDown()

		q.AddRateLimited("k")
		q.AddRateLimited("k")
		require.Equal(t, map[string]float64{retries: 2, delayed: 1, adds: 0},
			values(t, reg, "rl", retries, delayed, adds), "every AddRateLimited is a retry")
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, map[string]float64{retries: 2, delayed: 0, depth: 1, adds: 1},
			values(t, reg, "rl", retries, delayed, depth, adds), "after the first backoff")
	})
}

// TestDurations checks with a fake clock that latencies and the age gauges
// are exact when scraped, with no goroutine refreshing them.
func TestDurations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		q := newQueue(wqprom.NewProvider(reg), "q")
		defer q.ShutDown()

		q.Add("a")
		q.Add("b")
		time.Sleep(2 * time.Second)
		a, _ := q.Get() // waited 2s
		time.Sleep(time.Second)
		b, _ := q.Get() // waited 3s
		time.Sleep(4 * time.Second)

		require.Equal(t, map[string]float64{unfinished: 5 + 4, longest: 5},
			values(t, reg, "q", unfinished, longest), "a has run 5s, b 4s")
		count, sum := histogram(t, reg, queueLatency, "q")
		require.Equal(t, uint64(2), count)
		require.Equal(t, 2.0+3.0, sum, "queue latency sum")

		time.Sleep(10 * time.Second) // a stuck worker: the gauges keep growing
		require.Equal(t, map[string]float64{unfinished: 15 + 14, longest: 15},
			values(t, reg, "q", unfinished, longest), "exact 10s later")

		q.Done(a)
		require.Equal(t, map[string]float64{unfinished: 14, longest: 14},
			values(t, reg, "q", unfinished, longest), "only b runs")
		time.Sleep(time.Second)
		q.Done(b)
		require.Equal(t, map[string]float64{unfinished: 0, longest: 0},
			values(t, reg, "q", unfinished, longest), "nothing runs")

		count, sum = histogram(t, reg, workDuration, "q")
		require.Equal(t, uint64(2), count)
		require.Equal(t, 15.0+15.0, sum, "work duration sum")

		// The 2s, 3s and 15s observations are in the le=10 and +Inf
		// buckets as client-go's would be.
		m := find(t, reg, queueLatency, "q")
		for _, b := range m.GetHistogram().GetBucket() {
			want := uint64(0)
			if b.GetUpperBound() >= 10 {
				want = 2
			}
			require.Equal(t, want, b.GetCumulativeCount(), "queue latency bucket le=%g", b.GetUpperBound())
		}
		m = find(t, reg, workDuration, "q")
		for _, b := range m.GetHistogram().GetBucket() {
			require.Zero(t, b.GetCumulativeCount(), "15s is above every bucket, le=%g", b.GetUpperBound())
		}
	})
}

// TestNamesShareRegistry: queues with different names are reported side by
// side and independently.
func TestNamesShareRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := wqprom.NewProvider(reg)
	q1 := newQueue(p, "one")
	defer q1.ShutDown()
	q2 := newQueue(p, "two")
	defer q2.ShutDown()

	q1.Add("a")
	q1.Add("b")
	q2.AddAfter("c", time.Hour)
	require.Equal(t, map[string]float64{adds: 2, depth: 2, retries: 0, delayed: 0},
		values(t, reg, "one", adds, depth, retries, delayed))
	require.Equal(t, map[string]float64{adds: 0, depth: 0, retries: 1, delayed: 1},
		values(t, reg, "two", adds, depth, retries, delayed))
	for _, metric := range append(gaugeNames, adds, retries, queueLatency, workDuration) {
		n, err := testutil.GatherAndCount(reg, metric)
		require.NoError(t, err)
		require.Equal(t, 2, n, "%s has one series per queue", metric)
	}
}

// TestSameName: two queues with one name are reported as one: counters and
// histograms shared, depth, waiting and unfinished work summed, longest
// running the larger.
func TestSameName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		p := wqprom.NewProvider(reg)
		q1 := newQueue(p, "dup")
		defer q1.ShutDown()
		q2 := newQueue(p, "dup")
		defer q2.ShutDown()

		q1.Add("a")
		q1.Add("b")
		q1.AddAfter("w", time.Hour)
		a, _ := q1.Get()
		time.Sleep(2 * time.Second)
		q2.Add("a") // another queue: its own key
		q2.AddAfter("w", time.Hour)
		c, _ := q2.Get()
		time.Sleep(3 * time.Second)

		require.Equal(t, map[string]float64{
			adds: 3, retries: 2, depth: 1, delayed: 2, unfinished: 5 + 3, longest: 5,
		}, values(t, reg, "dup", adds, retries, depth, delayed, unfinished, longest))
		for _, metric := range append(gaugeNames, adds, queueLatency) {
			n, err := testutil.GatherAndCount(reg, metric)
			require.NoError(t, err, "same-name queues must not make duplicate series")
			require.Equal(t, 1, n, "%s has one series for both queues", metric)
		}
		count, _ := histogram(t, reg, queueLatency, "dup")
		require.Equal(t, uint64(2), count, "both queues' Gets")

		q1.Done(a)
		q2.Done(c)
		count, sum := histogram(t, reg, workDuration, "dup")
		require.Equal(t, uint64(2), count, "both queues' Dones")
		require.Equal(t, 5.0+3.0, sum)
	})
}

// TestShutDown: a shut-down queue counts in its name's gauges while it has
// work; the first scrape that finds it idle releases it, and the name's
// gauges stay at 0, as client-go's do; counters and histograms stay.
func TestShutDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		p := wqprom.NewProvider(reg)
		other := newQueue(p, "other")
		defer other.ShutDown()
		q := newQueue(p, "sd")

		q.Add("a")
		q.Add("b")
		q.AddAfter("w", time.Hour)
		a, _ := q.Get()
		time.Sleep(time.Second)
		q.ShutDown()

		require.Equal(t, map[string]float64{depth: 1, delayed: 0, unfinished: 1, longest: 1, adds: 2},
			values(t, reg, "sd", depth, delayed, unfinished, longest, adds),
			"shut down with b ready and a processing: still reported")
		require.Equal(t, 2, wqprom.LiveQueues(p))

		b, _ := q.Get()
		q.Done(a)
		time.Sleep(time.Second)
		require.Equal(t, map[string]float64{depth: 0, unfinished: 1, longest: 1},
			values(t, reg, "sd", depth, unfinished, longest), "b still processing")

		q.Done(b)
		for range 2 { // the scrape that releases it, and the next
			for _, metric := range gaugeNames {
				require.Zero(t, value(t, reg, metric, "sd"), "%s of the idle shut-down queue's name stays, at 0", metric)
				require.NotNil(t, find(t, reg, metric, "other"), "%s of another queue stays", metric)
			}
		}
		require.Equal(t, 1, wqprom.LiveQueues(p), "the idle shut-down queue is released")
		require.Equal(t, map[string]float64{adds: 2, retries: 1},
			values(t, reg, "sd", adds, retries), "counters stay")
		count, _ := histogram(t, reg, workDuration, "sd")
		require.Equal(t, uint64(2), count, "histograms stay")

		// A new queue of the same name continues the counters and brings
		// the gauges back.
		q2 := newQueue(p, "sd")
		defer q2.ShutDown()
		q2.Add("c")
		require.Equal(t, map[string]float64{adds: 3, depth: 1},
			values(t, reg, "sd", adds, depth), "a later queue named sd")
	})
}

// TestShutDownWithDrain: the first scrape after a drain has finished
// releases the queue; its name's gauges stay, at 0.
func TestShutDownWithDrain(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := wqprom.NewProvider(reg)
	q := newQueue(p, "drain")
	q.Add("a")

	drained := make(chan struct{})
	go func() {
		q.ShutDownWithDrain()
		close(drained)
	}()
	a, _ := q.Get()
	require.Equal(t, "a", a)
	require.NotNil(t, find(t, reg, depth, "drain"), "a draining queue is reported")
	q.Done(a)
	<-drained
	require.Equal(t, map[string]float64{depth: 0, delayed: 0, unfinished: 0, longest: 0},
		values(t, reg, "drain", gaugeNames...), "a drained queue's name reads 0")
	require.Equal(t, 0, wqprom.LiveQueues(p), "and the queue is released")
}

// TestShutDownQueueReleased: once dropped from the scrape, the Provider no
// longer keeps a shut-down queue reachable.
func TestShutDownQueueReleased(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := wqprom.NewProvider(reg)
	wp := func() weak.Pointer[workqueue.Queue[string]] {
		q := newQueue(p, "gone")
		q.Add("a")
		k, _ := q.Get()
		q.Done(k)
		q.ShutDown()
		return weak.Make(q)
	}()
	runtime.GC()
	require.NotNil(t, wp.Value(), "before a scrape the Provider still holds the queue")
	require.Zero(t, value(t, reg, depth, "gone"), "its name's depth stays, at 0")
	runtime.GC()
	require.Nil(t, wp.Value(), "after the scrape the queue must be collectable")
	require.Equal(t, 1.0, value(t, reg, adds, "gone"), "its counter stays")
}

// TestRegistration: one Provider per registry; a nil registerer registers
// nothing, which gives an error-returning way to register.
func TestRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	first := wqprom.NewProvider(reg)
	require.Panics(t, func() { wqprom.NewProvider(reg) },
		"a second Provider on one registry must panic like MustRegister")

	second := wqprom.NewProvider(nil)
	err := reg.Register(second)
	var are prometheus.AlreadyRegisteredError
	require.True(t, errors.As(err, &are), "Register of a second Provider: %v", err)
	require.Same(t, first, are.ExistingCollector, "the error names the registered Provider")

	unregistered := prometheus.NewRegistry()
	q := newQueue(second, "late")
	defer q.ShutDown()
	q.Add("a")
	require.NoError(t, unregistered.Register(second), "a Provider made with nil registers later")
	require.Equal(t, 1.0, value(t, unregistered, adds, "late"))
	require.Equal(t, 1.0, value(t, unregistered, depth, "late"))
}

// TestConcurrent runs workers, producers and scrapes at once, for the race
// detector, then checks the totals.
func TestConcurrent(t *testing.T) {
	const (
		keys    = 2000
		workers = 4
	)
	reg := prometheus.NewRegistry()
	p := wqprom.NewProvider(reg)
	q := newQueue(p, "c")

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				q.Done(k)
			}
		})
	}
	// Two scrapers, so that two scrapes can find the drained queue and
	// forget it at once.
	stop := make(chan struct{})
	scrapeErrs := make(chan error, 2)
	var scrapers sync.WaitGroup
	for range 2 {
		scrapers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := reg.Gather(); err != nil {
					scrapeErrs <- err
					return
				}
			}
		})
	}
	for i := range keys {
		q.Add(strconv.Itoa(i))
	}
	q.ShutDownWithDrain()
	wg.Wait()
	close(stop)
	scrapers.Wait()
	close(scrapeErrs)
	for err := range scrapeErrs {
		require.NoError(t, err, "concurrent scrapes must succeed")
	}

	require.Equal(t, float64(keys), value(t, reg, adds, "c"), "distinct keys: one add each")
	n, _ := histogram(t, reg, queueLatency, "c")
	require.Equal(t, uint64(keys), n)
	n, _ = histogram(t, reg, workDuration, "c")
	require.Equal(t, uint64(keys), n)
	require.Equal(t, map[string]float64{depth: 0, delayed: 0, unfinished: 0, longest: 0},
		values(t, reg, "c", gaugeNames...), "a drained queue's name reads 0")
	require.Zero(t, wqprom.LiveQueues(p), "and the queue is released")
}
