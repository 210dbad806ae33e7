// Package register makes named queues of github.com/go-coalesce/workqueue
// report into component-base's workqueue_* metrics when imported for its
// side effect, as k8s.io/component-base/metrics/prometheus/workqueue does
// for client-go's queues:
//
//	import _ "github.com/go-coalesce/workqueue/interop/hostmetrics/kubemetrics/register"
//
// Its init calls workqueue.SetDefaultMetricsProvider with kubemetrics'
// Provider, so a queue built with a Name and no Config.Metrics, such as the
// mechanical translation of client-go's
// TypedRateLimitingQueueConfig{Name: "configmaps"},
//
//	workqueue.NewRateLimitingQueueWithConfig(rl, workqueue.Config[string]{Name: "configmaps"})
//
// keeps its workqueue_*{name="configmaps"} series in the legacy registry of
// a kube-controller-manager-style binary. An explicit Config.Metrics still
// wins, and a later SetDefaultMetricsProvider replaces this default for the
// queues created after it.
//
// The legacy registry is looked up when the first named queue is created,
// not at import, so importing the package costs nothing until then. That
// lookup (kubemetrics.Provider) panics if client-go's global provider is not
// component-base's, which happens only when another package installed its
// own first (a controller-runtime binary: use crmetrics there, explicitly).
package register

import (
	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/hostmetrics/kubemetrics"
)

func init() { workqueue.SetDefaultMetricsProvider(lazy{}) }

// lazy is kubemetrics.Provider(), found when the first queue asks for it.
// It forwards both constructors, so a queue with a PriorityStore gets the
// priority-aware metrics as it would from the Provider itself.
type lazy struct{}

func (lazy) NewQueueMetrics(name string, stats func() workqueue.Stats) workqueue.QueueMetrics {
	return kubemetrics.Provider().NewQueueMetrics(name, stats)
}

func (lazy) NewPriorityQueueMetrics(name string, stats func() workqueue.Stats, byPriority func(map[int]int)) workqueue.QueueMetrics {
	return kubemetrics.Provider().NewPriorityQueueMetrics(name, stats, byPriority)
}
