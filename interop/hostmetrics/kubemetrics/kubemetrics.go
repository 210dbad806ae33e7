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
	"errors"
	"fmt"
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

var (
	once     sync.Once
	provider *hostmetrics.Provider
	errSetup error
)

// Provider returns the process's Provider for the legacy registry; every
// call returns the same one. It panics if component-base's workqueue
// families cannot be found there (NewProvider says why).
func Provider() *hostmetrics.Provider {
	p, err := NewProvider()
	if err != nil {
		panic(err)
	}
	return p
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
	once.Do(func() { provider, errSetup = setup() })
	return provider, errSetup
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
	depth, err1 := existing(gauge("depth", "Current depth of workqueue"))
	adds, err2 := existing(counter("adds_total", "Total number of adds handled by workqueue"))
	latency, err3 := existing(histogram("queue_duration_seconds", "How long in seconds an item stays in workqueue before being requested."))
	work, err4 := existing(histogram("work_duration_seconds", "How long in seconds processing an item from workqueue takes."))
	unfinished, err5 := existing(gauge("unfinished_work_seconds", "How many seconds of work has done that "+
		"is in progress and hasn't been observed by work_duration. Large "+
		"values indicate stuck threads. One can deduce the number of stuck "+
		"threads by observing the rate at which this increases."))
	longest, err6 := existing(gauge("longest_running_processor_seconds", "How many seconds has the longest running "+
		"processor for workqueue been running."))
	retries, err7 := existing(counter("retries_total", "Total number of retries handled by workqueue"))
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
		return nil, err
	}

	// Take away the probe queue's series (retries has none: only delaying
	// queues make it).
	probe := map[string]string{"name": probeName}
	depth.Delete(probe)
	adds.Delete(probe)
	latency.Delete(probe)
	work.Delete(probe)
	unfinished.Delete(probe)
	longest.Delete(probe)

	touch := func(v *k8smetrics.GaugeVec) func(...string) {
		return func(lvs ...string) { v.WithLabelValues(lvs...) }
	}
	return hostmetrics.New(hostmetrics.Host{
		Registerer:   legacyregistry.Registerer(),
		Labels:       func(name string) []string { return []string{name} },
		Adds:         func(lvs ...string) hostmetrics.Counter { return adds.WithLabelValues(lvs...) },
		Retries:      func(lvs ...string) hostmetrics.Counter { return retries.WithLabelValues(lvs...) },
		Latency:      func(lvs ...string) hostmetrics.Observer { return latency.WithLabelValues(lvs...) },
		WorkDuration: func(lvs ...string) hostmetrics.Observer { return work.WithLabelValues(lvs...) },
		Depth:        hostmetrics.GaugeFamily{Collector: depth, Touch: touch(depth)},
		Unfinished:   hostmetrics.GaugeFamily{Collector: unfinished, Touch: touch(unfinished)},
		Longest:      hostmetrics.GaugeFamily{Collector: longest, Touch: touch(longest)},
		Events:       []prometheus.Collector{adds, retries, latency, work},
	})
}

// existing returns the collector registered in the legacy registry that has
// the same descriptors as probe. If none is, probe is taken off again (it
// must not stay where component-base will register its own) and existing
// fails.
func existing[C k8smetrics.Registerable](probe C) (C, error) {
	var zero C
	err := legacyregistry.Register(probe)
	if err == nil {
		legacyregistry.Registerer().Unregister(probe)
		return zero, fmt.Errorf("kubemetrics: component-base's %s is not in the legacy registry: is client-go's global workqueue provider another one?", probe.FQName())
	}
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		return zero, fmt.Errorf("kubemetrics: component-base's %s differs from what this package expects: %w", probe.FQName(), err)
	}
	c, ok := are.ExistingCollector.(C)
	if !ok {
		return zero, fmt.Errorf("kubemetrics: component-base's %s is a %T, not a %T", probe.FQName(), are.ExistingCollector, zero)
	}
	return c, nil
}
