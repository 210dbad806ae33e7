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
// Beside those seven, Provider reports ours on metrics.Registry:
// workqueue_oldest_ready_seconds{name,controller,priority}, how long the
// oldest ready key of each priority level has been ready, so that a level
// starved by higher ones (an initial list at handler.LowPriority behind a
// stream of events) shows an age that keeps growing. Its name, help and
// bound on priorities (25 per controller, then "exceeded_cardinality_limit")
// are the Prometheus adapter's; see package hostmetrics.
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
	"sync"

	"github.com/go-coalesce/workqueue/interop/hostmetrics"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	// controller-runtime registers its workqueue families in the init of
	// an internal package; the priority queue imports it, so importing
	// the priority queue makes sure they exist before Provider looks.
	_ "sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// newProvider finds the families on the first call and returns what it
// found to every call.
var newProvider = sync.OnceValues(func() (*hostmetrics.Provider, error) { return setup(metrics.Registry) })

// Provider returns the process's Provider for controller-runtime's
// metrics.Registry; every call returns the same one. It panics if
// controller-runtime's workqueue families are not on metrics.Registry as
// expected (NewProvider says why): that means a controller-runtime version
// whose metrics differ, or a metrics.Registry replaced after init, and
// every scrape would otherwise miss the queue's series silently.
func Provider() *hostmetrics.Provider {
	return hostmetrics.Must(NewProvider())
}

// NewProvider is Provider that returns an error instead of panicking. It
// finds controller-runtime's seven collectors on metrics.Registry, on the
// first call, by offering look-alikes to the registry and taking the
// collector it reports as already registered (prometheus's
// AlreadyRegisteredError); the same error and Provider are returned by
// every later call.
func NewProvider() (*hostmetrics.Provider, error) {
	return newProvider()
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

// families are controller-runtime's vector types.
type families = hostmetrics.Families[*prometheus.CounterVec, *prometheus.HistogramVec, *prometheus.GaugeVec,
	prometheus.Counter, prometheus.Observer, prometheus.Gauge]

func setup(reg prometheus.Registerer) (*hostmetrics.Provider, error) {
	labels := []string{"name", "controller"}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	histogram := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help}, labels)
	}
	f, err := hostmetrics.Find(hostmetrics.Registry{
		Register:   reg.Register,
		Unregister: reg.Unregister,
		Whose:      "crmetrics: controller-runtime's",
		Missing:    "is not registered on metrics.Registry",
	}, families{
		Depth:        gauge("workqueue_depth", helpDepth, "name", "controller", "priority"),
		Adds:         counter("workqueue_adds_total", helpAdds),
		Latency:      histogram("workqueue_queue_duration_seconds", helpLatency),
		WorkDuration: histogram("workqueue_work_duration_seconds", helpWork),
		Unfinished:   gauge("workqueue_unfinished_work_seconds", helpUnfinished, labels...),
		Longest:      gauge("workqueue_longest_running_processor_seconds", helpLongest, labels...),
		Retries:      counter("workqueue_retries_total", helpRetries),
	})
	if err != nil {
		return nil, err
	}
	h := f.Host(reg, func(name string) []string { return []string{name, name} }, true)
	h.LabelNames = labels // and workqueue_oldest_ready_seconds{name,controller,priority}
	return hostmetrics.New(h)
}
