package bench

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/go-coalesce/workqueue"
	clientworkqueue "k8s.io/client-go/util/workqueue"
)

// The contended rows are bimodal: some rounds run several times slower than
// others, for every queue whose lock parks at once. One guess was
// sync.Mutex's starvation mode (once a waiter has waited more than 1 ms,
// every Unlock hands the lock to the oldest waiter, a context switch per
// hand-off). ModeRound tests that guess instead of trusting it: it runs a
// workload while a sampler reads the queue's mutex state word and counts
// how often the starving bit is set. It is rarely set (at most 1.5% of
// samples), in fast and slow rounds alike; the slow mode is a convoy of
// goroutines parked on the mutex's semaphore, which the backoff floor and
// our queue (lock.go in the core module) stay out of (PERF.md, Notes).
//
// Reading another package's mutex state is a diagnostic, not an API: it
// relies on sync.Mutex starting with its int32 state word (true of every
// Go release since 1.0, and checked at run time below on a mutex put in a
// known state) and on the starving bit being 4 (mutexStarving in
// internal/sync).

const mutexStarving = 4

// ModeResult is one round of one queue: the workload's ns/op, and the share
// of the sampler's reads that found the mutex in starvation mode.
type ModeResult struct {
	Queue    string
	NsPerOp  float64
	Starving float64 // 0..1
	Samples  int
}

// mutexState reads the state word of mu.
func mutexState(mu *sync.Mutex) int32 {
	return atomic.LoadInt32((*int32)(unsafe.Pointer(mu)))
}

// checkLayout panics unless the state word reads as this package expects: a
// locked mutex has bit 1 set, an unlocked one none.
func checkLayout() {
	var mu sync.Mutex
	mu.Lock()
	locked := mutexState(&mu)
	mu.Unlock()
	if locked&1 == 0 || mutexState(&mu) != 0 {
		panic("bench: sync.Mutex no longer starts with its state word; the starvation probe cannot read it")
	}
}

// ourMutex returns the mutex of our queue (the unexported field mu).
func ourMutex[T comparable](q *workqueue.Queue[T]) *sync.Mutex {
	f := reflect.ValueOf(q).Elem().FieldByName("mu")
	return (*sync.Mutex)(unsafe.Pointer(f.UnsafeAddr()))
}

// clientGoMutex returns the mutex of a client-go queue: its cond's Locker.
func clientGoMutex[T comparable](q clientworkqueue.TypedInterface[T]) *sync.Mutex {
	f := reflect.ValueOf(q).Elem().FieldByName("cond")
	cond := (*sync.Cond)(unsafe.Pointer(f.Pointer()))
	return cond.L.(*sync.Mutex)
}

// ModeQueues are the queues ModeRound compares, by name.
var ModeQueues = []string{"ours", "client-go", "floor", "floor-backoff"}

// ModeRound runs distinct-x8-int (mult = 8) or the 2x32 worker pool (mult
// = 0) once on the named queue with testing.Benchmark (so for
// -test.benchtime), sampling its mutex every so often (never if every is
// 0). The sampler is a goroutine woken by a ticker: on 2 cores its
// wake-ups perturb the workload, so compare with a run without it.
func ModeRound(queue string, mult int, every time.Duration) ModeResult {
	checkLayout()
	// testing.Benchmark calls run several times, and the worker pool
	// shuts its queue down: each call gets a new queue, and the sampler
	// follows it.
	var current atomic.Pointer[sync.Mutex]
	newQueue := func() typedQueue[int] {
		switch queue {
		case "ours":
			q := workqueue.New[int]()
			current.Store(ourMutex(q))
			return q
		case "client-go":
			q := clientworkqueue.NewTyped[int]()
			current.Store(clientGoMutex[int](q))
			return q
		case "floor":
			q := newFloorCond[int](false)
			current.Store(&q.mu)
			return q
		case "floor-backoff":
			q := newFloorCond[int](true)
			current.Store(&q.mu)
			return q
		}
		panic(fmt.Sprintf("bench: no queue %q", queue))
	}
	newQueue() // fails early on a bad name
	var samples, starving atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		if every <= 0 {
			return // no sampling: the ns/op without the probe
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				samples.Add(1)
				if mutexState(current.Load())&mutexStarving != 0 {
					starving.Add(1)
				}
			}
		}
	})
	run := func(b *testing.B) {
		if mult > 0 {
			distinct(b, newQueue(), intKeys(), mult)
		} else {
			workerPool(b, newQueue(), intKeys(), 2, 32)
		}
	}
	r := testing.Benchmark(run)
	close(stop)
	sampler.Wait()
	res := ModeResult{Queue: queue, NsPerOp: float64(r.T.Nanoseconds()) / float64(r.N), Samples: int(samples.Load())}
	if res.Samples > 0 {
		res.Starving = float64(starving.Load()) / float64(res.Samples)
	}
	return res
}
