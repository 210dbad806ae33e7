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
// .../impl=floor or .../impl=floor-<name> for its floors. For the
// interleaved run with medians and ratios, use go run ./cmd/compare.
func BenchmarkCompare(b *testing.B) {
	for _, w := range Workloads() {
		b.Run(w.Name+"/impl=ours", w.RunOurs)
		b.Run(w.Name+"/impl="+w.Theirs, w.RunTheirs)
		for _, f := range w.Floors {
			b.Run(w.Name+"/impl="+floorImpl(f), f.Run)
		}
	}
}

// BenchmarkDebouncedBurst compares a burst of 10 events per key on our
// queue with Debounce and on client-go's (which has none): ns per key and
// runs per key.
func BenchmarkDebouncedBurst(b *testing.B) {
	b.Run("impl=ours", func(b *testing.B) { DebouncedBurst(b, true) })
	b.Run("impl="+clientGo, func(b *testing.B) { DebouncedBurst(b, false) })
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
		runs := map[string]func(*testing.B){"ours": w.RunOurs, w.Theirs: w.RunTheirs}
		for _, f := range w.Floors {
			runs[floorImpl(f)] = f.Run
		}
		for name, run := range runs {
			r := testing.Benchmark(run)
			if r.N == 0 {
				t.Errorf("%s/%s: benchmark failed or did not run", w.Name, name)
			}
		}
	}
	// Every key of the debounced burst is reconciled, by client-go in
	// several runs, and by ours in fewer (one, unless the machine stalls
	// a round for longer than DebounceQuiet).
	for _, ours := range []bool{true, false} {
		r := testing.Benchmark(func(b *testing.B) { DebouncedBurst(b, ours) })
		if r.N == 0 {
			t.Fatalf("debounced burst (ours=%v): benchmark failed or did not run", ours)
		}
		if perKey := r.Extra["runs/key"]; perKey < 1 {
			t.Errorf("debounced burst (ours=%v): %.2f runs per key, want at least one", ours, perKey)
		}
	}
}

func floorImpl(f Floor) string {
	if f.Name == "" {
		return "floor"
	}
	return "floor-" + f.Name
}
