package bench

import (
	"flag"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// BenchmarkCompare runs every workload on both libraries as standard
// benchmarks: go test -bench . ./bench. Names are
// BenchmarkCompare/<workload>/impl=ours and .../impl=<theirs>, and
// .../impl=floor where the workload has a floor. For the
// interleaved run with medians and ratios, use go run ./cmd/compare.
func BenchmarkCompare(b *testing.B) {
	for _, w := range Workloads() {
		b.Run(w.Name+"/impl=ours", w.RunOurs)
		b.Run(w.Name+"/impl="+w.Theirs, w.RunTheirs)
		if w.RunFloor != nil {
			b.Run(w.Name+"/impl=floor", w.RunFloor)
		}
	}
}

// BenchmarkMemoryAfterBurst reports the heap each queue grew for a burst of
// 1M keys (peak-bytes) and what it kept after draining them (kept-bytes).
func BenchmarkMemoryAfterBurst(b *testing.B) {
	for _, impl := range []struct {
		name string
		ours bool
	}{{"ours", true}, {clientGo, false}} {
		b.Run("keys=1M/impl="+impl.name, func(b *testing.B) {
			var m MemResult
			for b.Loop() {
				m = MemoryAfterBurst(1_000_000, impl.ours)
			}
			b.ReportMetric(float64(m.Peak), "peak-bytes")
			b.ReportMetric(float64(m.Kept), "kept-bytes")
		})
	}
}

// TestWorkloadsRun runs each workload for a few iterations, so that go test
// ./... checks that they work (no deadlock, no leaked goroutine) without
// benchmarking.
func TestWorkloadsRun(t *testing.T) {
	bt := flag.Lookup("test.benchtime")
	old := bt.Value.String()
	if err := bt.Value.Set("20x"); err != nil {
		t.Fatal(err)
	}
	defer bt.Value.Set(old)
	for _, w := range Workloads() {
		for name, run := range map[string]func(*testing.B){"ours": w.RunOurs, w.Theirs: w.RunTheirs, "floor": w.RunFloor} {
			if run == nil {
				continue
			}
			r := testing.Benchmark(run)
			if r.N == 0 {
				t.Errorf("%s/%s: benchmark failed or did not run", w.Name, name)
			}
		}
	}
}
