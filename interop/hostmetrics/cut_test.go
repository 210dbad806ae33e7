package hostmetrics

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// gated is a host collector whose Collect waits until gate is closed, or
// a second has passed on synctest's clock: a registry worker that reaches
// it late.
type gated struct {
	prometheus.Collector
	gate chan struct{}
}

func (g gated) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-g.gate:
	case <-time.After(time.Second):
	}
	g.Collector.Collect(ch)
}

// hookedStats is a MetricsProvider that gives p the queue's Stats through a
// function that, on the read number at, runs during() once the Stats are
// taken: what a worker does while a scrape is reading the queue.
type hookedStats struct {
	p      *Provider
	at     int64
	reads  atomic.Int64
	during atomic.Pointer[func()]
}

func (h *hookedStats) NewQueueMetrics(name string, stats func() workqueue.Stats) workqueue.QueueMetrics {
	return h.p.NewQueueMetrics(name, func() workqueue.Stats {
		s := stats()
		if h.reads.Add(1) == h.at {
			if f := h.during.Swap(nil); f != nil {
				(*f)()
			}
		}
		return s
	})
}

// TestOneScrapeIsOneCut is the flake of "longest running processor above 0
// after all work is done", made deterministic: a scrape reads the queue's
// gauges while its last run is still going, the worker's Done comes, and the
// host's work_duration histogram is collected after it. Before the host's
// Events were collected with the gauges, the registry collected them apart
// and concurrently, and that scrape showed the run counted (work_duration
// count 1) with the queue still running it (longest 3s, unfinished 3s):
// a reader that waited for every run to be counted and took that scrape
// as the final one read a longest running processor above 0. Now the
// histogram is read first: the scrape that counts the run reads the gauges
// after its Done.
func TestOneScrapeIsOneCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		l := []string{"name"}
		gaugeVec := func(name string) *prometheus.GaugeVec {
			return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: name}, l)
		}
		depth, unfinished, longest := gaugeVec("workqueue_depth"), gaugeVec("workqueue_unfinished_work_seconds"), gaugeVec("workqueue_longest_running_processor_seconds")
		adds := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total", Help: "a"}, l)
		latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_queue_duration_seconds", Help: "q"}, l)
		work := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds", Help: "w"}, l)
		gate := make(chan struct{})
		workLate := gated{work, gate}
		reg.MustRegister(depth, unfinished, longest, adds, latency, workLate)
		touch := func(v *prometheus.GaugeVec) func(...string) { return func(lvs ...string) { v.WithLabelValues(lvs...) } }
		p, err := New(Host{
			Registerer:   reg,
			Labels:       func(n string) []string { return []string{n} },
			Adds:         func(lvs ...string) Counter { return adds.WithLabelValues(lvs...) },
			Retries:      func(lvs ...string) Counter { return adds.WithLabelValues(lvs...) },
			Latency:      func(lvs ...string) Observer { return latency.WithLabelValues(lvs...) },
			WorkDuration: func(lvs ...string) Observer { return work.WithLabelValues(lvs...) },
			Depth:        GaugeFamily{Collector: depth, Touch: touch(depth)},
			Unfinished:   GaugeFamily{Collector: unfinished, Touch: touch(unfinished)},
			Longest:      GaugeFamily{Collector: longest, Touch: touch(longest)},
			Events:       []prometheus.Collector{adds, latency, workLate},
		})
		require.NoError(t, err)

		// A scrape reads the queue once per gauge family; the worker's
		// Done comes right after the third read, and opens the gate.
		hook := &hookedStats{p: p, at: 3}
		q := workqueue.NewWithConfig(workqueue.Config[string]{Name: "q", Metrics: hook})
		defer q.ShutDown()
		q.Add("a")
		k, _ := q.Get()
		time.Sleep(3 * time.Second)
		done := func() {
			q.Done(k)
			close(gate)
		}
		hook.during.Store(&done)

		cut := func(scrape string) (runs uint64, unfinished, longest float64) {
			fams, err := reg.Gather()
			require.NoError(t, err, scrape)
			for _, f := range fams {
				for _, m := range f.GetMetric() {
					switch f.GetName() {
					case "workqueue_work_duration_seconds":
						runs = m.GetHistogram().GetSampleCount()
					case "workqueue_unfinished_work_seconds":
						unfinished = m.GetGauge().GetValue()
					case "workqueue_longest_running_processor_seconds":
						longest = m.GetGauge().GetValue()
					}
				}
			}
			if runs == 1 {
				require.Zero(t, longest, "%s counts the run in work_duration: its gauges must have it ended", scrape)
				require.Zero(t, unfinished, "%s counts the run in work_duration: its gauges must have it ended", scrape)
			}
			return runs, unfinished, longest
		}
		runs, u, lr := cut("the scrape during the Done")
		require.Equal(t, uint64(0), runs, "the run was counted after this scrape read work_duration")
		// Read after the second the late histogram waited for its gate.
		require.Equal(t, 4.0, lr, "and it was running when the gauges were read")
		require.Equal(t, 4.0, u)
		require.Equal(t, int64(3), hook.reads.Load(), "the Done came during the scrape")
		runs, u, lr = cut("the next scrape")
		require.Equal(t, uint64(1), runs)
		require.Zero(t, lr)
		require.Zero(t, u)
	})
}
