package bench

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/internal/benchwork"
	clientworkqueue "k8s.io/client-go/util/workqueue"
)

// Debounce settings of the debounced-burst workload: longer than a burst
// lasts here (about 1ms), short enough not to dominate the time per key.
const (
	DebounceQuiet   = 2 * time.Millisecond
	DebounceMaxWait = 20 * time.Millisecond
)

// DebouncedBurst is a burst of 10 events on each of 200 keys, arriving in
// ten rounds about 50µs apart while one worker takes keys as they come, the
// way an informer delivers a rollout's updates. client-go has no debounce,
// so a key the worker took between two rounds runs again; ours, with
// Config.Debounce, runs each key once after its burst has been quiet for
// DebounceQuiet. A batch ends when every key has had a run that started
// after its last event (it is then reconciled at its latest version).
// ns/op is per key, and runs/key says how many runs each key cost.
func DebouncedBurst(b *testing.B, ours bool) {
	var q cycler
	if ours {
		q = workqueue.NewWithConfig(workqueue.Config[string]{
			Debounce: workqueue.Debounce{Quiet: DebounceQuiet, MaxWait: DebounceMaxWait},
		})
	} else {
		q = clientworkqueue.NewTyped[string]()
	}
	keys := benchwork.Keys(200)
	index := make(map[string]int, len(keys))
	for i, k := range keys {
		index[k] = i
	}
	final := make([]atomic.Bool, len(keys)) // its last event of the batch is in
	var runs, reconciled atomic.Int64
	batchDone := make(chan struct{}, 1)

	var worker sync.WaitGroup
	worker.Go(func() {
		for {
			k, shutdown := q.Get()
			if shutdown {
				return
			}
			runs.Add(1)
			if i := index[k]; final[i].Load() && final[i].CompareAndSwap(true, false) {
				if reconciled.Add(1) == int64(len(keys)) {
					batchDone <- struct{}{}
				}
			}
			q.Done(k)
		}
	})
	defer func() {
		q.ShutDown()
		worker.Wait()
	}()

	total := 0
	perKey(b, keys, func(batch []string) {
		reconciled.Store(int64(len(keys) - len(batch)))
		for round := range 10 {
			for _, k := range batch {
				if round == 9 {
					final[index[k]].Store(true)
				}
				q.Add(k)
			}
			time.Sleep(50 * time.Microsecond)
		}
		<-batchDone
		total += len(batch)
	})
	b.ReportMetric(float64(runs.Load())/float64(max(total, 1)), "runs/key")
}
