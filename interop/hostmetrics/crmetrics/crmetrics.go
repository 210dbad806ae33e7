// Package crmetrics reports github.com/go-coalesce/workqueue queues into
// the workqueue_* metrics that controller-runtime registers on its
// metrics.Registry (served by the manager's /metrics), so a controller that
// returns our queue from its NewQueue option keeps its series:
//
//	controller.Options{
//		NewQueue: func(name string, rl clientworkqueue.TypedRateLimiter[reconcile.Request]) clientworkqueue.TypedRateLimitingInterface[reconcile.Request] {
//			return workqueue.NewRateLimitingQueueWithConfig(rl, workqueue.Config[reconcile.Request]{Name: name, Metrics: crmetrics.Provider()})
//		},
//	}
//
// (workqueue is github.com/go-coalesce/workqueue, clientworkqueue is
// k8s.io/client-go/util/workqueue) or, to keep the priorities
// controller-runtime's handlers assign,
// crpriority.New(rl, workqueue.Config[reconcile.Request]{Name: name, Metrics: crmetrics.Provider()}).
//
// controller-runtime (v0.25) registers seven families at init, with the
// labels name and controller (and priority on workqueue_depth), and installs
// the same vectors as client-go's global provider, so its client-go queues
// and its own priority queue report there. A queue reported through
// Provider gets name and controller both set to Config.Name (the controller
// name that NewQueue is given, as controller-runtime's own queues have);
// its depth is labelled with the priority of the pending runs: a queue with
// a PriorityStore (crpriority) by priority, any other at "0", as
// controller-runtime's priority queue reports keys added without one.
//
// Counters and histograms go through controller-runtime's own vectors (its
// 12 exponential buckets from 1e-8 s and native-histogram settings come
// with them). The three gauges are read from the queue's Stats at scrape
// time, so they are exact then, where controller-runtime's are pushed (and
// the age gauges refreshed every 500 ms); see package hostmetrics for how
// they share the families. Two small differences remain, both in
// controller-runtime's own favour of counting: workqueue_retries_total
// counts every AddAfter and AddRateLimited (as client-go does), also those
// whose delay is zero, which controller-runtime's priority queue leaves
// out; and a priority appears in depth from the first scrape that finds a
// key at it, not from the first add.
package crmetrics

import (
	"errors"
	"fmt"
	"sync"

	"github.com/go-coalesce/workqueue/interop/hostmetrics"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	// controller-runtime registers its workqueue families in the init of
	// an internal package; the priority queue imports it, so importing
	// the priority queue makes sure they exist before Provider looks.
	_ "sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

var (
	once     sync.Once
	provider *hostmetrics.Provider
	errSetup error
)

// Provider returns the process's Provider for controller-runtime's
// metrics.Registry; every call returns the same one. It panics if
// controller-runtime's workqueue families are not on metrics.Registry as
// expected (NewProvider says why): that means a controller-runtime version
// whose metrics differ, or a metrics.Registry replaced after init, and
// every scrape would otherwise miss the queue's series silently.
func Provider() *hostmetrics.Provider {
	p, err := NewProvider()
	if err != nil {
		panic(err)
	}
	return p
}

// NewProvider is Provider that returns an error instead of panicking. It
// finds controller-runtime's seven collectors on metrics.Registry, on the
// first call, by offering look-alikes to the registry and taking the
// collector it reports as already registered (prometheus's
// AlreadyRegisteredError); the same error and Provider are returned by
// every later call.
func NewProvider() (*hostmetrics.Provider, error) {
	once.Do(func() { provider, errSetup = setup(metrics.Registry) })
	return provider, errSetup
}

// The help strings are part of a family's identity on a registry: they must
// be controller-runtime's, word for word, or the look-up fails.
const (
	helpDepth      = "Current depth of workqueue by workqueue and priority"
	helpAdds       = "Total number of adds handled by workqueue"
	helpLatency    = "How long in seconds an item stays in workqueue before being requested"
	helpWork       = "How long in seconds processing an item from workqueue takes."
	helpUnfinished = "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases."
	helpLongest    = "How many seconds has the longest running processor for workqueue been running."
	helpRetries    = "Total number of items added to the workqueue with a non-zero delay (rate-limited requeues, explicit RequeueAfter or AddAfter calls)"
)

func setup(reg prometheus.Registerer) (*hostmetrics.Provider, error) {
	labels := []string{"name", "controller"}
	depth, err1 := existing[*prometheus.GaugeVec](reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_depth", Help: helpDepth}, []string{"name", "controller", "priority"}))
	adds, err2 := existing[*prometheus.CounterVec](reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total", Help: helpAdds}, labels))
	latency, err3 := existing[*prometheus.HistogramVec](reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_queue_duration_seconds", Help: helpLatency}, labels))
	work, err4 := existing[*prometheus.HistogramVec](reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds", Help: helpWork}, labels))
	unfinished, err5 := existing[*prometheus.GaugeVec](reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_unfinished_work_seconds", Help: helpUnfinished}, labels))
	longest, err6 := existing[*prometheus.GaugeVec](reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_longest_running_processor_seconds", Help: helpLongest}, labels))
	retries, err7 := existing[*prometheus.CounterVec](reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_retries_total", Help: helpRetries}, labels))
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
		return nil, err
	}
	touch := func(v *prometheus.GaugeVec) func(...string) {
		return func(lvs ...string) { v.WithLabelValues(lvs...) }
	}
	return hostmetrics.New(hostmetrics.Host{
		Registerer:   reg,
		Labels:       func(name string) []string { return []string{name, name} },
		Priority:     true,
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

// existing returns the collector registered on reg that has the same
// descriptors as probe. If none is, probe is taken off again (it must not
// stay in the host's place) and existing fails.
func existing[C prometheus.Collector](reg prometheus.Registerer, probe C) (C, error) {
	var zero C
	err := reg.Register(probe)
	if err == nil {
		reg.Unregister(probe)
		return zero, fmt.Errorf("crmetrics: controller-runtime's %s is not registered on metrics.Registry", name(probe))
	}
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		return zero, fmt.Errorf("crmetrics: controller-runtime's %s differs from what this package expects: %w", name(probe), err)
	}
	c, ok := are.ExistingCollector.(C)
	if !ok {
		return zero, fmt.Errorf("crmetrics: controller-runtime's %s is a %T, not a %T", name(probe), are.ExistingCollector, zero)
	}
	return c, nil
}

func name(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc, 1)
	c.Describe(ch)
	return (<-ch).String()
}
