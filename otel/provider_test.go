package otel_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"weak"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/go-coalesce/workqueue"
	wqotel "github.com/go-coalesce/workqueue/otel"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Short names for the metric names, as the tests use them.
const (
	adds         = wqotel.AddsName
	delayed      = wqotel.DelayedItemsName
	depth        = wqotel.DepthName
	longest      = wqotel.LongestRunningProcessorName
	queueLatency = wqotel.QueueDurationName
	retries      = wqotel.RetriesName
	unfinished   = wqotel.UnfinishedWorkName
	workDuration = wqotel.WorkDurationName
)

var gaugeNames = []string{delayed, depth, longest, unfinished}

func newQueue(p *wqotel.Provider, name string) *workqueue.Queue[string] {
	return workqueue.NewWithConfig(workqueue.Config[string]{Name: name, Metrics: p})
}

// snapshot is one collection of a ManualReader, indexed by metric name.
type snapshot map[string]metricdata.Metrics

// collect collects reader once. Every metric must come from this package's
// meter.
func collect(t *testing.T, reader sdkmetric.Reader) snapshot {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm), "the reader must collect without error")
	s := snapshot{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, wqotel.ScopeName, sm.Scope.Name, "the only meter is this package's")
		for _, m := range sm.Metrics {
			_, dup := s[m.Name]
			require.False(t, dup, "%s is reported once", m.Name)
			s[m.Name] = m
		}
	}
	return s
}

// isQueue reports whether attrs is exactly {name=queue}.
func isQueue(attrs attribute.Set, queue string) bool {
	v, ok := attrs.Value(wqotel.NameKey)
	return ok && attrs.Len() == 1 && v.AsString() == queue
}

// points returns how many points metric has, over all queues.
func (s snapshot) points(metric string) int {
	switch d := s[metric].Data.(type) {
	case metricdata.Sum[int64]:
		return len(d.DataPoints)
	case metricdata.Sum[float64]:
		return len(d.DataPoints)
	case metricdata.Gauge[float64]:
		return len(d.DataPoints)
	case metricdata.Histogram[float64]:
		return len(d.DataPoints)
	}
	return 0
}

// find reports the value of a counter or gauge point of queue, and whether
// there is one.
func (s snapshot) find(t *testing.T, metric, queue string) (float64, bool) {
	t.Helper()
	m, ok := s[metric]
	if !ok {
		return 0, false
	}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if isQueue(p.Attributes, queue) {
				return float64(p.Value), true
			}
		}
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			if isQueue(p.Attributes, queue) {
				return p.Value, true
			}
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			if isQueue(p.Attributes, queue) {
				return p.Value, true
			}
		}
	default:
		t.Fatalf("%s is %T, neither a sum nor a gauge", metric, m.Data)
	}
	return 0, false
}

// values reads several counters or gauges of one queue, for one require.
func (s snapshot) values(t *testing.T, queue string, metrics ...string) map[string]float64 {
	t.Helper()
	v := make(map[string]float64, len(metrics))
	for _, m := range metrics {
		x, ok := s.find(t, m, queue)
		require.True(t, ok, "%s{name=%q} must be reported", m, queue)
		v[m] = x
	}
	return v
}

