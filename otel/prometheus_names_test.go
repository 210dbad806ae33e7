package otel_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
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
// adds do not get in the way of queries by name. The two agree at idle (but
// for the histograms, which the SDK reports from their first event), at
// work, and once the queues have shut down, when both keep every series
// with the gauges at 0. The test runs in a bubble, so that both read the
// same clock: the ready ages agree to the nanosecond.
func TestPrometheusExporterNames(t *testing.T) {
	synctest.Test(t, testPrometheusExporterNames)
}

func testPrometheusExporterNames(t *testing.T) {
	viaOTel := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(viaOTel), otelprom.WithoutTargetInfo())
	require.NoError(t, err)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	p, err := wqotel.NewProvider(mp)
	require.NoError(t, err)

	direct := prometheus.NewRegistry()
	pp := wqprom.NewProvider(direct)

	// A queue of each, with the same events.
	var queues []*workqueue.Queue[string]
	for _, mp := range []workqueue.MetricsProvider{p, pp} {
		q := workqueue.NewWithConfig(workqueue.Config[string]{Name: "deployments", Metrics: mp})
		defer q.ShutDown()
		queues = append(queues, q)
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
	gauges := []string{"workqueue_depth", "workqueue_delayed_items",
		"workqueue_unfinished_work_seconds", "workqueue_longest_running_processor_seconds",
		"workqueue_oldest_ready_seconds"}
	histograms := []string{"workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"}
	compare := func(phase string, histogramsYet bool) map[string]family {
		got, want := read(viaOTel), read(direct)
		if histogramsYet {
			require.Len(t, want, 9, "%s: the Prometheus adapter's nine series", phase)
		} else {
			require.Len(t, want, 8, "%s: the Prometheus adapter's series but the ready age: no key was ever ready", phase)
		}
		for name, w := range want {
			g, ok := got[name]
			if !histogramsYet && slices.Contains(histograms, name) {
				// The SDK reports no histogram point before the first
				// Record (see NewQueueMetrics).
				require.False(t, ok, "%s: %s before any event", phase, name)
				continue
			}
			require.True(t, ok, "%s: %s must come out of the OpenTelemetry exporter under the same name", phase, name)
			require.Equal(t, w.typ, g.typ, "%s: %s type", phase, name)
			require.Equal(t, w.value, g.value, "%s: %s value", phase, name)
			require.Contains(t, g.labels, "name", "%s: %s has the name label", phase, name)
			if name == "workqueue_oldest_ready_seconds" {
				require.Contains(t, g.labels, "priority", "%s: %s has the priority label", phase, name)
			}
		}
		if histogramsYet {
			require.Len(t, got, len(want), "%s: nothing else is exported", phase)
		}
		return want
	}
	atZero := func(phase string, fams map[string]family) {
		for _, g := range gauges {
			require.Zero(t, fams[g].value, "%s: %s", phase, g)
		}
	}

	atZero("idle", compare("idle", false))
	for _, q := range queues {
		q.Add("a")
		q.Add("b")
		k, _ := q.Get()
		q.Done(k)
		q.AddAfter("c", time.Hour)
	}
	time.Sleep(time.Second)
	require.Equal(t, 1.0, compare("at work", true)["workqueue_oldest_ready_seconds"].value, "b has been ready for a second")

	// Shut down once idle: both keep every series, the gauges at 0, as
	// client-go's do (and each scrape after it, too).
	for _, q := range queues {
		k, _ := q.Get()
		q.Done(k)
		q.ShutDown() // drops c, which was waiting
	}
	atZero("shut down", compare("shut down", true))
	atZero("shut down, again", compare("shut down, again", true))
}
