package workqueue_test

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/go-coalesce/workqueue"
)

// BenchmarkInspect1M takes the snapshot the debug page takes (20
// processing, 20 waiting, 20 ready keys) of a queue holding a million keys:
// 4 processing, 500k ready, 500k waiting at random deadlines. Its time is
// how long the queue's lock is held. Without metrics the processing keys
// are found by a walk of the key table.
func BenchmarkInspect1M(b *testing.B) {
	for _, metrics := range []bool{true, false} {
		b.Run("metrics="+strconv.FormatBool(metrics), func(b *testing.B) {
			cfg := workqueue.Config[string]{}
			if metrics {
				cfg = workqueue.Config[string]{Name: "b", Metrics: &countingMetrics{}}
			}
			q := workqueue.NewWithConfig(cfg)
			defer q.ShutDown()
			for i := range 4 {
				q.Add("run-" + strconv.Itoa(i))
				q.Get()
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range 500_000 {
				q.Add("ready-" + strconv.Itoa(i))
				q.AddAfter("wait-"+strconv.Itoa(i), time.Hour+time.Duration(rng.IntN(1e6))*time.Millisecond)
			}
			lim := workqueue.InspectLimits{Processing: 20, Waiting: 20, Ready: 20}
			b.ReportAllocs()
			for b.Loop() {
				_ = q.InspectLimited(lim)
			}
		})
	}
}
