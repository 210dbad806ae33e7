package main

import (
	"testing"

	"go.uber.org/goleak"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRingMetricsRegistered: the ring's gauges, the scaling signal among
// them, are in controller-runtime's registry, which /metrics serves.
func TestRingMetricsRegistered(t *testing.T) {
	m := ringMetrics()
	m.DesiredReplicas.Set(3)
	m.RingBusy.Set(0.5)
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if len(f.GetMetric()) == 1 && f.GetMetric()[0].GetGauge() != nil {
			got[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	for name, want := range map[string]float64{"sharding_desired_replicas": 3, "sharding_ring_busy_ratio": 0.5,
		"sharding_ring_ready_keys": 0, "sharding_ring_oldest_ready_seconds": 0, "sharding_forbidden": 0} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (registered %v), want %v", name, v, ok, want)
		}
	}
}
