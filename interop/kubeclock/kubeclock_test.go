package kubeclock_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/kubeclock"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	clientworkqueue "k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRealClockIsNil(t *testing.T) {
	require.Nil(t, kubeclock.New(clock.RealClock{}), "the real clock is the queue's default: no adapter in the way")
	require.Nil(t, kubeclock.New(&clock.RealClock{}))
	require.Nil(t, kubeclock.New(nil))
	var c clock.WithTicker = testingclock.NewFakeClock(time.Now()) // what client-go's configs take
	require.NotNil(t, kubeclock.New(c))
}

// delaying is what both libraries' rate-limiting queues offer.
type delaying interface {
	AddAfter(item string, d time.Duration)
	AddRateLimited(item string)
	Len() int
	Get() (string, bool)
	Done(item string)
	ShutDown()
}

// TestStepPastDelay steps one FakeClock past an AddAfter and an
// AddRateLimited on client-go's queue and on ours, each given the clock as
// its config takes it, and requires the key of each at once: the wall
// clock (the bubble's) does not move.
func TestStepPastDelay(t *testing.T) {
	for _, lib := range []string{"client-go", "ours"} {
		t.Run(lib, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := testingclock.NewFakeClock(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
				var q delaying
				if lib == "ours" {
					q = workqueue.NewRateLimitingQueueWithConfig(
						workqueue.NewItemExponentialFailureRateLimiter[string](time.Minute, time.Hour),
						workqueue.Config[string]{Name: "q", Clock: kubeclock.New(fake)})
				} else {
					q = clientworkqueue.NewTypedRateLimitingQueueWithConfig(
						clientworkqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Minute, time.Hour),
						clientworkqueue.TypedRateLimitingQueueConfig[string]{Name: "q", Clock: fake})
				}
				start := time.Now()
				step := func(d time.Duration) {
					synctest.Wait()
					fake.Step(d)
					synctest.Wait()
					require.Zero(t, time.Since(start), "only the fake clock moves")
				}
				take := func(want string) {
					require.Equal(t, 1, q.Len(), "%s ready once the fake clock passed its time", want)
					got, _ := q.Get()
					require.Equal(t, want, got)
					q.Done(got)
				}

				q.AddAfter("a", time.Hour)
				step(time.Hour - time.Nanosecond)
				require.Zero(t, q.Len(), "not before its time")
				step(time.Nanosecond)
				take("a")

				q.AddRateLimited("b") // 1 min
				step(time.Minute)
				take("b")
				q.AddRateLimited("b") // 2 min
				step(time.Minute)
				require.Zero(t, q.Len(), "the second failure backs off twice as long")
				step(time.Minute)
				take("b")

				q.AddAfter("c", time.Hour)
				q.ShutDown()
				synctest.Wait()
				require.False(t, fake.HasWaiters() && lib == "ours", "ShutDown stopped our timer")
			})
		})
	}
}
