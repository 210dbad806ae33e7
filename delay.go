package workqueue

import (
	"math"
	"time"
)

// AddAfter gives item a run after d: it becomes ready when d has passed,
// unless something asks for it earlier. A key has at most one pending run, at
// the earliest time anyone asked for, so AddAfter of a key that is already
// due now (ready, or processing and dirty) changes nothing, and AddAfter of
// a waiting key keeps the earlier deadline. A key that is processing when
// its deadline passes is handed out again after Done. d <= 0 makes the run
// due now: it is Add, except that Config.Debounce does not delay it.
// After ShutDown, AddAfter does nothing.
func (q *Queue[T]) AddAfter(item T, d time.Duration) { q.addAfter(item, d, 0) }

// AddAfterWithPriority is AddAfter for a queue with a PriorityStore: the key
// becomes ready with the given priority when its deadline passes. Merging
// with another pending run keeps the earliest time and the highest priority.
func (q *Queue[T]) AddAfterWithPriority(item T, d time.Duration, priority int) {
	q.addAfter(item, d, priority)
}

func (q *Queue[T]) addAfter(item T, d time.Duration, prio int) {
	q.lock()
	if q.shuttingDown {
		q.mu.Unlock()
		return
	}
	t := &q.tab
	h, slot, pos := t.find(item)
	added := false
	if d <= 0 {
		added = q.markDirty(item, prio, h, slot, pos, false)
	} else {
		now := q.now()
		when := deadlineAt(now, d)
		switch {
		case pos >= 0 && t.isDue(pos):
			// Due now already, which is earlier; only the priority
			// may merge upwards.
			q.raise(item, pos, prio)
		case pos >= 0 && t.isWaiting(pos):
			t.setPrio(pos, max(t.prioAt(pos), prio))
			q.fixBounce(pos, when)
			if when < t.when[pos] {
				q.moveDeadline(item, pos, when)
			}
			q.sweepDelay()
		default: // absent, or processing with no pending run
			q.startWaiting(item, h, slot, pos, when, prio)
		}
		q.arm(now)
	}
	q.unlock()
	if q.metrics != nil {
		q.metrics.Retried()
		if added {
			q.metrics.Added()
		}
	}
}

// deadlineAt returns now + d, or the far future if that overflows.
func deadlineAt(now int64, d time.Duration) int64 {
	if when := now + int64(d); when >= now {
		return when
	}
	return 1<<63 - 1 // d so large it overflows: never, in practice
}

// startWaiting gives item, which has no pending run (absent, or processing
// and not dirty), a run due at when, at priority prio: the key starts
// waiting. h, slot and pos are what q.tab.find returned for it. It returns
// the key's position. q.mu must be held.
func (q *Queue[T]) startWaiting(item T, h uint32, slot, pos int, when int64, prio int) int {
	t := &q.tab
	t.enableDelays()
	if pos >= 0 {
		t.waitAfterRun(pos)
		t.setPrio(pos, prio)
	} else {
		pos = t.insertAs(item, h, slot, fWaiting, prio)
	}
	t.setDeadline(pos, when, q.delay.push(item, when))
	q.waiting++
	return pos
}

// dropWait cancels the run that the waiting key at pos (in slot) has at a
// deadline, Remove's and ShutDown's transition: a key that only waits
// leaves the table, and a processing one keeps only the run in progress.
// Its delay entry is the caller's to pop or count stale. q.mu must be
// held.
func (q *Queue[T]) dropWait(slot, pos int) {
	q.waiting--
	q.tab.cancelWait(slot, pos)
}

// moveDeadline moves the run of the waiting key at pos to when: a new delay
// entry becomes the live one and the old one goes stale (the key table
// says which entry is live). q.mu must be held.
func (q *Queue[T]) moveDeadline(item T, pos int, when int64) {
	q.tab.setDeadline(pos, when, q.delay.push(item, when))
	q.delay.stale++
}

// sweepDelay drops the stale deadline entries once they outnumber the live
// ones. q.mu must be held.
func (q *Queue[T]) sweepDelay() {
	if q.delay.stale <= q.waiting+64 {
		return
	}
	q.delay.sweep(q.isLive)
}

