package benchwork

import (
	"sync"
	"time"
)

// The floors are measuring sticks, not queues anyone should use: each does
// the least work that the protocol of a workload cannot avoid, and nothing
// else (no priorities, no metrics hooks, no shrinking, no checks of misuse).
// Running them next to a queue shows how much of its time is the
// protocol's and how much its own, and whether a goal is reachable at all
// on the machine: no queue can go below its floor.

// Floor is the floor of Add, Get and Done: one lock per call, one map
// entry per key, a FIFO of ready keys. It coalesces only what the
// workloads need (a key is never added twice while in flight). Not safe to
// copy; safe for concurrent use.
//
// A clock floor (NewClockFloor) also reads the clock where exact metrics
// must: when a key becomes dirty (its queue latency starts), at Get
// (latency ends, work starts) and at Done (work ends). Its time over the
// plain floor's is then the least that metrics with exact durations can
// cost over none, whatever the queue does.
type Floor struct {
	mu     sync.Mutex
	keys   map[string]floorKey
	fifo   FIFO[string]
	clock  bool
	origin time.Time
	sum    time.Duration // durations measured, kept so that no read is dead code
}

type floorKey struct {
	processing bool
	at         time.Duration
}

// NewFloor returns an empty floor that reads no clock.
func NewFloor() *Floor { return &Floor{keys: map[string]floorKey{}} }

// NewClockFloor returns an empty floor that reads the clock where exact
// metrics must.
func NewClockFloor() *Floor {
	return &Floor{keys: map[string]floorKey{}, clock: true, origin: time.Now()}
}

func (f *Floor) now() time.Duration {
	if !f.clock {
		return 0
	}
	return time.Since(f.origin)
}

// Add queues k, which must not be queued or processing.
func (f *Floor) Add(k string) {
	f.mu.Lock()
	f.keys[k] = floorKey{at: f.now()}
	f.fifo.Push(k)
	f.mu.Unlock()
}

// Get hands out the oldest queued key; one must be queued. Get and Done
// look the key up first only with the clock: the start times are what
// metrics add, and the plain floor overwrites or deletes the entry with
// one hash.
func (f *Floor) Get() (string, bool) {
	f.mu.Lock()
	k := f.fifo.Pop()
	st := floorKey{processing: true}
	if f.clock {
		st.at = f.now()
		f.sum += st.at - f.keys[k].at
	}
	f.keys[k] = st
	f.mu.Unlock()
	return k, false
}

// Done ends the processing of k.
func (f *Floor) Done(k string) {
	f.mu.Lock()
	if f.clock {
		f.sum += f.now() - f.keys[k].at
	}
	delete(f.keys, k)
	f.mu.Unlock()
}

// ShutDown does nothing: it lets a floor stand where a queue is shut down.
func (f *Floor) ShutDown() {}

// CoalescingFloor is Floor whose Add looks the key up first and does
// nothing for a key already queued: the floor of HotKey, whose Adds mostly
// find the key queued. One lock and one map lookup per duplicate.
type CoalescingFloor struct{ Floor }

// NewCoalescingFloor returns an empty CoalescingFloor.
func NewCoalescingFloor() *CoalescingFloor {
	return &CoalescingFloor{Floor{keys: map[string]floorKey{}}}
}

// Add queues k unless it is queued or processing.
func (f *CoalescingFloor) Add(k string) {
	f.mu.Lock()
	if _, ok := f.keys[k]; !ok {
		f.keys[k] = floorKey{}
		f.fifo.Push(k)
	}
	f.mu.Unlock()
}

// FIFO is a first-in first-out queue over a circular buffer whose capacity
// is a power of two: it grows when full, never shrinks, and restarts at
// slot 0 whenever it empties. Like the queue's own ring it reuses its
// slots, so a FIFO that never empties (many goroutines each with a key in
// flight) allocates nothing once it has grown; a slice used as a queue
// (append, then advance the head) would allocate for as long as it never
// empties. The zero value is empty. Not safe for concurrent use.
type FIFO[E any] struct {
	buf  []E // len(buf) is 0 or a power of two
	head int // index of the oldest element
	n    int // number of elements
}

// Push appends e. Amortized O(1).
func (q *FIFO[E]) Push(e E) {
	if q.n == len(q.buf) {
		grown := make([]E, max(2*len(q.buf), 16))
		for i := range q.n {
			grown[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
		}
		q.buf, q.head = grown, 0
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = e
	q.n++
}

// Len returns the number of elements.
func (q *FIFO[E]) Len() int { return q.n }

// Peek returns the oldest element; Len must be above 0.
func (q *FIFO[E]) Peek() E { return q.buf[q.head] }

// Pop removes and returns the oldest element; Len must be above 0.
func (q *FIFO[E]) Pop() E {
	var zero E
	e := q.buf[q.head]
	q.buf[q.head] = zero
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	if q.n == 0 {
		q.head = 0
	}
	return e
}
