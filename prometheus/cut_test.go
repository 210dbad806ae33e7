package prometheus_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/go-coalesce/workqueue"
	wqprom "github.com/go-coalesce/workqueue/prometheus"
)

// hookedStats gives p the queue's Stats through a function that, once
// during is set, runs it after the next read: a worker's Done that comes
// while a scrape is reading the queue.
type hookedStats struct {
	p      *wqprom.Provider
	during atomic.Pointer[func()]
}

func (h *hookedStats) NewQueueMetrics(name string, stats func() workqueue.Stats) workqueue.QueueMetrics {
	return h.p.NewQueueMetrics(name, func() workqueue.Stats {
		s := stats()
		if f := h.during.Swap(nil); f != nil {
			(*f)()
		}
		return s
	})
}

// TestOneScrapeIsOneCut: the Done of the last run comes while a scrape is
// reading the gauges, and the collected metrics are written after Collect
// has returned, as a registry may write them. The scrape must not show the
// run counted in work_duration with it still running in the gauges, which
// is how a reader that waited for every run to be counted read a longest
// running processor above 0 "after all work is done". It did while
// Collect sent the vectors' live children: their values were read when
// written, after the Done.
func TestOneScrapeIsOneCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := wqprom.NewProvider(nil)
		hook := &hookedStats{p: p}
		q := workqueue.NewWithConfig(workqueue.Config[string]{Name: "q", Metrics: hook})
		defer q.ShutDown()
		q.Add("a")
		k, _ := q.Get()
		time.Sleep(3 * time.Second)
		done := func() { q.Done(k) }
		hook.during.Store(&done)

		cut := func(scrape string) (runs uint64, longest float64) {
			ch := make(chan prometheus.Metric, 64)
			p.Collect(ch)
			close(ch)
			for m := range ch {
				var d dto.Metric
				require.NoError(t, m.Write(&d))
				switch name := m.Desc().String(); {
				case strings.Contains(name, `"workqueue_work_duration_seconds"`):
					runs = d.GetHistogram().GetSampleCount()
				case strings.Contains(name, `"workqueue_longest_running_processor_seconds"`):
					longest = d.GetGauge().GetValue()
				}
			}
			if runs == 1 {
				require.Zero(t, longest, "%s counts the run in work_duration: its gauges must have it ended", scrape)
			}
			return runs, longest
		}
		runs, longest := cut("the scrape during the Done")
		require.Equal(t, uint64(0), runs, "the run was counted after this scrape read work_duration")
		require.Equal(t, 3.0, longest, "and it was running when the gauges were read")
		runs, longest = cut("the next scrape")
		require.Equal(t, uint64(1), runs)
		require.Zero(t, longest)
	})
}
