package register_test

import (
	"testing"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/hostmetrics/internal/scrape"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	clientworkqueue "k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics/legacyregistry"

	// What a kube-controller-manager-style binary imports: component-base's
	// provider for client-go's queues, and ours for our queues.
	_ "github.com/go-coalesce/workqueue/interop/hostmetrics/kubemetrics/register"
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// queue is what both constructors give: client-go's interface.
type queue = clientworkqueue.TypedRateLimitingInterface[string]

func limiter() clientworkqueue.TypedRateLimiter[string] {
	return clientworkqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 10*time.Millisecond)
}

// work runs a fixed sequence on q from one goroutine: three keys added (one
// twice), each handed out and done, one of them requeued through the rate
// limiter and handled again; one key is left queued for the depth gauge.
// It leaves q shut down.
func work(t *testing.T, q queue) {
	t.Helper()
	for _, k := range []string{"default/a", "default/b", "default/a", "default/c"} {
		q.Add(k)
	}
	for range 3 {
		k, shutdown := q.Get()
		require.False(t, shutdown)
		if k == "default/b" {
			q.AddRateLimited(k)
		} else {
			q.Forget(k)
		}
		q.Done(k)
	}
	k, shutdown := q.Get() // default/b again, after its 1ms
	require.False(t, shutdown)
	require.Equal(t, "default/b", k)
	q.Forget(k)
	q.Done(k)
	q.Add("default/d") // left queued
}

// TestNameIsEnoughWithRegister is the constructor swap in a
// kube-controller-manager-style binary: client-go's
// NewTypedRateLimitingQueueWithConfig(rl, TypedRateLimitingQueueConfig{Name: n})
// becomes NewRateLimitingQueueWithConfig(rl, Config{Name: n}), nothing
// else changes, and the legacy registry shows the same workqueue_* series
// for ours as for client-go's, with the same values where timing does not
// enter.
func TestNameIsEnoughWithRegister(t *testing.T) {
	theirs := clientworkqueue.NewTypedRateLimitingQueueWithConfig(limiter(),
		clientworkqueue.TypedRateLimitingQueueConfig[string]{Name: "configmaps-theirs"})
	ours := workqueue.NewRateLimitingQueueWithConfig(limiter(),
		workqueue.Config[string]{Name: "configmaps"})
	defer theirs.ShutDown()
	defer ours.ShutDown()
	work(t, theirs)
	work(t, ours)

	got, err := scrape.Of(legacyregistry.DefaultGatherer, "configmaps")
	require.NoError(t, err, "a scrape of the legacy registry must not fail")
	want, err := scrape.Of(legacyregistry.DefaultGatherer, "configmaps-theirs")
	require.NoError(t, err)
	require.Len(t, want, 7, "client-go's seven workqueue series")
	require.Equal(t, scrape.Shapes(want), scrape.Shapes(got), "a name alone must give client-go's series")
	deterministic := []string{"workqueue_depth", "workqueue_adds_total", "workqueue_retries_total",
		"workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"}
	require.Equal(t, scrape.Values(want, deterministic...), scrape.Values(got, deterministic...), "and client-go's values")
	require.Equal(t, 5.0, got[`workqueue_adds_total{name=Q}`].Value, "four distinct adds and one requeue")
	require.Equal(t, 1.0, got[`workqueue_retries_total{name=Q}`].Value)
	require.Equal(t, 1.0, got[`workqueue_depth{name=Q}`].Value, "default/d is queued")
}

// TestExplicitMetricsWin: a queue with its own Config.Metrics reports
// there, not through the registered default.
func TestExplicitMetricsWin(t *testing.T) {
	var seen string
	q := workqueue.NewWithConfig(workqueue.Config[string]{Name: "explicit-configmaps", Metrics: nameOnly(func(n string) { seen = n })})
	q.Add("a")
	require.Equal(t, "explicit-configmaps", seen)
	got, err := scrape.Of(legacyregistry.DefaultGatherer, "explicit-configmaps")
	require.NoError(t, err)
	require.Empty(t, got, "the legacy registry has no series of a queue with its own provider")
}

// nameOnly is a MetricsProvider that records the name and reports nothing.
type nameOnly func(string)

func (f nameOnly) NewQueueMetrics(name string, _ func() workqueue.Stats) workqueue.QueueMetrics {
	f(name)
	return nil
}
