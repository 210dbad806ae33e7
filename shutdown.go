package workqueue

import (
	"context"
	"errors"
	"math"
)

// ErrShutDown is returned by GetContext once the queue has shut down and no
// ready key is left.
var ErrShutDown = errors.New("workqueue: shut down")

// ErrDrainInterrupted is returned by ShutDownWithDrainContext and
// ShutDownWithDrainAll when ShutDown
// was called while it waited: the caller asked to stop waiting, and keys may
// still be ready or processing.
var ErrDrainInterrupted = errors.New("workqueue: drain interrupted by ShutDown")

// ShutDown stops the queue from accepting keys: Add and AddAfter are ignored
// from now on, keys waiting for an AddAfter deadline are dropped (debounced
// keys become ready instead: see Config.Debounce) and the delay timer is
// stopped. Get
// keeps handing out the ready keys and then reports shutdown; Done still
// works, and a key added again while processing is still handed out once
// more. ShutDown does not wait; it may be called more than once.
//
// ShutDown also ends every ShutDownWithDrain* that is waiting at that moment:
// they return at once (ShutDownWithDrainContext and ShutDownWithDrainAll
// with ErrDrainInterrupted),
// leaving the keys still ready or processing to the workers. This is the
// "drain on the first signal, force on the second" of client-go.
func (q *Queue[T]) ShutDown() {
	q.lock()
	first, flushed := q.shutDownLocked()
	if q.drainers > 0 {
		q.interrupts++
		q.cond.Broadcast()
	}
	q.unlock()
	if first {
		q.reportShutDown(flushed)
	}
}

// reportShutDown tells the metrics that the queue shut down, after the
// debounced keys that it made ready (flushed) were added. q.mu must not be
// held.
func (q *Queue[T]) reportShutDown(flushed int) {
	if q.metrics == nil {
		return
	}
	for range flushed {
		q.metrics.Added()
	}
	q.metrics.ShutDown()
}

// shutDownLocked shuts the queue down and reports whether this call did it,
// and how many debounced keys it made ready. q.mu must be held.
func (q *Queue[T]) shutDownLocked() (first bool, flushed int) {
	if q.shuttingDown {
		return false, 0
	}
	q.shuttingDown = true
	t := &q.tab
	for q.waiting > 0 {
		e := q.delay.pop()
		slot, pos := t.liveWait(e)
		if pos < 0 {
			continue
		}
		if t.bounced && t.bounce[pos].on {
			// Its Add came before ShutDown; debouncing only merges
			// adds, so the run is not lost but due now, in deadline
			// order.
			q.markDirty(e.item, math.MinInt, 0, slot, pos, true) // it keeps its priority
			flushed++
			continue
		}
		q.dropWait(slot, pos) // its delay entry is popped already
	}
	q.arm(0) // no key waits: drops the entries and stops the timer
	q.cond.Broadcast()
	return true, flushed
}

// ShutDownWithDrain shuts the queue down like ShutDown and then waits until
// no key is processing: every key handed out by Get has been Done. Keys still
// ready when it returns stay ready, and Get keeps handing them out, as after
// ShutDown. This is client-go's rule, kept for the code written for it: a
// controller whose workers stop on their context and whose main goroutine
// then drains (for ctx.Err() == nil { key, _ := q.Get(); ...; q.Done(key) },
// then ShutDownWithDrain on exit) must return, not hang, when the workers
// leave keys queued. To wait until every queued key has run, use
// ShutDownWithDrainAll (Run's RunConfig.Drain does).
//
// Every concurrent caller returns once no key is processing, and every
// caller returns at once when ShutDown is called while it waits.
func (q *Queue[T]) ShutDownWithDrain() {
	_ = q.ShutDownWithDrainContext(context.Background())
}

// ShutDownWithDrainContext is ShutDownWithDrain that gives up when ctx ends,
// returning ctx.Err(), or when ShutDown is called while it waits, returning
// ErrDrainInterrupted. The queue stays shut down either way; keys still
// ready or processing are left to the workers. A second drain neither ends
// nor is ended by the first: each waits for its own condition.
func (q *Queue[T]) ShutDownWithDrainContext(ctx context.Context) error {
	return q.drain(ctx, false)
}

// ShutDownWithDrainAll shuts the queue down like ShutDown and then waits
// until no key is ready and none is processing: every key already due when
// it was called (and every key added again while processing) has been
// handed out and Done. Workers must keep calling Get and Done meanwhile, or
// it returns only when ctx ends, with ctx.Err(). A ShutDown called while it
// waits ends it at once with ErrDrainInterrupted ("drain on the first
// signal, force on the second"). Either way the queue stays shut down and
// no key is dropped: the keys left stay ready for Get.
//
// This is the drain of a controller that wants every queued key run before
// it exits; Run uses it for RunConfig.Drain. Code that stops its workers
// before it drains must use ShutDownWithDrain, which does not wait for the
// ready keys.
func (q *Queue[T]) ShutDownWithDrainAll(ctx context.Context) error {
	return q.drain(ctx, true)
}

// drain is the ShutDownWithDrain* family: it waits until no key is
// processing and, if all, none is ready. Every transition that can end
// its wait wakes it (the rule and its list are above wake, in queue.go):
// Done of the last processing key and Remove (wakeDrainers), a ShutDown
// (which interrupts it), and the end of ctx.
func (q *Queue[T]) drain(ctx context.Context, all bool) error {
	q.lock()
	// Shutting down and starting to wait happen under one hold of the
	// lock: a ShutDown that comes after this drain has shut the queue
	// down (ShuttingDown reports true) always finds it waiting.
	first, flushed := q.shutDownLocked()
	busy := func() bool { return q.processing > 0 || all && q.ready() > 0 }
	waiting := busy()
	epoch := q.interrupts
	if waiting {
		q.drainers++
	}
	q.unlock()
	if first {
		q.reportShutDown(flushed)
	}
	if !waiting {
		return nil
	}

	var err error
	q.lock()
	defer q.wakeWhenDone(ctx)()
	for busy() {
		if q.interrupts != epoch {
			err = ErrDrainInterrupted
			break
		}
		if err = ctx.Err(); err != nil {
			break
		}
		q.wait()
	}
	q.drainers--
	q.mu.Unlock()
	return err
}

// wakeDrainers wakes the drains once no key is processing: those of
// ShutDownWithDrain return then, and those of ShutDownWithDrainAll check
// whether keys are still ready (and wait again if so). q.mu must be held.
func (q *Queue[T]) wakeDrainers() {
	if q.drainers > 0 && q.processing == 0 {
		q.cond.Broadcast()
	}
}

// ShuttingDown reports whether ShutDown (or a drain) has been called.
func (q *Queue[T]) ShuttingDown() bool {
	q.lock()
	defer q.mu.Unlock()
	return q.shuttingDown
}
