package main

import (
	"fmt"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/hostmetrics/crmetrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// interop's hostmetrics, alone: a queue's adds show up in the workqueue_*
// families controller-runtime registered on its metrics.Registry.
func init() {
	register("interop/hostmetrics", func() (string, error) {
		q := workqueue.NewWithConfig(workqueue.Config[string]{Name: "newcomer", Metrics: crmetrics.Provider()})
		defer q.ShutDown()
		q.Add("default/web")
		q.Add("default/web")
		families, err := metrics.Registry.Gather()
		if err != nil {
			return "", err
		}
		for _, f := range families {
			if f.GetName() != "workqueue_adds_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "name" && l.GetValue() == "newcomer" {
						if v := m.GetCounter().GetValue(); v != 1 {
							return "", fmt.Errorf("workqueue_adds_total{name=newcomer} = %v, want 1", v)
						}
						return "workqueue_adds_total{name=\"newcomer\"} = 1 on controller-runtime's registry", nil
					}
				}
			}
		}
		return "", fmt.Errorf("no workqueue_adds_total{name=newcomer} on controller-runtime's registry")
	})
}
