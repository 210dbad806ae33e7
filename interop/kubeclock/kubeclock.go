// Package kubeclock makes a k8s.io/utils clock the Clock of a
// github.com/go-coalesce/workqueue queue, so that code that hands a clock to
// client-go's queues (TypedRateLimitingQueueConfig.Clock,
// TypedDelayingQueueConfig.Clock) hands the same clock to ours, and a test
// that steps a k8s.io/utils/clock/testing.FakeClock past a delay gets the
// key as it does from client-go's queue. Where a controller built
// client-go's queue with TypedRateLimitingQueueConfig[string]{Name: "job",
// Clock: c}, it builds ours so:
//
//	import (
//		"github.com/go-coalesce/workqueue"
//		"github.com/go-coalesce/workqueue/interop/kubeclock"
//		"k8s.io/utils/clock"
//	)
//
//	func newQueue(c clock.WithTicker) *workqueue.RateLimitingQueue[string] {
//		return workqueue.NewRateLimitingQueueWithConfig(workqueue.DefaultControllerRateLimiter[string](),
//			workqueue.Config[string]{Name: "job", Clock: kubeclock.New(c)})
//	}
package kubeclock

import (
	"sync"
	"time"

	"github.com/go-coalesce/workqueue"
	"k8s.io/utils/clock"
)

// New returns c as a workqueue.Clock. A clock.RealClock (the one
// production code passes) gives nil, which a queue reads as the wall clock
// through package time directly, at no cost; so does a nil c.
//
// Any other clock (a clock.WithTicker, a FakeClock) is read through Now and
// Since, and its timers through NewTimer: the queue's delay timer is a
// timer of c and a goroutine that waits for it, from when the queue arms it
// until it fires or the queue stops it (at the latest at ShutDown). Not
// through c's AfterFunc: FakeClock calls that function while Step holds the
// fake clock's lock, and the queue reads the clock when its timer fires.
func New(c clock.Clock) workqueue.Clock {
	switch c.(type) {
	case nil, clock.RealClock, *clock.RealClock:
		return nil
	}
	return kubeClock{c}
}

type kubeClock struct{ clock.Clock }

func (k kubeClock) AfterFunc(d time.Duration, f func()) workqueue.Timer {
	t := &timer{t: k.NewTimer(d), stop: make(chan struct{})}
	go t.wait(f)
	return t
}

// timer is one call of f scheduled on a clock.Timer; the goroutine that
// waits for it ends when it fires or when Stop is called.
type timer struct {
	t    clock.Timer
	stop chan struct{}
	once sync.Once
}

func (t *timer) wait(f func()) {
	select {
	case <-t.t.C():
		f()
	case <-t.stop:
	}
}

// Stop stops the clock's timer and ends the goroutine that waits for it. If
// the timer fired at the same moment, f may still run once: the queue
// takes a call with nothing due as a cue to arm its timer again.
func (t *timer) Stop() bool {
	stopped := t.t.Stop()
	t.once.Do(func() { close(t.stop) })
	return stopped
}
