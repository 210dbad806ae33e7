package workqueue_test

// Tests of the wake-up rule (queue.go, above wake): every transition that
// can end a wait wakes the waiters it ends. Each case brings a queue with a
// per-tenant cap to the moment before one transition, with goroutines
// waiting in Get or GetContext and, after ShutDown, with or without a drain
// waiting beside them (a drain's own wake-ups must not be what ends the
// getters' wait), then makes the transition and checks what each waiter
// returned, before anything else happens.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/go-coalesce/workqueue"
)

// newCapQueue returns a queue whose tenants may each have one key
// processing, debounced by a second if debounce is set.
func newCapQueue(debounce bool) *workqueue.Queue[string] {
	cfg := workqueue.Config[string]{
		Store: workqueue.NewFairPriorityStore(workqueue.FairPriority[string]{Tenant: tenantOf, MaxInFlight: 1}),
	}
	if debounce {
		cfg.Debounce = workqueue.Debounce{Quiet: time.Second, MaxWait: time.Second}
	}
	return workqueue.NewWithConfig(cfg)
}

// startWaiters starts n goroutines that each take one key with Get, or
// with GetContext if withCtx, and send what they got (ErrShutDown reads as
// shutdown).
func startWaiters(q *workqueue.Queue[string], n int, withCtx bool) chan getResult[string] {
	if !withCtx {
		return startGets(q, n)
	}
	ch := make(chan getResult[string], n)
	for range n {
		go func() {
			k, err := q.GetContext(context.Background())
			ch <- getResult[string]{k, errors.Is(err, workqueue.ErrShutDown)}
		}()
	}
	return ch
}

// holdA makes a/1 processing and a/2 ready but held back by tenant a's cap.
func holdA(t *testing.T, q *workqueue.Queue[string]) {
	q.Add("a/1")
	q.Add("a/2")
	k, _ := q.Get()
	require.Equal(t, "a/1", k)
}

// wakeCase is one transition that must end the wait of the getters.
type wakeCase struct {
	name string
	// shut: the queue is shut down before the getters wait, and the case
	// also runs with a drain waiting beside them.
	shut     bool
	debounce bool
	// setup brings the queue to the moment before the transition.
	setup func(t *testing.T, q *workqueue.Queue[string])
	// fire is the transition.
	fire func(q *workqueue.Queue[string])
	// want is what the waiting getters return once it happened, in any
	// order: one getter per entry.
	want []getResult[string]
}

var sd = getResult[string]{shutdown: true}

func wakeCases() []wakeCase {
	return []wakeCase{{
		name:  "Add makes a key available",
		setup: holdA,
		fire:  func(q *workqueue.Queue[string]) { q.Add("b/1") },
		want:  []getResult[string]{{"b/1", false}},
	}, {
		name: "AddAfter's deadline passes",
		setup: func(t *testing.T, q *workqueue.Queue[string]) {
			holdA(t, q)
			q.AddAfter("b/1", time.Second)
		},
		fire: func(*workqueue.Queue[string]) { time.Sleep(time.Second) },
		want: []getResult[string]{{"b/1", false}},
	}, {
		name:     "a debounced key's deadline passes",
		debounce: true,
		setup: func(t *testing.T, q *workqueue.Queue[string]) {
			q.Add("a/1")
			q.Add("a/2")
			time.Sleep(time.Second)
			k, _ := q.Get()
			require.Equal(t, "a/1", k)
			q.Add("b/1")
		},
		fire: func(*workqueue.Queue[string]) { time.Sleep(time.Second) },
		want: []getResult[string]{{"b/1", false}},
	}, {
		name:     "ShutDown makes a debounced key ready",
		debounce: true,
		setup:    func(_ *testing.T, q *workqueue.Queue[string]) { q.Add("b/1") },
		fire:     func(q *workqueue.Queue[string]) { q.ShutDown() },
		want:     []getResult[string]{{"b/1", false}, sd},
	}, {
		name:  "ShutDown of an empty queue",
		setup: func(*testing.T, *workqueue.Queue[string]) {},
		fire:  func(q *workqueue.Queue[string]) { q.ShutDown() },
		want:  []getResult[string]{sd, sd},
	}, {
		name:  "Done lifts a tenant's cap",
		setup: holdA,
		fire:  func(q *workqueue.Queue[string]) { q.Done("a/1") },
		want:  []getResult[string]{{"a/2", false}},
	}, {
		name:  "Done lifts a tenant's cap after ShutDown",
		shut:  true,
		setup: holdA,
		fire:  func(q *workqueue.Queue[string]) { q.Done("a/1") },
		want:  []getResult[string]{{"a/2", false}},
	}, {
		name: "Done of a key added again while it ran, after ShutDown",
		shut: true,
		setup: func(t *testing.T, q *workqueue.Queue[string]) {
			holdA(t, q)
			q.Add("b/1")
			k, _ := q.Get()
			require.Equal(t, "b/1", k)
			q.Add("b/1")
		},
		fire: func(q *workqueue.Queue[string]) { q.Done("b/1") },
		want: []getResult[string]{{"b/1", false}},
	}, {
		name:  "Remove of the last held key after ShutDown",
		shut:  true,
		setup: holdA,
		fire:  func(q *workqueue.Queue[string]) { q.Remove("a/2") },
		want:  []getResult[string]{sd, sd},
	}, {
		name:  "Get of the last held key after ShutDown",
		shut:  true,
		setup: holdA,
		fire:  func(q *workqueue.Queue[string]) { q.Done("a/1") },
		want:  []getResult[string]{{"a/2", false}, sd},
	}}
}

