//go:build upstream

package workqueue

// The harness around client-go's test files, which ../../suites_test.go
// adds to this package at test time (built with the tag upstream, only
// then): the synctest bubble and clock for the delaying tests, the two
// waits those tests call, and a black-box stand-in for the one queue test
// that cannot run outside client-go. It runs the same way over both
// variants of the package (alias.go, alias_clientgo.go).

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"k8s.io/utils/clock"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// client-go's delaying tests, each run in a synctest bubble (doc.go says
// why). Their bodies are upstream's delaying_queue_test.go, where
// ../../suites_test.go renames each TestX to testX.
func TestSimpleQueue(t *testing.T)     { synctest.Test(t, testSimpleQueue) }
func TestDeduping(t *testing.T)        { synctest.Test(t, testDeduping) }
func TestAddTwoFireEarly(t *testing.T) { synctest.Test(t, testAddTwoFireEarly) }
func TestCopyShifting(t *testing.T)    { synctest.Test(t, testCopyShifting) }

// waitForAdded and waitForWaitingQueueToFill stand for client-go's
// helpers of those names, which ../../suites_test.go drops from
// delaying_queue_test.go. Upstream's polled, every 1 ms for up to 10 s,
// the queue's Len and the length of client-go's unexported
// delayingType.waitingForAddCh. In a bubble, polling sleeps, and sleeping
// moves the clock the test steps, so a queue that fired late, or a Step
// that moved no time, would still pass: the time to fire would come from
// the polls. What both waited for (the waiting loop has taken every
// AddAfter and acted on what fell due) is what synctest.Wait waits for:
// every goroutine of the bubble blocked. Then one look at Len.
func waitForAdded(q DelayingInterface, depth int) error {
	synctest.Wait()
	if n := q.Len(); n != depth {
		return fmt.Errorf("workqueue: Len() = %d, want %d", n, depth)
	}
	return nil
}

func waitForWaitingQueueToFill(DelayingInterface) error {
	synctest.Wait()
	return nil
}

// bubbleClock stands where client-go's tests put a fake clock
// (k8s.io/utils/clock/testing.FakeClock). It is clock.RealClock, so it
// reads time.Now and the timers of package time, which inside a synctest
// bubble are the bubble's fake time: the time the core reads, and, when it
// is given this clock, the time client-go's queue reads. Step moves that
// time as FakeClock.Step moves its own.
//
// It also shuts down, when the test ends, every queue made with it: the
// tests leave their queues running, and client-go's delaying queue keeps a
// goroutine until ShutDown, which would keep the bubble from ending.
type bubbleClock struct {
	clock.RealClock

	mu        sync.Mutex // guards shutDowns
	shutDowns []func()
}

// newBubbleClock returns a clock for one test, which must run in a
// synctest bubble.
func newBubbleClock(tb testing.TB) *bubbleClock {
	c := &bubbleClock{}
	tb.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, shutDown := range c.shutDowns {
			shutDown()
		}
	})
	return c
}

func (c *bubbleClock) readsRealTime() {}

func (c *bubbleClock) track(shutDown func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shutDowns = append(c.shutDowns, shutDown)
}

// Step lets d of the bubble's time pass: the caller sleeps d, during which
// every timer that falls due fires in deadline order, and then waits until
// every other goroutine of the bubble is blocked, so that the queue has
// acted on what fired before the test looks. FakeClock.Step moves time at
// once and returns before the queue acts; the tests poll for that.
func (c *bubbleClock) Step(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// TestRateLimitingQueueDelays checks, through the public API, what
// client-go's TestRateLimitingQueue checks through its internals (that test
// builds client-go's unexported delayingType and reads its channel, so it
// compiles only inside client-go, and is not run here): AddRateLimited
// delays a key by the limiter's When for it, 1 ms then 2 ms per key;
// NumRequeues counts the requeues; Forget starts a key over. In the bubble
// a blocked Get lets time jump to the key's deadline, so the delay is
// measured exactly.
func TestRateLimitingQueueDelays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewRateLimitingQueue(NewItemExponentialFailureRateLimiter(time.Millisecond, time.Second))
		defer q.ShutDown()
		delay := func(item string) time.Duration {
			start := time.Now()
			q.AddRateLimited(item)
			got, shutdown := q.Get()
			elapsed := time.Since(start)
			require.False(t, shutdown)
			require.Equal(t, item, got)
			q.Done(got)
			return elapsed
		}

		require.Equal(t, time.Millisecond, delay("one"), "first requeue of one")
		require.Equal(t, 2*time.Millisecond, delay("one"), "second requeue of one")
		require.Equal(t, 2, q.NumRequeues("one"))
		require.Equal(t, time.Millisecond, delay("two"), "two has its own backoff")
		require.Equal(t, 2*time.Millisecond, delay("two"))

		q.Forget("one")
		require.Equal(t, 0, q.NumRequeues("one"), "Forget resets the count")
		require.Equal(t, time.Millisecond, delay("one"), "Forget resets the backoff")
	})
}
