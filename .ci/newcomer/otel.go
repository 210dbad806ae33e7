package main

import (
	"context"
	"fmt"

	"github.com/go-coalesce/workqueue"
	wqotel "github.com/go-coalesce/workqueue/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The OpenTelemetry module: a queue's adds show up, under the module's
// name for them, in what an SDK reader collects.
func init() {
	register("otel", func() (string, error) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		p, err := wqotel.NewProvider(mp)
		if err != nil {
			return "", err
		}
		q := workqueue.NewWithConfig(workqueue.Config[string]{Name: "deployments", Metrics: p})
		q.Add("default/web")
		q.Add("default/web")
		key, _ := q.Get()
		q.Done(key)

		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			return "", err
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != wqotel.AddsName {
					continue
				}
				sum, ok := m.Data.(metricdata.Sum[int64])
				if !ok || len(sum.DataPoints) != 1 || sum.DataPoints[0].Value != 1 {
					return "", fmt.Errorf("%s = %+v, want one point of 1", m.Name, m.Data)
				}
				return fmt.Sprintf("%s = 1 after two adds of one key", m.Name), nil
			}
		}
		return "", fmt.Errorf("no %s among the collected metrics", wqotel.AddsName)
	})
}