// TestWakeUps runs every wakeCase with Get and GetContext waiters, and,
// after ShutDown, also with a ShutDownWithDrain and a ShutDownWithDrainAll
// waiting beside them.
func TestWakeUps(t *testing.T) {
	for _, c := range wakeCases() {
		drains := []string{"no drain"}
		if c.shut {
			drains = append(drains, "ShutDownWithDrain", "ShutDownWithDrainAll")
		}
		for _, drain := range drains {
			for _, withCtx := range []bool{false, true} {
				name := fmt.Sprintf("%s/%s/GetContext=%v", c.name, drain, withCtx)
				t.Run(name, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) { runWakeCase(t, c, drain, withCtx) })
				})
			}
		}
	}
}

func runWakeCase(t *testing.T, c wakeCase, drain string, withCtx bool) {
	q := newCapQueue(c.debounce)
	c.setup(t, q)
	if c.shut {
		q.ShutDown()
	}
	drained := make(chan error, 1)
	switch drain {
	case "ShutDownWithDrain":
		go func() { q.ShutDownWithDrain(); drained <- nil }()
	case "ShutDownWithDrainAll":
		go func() { drained <- q.ShutDownWithDrainAll(context.Background()) }()
	}
	// The drainer waits first, so that a Signal meant for a getter would
	// find it: a wake-up must reach the getters with a drainer in line.
	synctest.Wait()
	ch := startWaiters(q, len(c.want), withCtx)
	synctest.Wait()
	require.Empty(t, ch, "before the transition every getter waits")

	c.fire(q)
	synctest.Wait()
	require.Len(t, ch, len(c.want), "the transition must end the wait of every getter it concerns, at once")
	var got []getResult[string]
	for range len(c.want) {
		got = append(got, <-ch)
	}
	require.ElementsMatch(t, c.want, got)

	// Finish every run and hand out what is left, as workers would: the
	// drain, if any, returns.
	for _, k := range []string{"a/1", "a/2", "b/1"} {
		q.Done(k) // does nothing unless k is processing
	}
	q.ShutDown()
	for {
		k, shutdown := q.Get()
		if shutdown {
			break
		}
		q.Done(k)
	}
	if drain != "no drain" {
		synctest.Wait()
		require.Len(t, drained, 1, "the drain returns once the runs are done")
		require.NoError(t, <-drained)
	}
}

// TestWakeUpsOfDrains checks the transitions that end a drain's wait while
// a tenant's cap holds a key back: the Done of the last run (for
// ShutDownWithDrain, whatever is ready), and the Remove of the last ready
// key once nothing runs (for ShutDownWithDrainAll).
func TestWakeUpsOfDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newCapQueue(false)
		holdA(t, q)
		drained := make(chan struct{})
		go func() { q.ShutDownWithDrain(); close(drained) }()
		synctest.Wait()
		require.False(t, isClosed(drained), "a/1 runs: the drain waits")
		q.Done("a/1")
		synctest.Wait()
		require.True(t, isClosed(drained), "Done of the last run must end ShutDownWithDrain, though a/2 is ready")
	})
	synctest.Test(t, func(t *testing.T) {
		q := newCapQueue(false)
		holdA(t, q)
		drained := make(chan error, 1)
		go func() { drained <- q.ShutDownWithDrainAll(context.Background()) }()
		synctest.Wait()
		q.Done("a/1")
		synctest.Wait()
		require.Empty(t, drained, "a/2 is ready: ShutDownWithDrainAll waits")
		require.True(t, q.Remove("a/2"))
		synctest.Wait()
		require.Len(t, drained, 1, "Remove of the last ready key with nothing running must end ShutDownWithDrainAll")
		require.NoError(t, <-drained)
	})
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestWakeUpsKeepWaiting checks the other side of the rule: a transition
// that leaves a held key ready after ShutDown does not end the wait. Of
// two held keys, Remove of one leaves the getter waiting for the other.
func TestWakeUpsKeepWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newCapQueue(false)
		holdA(t, q)
		q.Add("a/3")
		q.ShutDown()
		ch := startGets(q, 1)
		synctest.Wait()
		require.True(t, q.Remove("a/2"))
		synctest.Wait()
		require.Empty(t, ch, "a/3 is still ready: the getter must wait for it")
		q.Done("a/1")
		synctest.Wait()
		require.Equal(t, getResult[string]{"a/3", false}, <-ch)
		q.Done("a/3")
		_, shutdown := q.Get()
		require.True(t, shutdown)
		require.Zero(t, q.Len())
	})
}
