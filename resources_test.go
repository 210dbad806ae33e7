package workqueue_test

// Tests of what a queue holds on to: goroutines, keys, memory.

import (
	"context"
	"errors"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/go-coalesce/workqueue"
)

// ---------------------------------------------------------------------------
// Resources: goroutines, garbage, memory.

// TestNoGoroutines checks that a plain queue starts no goroutine, named or
// not, for any of its operations (besides AfterFunc for a cancellable
// context, which is the context's).
func TestNoGoroutines(t *testing.T) {
	goleak.VerifyNone(t) // a quiet baseline
	before := runtime.NumGoroutine()
	q := workqueue.New[int]()
	var z workqueue.Queue[int]
	for _, q := range []*workqueue.Queue[int]{q, &z} {
		for i := range 100 {
			q.Add(i)
			q.Add(i)
		}
		for range 50 {
			k, _ := q.Get()
			q.Add(k)
			q.Done(k)
		}
		k, err := q.GetContext(context.Background())
		require.NoError(t, err, "a key is ready")
		q.Done(k)
		_ = q.Len()
		_ = q.Stats()
		require.Equal(t, before, runtime.NumGoroutine(), "Add, Get, GetContext and Done must start no goroutine")
		q.ShutDown()
		for {
			k, shutdown := q.Get()
			if shutdown {
				break
			}
			q.Done(k)
		}
		q.ShutDownWithDrain()
		require.Equal(t, before, runtime.NumGoroutine(), "ShutDown and drain must start no goroutine")
	}
	goleak.VerifyNone(t)
}

// waitCollected runs the garbage collector until done is closed, a bounded
// number of times, and reports whether it was.
func waitCollected(done <-chan struct{}) bool {
	for range 50 {
		runtime.GC()
		runtime.Gosched()
		select {
		case <-done:
			return true
		default:
		}
	}
	return false
}

type payload struct{ buf [64]byte }

// TestKeyCollectedAfterDone checks that the queue keeps no reference to a
// key once it has been handed out and Done, whichever way it went.
func TestKeyCollectedAfterDone(t *testing.T) {
	for _, path := range []string{"Add-Get-Done", "re-added while processing", "Done twice", "shut down"} {
		t.Run(path, func(t *testing.T) {
			q := workqueue.New[*payload]()
			collected := make(chan struct{})
			func() {
				p := &payload{}
				runtime.AddCleanup(p, func(c chan struct{}) { close(c) }, collected)
				for i := range 20 { // other keys around it, so the ring wraps
					q.Add(&payload{buf: [64]byte{byte(i)}})
				}
				q.Add(p)
				for range 20 {
					k, _ := q.Get()
					q.Done(k)
				}
				k, _ := q.Get()
				switch path {
				case "re-added while processing":
					q.Add(k)
					q.Done(k)
					k, _ = q.Get()
				case "Done twice":
					q.Done(k)
				case "shut down":
					q.ShutDown()
				}
				q.Done(k)
			}()
			require.True(t, waitCollected(collected), "a key handed out and Done must not be kept alive by the queue")
			runtime.KeepAlive(q)
		})
	}
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// burstMemory queues n distinct keys on q, drains them in the given order,
// and returns how much the heap grew with the keys queued and how much of
// that is still held once they are drained.
func burstMemory(q *workqueue.Queue[int], n int, order string) (grew, kept uint64) {
	before := heapInUse()
	for i := range n {
		q.Add(i)
	}
	peak := heapInUse()
	switch order {
	case "get-done":
		for range n {
			k, _ := q.Get()
			q.Done(k)
		}
	case "get-all-then-done":
		for range n {
			q.Get()
		}
		for i := range n {
			q.Done(i)
		}
	}
	after := heapInUse()
	if peak > before {
		grew = peak - before
	}
	if after > before {
		kept = after - before
	}
	return grew, kept
}

// TestMemoryAfterBurst queues and drains 1M distinct keys and checks that
// the queue then keeps at most 10% of the heap it grew: the key table and
// the ring give their memory back (a Go map never shrinks on its own). It
// checks a second burst on the same queue too: memory follows the live key
// count, not the peak of the bursts before. Under -race, where 1M keys take
// several seconds, it uses 64K keys: the property does not depend on the
// count once it is far above the sizes below which the queue does not
// bother to shrink.
func TestMemoryAfterBurst(t *testing.T) {
	n := 1 << 20
	if workqueue.RaceBuild() {
		n = 1 << 16
	}
	check := func(t *testing.T, grew, kept uint64, what string) {
		t.Helper()
		require.Greater(t, grew, uint64(n), "queueing %d keys must grow the heap", n)
		require.LessOrEqual(t, kept, grew/10,
			"after draining %d keys (%s) the queue keeps %d of the %d bytes it grew; at most 10%% allowed", n, what, kept, grew)
		// Memory follows the live key count, which is now zero: what an
		// idle queue holds must not grow with the size of past bursts.
		const idleMax = 1 << 20
		require.LessOrEqual(t, kept, uint64(idleMax),
			"after draining %d keys (%s) the idle queue keeps %d bytes; at most %d allowed, whatever the burst size", n, what, kept, idleMax)
	}
	t.Run("get-done twice", func(t *testing.T) {
		q := workqueue.New[int]()
		grew, kept := burstMemory(q, n, "get-done")
		check(t, grew, kept, "first burst")
		grew, kept = burstMemory(q, n, "get-done")
		check(t, grew, kept, "second burst of the same size")
		require.Equal(t, workqueue.Stats{}, trimStats(q.Stats()), "the queue is empty")
		runtime.KeepAlive(q)
	})
	t.Run("get-all-then-done", func(t *testing.T) {
		// All keys processing at once: the key table peaks with
		// processing entries rather than ready ones.
		q := workqueue.New[int]()
		grew, kept := burstMemory(q, n, "get-all-then-done")
		check(t, grew, kept, "all processing, then all Done")
		require.Equal(t, workqueue.Stats{}, trimStats(q.Stats()), "the queue is empty")
		runtime.KeepAlive(q)
	})
}

// TestErrShutDown checks the error's identity and message prefix.
func TestErrShutDown(t *testing.T) {
	require.True(t, errors.Is(workqueue.ErrShutDown, workqueue.ErrShutDown), "ErrShutDown is a sentinel")
	require.Contains(t, workqueue.ErrShutDown.Error(), "workqueue:", "errors start with the package name")
}
