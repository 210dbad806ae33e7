package hostmetrics

import (
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeHost registers a controller-runtime-like set of families on a fresh
// registry, as a host would, and returns its Host.
func fakeHost(t *testing.T) (Host, *prometheus.Registry, *prometheus.GaugeVec) {
	reg := prometheus.NewRegistry()
	l := []string{"name", "controller"}
	depth := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_depth", Help: "d"}, append(l, "priority"))
	unfinished := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_unfinished_work_seconds", Help: "u"}, l)
	longest := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_longest_running_processor_seconds", Help: "l"}, l)
	adds := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total", Help: "a"}, l)
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_queue_duration_seconds", Help: "q"}, l)
	reg.MustRegister(depth, unfinished, longest, adds, hist)
	touch := func(v *prometheus.GaugeVec) func(...string) { return func(lvs ...string) { v.WithLabelValues(lvs...) } }
	return Host{
		Registerer:   reg,
		Labels:       func(n string) []string { return []string{n, n} },
		Priority:     true,
		Adds:         func(lvs ...string) Counter { return adds.WithLabelValues(lvs...) },
		Retries:      func(lvs ...string) Counter { return adds.WithLabelValues(lvs...) },
		Latency:      func(lvs ...string) Observer { return hist.WithLabelValues(lvs...) },
		WorkDuration: func(lvs ...string) Observer { return hist.WithLabelValues(lvs...) },
		Depth:        GaugeFamily{Collector: depth, Touch: touch(depth)},
		Unfinished:   GaugeFamily{Collector: unfinished, Touch: touch(unfinished)},
		Longest:      GaugeFamily{Collector: longest, Touch: touch(longest)},
	}, reg, longest
}

func TestNewFailsAndLeavesTheRegistryAlone(t *testing.T) {
	h, reg, _ := fakeHost(t)
	h.Longest.Collector = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_longest_running_processor_seconds", Help: "other"}, []string{"name", "controller"})
	before, err := reg.Gather()
	require.NoError(t, err)
	_, err = New(h)
	require.Error(t, err, "a gauge collector that is not registered must fail New")
	after, err := reg.Gather()
	require.NoError(t, err)
	require.Equal(t, len(before), len(after), "the families must be back as they were")
	require.NoError(t, reg.Register(prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "x", Help: "x"}, nil)))
	// The host's own depth vector is registered again: registering a copy
	// of it is refused as a duplicate.
	var are prometheus.AlreadyRegisteredError
	require.ErrorAs(t, reg.Register(prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_depth", Help: "d"}, []string{"name", "controller", "priority"})), &are)
	require.Same(t, h.Depth.Collector, are.ExistingCollector, "the host's depth must be restored")
}

func TestGaugesCombineAndForget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, reg, longestVec := fakeHost(t)
		p, err := New(h)
		require.NoError(t, err)
		// A client-go queue of the same name pushed a longer run.
		longestVec.WithLabelValues("q", "q").Set(100)

		a := workqueue.NewWithConfig(workqueue.Config[string]{Name: "q", Metrics: p})
		b := workqueue.NewWithConfig(workqueue.Config[string]{Name: "q", Metrics: p})
		a.Add("1")
		a.Add("2")
		b.Add("3")
		k, _ := b.Get()
		time.Sleep(3 * time.Second)
		require.Equal(t, 2.0, scraped(t, reg, "workqueue_depth", "q", "q", "0"), "depth adds up the queues of one name")
		require.Equal(t, 3.0, scraped(t, reg, "workqueue_unfinished_work_seconds", "q", "q"), "unfinished work adds up")
		require.Equal(t, 100.0, scraped(t, reg, "workqueue_longest_running_processor_seconds", "q", "q"), "the longest is the larger")
		longestVec.WithLabelValues("q", "q").Set(0)
		require.Equal(t, 3.0, scraped(t, reg, "workqueue_longest_running_processor_seconds", "q", "q"))

		b.Done(k)
		b.ShutDown()
		a.ShutDown()
		_, err = reg.Gather()
		require.NoError(t, err)
		n := p.book.Len()
		require.Equal(t, 1, n, "the shut-down empty queue is forgotten, the one with keys is kept")
		require.Equal(t, 2.0, scraped(t, reg, "workqueue_depth", "q", "q", "0"), "a shut-down queue with keys still counts")
	})
}

