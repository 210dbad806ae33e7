// Package kubemetrics reports github.com/go-coalesce/workqueue queues into
// the workqueue_* metrics that Kubernetes components (kube-controller-manager
// and the other component-base binaries) register for client-go's queues,
// in component-base's legacy registry (k8s.io/component-base/metrics/legacyregistry,
// served on their /metrics), so a controller moved onto our queue keeps its
// workqueue_*{name="deployment"} series:
//
//	queue := workqueue.NewRateLimitingQueueWithConfig(rl, workqueue.Config[string]{Name: "deployment", Metrics: kubemetrics.Provider()})
//
// or, so that a name alone is enough, as with client-go, import package
// register (kubemetrics/register) for its side effect: it makes Provider the
// process's default (workqueue.SetDefaultMetricsProvider), used by every
// queue created with a Name and no Config.Metrics.
//
// Those families are component-base's
// (k8s.io/component-base/metrics/prometheus/workqueue): one label, name,
// histograms with 10 exponential buckets from 1e-8 s. That package installs
// itself as client-go's global metrics provider when imported, and
// registers its families in the legacy registry when client-go first asks
// it for a queue's metrics. This package imports it, as those binaries do;
// do not import it into a controller-runtime binary (use crmetrics there):
// client-go keeps the first global provider installed.
//
// Beside those seven, Provider reports ours in the legacy registry:
// workqueue_oldest_ready_seconds{name,priority}, how long the oldest
// ready key of each priority level has been ready (a plain queue's keys are at
// priority 0), so that a starved level, or a queue whose workers are
// stuck, shows an age that keeps growing. Its name, help and bound on
// priorities are the Prometheus adapter's; see package hostmetrics. It is
// registered as a plain Prometheus collector, without a stability level.
//
// Counters and histograms go through component-base's own vectors (its
// buckets, stability annotation and label allow-lists come with them). The
// three gauges are read from the queue's Stats at scrape time, so they are
// exact then, where component-base's are pushed by client-go (and the age
// gauges refreshed every 500 ms); see package hostmetrics for how they share
// the families. One difference: the gauge series of our queues are not
// passed through component-base's label allow-lists (a name an allow-list
// would replace keeps its value there).
package kubemetrics

import (
	"sync"

	"github.com/go-coalesce/workqueue/interop/hostmetrics"
	"github.com/prometheus/client_golang/prometheus"
	clientworkqueue "k8s.io/client-go/util/workqueue"
	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	// Installs component-base's provider as client-go's global one, as
	// kube-controller-manager does.
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

// newProvider finds the families on the first call and returns what it
// found to every call.
var newProvider = sync.OnceValues(setup)

// Provider returns the process's Provider for the legacy registry; every
// call returns the same one. It panics if component-base's workqueue
// families cannot be found there (NewProvider says why).
func Provider() *hostmetrics.Provider {
	return hostmetrics.Must(NewProvider())
}

// NewProvider is Provider that returns an error instead of panicking.
//
// On the first call it makes sure component-base has registered its
// families: they are registered when client-go first asks its provider for
// a queue's metrics, and registering ours before would make that panic. So
// it creates a client-go queue named probeName, which is the only way to
// reach that provider, shuts it down at once, and deletes the series it
// made. Then it finds the seven collectors in the legacy registry by
// offering look-alikes and taking the ones it reports as already
// registered (prometheus's AlreadyRegisteredError). It fails when client-go's
// global provider is not component-base's (another one was installed
// first), or when component-base's families differ from what this package
// expects.
func NewProvider() (*hostmetrics.Provider, error) {
	return newProvider()
}

// probeName names the client-go queue that NewProvider makes to have
// component-base register its families.
const probeName = "go-coalesce-workqueue-hostmetrics-probe"

// setup finds the families. The help strings and stability level below are
// part of a family's identity on the registry (the level is written into
// the help), so they must be component-base's, word for word.
func setup() (*hostmetrics.Provider, error) {
	q := clientworkqueue.NewTypedWithConfig(clientworkqueue.TypedQueueConfig[struct{}]{Name: probeName})
	q.ShutDown()

	labels := []string{"name"}
	gauge := func(name, help string) *k8smetrics.GaugeVec {
		return k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{Subsystem: "workqueue", Name: name, StabilityLevel: k8smetrics.BETA, Help: help}, labels)
	}
	counter := func(name, help string) *k8smetrics.CounterVec {
		return k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{Subsystem: "workqueue", Name: name, StabilityLevel: k8smetrics.BETA, Help: help}, labels)
	}
	histogram := func(name, help string) *k8smetrics.HistogramVec {
		return k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{Subsystem: "workqueue", Name: name, StabilityLevel: k8smetrics.BETA, Help: help,
			Buckets: k8smetrics.ExponentialBuckets(10e-9, 10, 10)}, labels)
	}
	f, err := hostmetrics.Find(hostmetrics.Registry{
		Register:   func(c prometheus.Collector) error { return legacyregistry.Register(c.(k8smetrics.Registerable)) },
		Unregister: legacyregistry.Registerer().Unregister,
		Name:       func(c prometheus.Collector) string { return c.(k8smetrics.Registerable).FQName() },
		Whose:      "kubemetrics: component-base's",
		Missing:    "is not in the legacy registry: is client-go's global workqueue provider another one?",
	}, families{
		Depth:        gauge("depth", "Current depth of workqueue"),
		Adds:         counter("adds_total", "Total number of adds handled by workqueue"),
		Latency:      histogram("queue_duration_seconds", "How long in seconds an item stays in workqueue before being requested."),
		WorkDuration: histogram("work_duration_seconds", "How long in seconds processing an item from workqueue takes."),
		Unfinished: gauge("unfinished_work_seconds", "How many seconds of work has done that "+
			"is in progress and hasn't been observed by work_duration. Large "+
			"values indicate stuck threads. One can deduce the number of stuck "+
			"threads by observing the rate at which this increases."),
		Longest: gauge("longest_running_processor_seconds", "How many seconds has the longest running "+
			"processor for workqueue been running."),
		Retries: counter("retries_total", "Total number of retries handled by workqueue"),
	})
	if err != nil {
		return nil, err
	}

	// Take away the probe queue's series (retries has none: only delaying
	// queues make it).
	probe := map[string]string{"name": probeName}
	f.Depth.Delete(probe)
	f.Adds.Delete(probe)
	f.Latency.Delete(probe)
	f.WorkDuration.Delete(probe)
	f.Unfinished.Delete(probe)
	f.Longest.Delete(probe)

	h := f.Host(legacyregistry.Registerer(), func(name string) []string { return []string{name} }, false)
	h.LabelNames = labels // and workqueue_oldest_ready_seconds{name,priority}
	return hostmetrics.New(h)
}

// families are component-base's vector types.
type families = hostmetrics.Families[*k8smetrics.CounterVec, *k8smetrics.HistogramVec, *k8smetrics.GaugeVec,
	k8smetrics.CounterMetric, k8smetrics.ObserverMetric, k8smetrics.GaugeMetric]
