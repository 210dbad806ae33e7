// Package scrape reads a queue's workqueue_* series from a registry, in a
// form that the tests of the host packages compare between our queue and a
// client-go queue of the same name.
package scrape

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Series is one series of a workqueue_* family, with the queue's name
// label (and controller-runtime's controller label) replaced by "Q", so
// that the series of two queues can be compared.
type Series struct {
	Family string // metric name
	Type   string // COUNTER, GAUGE, HISTOGRAM
	Help   string
	Labels string // name=value pairs, sorted by name
	// Bounds are a histogram's bucket upper bounds, and Native its
	// native-histogram schema and zero threshold; empty otherwise.
	Bounds string
	Native string
	// Value is a counter's or gauge's value, or a histogram's sample
	// count.
	Value float64
}

// Key is a series' family and labels: what names it on a registry.
func (s Series) Key() string { return s.Family + "{" + s.Labels + "}" }

// Shape is the series without its value.
func (s Series) Shape() Series { s.Value = 0; return s }

// Of gathers g and returns the workqueue_* series whose name label is
// name, by Key. A Gather error (an inconsistent family, a duplicate
// series) is returned: a real scrape would fail with it.
func Of(g prometheus.Gatherer, name string) (map[string]Series, error) {
	fams, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]Series{}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "workqueue_") {
			continue
		}
		for _, m := range f.GetMetric() {
			mine := false
			var lbl []string
			for _, lp := range m.GetLabel() {
				v := lp.GetValue()
				if lp.GetName() == "name" && v == name {
					mine = true
				}
				if (lp.GetName() == "name" || lp.GetName() == "controller") && v == name {
					v = "Q"
				}
				lbl = append(lbl, lp.GetName()+"="+v)
			}
			if !mine {
				continue
			}
			sort.Strings(lbl)
			s := Series{Family: f.GetName(), Type: f.GetType().String(), Help: f.GetHelp(), Labels: strings.Join(lbl, ",")}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				s.Value = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				s.Value = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				s.Value = float64(h.GetSampleCount())
				var b []string
				for _, bk := range h.GetBucket() {
					b = append(b, fmt.Sprint(bk.GetUpperBound()))
				}
				s.Bounds = strings.Join(b, " ")
				s.Native = fmt.Sprintf("schema=%d zero=%g", h.GetSchema(), h.GetZeroThreshold())
			}
			out[s.Key()] = s
		}
	}
	return out, nil
}

// Shapes returns the series without their values, by Key.
func Shapes(ss map[string]Series) map[string]Series {
	out := make(map[string]Series, len(ss))
	for k, s := range ss {
		out[k] = s.Shape()
	}
	return out
}

// Values returns the values of the series of the given families, by Key.
func Values(ss map[string]Series, families ...string) map[string]float64 {
	out := map[string]float64{}
	for k, s := range ss {
		for _, f := range families {
			if s.Family == f {
				out[k] = s.Value
			}
		}
	}
	return out
}

// OldestReady is the family our queues report beside the host's, which the
// host's own queues do not have.
const OldestReady = "workqueue_oldest_ready_seconds"

// Without returns the series of ss whose family is none of families, by
// Key: the series a host's own queue has too, once OldestReady is left
// out.
func Without(ss map[string]Series, families ...string) map[string]Series {
	out := make(map[string]Series, len(ss))
	for k, s := range ss {
		if !slices.Contains(families, s.Family) {
			out[k] = s
		}
	}
	return out
}
