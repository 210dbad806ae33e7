package workqueue_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-coalesce/workqueue"
)

// zeroLimiter never delays and tracks nothing: with it, AddRateLimited
// costs only the queue's own work, the floor for any limiter.
type zeroLimiter[T comparable] struct{}

func (zeroLimiter[T]) When(T) time.Duration { return 0 }
func (zeroLimiter[T]) Forget(T)             {}
func (zeroLimiter[T]) NumRequeues(T) int    { return 0 }

// BenchmarkAddRateLimited measures one worker cycle through a
// rate-limiting queue with delays of zero, so no timer is involved:
// AddRateLimited, Get, Forget, Done, over a set of keys. limiter=zero is
// the queue's floor; limiter=exponential adds the failure bookkeeping of
// a real per-key limiter (base 0, so it still never delays).
func BenchmarkAddRateLimited(b *testing.B) {
	limiters := []struct {
		name string
		mk   func() workqueue.RateLimiter[int]
	}{
		{"zero", func() workqueue.RateLimiter[int] { return zeroLimiter[int]{} }},
		{"exponential", func() workqueue.RateLimiter[int] {
			return workqueue.NewItemExponentialFailureRateLimiter[int](0, 0)
		}},
	}
	for _, l := range limiters {
		for _, keys := range []int{1, 1000} {
			b.Run(fmt.Sprintf("limiter=%s/keys=%d", l.name, keys), func(b *testing.B) {
				q := workqueue.NewRateLimitingQueue(l.mk())
				defer q.ShutDown()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					q.AddRateLimited(i % keys)
					item, _ := q.Get()
					if i%4 == 3 { // one in four tries succeeds
						q.Forget(item)
					}
					q.Done(item)
					i++
				}
			})
		}
	}
}

// BenchmarkItemExponentialWhen measures When of the exponential limiter,
// with a Forget after every 8th failure of a key so that counts and the
// map stay realistic, from one goroutine and from many.
func BenchmarkItemExponentialWhen(b *testing.B) {
	for _, keys := range []int{1, 1000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			l := workqueue.NewItemExponentialFailureRateLimiter[int](time.Millisecond, time.Minute)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				k := i % keys
				l.When(k)
				if i/keys%8 == 7 {
					l.Forget(k)
				}
				i++
			}
		})
	}
	b.Run("parallel/keys=1000", func(b *testing.B) {
		l := workqueue.NewItemExponentialFailureRateLimiter[int](time.Millisecond, time.Minute)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				k := i % 1000
				l.When(k)
				if i%8 == 7 {
					l.Forget(k)
				}
				i++
			}
		})
	})
}

// BenchmarkDefaultControllerRateLimiterWhen measures When of the default
// limiter: the exponential part and one token-bucket reservation.
func BenchmarkDefaultControllerRateLimiterWhen(b *testing.B) {
	l := workqueue.DefaultControllerRateLimiter[int]()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		l.When(i % 1000)
		i++
	}
}
