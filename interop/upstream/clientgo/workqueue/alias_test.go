//go:build upstream && !clientgo

package workqueue

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// A constructor given client-go's fake clock gives it to the core, which
// then follows it: stepping the clock past a delay makes the key ready with
// no real time passing, from each constructor that takes a Clock. The real
// clock is the core's own time.
func TestForeignClockFollowed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := testingclock.NewFakeClock(time.Now())
		queues := []TypedDelayingInterface[any]{
			NewDelayingQueueWithConfig(DelayingQueueConfig{Clock: fake}),
			NewRateLimitingQueueWithConfig(DefaultControllerRateLimiter(), RateLimitingQueueConfig{Clock: fake}),
		}
		plain := NewTypedWithConfig(TypedQueueConfig[any]{Clock: fake})
		queues = append(queues, plain)
		start := time.Now()
		for _, q := range queues {
			q.AddAfter("a", time.Hour)
		}
		fake.Step(time.Hour)
		synctest.Wait()
		for i, q := range queues {
			require.Equal(t, 1, q.Len(), "queue %d: ready once the fake clock passed the delay", i)
			q.ShutDown()
		}
		require.Zero(t, time.Since(start), "only the fake clock moved")
	})

	q := NewDelayingQueueWithConfig(DelayingQueueConfig{Clock: clock.RealClock{}})
	q.ShutDown()
}
