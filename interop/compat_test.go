package interop

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
	clientworkqueue "k8s.io/client-go/util/workqueue"
)

// compat.go proves at compile time that the types fit; these tests prove
// that the values work once they cross over.

// drainAll takes every ready key in order, calling Done on each.
func drainAll(q interface {
	Len() int
	Get() (string, bool)
	Done(string)
}) []string {
	var got []string
	for q.Len() > 0 {
		k, _ := q.Get()
		got = append(got, k)
		q.Done(k)
	}
	return got
}

// TestOurStoreInClientGo runs client-go's queue on our stores.
func TestOurStoreInClientGo(t *testing.T) {
	t.Parallel()
	for name, store := range map[string]workqueue.Store[string]{
		"fifo":     workqueue.NewFIFOStore[string](),
		"priority": workqueue.NewPriorityStore[string](),
		"fair":     workqueue.NewFairStore(func(k string) string { return k[:1] }),
	} {
		t.Run(name, func(t *testing.T) {
			q := clientworkqueue.NewTypedWithConfig(clientworkqueue.TypedQueueConfig[string]{Queue: store})
			defer q.ShutDown()
			for _, k := range []string{"a1", "a2", "a1", "a3"} {
				q.Add(k)
			}
			require.Equal(t, 3, q.Len(), "client-go coalesces duplicates before they reach the store")
			got := drainAll(q)
			require.ElementsMatch(t, []string{"a1", "a2", "a3"}, got, "every key comes out of our store once")
			if name != "fair" {
				require.Equal(t, []string{"a1", "a2", "a3"}, got, "plain Push is FIFO (priority 0)")
			}
			require.Equal(t, 0, store.Len(), "the store is empty after the drain")
		})
	}
}

// TestClientGoStoreInOurs runs our queue on client-go's slice FIFO.
func TestClientGoStoreInOurs(t *testing.T) {
	t.Parallel()
	store := clientworkqueue.DefaultQueue[string]()
	q := workqueue.NewWithConfig(workqueue.Config[string]{Store: store})
	for _, k := range []string{"a", "b", "a", "c"} {
		q.Add(k)
	}
	k, _ := q.Get()
	require.Equal(t, "a", k)
	q.Add("a") // processing: dirty again, pushed to the store at Done
	require.Equal(t, 2, store.Len(), "b and c are in client-go's store")
	q.Done("a")
	require.Equal(t, []string{"b", "c", "a"}, drainAll(q), "a re-added while processing goes to the tail")
	q.ShutDown()
}

// TestClientGoDelayingQueueOverOurQueue gives client-go's delaying queue our
// Queue as its inner TypedInterface.
func TestClientGoDelayingQueueOverOurQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		inner := workqueue.New[string]()
		q := clientworkqueue.NewTypedDelayingQueueWithConfig(clientworkqueue.TypedDelayingQueueConfig[string]{Queue: inner})
		defer q.ShutDown()
		q.AddAfter("a", time.Second)
		q.Add("b")
		synctest.Wait()
		require.Equal(t, 1, inner.Len(), "only b is ready")
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []string{"b", "a"}, drainAll(q), "client-go's waiting loop added a to our queue at its deadline")
	})
}

// TestRateLimitingQueuesSwapLimiters runs each library's rate-limiting
// queue with the other library's limiter.
func TestRateLimitingQueuesSwapLimiters(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ours := workqueue.NewRateLimitingQueue(clientworkqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second))
		theirs := clientworkqueue.NewTypedRateLimitingQueue[string](workqueue.NewItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second))
		defer ours.ShutDown()
		defer theirs.ShutDown()
		for _, q := range []clientworkqueue.TypedRateLimitingInterface[string]{ours, theirs} {
			q.AddRateLimited("a") // 1ms
			q.AddRateLimited("a") // 2ms, merged: the earlier deadline stays
			require.Equal(t, 2, q.NumRequeues("a"))
			synctest.Wait()
			require.Equal(t, 0, q.Len())
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		for _, q := range []clientworkqueue.TypedRateLimitingInterface[string]{ours, theirs} {
			require.Equal(t, 1, q.Len(), "the key is ready after the first delay")
			k, _ := q.Get()
			q.Forget(k)
			q.Done(k)
			require.Equal(t, 0, q.NumRequeues("a"), "Forget reaches the other library's limiter")
		}
	})
}

// TestLimitersAgree asks each of our limiters and its client-go counterpart
// for the same sequence of delays. Time runs in a bubble so that the token
// buckets are deterministic.
func TestLimitersAgree(t *testing.T) {
	t.Parallel()
	type limiter = clientworkqueue.TypedRateLimiter[string]
	cases := []struct {
		name         string
		ours, theirs func() limiter
	}{
		{"exponential",
			func() limiter {
				return workqueue.NewItemExponentialFailureRateLimiter[string](time.Millisecond, 300*time.Millisecond)
			},
			func() limiter {
				return clientworkqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 300*time.Millisecond)
			}},
		{"fast-slow",
			func() limiter { return workqueue.NewItemFastSlowRateLimiter[string](time.Millisecond, time.Second, 3) },
			func() limiter {
				return clientworkqueue.NewTypedItemFastSlowRateLimiter[string](time.Millisecond, time.Second, 3)
			}},
		{"bucket",
			func() limiter { return workqueue.NewBucketRateLimiter[string](rate.NewLimiter(10, 3)) },
			func() limiter {
				return &clientworkqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(10, 3)}
			}},
		{"max-of",
			func() limiter { return workqueue.DefaultControllerRateLimiter[string]() },
			func() limiter { return clientworkqueue.DefaultTypedControllerRateLimiter[string]() }},
		{"with-max-wait",
			func() limiter {
				return workqueue.NewWithMaxWaitRateLimiter[string](workqueue.NewItemExponentialFailureRateLimiter[string](time.Millisecond, time.Hour), 50*time.Millisecond)
			},
			func() limiter {
				return clientworkqueue.NewTypedWithMaxWaitRateLimiter[string](clientworkqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Hour), 50*time.Millisecond)
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ours, theirs := c.ours(), c.theirs()
				for i := range 12 {
					key := []string{"a", "b"}[i%2]
					require.Equalf(t, theirs.When(key), ours.When(key), "When(%s), call %d", key, i)
					require.Equalf(t, theirs.NumRequeues(key), ours.NumRequeues(key), "NumRequeues(%s), call %d", key, i)
					if i == 7 {
						ours.Forget("a")
						theirs.Forget("a")
					}
				}
			})
		})
	}
}
