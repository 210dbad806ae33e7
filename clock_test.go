package workqueue

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a Clock that moves only when Step is called, as client-go
// users' fake clocks do. Step starts the calls whose time has come, each on
// a goroutine of its own, so under synctest a synctest.Wait after Step sees
// them done.
type fakeClock struct {
	mu     sync.Mutex // guards the fields below
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c  *fakeClock
	at time.Time
	f  func()
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, tm)
	return tm
}

func (tm *fakeTimer) Stop() bool {
	tm.c.mu.Lock()
	defer tm.c.mu.Unlock()
	for i, x := range tm.c.timers {
		if x == tm {
			tm.c.timers = append(tm.c.timers[:i], tm.c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Step moves the clock by d and starts the calls that are due.
func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at.After(c.now) {
			kept = append(kept, tm)
		} else {
			due = append(due, tm.f)
		}
	}
	c.timers = kept
	c.mu.Unlock()
	for _, f := range due {
		go f()
	}
}

// pending counts the timers armed and not yet due.
func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// step steps c by d inside a synctest bubble and waits until the calls it
// started have returned; it checks that the bubble's own clock did not
// move, so whatever the queue does next it did on c's time alone.
func step(t *testing.T, c *fakeClock, d time.Duration) {
	t.Helper()
	start := time.Now()
	c.Step(d)
	synctest.Wait()
	require.Zero(t, time.Since(start), "the wall clock stood still; only the fake clock moved")
}

// readyNow checks that q hands out want at once, with no wall time passing.
func readyNow[T comparable](t *testing.T, q interface {
	Len() int
	Get() (T, bool)
}, want T) {
	t.Helper()
	start := time.Now()
	require.Equal(t, 1, q.Len(), "the key is ready as soon as the fake clock passed its time")
	got, shutdown := q.Get()
	require.False(t, shutdown)
	require.Equal(t, want, got)
	require.Zero(t, time.Since(start), "Get did not wait")
}

func TestClockAddAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeClock{} // from the zero time: the queue's origin is the clock's first reading
		q := NewWithConfig(Config[string]{Clock: c})
		defer q.ShutDown()
		q.AddAfter("a", time.Hour)
		q.AddAfter("b", 2*time.Hour)
		step(t, c, time.Hour-time.Nanosecond)
		require.Zero(t, q.Len(), "not due before its time on the fake clock")
		step(t, c, time.Nanosecond)
		readyNow(t, q, "a")
		q.Done("a")
		require.Equal(t, 1, c.pending(), "the timer is armed again, for b")
		step(t, c, time.Hour)
		readyNow(t, q, "b")
		q.Done("b")
		require.Zero(t, c.pending(), "no key waits: no timer is left armed")

		q.AddAfter("c", time.Minute)
		q.ShutDown()
		require.Zero(t, c.pending(), "ShutDown stops the clock's timer")
	})
}

func TestClockAddRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeClock{now: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}
		q := NewRateLimitingQueueWithConfig(NewItemExponentialFailureRateLimiter[string](time.Minute, time.Hour), Config[string]{Clock: c})
		defer q.ShutDown()
		q.AddRateLimited("a") // 1 min
		step(t, c, time.Minute)
		readyNow(t, q, "a")
		q.AddRateLimited("a") // 2 min, due once a's run ends
		q.Done("a")
		step(t, c, time.Minute)
		require.Zero(t, q.Len(), "the second failure backs off twice as long")
		step(t, c, time.Minute)
		readyNow(t, q, "a")
		q.Done("a")
	})
}

func TestClockDebounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeClock{now: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}
		q := NewWithConfig(Config[string]{Clock: c, Debounce: Debounce{Quiet: time.Second, MaxWait: 3 * time.Second}})
		defer q.ShutDown()
		q.Add("a")
		step(t, c, 900*time.Millisecond)
		q.Add("a") // the burst goes on: due 1 s from now
		step(t, c, 900*time.Millisecond)
		require.Zero(t, q.Len(), "quiet for less than Quiet")
		step(t, c, 100*time.Millisecond)
		readyNow(t, q, "a")
		q.Done("a")

		// A burst that never pauses runs at MaxWait after its first Add.
		q.Add("b")
		for range 3 {
			step(t, c, 900*time.Millisecond)
			q.Add("b")
		}
		require.Zero(t, q.Len(), "2.7 s into the burst")
		step(t, c, 300*time.Millisecond)
		readyNow(t, q, "b")
		q.Done("b")
	})
}

func TestClockMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeClock{now: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}
		q := NewWithConfig(Config[string]{Clock: c, Store: NewFairPriorityStore(FairPriority[string]{MaxWait: time.Second})})
		defer q.ShutDown()
		q.AddWithPriority("low", 0)
		q.AddWithPriority("high1", 10)
		q.AddWithPriority("high2", 10)
		start := time.Now()
		got, _ := q.Get()
		require.Equal(t, "high1", got, "within MaxWait, priority wins")
		q.Done(got)
		c.Step(time.Second + time.Nanosecond)
		got, _ = q.Get()
		require.Equal(t, "low", got, "past MaxWait on the fake clock, the oldest key goes first")
		q.Done(got)
		require.Zero(t, time.Since(start), "only the fake clock moved")
	})
}

func TestClockMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &fakeClock{now: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}
		r := &ageRecorder{}
		q := NewWithConfig(Config[string]{Name: "q", Metrics: r, Clock: c})
		defer q.ShutDown()
		q.Add("a")
		step(t, c, 5*time.Second)
		require.Equal(t, map[int]time.Duration{0: 5 * time.Second}, ages(t, q, true), "ready ages on the fake clock")
		got, _ := q.Get()
		step(t, c, 2*time.Second)
		q.Done(got)
		r.mu.Lock()
		defer r.mu.Unlock()
		require.Equal(t, []time.Duration{5 * time.Second}, r.waited, "queue latency on the fake clock")
		require.Equal(t, []time.Duration{2 * time.Second}, r.worked, "work duration on the fake clock")
	})
}