// histogram returns the point of a histogram of queue, or nil.
func (s snapshot) histogram(t *testing.T, metric, queue string) *metricdata.HistogramDataPoint[float64] {
	t.Helper()
	m, ok := s[metric]
	if !ok {
		return nil
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s must be a float64 histogram, is %T", metric, m.Data)
	for i := range h.DataPoints {
		if isQueue(h.DataPoints[i].Attributes, queue) {
			return &h.DataPoints[i]
		}
	}
	return nil
}

// count returns the count and sum of a histogram of queue, which must exist.
func (s snapshot) count(t *testing.T, metric, queue string) (uint64, float64) {
	t.Helper()
	p := s.histogram(t, metric, queue)
	require.NotNil(t, p, "%s{name=%q} must be reported", metric, queue)
	return p.Count, p.Sum
}

// TestInstruments checks the name, kind, unit, description and attribute of
// every instrument, and the histograms' boundaries.
func TestInstruments(t *testing.T) {
	p, reader := newSDKProvider(t)
	q := newQueue(p, "q")
	defer q.ShutDown()
	q.Add("a")
	k, _ := q.Get()
	q.Done(k)

	s := collect(t, reader)
	require.Len(t, s, 8, "eight metrics")
	want := []struct {
		name, unit string
		kind       string // sum, updown, gauge, histogram
		int        bool
	}{
		{depth, "{item}", "updown", true},
		{adds, "{item}", "sum", true},
		{queueLatency, "s", "histogram", false},
		{workDuration, "s", "histogram", false},
		{unfinished, "s", "updown", false},
		{longest, "s", "gauge", false},
		{retries, "{item}", "sum", true},
		{delayed, "{item}", "updown", true},
	}
	for _, w := range want {
		m, ok := s[w.name]
		require.True(t, ok, "%s must be reported", w.name)
		require.Equal(t, w.unit, m.Unit, "%s unit", w.name)
		require.NotEmpty(t, m.Description, "%s has a description", w.name)
		switch w.kind {
		case "sum", "updown":
			var mono bool
			var temp metricdata.Temporality
			if w.int {
				d, ok := m.Data.(metricdata.Sum[int64])
				require.True(t, ok, "%s must be an int64 sum, is %T", w.name, m.Data)
				mono, temp = d.IsMonotonic, d.Temporality
			} else {
				d, ok := m.Data.(metricdata.Sum[float64])
				require.True(t, ok, "%s must be a float64 sum, is %T", w.name, m.Data)
				mono, temp = d.IsMonotonic, d.Temporality
			}
			require.Equal(t, w.kind == "sum", mono, "%s: counters are monotonic, up-down counters not", w.name)
			require.Equal(t, metricdata.CumulativeTemporality, temp, "%s temporality", w.name)
		case "gauge":
			_, ok := m.Data.(metricdata.Gauge[float64])
			require.True(t, ok, "%s must be a float64 gauge, is %T", w.name, m.Data)
		case "histogram":
			h := s.histogram(t, w.name, "q")
			require.NotNil(t, h, "%s{name=q}", w.name)
			require.Equal(t, wqotel.DurationBoundaries(), h.Bounds, "%s uses the advised boundaries", w.name)
		}
		require.Equal(t, 1, s.points(w.name), "%s has one point, for q", w.name)
	}
	require.Equal(t, map[string]float64{adds: 1, retries: 0, depth: 0, delayed: 0, unfinished: 0, longest: 0},
		s.values(t, "q", adds, retries, depth, delayed, unfinished, longest))
}

// TestNewQueueSeries: a new queue's counters and gauges are reported at zero
// from the first collection; its histograms only once they have a value.
func TestNewQueueSeries(t *testing.T) {
	p, reader := newSDKProvider(t)
	q := newQueue(p, "q")
	defer q.ShutDown()
	s := collect(t, reader)
	require.Equal(t, map[string]float64{adds: 0, retries: 0, depth: 0, delayed: 0, unfinished: 0, longest: 0},
		s.values(t, "q", adds, retries, depth, delayed, unfinished, longest))
	require.Nil(t, s.histogram(t, queueLatency, "q"))
	require.Nil(t, s.histogram(t, workDuration, "q"))
}

func TestAddGetDone(t *testing.T) {
	p, reader := newSDKProvider(t)
	q := newQueue(p, "q")
	defer q.ShutDown()

	q.Add("a")
	q.Add("b")
	q.Add("a") // already ready: not an add
	require.Equal(t, map[string]float64{adds: 2, depth: 2, delayed: 0, retries: 0},
		collect(t, reader).values(t, "q", adds, depth, delayed, retries), "after Add a, b, a")

	a, _ := q.Get()
	require.Equal(t, "a", a)
	s := collect(t, reader)
	require.Equal(t, map[string]float64{adds: 2, depth: 1}, s.values(t, "q", adds, depth), "after Get a")
	n, _ := s.count(t, queueLatency, "q")
	require.Equal(t, uint64(1), n, "Get records the queue latency once")

	q.Add("a") // processing: due once more, an add, counted in depth
	q.Add("a")
	require.Equal(t, map[string]float64{adds: 3, depth: 2},
		collect(t, reader).values(t, "q", adds, depth), "after Add of processing a")

	q.Done("a") // a is ready again: no add
	s = collect(t, reader)
	require.Equal(t, map[string]float64{adds: 3, depth: 2}, s.values(t, "q", adds, depth), "after Done a")
	n, _ = s.count(t, workDuration, "q")
	require.Equal(t, uint64(1), n, "Done records the work duration once")

	q.Done("a") // not processing: nothing
	n, _ = collect(t, reader).count(t, workDuration, "q")
	require.Equal(t, uint64(1), n, "Done of a key that is not processing records nothing")

	for range 2 {
		k, _ := q.Get()
		q.Done(k)
	}
	s = collect(t, reader)
	require.Equal(t, map[string]float64{adds: 3, depth: 0, unfinished: 0, longest: 0},
		s.values(t, "q", adds, depth, unfinished, longest), "after all is done")
	n, _ = s.count(t, queueLatency, "q")
	require.Equal(t, uint64(3), n, "three Gets")
	n, _ = s.count(t, workDuration, "q")
	require.Equal(t, uint64(3), n, "three Dones")
}

func TestAddAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, reader := newSDKProvider(t)
		q := newQueue(p, "q")
		defer q.ShutDown()

		q.AddAfter("x", time.Minute)
		q.AddAfter("x", 2*time.Minute) // merged: the earlier deadline stays
		q.AddAfter("y", time.Hour)
		require.Equal(t, map[string]float64{retries: 3, delayed: 2, depth: 0, adds: 0},
			collect(t, reader).values(t, "q", retries, delayed, depth, adds), "after three AddAfter")

		time.Sleep(time.Minute)
		synctest.Wait()
		require.Equal(t, map[string]float64{retries: 3, delayed: 1, depth: 1, adds: 1},
			collect(t, reader).values(t, "q", retries, delayed, depth, adds), "after x's deadline")

		q.AddAfter("z", 0) // d <= 0 is Add, and still a retry as in client-go
		require.Equal(t, map[string]float64{retries: 4, delayed: 1, depth: 2, adds: 2},
			collect(t, reader).values(t, "q", retries, delayed, depth, adds), "after AddAfter(z, 0)")

		q.Add("y") // waiting y becomes ready now
		require.Equal(t, map[string]float64{retries: 4, delayed: 0, depth: 3, adds: 3},
			collect(t, reader).values(t, "q", retries, delayed, depth, adds), "after Add of waiting y")

		k, _ := q.Get()
		require.Equal(t, "x", k)
		count, sum := collect(t, reader).count(t, queueLatency, "q")
		require.Equal(t, uint64(1), count)
		require.Zero(t, sum, "x waited from its deadline, not from AddAfter")
		q.Done(k)
	})
}

func TestRateLimitingQueueRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, reader := newSDKProvider(t)
		q := workqueue.NewRateLimitingQueueWithConfig(
			workqueue.NewItemExponentialFailureRateLimiter[string](time.Second, time.Minute),
			workqueue.Config[string]{Name: "rl", Metrics: p})
		defer q.ShutDown()

		q.AddRateLimited("k")
		q.AddRateLimited("k")
		require.Equal(t, map[string]float64{retries: 2, delayed: 1, adds: 0},
			collect(t, reader).values(t, "rl", retries, delayed, adds), "every AddRateLimited is a retry")
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, map[string]float64{retries: 2, delayed: 0, depth: 1, adds: 1},
			collect(t, reader).values(t, "rl", retries, delayed, depth, adds), "after the first backoff")
	})
}

// TestDurations checks with a fake clock that latencies and the age gauges
// are exact when collected, with no goroutine refreshing them, and that the
// observations land in the advised buckets.
func TestDurations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, reader := newSDKProvider(t)
		q := newQueue(p, "q")
		defer q.ShutDown()

		q.Add("a")
		q.Add("b")
		time.Sleep(2 * time.Second)
		a, _ := q.Get() // waited 2s
		time.Sleep(time.Second)
		b, _ := q.Get() // waited 3s
		time.Sleep(4 * time.Second)

		s := collect(t, reader)
		require.Equal(t, map[string]float64{unfinished: 5 + 4, longest: 5},
			s.values(t, "q", unfinished, longest), "a has run 5s, b 4s")
		count, sum := s.count(t, queueLatency, "q")
		require.Equal(t, uint64(2), count)
		require.Equal(t, 2.0+3.0, sum, "queue latency sum")

		time.Sleep(10 * time.Second) // a stuck worker: the gauges keep growing
		require.Equal(t, map[string]float64{unfinished: 15 + 14, longest: 15},
			collect(t, reader).values(t, "q", unfinished, longest), "exact 10s later")

		q.Done(a)
		require.Equal(t, map[string]float64{unfinished: 14, longest: 14},
			collect(t, reader).values(t, "q", unfinished, longest), "only b runs")
		time.Sleep(time.Minute)
		q.Done(b)
		s = collect(t, reader)
		require.Equal(t, map[string]float64{unfinished: 0, longest: 0},
			s.values(t, "q", unfinished, longest), "nothing runs")

		h := s.histogram(t, workDuration, "q")
		require.NotNil(t, h)
		require.Equal(t, uint64(2), h.Count)
		require.Equal(t, 15.0+74.0, h.Sum, "work duration sum")
		minV, _ := h.Min.Value()
		maxV, _ := h.Max.Value()
		require.Equal(t, 15.0, minV, "work duration min")
		require.Equal(t, 74.0, maxV, "work duration max")

		// Bucket i counts values in (bound[i-1], bound[i]]; the last one
		// is above 60s.
		bucketOf := func(v float64) int {
			for i, b := range wqotel.DurationBoundaries() {
				if v <= b {
					return i
				}
			}
			return len(wqotel.DurationBoundaries())
		}
		wantBuckets := func(vs ...float64) []uint64 {
			c := make([]uint64, len(wqotel.DurationBoundaries())+1)
			for _, v := range vs {
				c[bucketOf(v)]++
			}
			return c
		}
		require.Equal(t, wantBuckets(15, 74), h.BucketCounts, "work duration buckets: (10,30] and above 60")
		require.Equal(t, wantBuckets(2, 3), s.histogram(t, queueLatency, "q").BucketCounts,
			"queue latency buckets: (1,2.5] and (2.5,5]")
	})
}

