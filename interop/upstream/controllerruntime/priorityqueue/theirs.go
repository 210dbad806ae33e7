//go:build crupstream

package priorityqueue

import (
	"reflect"
	"unsafe"

	"github.com/go-coalesce/workqueue/interop/upstream/controllerruntime/internal/metrics"
	"k8s.io/client-go/util/workqueue"
	crpq "sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// backend names the queue under test in skip lists and logs.
const backend = "controller-runtime"

// New is controller-runtime's own New, in the harness's wrapper, with its
// limiter asked through fieldLimiter.
//
// Its tests hand it a provider whose depth gauge is by priority: a
// controller-runtime internal interface, which its queue recognizes by a
// type assertion that our provider, made outside controller-runtime, cannot
// pass (the gauge's method returns a type of another package). So the
// queue is given the provider without that method, and the gauge it would
// have made is put in place afterwards, into the unexported field where
// controller-runtime keeps it: reflection, for this harness only.
func New[T comparable](name string, o ...Opt[T]) PriorityQueue[T] {
	opts := &Opts[T]{}
	for _, f := range o {
		f(opts)
	}
	q := newWrapper(opts)
	byPrio, _ := opts.MetricProvider.(metrics.MetricsProviderWithPriority)
	o = append(o, func(o *Opts[T]) {
		o.RateLimiter = fieldLimiter[T]{q}
		if byPrio != nil {
			o.MetricProvider = withoutPriority{byPrio}
		}
	})
	q.PriorityQueue = crpq.New[T](name, o...)
	if byPrio != nil && name != "" {
		m := reflect.ValueOf(q.PriorityQueue).Elem().FieldByName("metrics").Elem().Elem()
		f := m.FieldByName("depthWithPriority")
		reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(byPrio.NewDepthMetricWithPriority(name)))
	}
	return q
}

// withoutPriority is a provider whose depth gauge is never used: the queue
// uses the one by priority that New puts in place.
type withoutPriority struct{ workqueue.MetricsProvider }

func (withoutPriority) NewDepthMetric(string) workqueue.GaugeMetric { return noGauge{} }

type noGauge struct{}

func (noGauge) Inc() {}
func (noGauge) Dec() {}
