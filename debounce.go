package workqueue

import (
	"fmt"
	"math"
	"time"
)

// Debounce makes Add wait for a burst of events on one key to settle: see
// Config.Debounce. The zero value is off.
type Debounce struct {
	// Quiet is how long a key must go without an Add before its run is
	// due. Zero turns debouncing off.
	Quiet time.Duration
	// MaxWait bounds how long a burst can put a run off: the run is due at
	// the latest MaxWait after the first Add of the burst, however often
	// the key is added. It must be at least Quiet when Quiet is set.
	MaxWait time.Duration
}

// validate panics, naming the field, if d is not a valid configuration:
// failing in the constructor beats a queue that never runs a busy key.
func (d Debounce) validate() {
	switch {
	case d.Quiet < 0:
		panic(fmt.Sprintf("workqueue: Config.Debounce.Quiet is negative (%v)", d.Quiet))
	case d.MaxWait < 0:
		panic(fmt.Sprintf("workqueue: Config.Debounce.MaxWait is negative (%v)", d.MaxWait))
	case d.Quiet == 0 && d.MaxWait != 0:
		panic(fmt.Sprintf("workqueue: Config.Debounce.MaxWait is %v but Quiet is zero, which turns debouncing off; set Quiet too", d.MaxWait))
	case d.MaxWait < d.Quiet:
		panic(fmt.Sprintf("workqueue: Config.Debounce.MaxWait (%v) is less than Quiet (%v); MaxWait bounds how long a burst may put a run off and must be at least Quiet", d.MaxWait, d.Quiet))
	}
}

// A debounced key waits in the delay heap like a key given AddAfter: it is
// "waiting", counted in Stats.Waiting, and its one pending run is at the
// deadline the key table holds (its when column). What debouncing adds is
// that a later Add may move that deadline later, which AddAfter never does.
// So for each key whose pending run came from a debounced Add, the queue
// keeps two more numbers, in a side column of the key table (bounce,
// table_columns.go) that only a queue with Debounce has, so that a queue
// without it pays nothing:
//
//   - first, when the first debounced Add since the key's last run started
//     came: the run is never put off past first + MaxWait, and queue
//     latency counts from it;
//   - fixed, the earliest time that AddAfter or AddRateLimited asked for,
//     if any: a debounced deadline never moves the run later than that.
//
// The deadline is min(last Add + Quiet, first + MaxWait, fixed). When it
// moves, later or earlier, a new heap entry is pushed and the old one goes
// stale, as AddAfter already does when it moves a deadline earlier: a burst
// costs one O(1) push per Add (its deadlines arrive in order, so they go to
// the in-order ring) and no allocation in steady state, and the stale
// entries are swept as usual. The key's bounce state is cleared when the
// run becomes due (deadline, or an AddAfter with d <= 0), or on Remove or
// ShutDown: only a waiting key has one, so an entry never dies with it set.

// bounceState is what the queue keeps of a debounced key: see above. Times
// are queue clock nanoseconds.
type bounceState struct {
	first int64
	fixed int64 // never: no fixed time was asked for
	on    bool  // the key's pending run came from a debounced Add
}

const never = math.MaxInt64

// addDebounced is Add for a queue with Debounce: it gives item a run due
// once Add has not been called for it for Quiet, and at the latest MaxWait
// after the first Add of the burst, at priority prio. It never makes a run
// due later than a fixed time already asked for, and a key already due now
// keeps its run. q.mu must be held and the queue not shut down.
func (q *Queue[T]) addDebounced(item T, prio int) {
	t := &q.tab
	h, slot, pos := t.find(item)
	if pos >= 0 && t.isDue(pos) {
		// Due now already: the earliest time wins. Only the priority
		// merges, as for any Add.
		q.markDirty(item, prio, h, slot, pos, false)
		return
	}
	now := q.now()
	waiting := pos >= 0 && t.isWaiting(pos)
	var b bounceState
	if waiting {
		b = t.bounce[pos]
	}
	if !b.on {
		b = bounceState{first: now, fixed: never, on: true}
		if waiting {
			b.fixed = t.when[pos] // AddAfter's deadline, which must not move later
		}
	}
	when := min(now+q.quiet, b.first+q.maxWait, b.fixed)
	if waiting {
		t.setPrio(pos, max(t.prioAt(pos), prio))
		if when != t.when[pos] {
			q.moveDeadline(item, pos, when)
		}
		q.sweepDelay()
	} else { // absent, or processing with no pending run
		pos = q.startWaiting(item, h, slot, pos, when, prio)
	}
	t.bounce[pos] = b
	q.arm(now)
}

// unbounce forgets the debounce state of the waiting key at pos, whose run
// is now due, or cancelled, and returns when its burst began: the time its
// queue latency counts from. ok is false if the key was not debounced. q.mu
// must be held.
func (q *Queue[T]) unbounce(pos int) (first int64, ok bool) {
	t := &q.tab
	if !t.bounced {
		return 0, false
	}
	b := t.bounce[pos]
	t.bounce[pos] = bounceState{}
	return b.first, b.on
}

// fixBounce records that AddAfter asked for a run of the waiting key at pos
// at when: the debounced deadline may never move past it. q.mu must be
// held.
func (q *Queue[T]) fixBounce(pos int, when int64) {
	t := &q.tab
	if t.bounced && t.bounce[pos].on && when < t.bounce[pos].fixed {
		t.bounce[pos].fixed = when
	}
}