// TestNamesShareProvider: queues with different names are reported side by
// side and independently.
func TestNamesShareProvider(t *testing.T) {
	p, reader := newSDKProvider(t)
	q1 := newQueue(p, "one")
	defer q1.ShutDown()
	q2 := newQueue(p, "two")
	defer q2.ShutDown()

	q1.Add("a")
	q1.Add("b")
	q2.AddAfter("c", time.Hour)
	k, _ := q1.Get()
	q1.Done(k)
	q2.Add("d")
	k, _ = q2.Get()
	q2.Done(k)
	s := collect(t, reader)
	require.Equal(t, map[string]float64{adds: 2, depth: 1, retries: 0, delayed: 0},
		s.values(t, "one", adds, depth, retries, delayed))
	require.Equal(t, map[string]float64{adds: 1, depth: 0, retries: 1, delayed: 1},
		s.values(t, "two", adds, depth, retries, delayed))
	for _, metric := range append(gaugeNames, adds, retries, queueLatency, workDuration) {
		require.Equal(t, 2, s.points(metric), "%s has one point per queue", metric)
	}
}

// TestSameName: two queues with one name are reported as one: counters and
// histograms shared, depth, waiting and unfinished work summed, longest
// running the larger.
func TestSameName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, reader := newSDKProvider(t)
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

		s := collect(t, reader)
		require.Equal(t, map[string]float64{
			adds: 3, retries: 2, depth: 1, delayed: 2, unfinished: 5 + 3, longest: 5,
		}, s.values(t, "dup", adds, retries, depth, delayed, unfinished, longest))
		for _, metric := range append(gaugeNames, adds, retries, queueLatency) {
			require.Equal(t, 1, s.points(metric), "%s has one point for both queues", metric)
		}
		count, _ := s.count(t, queueLatency, "dup")
		require.Equal(t, uint64(2), count, "both queues' Gets")

		q1.Done(a)
		q2.Done(c)
		count, sum := collect(t, reader).count(t, workDuration, "dup")
		require.Equal(t, uint64(2), count, "both queues' Dones")
		require.Equal(t, 5.0+3.0, sum)
	})
}

