package interop

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/stretchr/testify/require"
	clientworkqueue "k8s.io/client-go/util/workqueue"
)

// Each test here is one deliberate difference from client-go (README.md,
// "Where it differs from client-go"), shown side by side: the same calls on both queues,
// and what each one does. If client-go changes its behaviour, the client-go
// half fails and the README must be updated.

// Done of a key that is not processing: client-go pushes it into its store a
// second time (kubernetes#79934), so Get hands it out twice, the second time
// while it is still processing. Ours ignores the Done.
func TestDifferenceDoneOfKeyNotProcessing(t *testing.T) {
	t.Parallel()
	t.Run("ours", func(t *testing.T) {
		q := workqueue.New[string]()
		q.Add("a")
		q.Done("a") // a is ready, not processing
		require.Equal(t, 1, q.Len(), "Done of a ready key changes nothing")
		k, _ := q.Get()
		require.Equal(t, "a", k)
		require.Equal(t, 0, q.Len(), "a is handed out once")
	})
	t.Run("client-go", func(t *testing.T) {
		q := clientworkqueue.NewTyped[string]()
		defer q.ShutDown()
		q.Add("a")
		q.Done("a")
		require.Equal(t, 2, q.Len(), "client-go pushes the dirty key again: a duplicate")
		k1, _ := q.Get()
		k2, _ := q.Get()
		require.Equal(t, []string{"a", "a"}, []string{k1, k2}, "client-go hands a out twice, to two workers at once")
	})
}

// Add of a key that waits for an AddAfter deadline: client-go adds it now
// and leaves the heap entry, so the key runs twice (kubernetes#126027). Ours
// keeps one pending run at the earliest time asked for: the Add.
func TestDifferenceAddOfWaitingKey(t *testing.T) {
	t.Parallel()
	type delaying = clientworkqueue.TypedDelayingInterface[string]
	story := func(t *testing.T, q delaying) (runs int) {
		q.AddAfter("a", time.Second)
		q.Add("a") // an event arrives: run now
		synctest.Wait()
		for range 2 {
			for q.Len() > 0 {
				k, _ := q.Get()
				runs++
				q.Done(k)
			}
			time.Sleep(time.Second) // the old deadline passes
			synctest.Wait()
		}
		return runs
	}
	t.Run("ours", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := workqueue.New[string]()
			defer q.ShutDown()
			require.Equal(t, 1, story(t, q), "one pending run: the Add replaced the delayed one")
		})
	})
	t.Run("client-go", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := clientworkqueue.NewTypedDelayingQueue[string]()
			defer q.ShutDown()
			require.Equal(t, 2, story(t, q), "client-go runs the key again when the stale deadline passes")
		})
	})
}

// AddAfter of a key that is already ready: the same rule seen from the
// other side. client-go remembers the deadline and runs the key once more
// after it has been processed; ours has the earlier run already.
func TestDifferenceAddAfterOfReadyKey(t *testing.T) {
	t.Parallel()
	story := func(q clientworkqueue.TypedDelayingInterface[string]) (runs int) {
		q.Add("a")
		q.AddAfter("a", time.Second)
		synctest.Wait()
		for range 2 {
			for q.Len() > 0 {
				k, _ := q.Get()
				runs++
				q.Done(k)
			}
			time.Sleep(time.Second)
			synctest.Wait()
		}
		return runs
	}
	t.Run("ours", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := workqueue.New[string]()
			defer q.ShutDown()
			require.Equal(t, 1, story(q))
		})
	})
	t.Run("client-go", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := clientworkqueue.NewTypedDelayingQueue[string]()
			defer q.ShutDown()
			require.Equal(t, 2, story(q))
		})
	})
}

// AddRateLimited after ShutDown: client-go asks the limiter first, so a
// queue that is going away still counts a failure (and spends a bucket
// token). Ours does not touch the limiter.
func TestDifferenceAddRateLimitedAfterShutDown(t *testing.T) {
	t.Parallel()
	t.Run("ours", func(t *testing.T) {
		q := workqueue.NewRateLimitingQueue(workqueue.NewItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second))
		q.ShutDown()
		q.AddRateLimited("a")
		require.Equal(t, 0, q.NumRequeues("a"), "no failure counted after ShutDown")
		require.Equal(t, 0, q.Stats().Waiting, "and nothing waits")
	})
	t.Run("client-go", func(t *testing.T) {
		q := clientworkqueue.NewTypedRateLimitingQueue(clientworkqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second))
		q.ShutDown()
		q.AddRateLimited("a")
		require.Equal(t, 1, q.NumRequeues("a"), "client-go counts a failure for a key it then drops")
	})
}

// Goroutines: a plain delaying queue of ours starts none until a key waits,
// and none once ShutDown has dropped the waiting keys; client-go's starts
// its waiting loop (with a 10 s heartbeat) in the constructor and keeps it
// until ShutDown.
func TestDifferenceGoroutines(t *testing.T) {
	t.Parallel()
	t.Run("ours", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := workqueue.New[string]()
			q.Add("a")
			// If the queue had started a goroutine, it would be
			// blocked now and synctest.Test would report a deadlock
			// at the end of the bubble, since nothing shuts q down.
			synctest.Wait()
			_ = q
		})
	})
	t.Run("client-go", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := clientworkqueue.NewTypedDelayingQueue[string]()
			// Without this ShutDown the bubble would never end: the
			// waiting loop runs until ShutDown.
			q.ShutDown()
		})
	})
}
