package workqueue

// Tests of RateLimitingQueue (the limiters alone are in ratelimit_test.go).

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// rateLimitingInterface is client-go's workqueue.TypedRateLimitingInterface
// (v0.37), spelled out so that the compiler proves RateLimitingQueue has its
// method set without importing client-go.
type rateLimitingInterface[T comparable] interface {
	Add(item T)
	Len() int
	Get() (item T, shutdown bool)
	Done(item T)
	ShutDown()
	ShutDownWithDrain()
	ShuttingDown() bool
	AddAfter(item T, duration time.Duration)
	AddRateLimited(item T)
	Forget(item T)
	NumRequeues(item T) int
}

var _ rateLimitingInterface[string] = (*RateLimitingQueue[string])(nil)

// requireReadyAt checks, in a synctest bubble, that the key added just now
// is not ready one nanosecond before d from now, and is ready at exactly d.
func requireReadyAt[T comparable](t *testing.T, q *RateLimitingQueue[T], d time.Duration, msg string) {
	t.Helper()
	time.Sleep(d - 1)
	synctest.Wait()
	require.Equal(t, 0, q.Len(), "%s: not ready 1ns before %v", msg, d)
	require.Equal(t, 1, q.Stats().Waiting, "%s: waiting before its deadline", msg)
	time.Sleep(1)
	synctest.Wait()
	require.Equal(t, 1, q.Len(), "%s: ready exactly at %v", msg, d)
	require.Equal(t, 0, q.Stats().Waiting, "%s: no longer waiting", msg)
}

// TestRateLimitingQueueAddRateLimited runs the worker cycle in fake time: a
// failing key comes back after the limiter's growing delays, exactly on
// time, and Forget starts its backoff over.
func TestRateLimitingQueueAddRateLimited(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := NewRateLimitingQueue[string](NewItemExponentialFailureRateLimiter[string](time.Second, time.Minute))
		defer q.ShutDown()

		q.AddRateLimited("a")
		require.Equal(t, 1, q.NumRequeues("a"), "AddRateLimited records a failure")
		requireReadyAt(t, q, time.Second, "first failure")

		for i, want := range []time.Duration{2 * time.Second, 4 * time.Second} {
			item, shutdown := q.Get()
			require.False(t, shutdown)
			require.Equal(t, "a", item)
			// Failing while processing: the retry waits for Done and its
			// deadline, whichever is later.
			q.AddRateLimited("a")
			q.Done("a")
			require.Equal(t, i+2, q.NumRequeues("a"))
			requireReadyAt(t, q, want, fmt.Sprint("failure ", i+2))
		}

		item, _ := q.Get()
		q.Forget(item)
		q.Done(item)
		require.Equal(t, 0, q.NumRequeues("a"), "Forget resets the count")
		q.AddRateLimited("a")
		requireReadyAt(t, q, time.Second, "after Forget")
	})
}

// TestRateLimitingQueueAddRateLimitedMerges checks that AddRateLimited
// follows AddAfter's merge rule: a key that is already ready stays ready
// (the failure is still counted), and a waiting key keeps the earlier of
// its deadlines.
func TestRateLimitingQueueAddRateLimitedMerges(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := NewRateLimitingQueue[string](NewItemFastSlowRateLimiter[string](time.Second, time.Hour, 1))
		defer q.ShutDown()

		q.Add("ready")
		q.AddRateLimited("ready")
		require.Equal(t, 1, q.Len(), "a ready key is not delayed by AddRateLimited")
		require.Equal(t, 0, q.Stats().Waiting)
		require.Equal(t, 1, q.NumRequeues("ready"), "the failure is counted all the same")

		q.AddRateLimited("w") // 1s
		q.AddRateLimited("w") // 1h: the 1s deadline is earlier and stays
		require.Equal(t, 2, q.NumRequeues("w"))
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, 2, q.Len(), "the earliest deadline wins")
	})
}

// TestRateLimitingQueueShutDownSkipsLimiter checks that AddRateLimited on a
// shut-down queue neither counts a failure nor spends a bucket token, and
// adds nothing.
func TestRateLimitingQueueShutDownSkipsLimiter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		bucket := rate.NewLimiter(1, 1)
		q := NewRateLimitingQueue(NewMaxOfRateLimiter(
			RateLimiter[string](NewItemExponentialFailureRateLimiter[string](time.Second, time.Minute)),
			NewBucketRateLimiter[string](bucket),
		))
		q.ShutDown()
		q.AddRateLimited("a")
		require.Equal(t, 0, q.NumRequeues("a"), "no failure counted after ShutDown")
		require.InDelta(t, 1, bucket.Tokens(), 1e-9, "no token spent after ShutDown")
		require.Equal(t, Stats{}, q.Stats(), "nothing added after ShutDown")
		_, shutdown := q.Get()
		require.True(t, shutdown)
	})
}

// TestRateLimitingQueueNilLimiter checks that a nil limiter means
// DefaultControllerRateLimiter: 5ms for a first failure.
func TestRateLimitingQueueNilLimiter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := NewRateLimitingQueue[int](nil)
		defer q.ShutDown()
		q.AddRateLimited(1)
		requireReadyAt(t, q, 5*time.Millisecond, "default limiter")
		require.Equal(t, 1, q.NumRequeues(1))

		q2 := NewRateLimitingQueueWithConfig[int](nil, Config[int]{})
		defer q2.ShutDown()
		q2.AddRateLimited(1)
		requireReadyAt(t, q2, 5*time.Millisecond, "default limiter with config")
	})
}

// countingStore is a FIFO Store that counts Push calls, to show that the
// Config reaches the embedded Queue.
type countingStore struct {
	Store[string]
	pushes int
}

func (s *countingStore) Push(item string) {
	s.pushes++
	s.Store.Push(item)
}

// TestRateLimitingQueueWithConfig checks that the Config is applied.
func TestRateLimitingQueueWithConfig(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &countingStore{Store: NewFIFOStore[string]()}
		q := NewRateLimitingQueueWithConfig(NewItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second), Config[string]{Store: store})
		defer q.ShutDown()
		q.AddRateLimited("a")
		requireReadyAt(t, q, time.Millisecond, "with config")
		require.Equal(t, 1, store.pushes, "the configured store holds the ready key")
	})
}

// TestRateLimitingQueueConcurrent runs workers that fail every key a few
// times before succeeding, under -race, and checks that every key is
// finished and forgotten.
func TestRateLimitingQueueConcurrent(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const (
			keys     = 200
			failures = 3
			workers  = 4
		)
		q := NewRateLimitingQueue[int](nil)
		var done atomic.Int64
		var wrongCount atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for {
					k, shutdown := q.Get()
					if shutdown {
						return
					}
					n := q.NumRequeues(k)
					if n > failures {
						wrongCount.Add(1)
					}
					if n < failures {
						q.AddRateLimited(k)
					} else {
						q.Forget(k)
						if done.Add(1) == keys {
							go q.ShutDownWithDrain()
						}
					}
					q.Done(k)
				}
			})
		}
		for k := range keys {
			q.Add(k)
		}
		wg.Wait()
		require.Equal(t, int64(keys), done.Load(), "every key finished")
		require.Zero(t, wrongCount.Load(), "no key failed more often than scripted")
		for k := range keys {
			require.Equal(t, 0, q.NumRequeues(k), "key %d forgotten", k)
		}
	})
}