// TestShutDown: a shut-down queue counts in its name's gauges while it has
// work; the first collection that finds it idle releases it, and the name's
// gauges stay at 0, as client-go's series do; counters and histograms stay.
func TestShutDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, reader := newSDKProvider(t)
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
			collect(t, reader).values(t, "sd", depth, delayed, unfinished, longest, adds),
			"shut down with b ready and a processing: still reported")
		require.Equal(t, 2, wqotel.LiveQueues(p))

		b, _ := q.Get()
		q.Done(a)
		time.Sleep(time.Second)
		require.Equal(t, map[string]float64{depth: 0, unfinished: 1, longest: 1},
			collect(t, reader).values(t, "sd", depth, unfinished, longest), "b still processing")

		q.Done(b)
		var s snapshot
		for range 2 { // the collection that releases it, and the next
			s = collect(t, reader)
			for _, metric := range gaugeNames {
				v, ok := s.find(t, metric, "sd")
				require.True(t, ok, "%s of the idle shut-down queue's name stays", metric)
				require.Zero(t, v, "%s of the idle shut-down queue's name reads 0", metric)
				_, ok = s.find(t, metric, "other")
				require.True(t, ok, "%s of another queue stays", metric)
			}
		}
		require.Equal(t, 1, wqotel.LiveQueues(p), "the idle shut-down queue is released")
		require.Equal(t, map[string]float64{adds: 2, retries: 1}, s.values(t, "sd", adds, retries), "counters stay")
		count, _ := s.count(t, workDuration, "sd")
		require.Equal(t, uint64(2), count, "histograms stay")

		// A new queue of the same name continues the counters and brings
		// the gauges back.
		q2 := newQueue(p, "sd")
		defer q2.ShutDown()
		q2.Add("c")
		require.Equal(t, map[string]float64{adds: 3, depth: 1},
			collect(t, reader).values(t, "sd", adds, depth), "a later queue named sd")
	})
}

// TestShutDownWithDrain: the first collection after a drain has finished
// releases the queue; its name's gauges stay, at 0.
func TestShutDownWithDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, reader := newSDKProvider(t)
		q := newQueue(p, "drain")
		q.Add("a")

		drained := make(chan struct{})
		go func() {
			q.ShutDownWithDrain()
			close(drained)
		}()
		a, _ := q.Get()
		require.Equal(t, "a", a)
		synctest.Wait() // the drain waits for a
		_, ok := collect(t, reader).find(t, depth, "drain")
		require.True(t, ok, "a draining queue is reported")
		q.Done(a)
		<-drained
		require.Equal(t, map[string]float64{depth: 0, delayed: 0, unfinished: 0, longest: 0},
			collect(t, reader).values(t, "drain", gaugeNames...), "a drained queue's name reads 0")
		require.Equal(t, 0, wqotel.LiveQueues(p), "and the queue is released")
	})
}

// TestShutDownQueueReleased: once dropped from the collection, the Provider
// no longer keeps a shut-down queue reachable.
func TestShutDownQueueReleased(t *testing.T) {
	p, reader := newSDKProvider(t)
	wp := func() weak.Pointer[workqueue.Queue[string]] {
		q := newQueue(p, "gone")
		q.Add("a")
		k, _ := q.Get()
		q.Done(k)
		q.ShutDown()
		return weak.Make(q)
	}()
	runtime.GC()
	require.NotNil(t, wp.Value(), "before a collection the Provider still holds the queue")
	s := collect(t, reader)
	require.Equal(t, map[string]float64{depth: 0}, s.values(t, "gone", depth), "its name's depth stays, at 0")
	runtime.GC()
	require.Nil(t, wp.Value(), "after the collection the queue must be collectable")
	require.Equal(t, map[string]float64{adds: 1}, s.values(t, "gone", adds), "its counter stays")
}

// TestUnregister: after Unregister nothing is observed and the queues are
// released; histograms keep recording.
func TestUnregister(t *testing.T) {
	p, reader := newSDKProvider(t)
	q := newQueue(p, "u")
	defer q.ShutDown()
	wp := func() weak.Pointer[workqueue.Queue[string]] {
		q := newQueue(p, "u2")
		q.Add("a")
		return weak.Make(q)
	}()
	q.Add("a")
	require.Equal(t, 2, wqotel.LiveQueues(p))

	require.NoError(t, p.Unregister())
	require.Equal(t, 0, wqotel.LiveQueues(p))
	late := newQueue(p, "late")
	defer late.ShutDown()
	require.Equal(t, 0, wqotel.LiveQueues(p), "queues made after Unregister are not kept")
	k, _ := q.Get()
	q.Done(k)

	s := collect(t, reader)
	for _, metric := range append(gaugeNames, adds, retries) {
		require.Zero(t, s.points(metric), "%s is no longer observed", metric)
	}
	count, _ := s.count(t, workDuration, "u")
	require.Equal(t, uint64(1), count, "histograms keep recording")
	runtime.GC()
	require.Nil(t, wp.Value(), "an unregistered Provider keeps no queue reachable")
}

