// Package workqueue exists to run client-go's own workqueue tests against
// github.com/go-coalesce/workqueue (the core). It is not for use in
// programs: import the core.
//
// client-go's util/workqueue tests are not in the repository:
// ../../suites_test.go adds them, from the module cache and with its edits,
// to this package at test time (go test -overlay), with harness_test.go.
// They call client-go's names (New, NewTyped, NewDelayingQueueWithConfig,
// NewItemExponentialFailureRateLimiter, ...); this package declares those
// names. By default (alias.go) each one is backed by the core, so the
// tests exercise our queue and limiters; built with the tag clientgo
// (alias_clientgo.go) each one forwards to client-go itself, so the same
// files give client-go's own results to compare with. ../README.md says
// how to run them.
//
// Time: client-go's tests inject a fake clock (k8s.io/utils/clock/testing).
// The constructors here give any clock to the core (Config.Clock, through
// interop/kubeclock); one that reads the real time functions is the core's
// own time and is given as nil. The delaying tests run inside a
// testing/synctest bubble, where those functions are the bubble's fake
// clock, and are given a clock (harness_test.go) that reads the real time
// functions and whose Step sleeps in the bubble. Both variants get that
// same clock, so client-go runs on the bubble's time too.
package workqueue

import (
	"k8s.io/utils/clock"
)

// realTimeClock is a clock that reads the time functions of package time
// (time.Now, time.NewTimer, ...), as clock.RealClock does: inside a
// testing/synctest bubble those are the bubble's fake time, the one the core
// reads too. The harness's clock implements it.
type realTimeClock interface {
	clock.WithTicker
	readsRealTime()
}

// queueTracker is a clock that wants to know the queues made with it, so
// that the test that made the clock can shut them down when it ends:
// client-go's delaying queue runs a goroutine until ShutDown, and a
// testing/synctest bubble does not end while one of its goroutines waits.
type queueTracker interface {
	track(shutDown func())
}

// track hands q's ShutDown to c if c wants it.
func track(c clock.WithTicker, shutDown func()) {
	if t, ok := c.(queueTracker); ok {
		t.track(shutDown)
	}
}
