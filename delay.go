package workqueue

import (
	"container/heap"
	"time"
)

// AddAfter gives item a run after d: it becomes ready when d has passed,
// unless something asks for it earlier. A key has at most one pending run, at
// the earliest time anyone asked for, so AddAfter of a key that is already
// due now (ready, or processing and dirty) changes nothing, and AddAfter of
// a waiting key keeps the earlier deadline. A key that is processing when
// its deadline passes is handed out again after Done. d <= 0 is Add.
// After ShutDown, AddAfter does nothing.
func (q *Queue[T]) AddAfter(item T, d time.Duration) { q.addAfter(item, d, 0) }

// AddAfterWithPriority is AddAfter for a queue with a PriorityStore: the key
// becomes ready with the given priority when its deadline passes. Merging
// with another pending run keeps the earliest time and the highest priority.
func (q *Queue[T]) AddAfterWithPriority(item T, d time.Duration, priority int) {
	q.addAfter(item, d, clampPrio(priority))
}

func (q *Queue[T]) addAfter(item T, d time.Duration, prio int32) {
	q.mu.Lock()
	if q.shuttingDown {
		q.mu.Unlock()
		return
	}
	added := false
	if d <= 0 {
		added = q.markDirty(item, prio)
	} else {
		now := q.now()
		when := now + int64(d)
		if when < now {
			when = 1<<63 - 1 // d so large it overflows: never, in practice
		}
		st, ok := q.keys.m[item]
		switch {
		case ok && st.flags&fDirty != 0:
			// Due now already, which is earlier; only the priority
			// may merge upwards.
			q.raise(item, st, prio)
		case ok && st.flags&fWaiting != 0:
			q.delay.merge(item, when, prio)
		default: // absent, or processing with no pending run
			st.flags |= fWaiting
			q.keys.put(item, st)
			q.delay.add(item, when, prio)
		}
		q.arm(now)
	}
	q.mu.Unlock()
	if q.metrics != nil {
		q.metrics.Retried()
		if added {
			q.metrics.Added()
		}
	}
}

// raise gives a dirty key (state st) the priority prio if that is higher
// than its own, moving it in a PriorityStore if it is ready. It reports
// whether it raised. q.mu must be held.
func (q *Queue[T]) raise(item T, st keyState, prio int32) bool {
	if prio <= st.prio {
		return false
	}
	st.prio = prio
	q.keys.m[item] = st
	if st.flags&fProcessing == 0 && q.prio != nil {
		q.prio.Raise(item, int(prio))
	}
	return true
}

// arm makes sure the timer fires at the earliest deadline, or not at all
// when no key waits. A timer already set for an earlier time is left alone:
// when it fires, fire finds nothing due and arms it again. q.mu must be held.
func (q *Queue[T]) arm(now int64) {
	ds := &q.delay
	if len(ds.heap) == 0 {
		if ds.timerSet {
			ds.timer.Stop()
			ds.timerSet = false
		}
		return
	}
	when := ds.heap[0].when
	if ds.timerSet && ds.armed <= when {
		return
	}
	d := time.Duration(when - now)
	if ds.timer == nil {
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
	q.mu.Lock()
	ds := &q.delay
	ds.timerSet = false
	now := q.now()
	added := 0
	for len(ds.heap) > 0 && ds.heap[0].when <= now {
		// markDirty takes the key out of the heap and keeps its
		// priority.
		if q.markDirty(ds.heap[0].item, 0) {
			added++
		}
	}
	q.arm(now)
	q.mu.Unlock()
	if q.metrics != nil {
		for range added {
			q.metrics.Added()
		}
	}
}

// waiter is one waiting key in the delay heap.
type waiter[T comparable] struct {
	item  T
	when  int64  // deadline, queue clock ns
	seq   uint64 // order of arrival: equal deadlines fire first-come first
	prio  int32
	index int // position in delayState.heap
}

// delayState holds the waiting keys: a min-heap by deadline with an index by
// key, so that a key can be found, moved or removed in O(log n), and one
// timer armed for the earliest deadline. Its methods need q.mu held.
//
// Heap entries are pointers so that a swap does not have to update the key
// index; they are recycled through free, so a steady AddAfter load does not
// allocate. When the heap empties, the free list and the heap's array are
// dropped, so memory follows the waiting keys rather than their peak.
type delayState[T comparable] struct {
	heap  waiterHeap[T]
	byKey shrinkingMap[T, *waiter[T]]
	free  []*waiter[T]
	seq   uint64 // last waiter.seq handed out

	timer    *time.Timer // nil until the first AddAfter with d > 0
	armed    int64       // the deadline timer is set for, if timerSet
	timerSet bool
}

// maxFree bounds the recycled waiters kept while keys still wait.
const maxFree = 1024

func (ds *delayState[T]) len() int { return len(ds.heap) }

// add puts item, which is not waiting, into the heap.
func (ds *delayState[T]) add(item T, when int64, prio int32) {
	var w *waiter[T]
	if n := len(ds.free); n > 0 {
		w = ds.free[n-1]
		ds.free[n-1] = nil
		ds.free = ds.free[:n-1]
	} else {
		w = new(waiter[T])
	}
	ds.seq++
	w.item, w.when, w.prio, w.seq = item, when, prio, ds.seq
	heap.Push(&ds.heap, w)
	ds.byKey.put(item, w)
}

// merge folds a new request into waiting item's entry: the earlier deadline
// and the higher priority win.
func (ds *delayState[T]) merge(item T, when int64, prio int32) {
	w := ds.byKey.m[item]
	w.prio = max(w.prio, prio)
	if when < w.when {
		w.when = when
		heap.Fix(&ds.heap, w.index)
	}
}

// remove takes waiting item out of the heap and returns its priority.
func (ds *delayState[T]) remove(item T) int32 {
	w := ds.byKey.m[item]
	ds.byKey.del(item)
	heap.Remove(&ds.heap, w.index)
	prio := w.prio
	ds.recycle(w)
	return prio
}

func (ds *delayState[T]) recycle(w *waiter[T]) {
	var zero T
	w.item = zero // let the key be collected
	if len(ds.heap) == 0 {
		ds.free = nil
		ds.heap = nil
		return
	}
	if len(ds.free) < maxFree {
		ds.free = append(ds.free, w)
	}
	if cap(ds.heap) > 64 && len(ds.heap) < cap(ds.heap)/4 {
		ds.heap = append(waiterHeap[T](nil), ds.heap...)
	}
}

// dropAll empties the heap, calling f for each key, and stops the timer.
func (ds *delayState[T]) dropAll(f func(item T)) {
	for _, w := range ds.heap {
		f(w.item)
	}
	ds.heap, ds.free = nil, nil
	ds.byKey = shrinkingMap[T, *waiter[T]]{}
	if ds.timerSet {
		ds.timer.Stop()
		ds.timerSet = false
	}
}

// waiterHeap implements heap.Interface over waiters, earliest deadline
// first, keeping each waiter's index current.
type waiterHeap[T comparable] []*waiter[T]

func (h waiterHeap[T]) Len() int { return len(h) }
func (h waiterHeap[T]) Less(i, j int) bool {
	return h[i].when < h[j].when || h[i].when == h[j].when && h[i].seq < h[j].seq
}
func (h waiterHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *waiterHeap[T]) Push(x any) {
	w := x.(*waiter[T])
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waiterHeap[T]) Pop() any {
	old := *h
	n := len(old) - 1
	w := old[n]
	old[n] = nil // the array must not keep the waiter alive
	*h = old[:n]
	return w
}