// isLive reports whether e is the live entry of a waiting key. q.mu must be
// held.
func (q *Queue[T]) isLive(e deadline[T]) bool {
	_, pos := q.tab.liveWait(e)
	return pos >= 0
}

// waitingEntry returns the table entry of e's key if e is its live delay
// entry. q.mu must be held.
func (q *Queue[T]) waitingEntry(e deadline[T]) (keyState, bool) {
	if _, pos := q.tab.liveWait(e); pos >= 0 {
		return q.tab.entry(pos), true
	}
	return keyState{}, false
}

// arm makes sure the timer fires at the earliest deadline, or not at all
// when no key waits. A timer already set for an earlier time is left alone:
// when it fires, fire finds nothing due and arms it again. q.mu must be held.
func (q *Queue[T]) arm(now int64) {
	ds := &q.delay
	if q.waiting == 0 {
		if ds.len() > 0 {
			ds.clear() // only stale entries are left
		}
		if ds.timerSet {
			ds.stopTimer()
			ds.timerSet = false
		}
		return
	}
	when := ds.peek().when
	if ds.timerSet && ds.armed <= when {
		return
	}
	d := time.Duration(when - now)
	if q.clk != nil {
		// A Clock's timer is armed anew each time: Reset is not part of
		// Clock, and the one it replaces is stopped first, so that at
		// most one is pending.
		if ds.ctimer != nil {
			ds.ctimer.Stop()
		}
		ds.ctimer = q.clk.AfterFunc(d, q.fire)
	} else if ds.timer == nil {
		// AfterFunc rather than a goroutine with a timer channel: nothing
		// runs until the deadline, and nothing at all once it is stopped.
		ds.timer = time.AfterFunc(d, q.fire)
	} else {
		ds.timer.Reset(d)
	}
	ds.armed = when
	ds.timerSet = true
}

// fire runs on the timer's goroutine at a deadline: every key whose deadline
// has passed becomes dirty, exactly as if Add had been called for it then.
func (q *Queue[T]) fire() {
	q.lock()
	ds := &q.delay
	ds.timerSet = false
	now := q.now()
	added := 0
	for q.waiting > 0 && ds.peek().when <= now {
		e := ds.pop()
		slot, pos := q.tab.liveWait(e)
		if pos < 0 {
			ds.stale-- // the key was made ready, or moved earlier
			continue
		}
		if q.markDirty(e.item, math.MinInt, 0, slot, pos, true) { // its run keeps its priority
			added++
		}
	}
	q.arm(now)
	// The adds are counted before the keys can be seen: a worker may take
	// a fired key the moment the lock is released, and if this timer
	// goroutine were descheduled before counting, a scrape after that
	// key's run would show more runs than adds. Add counts after the
	// lock, as its caller is the one that made the key visible; the timer
	// is not a hot path.
	if q.metrics != nil {
		for range added {
			q.metrics.Added()
		}
	}
	q.unlock()
}

// deadline is one entry of the waiting keys: item's run is due at when.
// seq orders entries with equal deadlines by arrival.
type deadline[T comparable] struct {
	item T
	when int64 // queue clock ns
	seq  uint64
}

func (a deadline[T]) before(b deadline[T]) bool {
	return a.when < b.when || a.when == b.when && a.seq < b.seq
}

