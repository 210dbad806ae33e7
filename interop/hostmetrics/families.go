package hostmetrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Vec is a host's metric vector: a collector whose child for a queue's
// label values is a C.
type Vec[C any] interface {
	prometheus.Collector
	WithLabelValues(labelValues ...string) C
}

// Families are a host's seven workqueue families, as the host's own vector
// types: CV for the counters, OV for the histograms and GV for the gauges,
// whose children are C, O and G. A subpackage makes look-alikes of them,
// finds the host's with Find and turns those into a Host with Host.
type Families[CV Vec[C], OV Vec[O], GV Vec[G], C Counter, O Observer, G any] struct {
	Depth, Unfinished, Longest GV
	Adds, Retries              CV
	Latency, WorkDuration      OV
}

// Host is the Host of these families, registered on reg, where a queue
// named name has the label values labels(name), and depth has a priority
// label if priority is set (Host.Priority). Counters and histograms are
// updated through the families' own children, and the gauges' series made
// through their own vectors, so buckets and label handling are the host's.
func (f Families[CV, OV, GV, C, O, G]) Host(reg prometheus.Registerer, labels func(name string) []string, priority bool) Host {
	gauges := func(v GV) GaugeFamily {
		return GaugeFamily{Collector: v, Touch: func(lvs ...string) { v.WithLabelValues(lvs...) }}
	}
	return Host{
		Registerer:   reg,
		Labels:       labels,
		Priority:     priority,
		Adds:         func(lvs ...string) Counter { return f.Adds.WithLabelValues(lvs...) },
		Retries:      func(lvs ...string) Counter { return f.Retries.WithLabelValues(lvs...) },
		Latency:      func(lvs ...string) Observer { return f.Latency.WithLabelValues(lvs...) },
		WorkDuration: func(lvs ...string) Observer { return f.WorkDuration.WithLabelValues(lvs...) },
		Depth:        gauges(f.Depth),
		Unfinished:   gauges(f.Unfinished),
		Longest:      gauges(f.Longest),
		Events:       []prometheus.Collector{f.Adds, f.Retries, f.Latency, f.WorkDuration},
	}
}

// A Registry is where Find looks for a host's families, and how its
// errors speak of them.
type Registry struct {
	// Register and Unregister are the registry's own.
	Register   func(prometheus.Collector) error
	Unregister func(prometheus.Collector) bool
	// Name names a family in errors; nil names it by its descriptor.
	Name func(prometheus.Collector) string
	// Whose starts every error ("crmetrics: controller-runtime's", the
	// family's name follows); Missing ends the one for a family that is
	// not registered ("is not registered on metrics.Registry").
	Whose, Missing string
}

// Find returns the families registered on r that have the descriptors of
// probes. It offers each probe to r and takes the collector r reports as
// already registered (prometheus's AlreadyRegisteredError), so it finds a
// family only if its name, help, labels and type are the probe's. A probe
// that r takes, because no such family is there, is taken off again: it
// must not stay in the host's place. Each family not found, or found as
// another type than the probe's, is an error; Find returns them joined.
func Find[CV Vec[C], OV Vec[O], GV Vec[G], C Counter, O Observer, G any](r Registry, probes Families[CV, OV, GV, C, O, G]) (Families[CV, OV, GV, C, O, G], error) {
	var f Families[CV, OV, GV, C, O, G]
	var errs [7]error
	f.Depth, errs[0] = find(r, probes.Depth)
	f.Adds, errs[1] = find(r, probes.Adds)
	f.Latency, errs[2] = find(r, probes.Latency)
	f.WorkDuration, errs[3] = find(r, probes.WorkDuration)
	f.Unfinished, errs[4] = find(r, probes.Unfinished)
	f.Longest, errs[5] = find(r, probes.Longest)
	f.Retries, errs[6] = find(r, probes.Retries)
	return f, errors.Join(errs[:]...)
}

// find returns the collector registered on r that has the descriptors of
// probe, if it is of probe's type.
func find[V prometheus.Collector](r Registry, probe V) (V, error) {
	var zero V
	name := describe
	if r.Name != nil {
		name = r.Name
	}
	err := r.Register(probe)
	if err == nil {
		r.Unregister(probe)
		return zero, fmt.Errorf("%s %s %s", r.Whose, name(probe), r.Missing)
	}
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		return zero, fmt.Errorf("%s %s differs from what this package expects: %w", r.Whose, name(probe), err)
	}
	c, ok := are.ExistingCollector.(V)
	if !ok {
		return zero, fmt.Errorf("%s %s is a %T, not a %T", r.Whose, name(probe), are.ExistingCollector, zero)
	}
	return c, nil
}