func TestPriorityCardinality(t *testing.T) {
	h, reg, _ := fakeHost(t)
	p, err := New(h)
	require.NoError(t, err)
	q := workqueue.NewWithConfig(workqueue.Config[int]{Name: "q", Metrics: p, Store: workqueue.NewPriorityStore[int]()})
	for i := range MaxPriorities {
		q.AddWithPriority(i, i)
	}
	require.Equal(t, 1.0, scraped(t, reg, "workqueue_depth", "q", "q", strconv.Itoa(MaxPriorities-1)))
	q.AddWithPriority(MaxPriorities, MaxPriorities)
	require.Equal(t, float64(MaxPriorities+1), scraped(t, reg, "workqueue_depth", "q", "q", PriorityOverflow),
		"past MaxPriorities, every key is counted under the overflow label")
	require.Equal(t, 0.0, scraped(t, reg, "workqueue_depth", "q", "q", "0"), "earlier series stay, at the host's 0")
}

// scraped scrapes reg and returns the value of the gauge series of family
// with the label values lvs (name, controller, priority).
func scraped(t *testing.T, reg *prometheus.Registry, family string, lvs ...string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err, "a scrape must not fail")
	for _, f := range fams {
		if f.GetName() != family {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			names := []string{"name", "controller", "priority"}
			for i, v := range lvs {
				if got[names[i]] != v {
					continue next
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s%v", family, lvs)
	return 0
}

// TestReadyAges: with Host.LabelNames, the Provider reports
// workqueue_oldest_ready_seconds beside the host's families, labelled by the
// host's labels and priority: the larger age of the queues with the same
// labels, a series per priority from the first scrape that finds a key
// ready at it, at 0 once none is, and past MaxPriorities one series under
// PriorityOverflow with the largest age. Without LabelNames there is none.
func TestReadyAges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, reg, _ := fakeHost(t)
		h.LabelNames = []string{"name", "controller"}
		p, err := New(h)
		require.NoError(t, err)
		store := func() workqueue.Config[int] {
			return workqueue.Config[int]{Name: "q", Metrics: p, Store: workqueue.NewPriorityStore[int]()}
		}
		a, b := workqueue.NewWithConfig(store()), workqueue.NewWithConfig(store())
		a.AddWithPriority(1, -100)
		time.Sleep(2 * time.Second)
		b.AddWithPriority(2, -100)
		b.AddWithPriority(3, 0)
		time.Sleep(time.Second)
		require.Equal(t, 3.0, scraped(t, reg, "workqueue_oldest_ready_seconds", "q", "q", "-100"), "the larger age of the queues of one name")
		require.Equal(t, 1.0, scraped(t, reg, "workqueue_oldest_ready_seconds", "q", "q", "0"))
		k, _ := b.Get()
		b.Done(k)
		require.Equal(t, 0.0, scraped(t, reg, "workqueue_oldest_ready_seconds", "q", "q", "0"), "the series stays, at 0")

		for i := range MaxPriorities {
			a.AddWithPriority(10+i, i+1)
		}
		time.Sleep(time.Second)
		require.Equal(t, 4.0, scraped(t, reg, "workqueue_oldest_ready_seconds", "q", "q", PriorityOverflow),
			"past MaxPriorities, one series with the largest age")
		a.ShutDown()
		b.ShutDown()
		require.Equal(t, 2, p.ages.Len(), "a shut-down queue with keys ready is kept")
		for a.Len() > 0 {
			k, _ := a.Get()
			a.Done(k)
		}
		for b.Len() > 0 {
			k, _ := b.Get()
			b.Done(k)
		}
		require.Equal(t, 0.0, scraped(t, reg, "workqueue_oldest_ready_seconds", "q", "q", PriorityOverflow))
		require.Zero(t, p.ages.Len(), "and forgotten once it has none")

		// Without LabelNames, the host's families only.
		h, reg, _ = fakeHost(t)
		p, err = New(h)
		require.NoError(t, err)
		c := workqueue.NewWithConfig(workqueue.Config[int]{Name: "q", Metrics: p})
		defer c.ShutDown()
		c.Add(1)
		fams, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range fams {
			require.NotEqual(t, "workqueue_oldest_ready_seconds", f.GetName())
		}
		require.Zero(t, p.ages.Len())
	})
}
