package otel_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/go-coalesce/workqueue"
	wqotel "github.com/go-coalesce/workqueue/otel"
)

func ExampleNewProvider() {
	// In a program, the reader is a PeriodicReader with an OTLP exporter,
	// or the Prometheus exporter; a ManualReader shows what they get.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	provider, err := wqotel.NewProvider(mp)
	if err != nil {
		fmt.Println(err)
		return
	}
	q := workqueue.NewWithConfig(workqueue.Config[string]{
		Name:    "deployments",
		Metrics: provider,
	})
	defer q.ShutDown()

	q.Add("default/web")
	q.Add("default/api")
	q.Add("default/web") // already queued: not an add
	key, _ := q.Get()
	q.Done(key)
	q.AddAfter("default/db", time.Hour) // a retry, waiting

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		fmt.Println(err)
		return
	}
	// Print each point with its attribute, histograms as their count.
	enc := attribute.DefaultEncoder()
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, p.Attributes.Encoded(enc), p.Value))
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} %g", m.Name, p.Attributes.Encoded(enc), p.Value))
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					if m.Name == wqotel.OldestReadyName {
						// A clock reading: how long default/api has
						// been ready.
						lines = append(lines, fmt.Sprintf("%s{%s} >0: %t", m.Name, p.Attributes.Encoded(enc), p.Value > 0))
						continue
					}
					lines = append(lines, fmt.Sprintf("%s{%s} %g", m.Name, p.Attributes.Encoded(enc), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count=%d", m.Name, p.Attributes.Encoded(enc), p.Count))
				}
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// workqueue.adds{name=deployments} 2
	// workqueue.delayed_items{name=deployments} 1
	// workqueue.depth{name=deployments} 1
	// workqueue.longest_running_processor{name=deployments} 0
	// workqueue.oldest_ready{name=deployments,priority=0} >0: true
	// workqueue.queue.duration{name=deployments} count=1
	// workqueue.retries{name=deployments} 1
	// workqueue.unfinished_work{name=deployments} 0
	// workqueue.work.duration{name=deployments} count=1
}
