package workqueue

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

// BenchmarkAddAfter measures the delay path end to end, in real time: each
// iteration gives `keys` distinct keys a run after 1ms with AddAfter, then
// drains them with Get and Done as the timer makes them ready. ns/key and
// allocs/key are per key. The 1ms that the keys wait is part of each
// iteration: at most 100 ns/key at keys=10000, less when adding the keys
// takes longer than 1ms, as for any queue measured the same way. Goal: at
// most 1 alloc per key amortized.
func BenchmarkAddAfter(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = "default/deployment-" + strconv.Itoa(i)
			}
			q := New[string]()
			defer q.ShutDown()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			mallocs := ms.Mallocs
			b.ReportAllocs()
			for b.Loop() {
				for _, k := range keys {
					q.AddAfter(k, time.Millisecond)
				}
				for range keys {
					k, _ := q.Get()
					q.Done(k)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&ms)
			perKey := float64(b.N) * float64(n)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/perKey, "ns/key")
			b.ReportMetric(float64(ms.Mallocs-mallocs)/perKey, "allocs/key")
		})
	}
}
