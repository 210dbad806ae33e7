package otel_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/go-coalesce/workqueue"
	wqotel "github.com/go-coalesce/workqueue/otel"
	wqprom "github.com/go-coalesce/workqueue/prometheus"
)

// TestPrometheusExporterNames: through OpenTelemetry's own Prometheus
// exporter, with its default translation, the metrics come out under
// exactly the names, types and name label that the Prometheus adapter (and
// client-go) expose, so dashboards written for client-go controllers work
// on a controller that moved to OpenTelemetry. The scope labels the exporter
// adds do not get in the way of queries by name.
func TestPrometheusExporterNames(t *testing.T) {
	viaOTel := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(viaOTel), otelprom.WithoutTargetInfo())
	require.NoError(t, err)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	p, err := wqotel.NewProvider(mp)
	require.NoError(t, err)

	direct := prometheus.NewRegistry()
	pp := wqprom.NewProvider(direct)

	// The same events on a queue of each.
	for _, mp := range []workqueue.MetricsProvider{p, pp} {
		q := workqueue.NewWithConfig(workqueue.Config[string]{Name: "deployments", Metrics: mp})
		defer q.ShutDown()
		q.Add("a")
		q.Add("b")
		k, _ := q.Get()
		q.Done(k)
		q.AddAfter("c", time.Hour)
	}

	type family struct {
		typ    dto.MetricType
		labels []string // label names of the first sample
		value  float64  // counter or gauge value, or histogram count
	}
	read := func(reg *prometheus.Registry) map[string]family {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		out := map[string]family{}
		for _, mf := range mfs {
			require.Len(t, mf.GetMetric(), 1, "%s: one series", mf.GetName())
			m := mf.GetMetric()[0]
			f := family{typ: mf.GetType()}
			for _, l := range m.GetLabel() {
				f.labels = append(f.labels, l.GetName())
				if l.GetName() == "name" {
					require.Equal(t, "deployments", l.GetValue(), "%s name label", mf.GetName())
				}
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				f.value = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				f.value = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				f.value = float64(m.GetHistogram().GetSampleCount())
			}
			out[mf.GetName()] = f
		}
		return out
	}
	got, want := read(viaOTel), read(direct)
	require.Len(t, want, 8)
	for name, w := range want {
		g, ok := got[name]
		require.True(t, ok, "%s must come out of the OpenTelemetry exporter under the same name", name)
		require.Equal(t, w.typ, g.typ, "%s type", name)
		require.Equal(t, w.value, g.value, "%s value", name)
		require.Contains(t, g.labels, "name", "%s has the name label", name)
	}
	require.Len(t, got, len(want), "nothing else is exported")
}
