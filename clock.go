package workqueue

import "time"

// Clock is a source of time for a queue (Config.Clock): code that already
// steps a fake clock through client-go's queues (TypedDelayingQueueConfig
// and TypedRateLimitingQueueConfig take a clock.WithTicker) can step it
// through ours. interop/kubeclock turns any k8s.io/utils clock, the fake
// one included, into a Clock in one line.
//
// Under a Clock, the queue reads it for every time it keeps: AddAfter's
// and AddRateLimited's deadlines, Debounce's quiet time and MaxWait, a
// FairPriorityStore's MaxWait, the ages and latencies that metrics, Inspect
// and MostRequeued report; and it arms its one delay timer through
// AfterFunc. A rate limiter that reads time itself (BucketRateLimiter,
// through rate.Limiter) keeps the wall clock, as client-go's does.
//
// The queue calls Now and Since with its own lock held, so they must not
// call the queue; AfterFunc too, and f takes the queue's lock, so f must
// run on a goroutine of its own (or later), never inside AfterFunc or
// inside a Stop. Since must agree with Now: Since(t) is Now().Sub(t), and
// Now never goes back.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Since returns the time passed since t.
	Since(t time.Time) time.Duration
	// AfterFunc calls f, on a goroutine of its own, once d has passed,
	// unless the returned Timer is stopped first. The queue keeps at most
	// one such timer armed, and stops it before it arms another.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a call that Clock.AfterFunc has scheduled. *time.Timer is one.
type Timer interface {
	// Stop cancels the call if it has not started, and reports whether it
	// did so.
	Stop() bool
}

// clockedStore is a Store that reads time itself (a FairPriorityStore with
// MaxWait): NewWithConfig hands it Config.Clock, before any key is pushed.
type clockedStore interface {
	useClock(c Clock)
}
