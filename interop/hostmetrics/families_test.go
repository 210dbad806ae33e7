package hostmetrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

type promFamilies = Families[*prometheus.CounterVec, *prometheus.HistogramVec, *prometheus.GaugeVec,
	prometheus.Counter, prometheus.Observer, prometheus.Gauge]

// newFamilies makes the seven families; help is every family's help, so
// that two sets with different help are not the same families.
func newFamilies(help string) promFamilies {
	l := []string{"name"}
	g := func(n string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: n, Help: help}, l)
	}
	c := func(n string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: n, Help: help}, l)
	}
	h := func(n string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: n, Help: help}, l)
	}
	return promFamilies{
		Depth: g("depth"), Unfinished: g("unfinished"), Longest: g("longest"),
		Adds: c("adds"), Retries: c("retries"),
		Latency: h("latency"), WorkDuration: h("work"),
	}
}

func all(f promFamilies) []prometheus.Collector {
	return []prometheus.Collector{f.Depth, f.Unfinished, f.Longest, f.Adds, f.Retries, f.Latency, f.WorkDuration}
}

func registryOf(reg *prometheus.Registry) Registry {
	return Registry{Register: reg.Register, Unregister: reg.Unregister, Whose: "host's", Missing: "is missing"}
}

// Find returns the host's own collectors, not the look-alikes, and leaves
// the registry as it was.
func TestFindTakesTheHostsFamilies(t *testing.T) {
	reg := prometheus.NewRegistry()
	host := newFamilies("h")
	reg.MustRegister(all(host)...)

	got, err := Find(registryOf(reg), newFamilies("h"))
	require.NoError(t, err)
	for i, c := range all(got) {
		require.Same(t, all(host)[i], c, "Find must return the registered collectors themselves")
	}
	for _, c := range all(newFamilies("h")) {
		require.Error(t, reg.Register(c), "the host's families must still be registered")
	}

	// The Host made of them updates the host's own children.
	h := got.Host(reg, func(n string) []string { return []string{n} }, false)
	h.Adds("q").Inc()
	h.Depth.Touch("q")
	mfs, err := reg.Gather()
	require.NoError(t, err)
	series := map[string]int{}
	for _, mf := range mfs {
		series[mf.GetName()] = len(mf.GetMetric())
	}
	require.Equal(t, map[string]int{"adds": 1, "depth": 1}, series)
	require.Equal(t, []prometheus.Collector{host.Adds, host.Retries, host.Latency, host.WorkDuration}, h.Events)
}

// A family that is missing, differs, or is of another type is an error
// each, and a look-alike the registry took does not stay there.
func TestFindFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	host := newFamilies("h")
	reg.MustRegister(host.Depth, host.Unfinished, host.Longest, host.Adds, host.Latency)
	// work_duration with other help, retries not at all.
	reg.MustRegister(newFamilies("other").WorkDuration)

	_, err := Find(registryOf(reg), newFamilies("h"))
	require.ErrorContains(t, err, `host's Desc{fqName: "retries"`)
	require.ErrorContains(t, err, "is missing")
	require.ErrorContains(t, err, `host's Desc{fqName: "work"`)
	require.ErrorContains(t, err, "differs from what this package expects")
	require.NoError(t, reg.Register(newFamilies("h").Retries), "the look-alike of a missing family must be taken off again")

	// A collector of another type, with the family's descriptors.
	reg = prometheus.NewRegistry()
	reg.MustRegister(all(host)...)
	require.True(t, reg.Unregister(host.Adds))
	reg.MustRegister(wrapped{host.Adds})
	_, err = Find(registryOf(reg), newFamilies("h"))
	require.ErrorContains(t, err, "is a hostmetrics.wrapped, not a *prometheus.CounterVec")

	// Name names the family.
	r := registryOf(prometheus.NewRegistry())
	r.Name = func(prometheus.Collector) string { return "that family" }
	_, err = Find(r, newFamilies("h"))
	require.ErrorContains(t, err, "host's that family is missing")
}

type wrapped struct{ prometheus.Collector }