// delayState holds the deadlines of the waiting keys, earliest first, and
// the one timer armed for the earliest. Its methods need q.mu held.
//
// Most delays are one constant (a resync, a fixed requeue), so deadlines
// mostly arrive in order. Those go to a FIFO ring, where push and pop are
// O(1) and touch no other entry; only a deadline earlier than the ring's
// last goes to a binary heap, O(log n). The earliest entry is the earlier
// of the two heads.
//
// Entries are values, found by position only: nothing indexes them by key.
// The key table is what says whether a key waits, until when, and which
// entry is live (its wseq column); an entry that no longer matches it (the key
// was made ready by Add, or moved to an earlier deadline) is stale and
// skipped when it reaches the front. This spares a map from keys to entries and the
// index upkeep of every heap swap, and makes the steady state allocation
// free. Stale entries are counted and swept out when they outnumber the
// live ones, so memory follows the waiting keys, and both arrays shrink as
// they empty.
type delayState[T comparable] struct {
	inOrder ring[deadline[T]] // deadlines in nondecreasing order
	heap    []deadline[T]     // min-heap of the deadlines that came early
	seq     uint64            // last deadline.seq handed out
	stale   int               // entries whose key no longer waits for them

	timer    *time.Timer // nil until the first AddAfter with d > 0
	ctimer   Timer       // the timer instead, under Config.Clock
	armed    int64       // the deadline timer is set for, if timerSet
	timerSet bool
}

// stopTimer stops whichever timer is armed.
func (ds *delayState[T]) stopTimer() {
	if ds.ctimer != nil {
		ds.ctimer.Stop()
		ds.ctimer = nil
		return
	}
	ds.timer.Stop()
}

// len counts entries, stale ones included.
func (ds *delayState[T]) len() int { return ds.inOrder.Len() + len(ds.heap) }

// push adds an entry for item at when and returns its seq.
func (ds *delayState[T]) push(item T, when int64) uint64 {
	ds.seq++
	e := deadline[T]{item, when, ds.seq}
	if n := ds.inOrder.Len(); n == 0 || ds.inOrder.buf[(ds.inOrder.head+n-1)&(len(ds.inOrder.buf)-1)].when <= when {
		ds.inOrder.Push(e)
		return e.seq
	}
	ds.heap = append(ds.heap, e)
	ds.up(len(ds.heap) - 1)
	return e.seq
}

// peek returns the earliest entry; ds.len() > 0.
func (ds *delayState[T]) peek() deadline[T] {
	if len(ds.heap) == 0 {
		return ds.inOrder.peek()
	}
	if ds.inOrder.Len() == 0 || ds.heap[0].before(ds.inOrder.peek()) {
		return ds.heap[0]
	}
	return ds.inOrder.peek()
}

// pop removes and returns the earliest entry; ds.len() > 0.
func (ds *delayState[T]) pop() deadline[T] {
	if len(ds.heap) == 0 || ds.inOrder.Len() > 0 && !ds.heap[0].before(ds.inOrder.peek()) {
		return ds.inOrder.Pop()
	}
	e := ds.heap[0]
	n := len(ds.heap) - 1
	ds.heap[0] = ds.heap[n]
	ds.heap[n] = deadline[T]{} // the array must not keep the key alive
	ds.heap = ds.heap[:n]
	if n > 0 {
		ds.down(0)
	}
	if n == 0 {
		ds.heap = nil
	} else if cap(ds.heap) > 64 && n < cap(ds.heap)/4 {
		ds.heap = append([]deadline[T](nil), ds.heap...)
	}
	return e
}

// sweep drops the entries that isLive rejects. The queue calls it when
// stale entries outnumber live ones: each sweep costs O(entries) and
// removes more than half of them, so O(1) amortized per stale entry.
func (ds *delayState[T]) sweep(isLive func(deadline[T]) bool) {
	for range ds.inOrder.Len() {
		if e := ds.inOrder.Pop(); isLive(e) {
			ds.inOrder.Push(e)
		}
	}
	kept := ds.heap[:0]
	for _, e := range ds.heap {
		if isLive(e) {
			kept = append(kept, e)
		}
	}
	clear(ds.heap[len(kept):])
	ds.heap = append([]deadline[T](nil), kept...)
	for i := len(ds.heap)/2 - 1; i >= 0; i-- {
		ds.down(i)
	}
	ds.stale = 0
}

// clear drops every entry and the arrays that held them.
func (ds *delayState[T]) clear() {
	ds.inOrder = ring[deadline[T]]{}
	ds.heap = nil
	ds.stale = 0
}

func (ds *delayState[T]) up(i int) {
	h := ds.heap
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (ds *delayState[T]) down(i int) {
	h := ds.heap
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1].before(h[c]) {
			c++
		}
		if !h[c].before(h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}
