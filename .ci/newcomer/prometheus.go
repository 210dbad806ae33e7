package main

import (
	"fmt"

	"github.com/go-coalesce/workqueue"
	wqprom "github.com/go-coalesce/workqueue/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// The Prometheus module: a queue's adds show up under client-go's metric
// name in the registry it was given.
func init() {
	register("prometheus", func() (string, error) {
		reg := prometheus.NewRegistry()
		q := workqueue.NewWithConfig(workqueue.Config[string]{Name: "deployments", Metrics: wqprom.NewProvider(reg)})
		q.Add("default/web")
		q.Add("default/web")
		key, _ := q.Get()
		q.Done(key)

		families, err := reg.Gather()
		if err != nil {
			return "", err
		}
		for _, f := range families {
			if f.GetName() != "workqueue_adds_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				if v := m.GetCounter().GetValue(); v == 1 {
					return fmt.Sprintf("workqueue_adds_total{name=%q} = %v after two adds of one key", m.GetLabel()[0].GetValue(), v), nil
				}
			}
			return "", fmt.Errorf("workqueue_adds_total = %v, want 1", f.GetMetric())
		}
		return "", fmt.Errorf("no workqueue_adds_total among %d metric families", len(families))
	})
}
