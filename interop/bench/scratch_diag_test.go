package bench

import (
	"fmt"
	"os"
	"runtime/metrics"
	"testing"
	"time"
)

func readMetric(name string) float64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	switch s[0].Value.Kind() {
	case metrics.KindFloat64:
		return s[0].Value.Float64()
	case metrics.KindUint64:
		return float64(s[0].Value.Uint64())
	}
	return 0
}

func TestDiagContention(t *testing.T) {
	if os.Getenv("DIAG") == "" {
		t.Skip()
	}
	ws := Workloads()
	want := os.Getenv("DIAG")
	for round := 0; round < 6; round++ {
		for _, w := range ws {
			if w.Name != want {
				continue
			}
			runs := map[string]func(*testing.B){"ours": w.RunOurs, "theirs": w.RunTheirs}
			for _, f := range w.Floors {
				runs["floor"] = f.Run
			}
			for _, name := range []string{"ours", "theirs", "floor"} {
				wait0 := readMetric("/sync/mutex/wait/total:seconds")
				gc0 := readMetric("/sched/goroutines-created:goroutines")
				t0 := time.Now()
				r := testing.Benchmark(runs[name])
				_ = t0
				wait1 := readMetric("/sync/mutex/wait/total:seconds")
				_ = gc0
				fmt.Printf("%-7s %8.0f ns/op  mutexwait %8.0f ns/op  N=%d\n", name, float64(r.T.Nanoseconds())/float64(r.N),
					(wait1-wait0)*1e9/float64(r.N), r.N)
			}
		}
	}
}
