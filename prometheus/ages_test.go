package prometheus_test

import (
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/go-coalesce/workqueue"
	wqprom "github.com/go-coalesce/workqueue/prometheus"
)

const oldestReady = "workqueue_oldest_ready_seconds"

// readyAges gathers reg and returns workqueue_oldest_ready_seconds of the
// queues named queue, by priority label.
func readyAges(t *testing.T, reg prometheus.Gatherer, queue string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err, "the registry must gather without error")
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != oldestReady {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			require.Len(t, labels, 2, "name and priority")
			if labels["name"] == queue {
				out[labels["priority"]] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestOldestReady checks the gauge of a priority queue whose low level is
// starved by a stream of priority-0 keys: the -100 series grows with the
// time its front has waited, the 0 series stays at the age of the next
// key; a level that empties keeps its series at 0.
func TestOldestReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		p := wqprom.NewProvider(reg)
		q := workqueue.NewWithConfig(workqueue.Config[string]{Name: "q", Metrics: p, Store: workqueue.NewPriorityStore[string]()})
		require.Empty(t, readyAges(t, reg, "q"), "no series before a key is ready")

		q.AddWithPriority("initial", -100)
		q.Add("k0")
		for i := range 30 {
			time.Sleep(time.Second)
			q.Add("k" + strconv.Itoa(i+1))
			k, _ := q.Get()
			q.Done(k)
		}
		require.Equal(t, map[string]float64{"-100": 30, "0": 0}, readyAges(t, reg, "q"),
			"the starved level's age is the time since its front became ready")

		q.Remove("k30")
		time.Sleep(time.Second)
		require.Equal(t, map[string]float64{"-100": 31, "0": 0}, readyAges(t, reg, "q"),
			"an empty level keeps its series, at 0")

		problems, err := testutil.GatherAndLint(reg, oldestReady)
		require.NoError(t, err)
		require.Empty(t, problems, "the gauge must pass promlint")

		// A second queue of the same name: the larger age per priority.
		q2 := workqueue.NewWithConfig(workqueue.Config[string]{Name: "q", Metrics: p})
		q2.Add("x")
		time.Sleep(time.Second)
		q.Add("y")
		require.Equal(t, map[string]float64{"-100": 32, "0": 1}, readyAges(t, reg, "q"))

		// Not a ReadyAgeMetricsProvider source: a FairStore reports nothing.
		fair := workqueue.NewWithConfig(workqueue.Config[string]{Name: "fair", Metrics: p, Store: workqueue.NewFairStore(func(s string) string { return s })})
		fair.Add("a")
		require.Empty(t, readyAges(t, reg, "fair"))

		for _, q := range []*workqueue.Queue[string]{q, q2, fair} {
			q.ShutDown()
			for q.Len() > 0 {
				k, _ := q.Get()
				q.Done(k)
			}
		}
		require.Equal(t, map[string]float64{"-100": 0, "0": 0}, readyAges(t, reg, "q"), "the name's series stay, at 0")
		require.Zero(t, wqprom.AgedQueues(p), "the scrape forgot the shut-down queues")
	})
}

// TestOldestReadyCardinality checks the bound on the priority label: a name
// that has shown more than 25 priorities reports one series, labelled as
// controller-runtime labels its depth past the bound, with the largest age.
func TestOldestReadyCardinality(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		p := wqprom.NewProvider(reg)
		q := workqueue.NewWithConfig(workqueue.Config[int]{Name: "q", Metrics: p, Store: workqueue.NewPriorityStore[int]()})
		defer q.ShutDown()
		for prio := range 25 {
			q.AddWithPriority(prio, prio)
			time.Sleep(time.Second)
		}
		got := readyAges(t, reg, "q")
		require.Len(t, got, 25, "up to 25 priorities are shown one by one")
		require.Equal(t, 25.0, got["0"])
		require.Equal(t, 1.0, got["24"])

		q.AddWithPriority(25, 25)
		require.Equal(t, map[string]float64{"exceeded_cardinality_limit": 25}, readyAges(t, reg, "q"),
			"the 26th priority puts the name's ages under one label, the largest")
		for q.Len() > 1 {
			k, _ := q.Get()
			q.Done(k)
		}
		require.Equal(t, map[string]float64{"exceeded_cardinality_limit": 25}, readyAges(t, reg, "q"),
			"for good: the bound holds once passed")
	})
}
