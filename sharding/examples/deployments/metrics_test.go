package main

import (
	"strings"
	"testing"
)

// TestMetricsText checks the example's /metrics text: the counters, the
// labelled counters and the per-shard series, which go with their shard.
func TestMetricsText(t *testing.T) {
	g := newGauges()
	m := g.metrics()
	m.Gained.Inc()
	m.Gained.Inc()
	m.Lists("deployments", "gain").Inc()
	m.Lapses("deadline").Inc()
	m.PerShard.SetShard(3, true, 12)
	m.PerShard.SetShard(5, false, 0)
	m.PerShard.DeleteShard(5)
	var b strings.Builder
	g.write(&b)
	out := b.String()
	for _, want := range []string{
		"# TYPE sharding_gained_total counter\nsharding_gained_total 2\n",
		`sharding_lists_total{resource="deployments",cause="gain"} 1`,
		`sharding_lapses_total{cause="deadline"} 1`,
		"# TYPE sharding_shard_admitted gauge\n" + `sharding_shard_admitted{shard="3"} 1`,
		`sharding_shard_objects{shard="3"} 12`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, `shard="5"`) {
		t.Errorf("a released shard's series stayed:\n%s", out)
	}
}
