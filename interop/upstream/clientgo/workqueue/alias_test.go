//go:build upstream && !clientgo

package workqueue

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// The core reads time itself, so a constructor given a clock it cannot
// follow (client-go's fake clock) must refuse it, not run on real time
// while the test steps a clock nobody reads. The real clock is fine.
func TestForeignClockRefused(t *testing.T) {
	fake := testingclock.NewFakeClock(time.Now())
	require.Panics(t, func() { NewTypedWithConfig(TypedQueueConfig[string]{Clock: fake}) }, "queue")
	require.Panics(t, func() { NewDelayingQueueWithConfig(DelayingQueueConfig{Clock: fake}) }, "delaying queue")
	require.Panics(t, func() {
		NewRateLimitingQueueWithConfig(DefaultControllerRateLimiter(), RateLimitingQueueConfig{Clock: fake})
	}, "rate-limiting queue")

	q := NewDelayingQueueWithConfig(DelayingQueueConfig{Clock: clock.RealClock{}})
	q.ShutDown()
}