// TestDroppedHistograms: Views that drop the histograms leave the rest as
// it was.
func TestDroppedHistograms(t *testing.T) {
	p, reader := newSDKProvider(t, dropHistograms...)
	q := newQueue(p, "q")
	defer q.ShutDown()
	q.Add("a")
	k, _ := q.Get()
	q.Done(k)
	s := collect(t, reader)
	require.Zero(t, s.points(queueLatency), "dropped")
	require.Zero(t, s.points(workDuration), "dropped")
	require.Equal(t, map[string]float64{adds: 1, depth: 0}, s.values(t, "q", adds, depth))
}

// TestDeltaTemporality: the counters, observed as cumulative totals, are
// turned into deltas by the SDK for a reader that prefers deltas (as
// OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta does: deltas for
// counters and histograms, levels for up-down counters).
func TestDeltaTemporality(t *testing.T) {
	reader := sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(
		func(k sdkmetric.InstrumentKind) metricdata.Temporality {
			switch k {
			case sdkmetric.InstrumentKindUpDownCounter, sdkmetric.InstrumentKindObservableUpDownCounter:
				return metricdata.CumulativeTemporality
			}
			return metricdata.DeltaTemporality
		}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	p, err := wqotel.NewProvider(mp)
	require.NoError(t, err)
	q := newQueue(p, "d")
	defer q.ShutDown()

	q.Add("a")
	q.Add("b")
	require.Equal(t, map[string]float64{adds: 2, depth: 2}, collect(t, reader).values(t, "d", adds, depth))
	q.Add("c")
	s := collect(t, reader)
	require.Equal(t, map[string]float64{adds: 1, depth: 3}, s.values(t, "d", adds, depth),
		"adds is the delta since the last collection; depth stays a level")
	d, ok := s[adds].Data.(metricdata.Sum[int64])
	require.True(t, ok)
	require.Equal(t, metricdata.DeltaTemporality, d.Temporality)
}

// TestNewProviderErrors: a nil MeterProvider is an error, and so is an
// instrument the MeterProvider refuses.
func TestNewProviderErrors(t *testing.T) {
	_, err := wqotel.NewProvider(nil)
	require.ErrorContains(t, err, "workqueue/otel: ")

	broken := errors.New("no instruments today")
	_, err = wqotel.NewProvider(failingMeterProvider{err: broken})
	require.ErrorIs(t, err, broken)
	require.ErrorContains(t, err, "workqueue/otel: ")

	// A no-op MeterProvider works, and measures nothing.
	p, err := wqotel.NewProvider(noop.NewMeterProvider())
	require.NoError(t, err)
	q := newQueue(p, "noop")
	q.Add("a")
	k, _ := q.Get()
	q.Done(k)
	q.ShutDown()
	require.NoError(t, p.Unregister())
}

// failingMeterProvider gives meters that refuse every instrument.
type failingMeterProvider struct {
	noop.MeterProvider
	err error
}

func (f failingMeterProvider) Meter(string, ...metric.MeterOption) metric.Meter {
	return failingMeter{err: f.err}
}

type failingMeter struct {
	noop.Meter
	err error
}

func (f failingMeter) Int64ObservableCounter(string, ...metric.Int64ObservableCounterOption) (metric.Int64ObservableCounter, error) {
	return noop.Int64ObservableCounter{}, f.err
}

// TestConcurrent runs workers, producers and collections at once, for the
// race detector, then checks the totals.
func TestConcurrent(t *testing.T) {
	const (
		keys    = 2000
		workers = 4
	)
	p, reader := newSDKProvider(t)
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
	// Two collectors, so that two collections can find the drained queue
	// and forget it at once.
	stop := make(chan struct{})
	collectErrs := make(chan error, 2)
	var collectors sync.WaitGroup
	for range 2 {
		collectors.Go(func() {
			var rm metricdata.ResourceMetrics
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := reader.Collect(context.Background(), &rm); err != nil {
					collectErrs <- err
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
	collectors.Wait()
	close(collectErrs)
	for err := range collectErrs {
		require.NoError(t, err, "concurrent collections must succeed")
	}

	s := collect(t, reader)
	require.Equal(t, map[string]float64{adds: keys}, s.values(t, "c", adds), "distinct keys: one add each")
	n, _ := s.count(t, queueLatency, "c")
	require.Equal(t, uint64(keys), n)
	n, _ = s.count(t, workDuration, "c")
	require.Equal(t, uint64(keys), n)
	require.Equal(t, map[string]float64{depth: 0, delayed: 0, unfinished: 0, longest: 0},
		s.values(t, "c", gaugeNames...), "a drained queue's name reads 0")
	require.Zero(t, wqotel.LiveQueues(p), "and the queue is released")
}
