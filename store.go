package workqueue

import (
	"reflect"
	"runtime"
	"sync"
	"weak"
)

// Store holds the ready keys of a Queue: keys that are due for processing and
// not yet handed out by Get. It decides the order in which Get hands them out.
//
// Caller and locking: only the Queue calls a Store, and always with the
// queue's lock held, from whichever goroutine called Add, Get, Done or fired
// a delay. A Store therefore needs no locking of its own, must not block, and
// must not call back into the queue.
//
// Invariants the queue keeps for the Store:
//   - Push is called only with an item that is not in the store.
//   - Pop is called only when Len() > 0.
//   - Touch is called only with an item that is in the store, when it is
//     added again while still waiting to be handed out (a duplicate Add).
//     A FIFO ignores it; a store may use it to reorder.
//
// One store serves one queue: the queue's key table and the store hold the
// same keys, so a store shared by two queues would hand one queue the keys
// of the other. NewWithConfig panics when given a store (any pointer to a
// non-empty type) that another queue already took.
//
// The method set equals client-go's workqueue.Queue[T], so a store written
// for one library works with the other.
type Store[T comparable] interface {
	// Push adds item, which is not in the store.
	Push(item T)
	// Pop removes and returns the next item to hand out. Len() > 0.
	Pop() T
	// Len reports how many items the store holds.
	Len() int
	// Touch tells the store that item, which it holds, was added again.
	Touch(item T)
}

// PriorityStore is a Store that orders keys by an integer priority, higher
// first. When Config.Store is a PriorityStore, AddWithPriority and
// AddAfterWithPriority pass their priority to it; plain Push means priority 0.
// The queue keeps the same locking and invariants as for Store, and in
// addition:
//   - PushPriority is called only with an item that is not in the store.
//   - Raise is called only with an item that is in the store at a priority
//     lower than priority; the store moves it to the back of that level.
type PriorityStore[T comparable] interface {
	Store[T]
	// PushPriority adds item, which is not in the store, at priority.
	PushPriority(item T, priority int)
	// Raise moves item, which is in the store at a lower priority, to the
	// back of priority's level.
	Raise(item T, priority int)
}

// minRing is the smallest capacity the ring keeps after shrinking. Small
// enough that an idle queue holds almost nothing, large enough that a queue
// with a handful of keys in flight never reallocates.
const minRing = 16

// ring is the default Store: a FIFO over a circular buffer whose capacity is
// a power of two. Unlike a slice used as a queue (s = s[1:], then append),
// it reuses its slots, so a steady Add/Get cycle allocates nothing. Popped
// slots are zeroed so that the ring never keeps a key (and what it points
// to) alive, and the buffer halves when it is at most a quarter full, so its
// memory follows the live key count rather than the peak of a burst.
//
// Shrinking has one brake. A controller's resync adds the same number of
// keys again and again, and a ring that shrank to nothing after each burst
// would grow back, allocating, every time. So the ring remembers how full it
// got recently and keeps room for that: it counts pushes in windows of
// twice the larger of its recent peak and the peak it keeps, and at the end
// of each window keeps that window's peak (the most items held in it),
// whatever happened in between. It does not shrink below twice the kept
// peak, and never keeps more than keepMax slots for it (dirty_set.go; the
// key table follows a similar rule), so larger bursts shrink all the way and
// an idle queue holds at most keepMax slots whatever its history.
//
// Windows, not bursts: a ring that is drained while it is still being filled
// (keys fired by a timer and taken by workers while a batch of AddAfter is
// still arriving) empties many times per batch, at peaks that wander, and a
// rule tied to "the last time it was empty" would forget the batch's size
// and reallocate for every batch. A window spans at least one batch, and
// the factor two absorbs peaks that wander across a power of two.
//
// The zero ring is an empty FIFO. It is not safe for concurrent use; the
// queue calls it under its lock.
type ring[T comparable] struct {
	buf    []T // len(buf) is 0 or a power of two
	head   int // index of the oldest item
	n      int // number of items
	peak   int // most items held in the current window
	keep   int // the previous window's peak, if at most keepMax: room kept for it
	pushes int // pushes in the current window
}

// Push appends item at the tail. Amortized O(1).
func (r *ring[T]) Push(item T) {
	if r.n == len(r.buf) {
		r.resize(max(2*len(r.buf), minRing))
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = item
	r.n++
	r.peak = max(r.peak, r.n)
	if r.pushes++; r.pushes >= 2*max(r.peak, r.keep, minRing) {
		r.keep = r.peak
		if r.keep > keepMax {
			r.keep = 0
		}
		r.peak, r.pushes = r.n, 0
	}
}

// Pop removes and returns the oldest item. Amortized O(1); r.n > 0.
func (r *ring[T]) Pop() T {
	var zero T
	item := r.buf[r.head]
	r.buf[r.head] = zero
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	if r.n == 0 {
		// Restart at slot 0, which keeps a busy ring cache-friendly
		// and lets a shrink copy nothing.
		r.head = 0
	}
	if r.n <= len(r.buf)/4 && len(r.buf)/2 >= max(minRing, min(2*r.keep, keepMax)) {
		r.resize(len(r.buf) / 2)
	}
	return item
}

// Len reports the number of items. O(1).
func (r *ring[T]) Len() int { return r.n }

// peek returns the oldest item without removing it; r.n > 0.
func (r *ring[T]) peek() T { return r.buf[r.head] }

// Touch does nothing: a FIFO keeps a re-added key at its first place.
func (r *ring[T]) Touch(T) {}

// resize moves the items, oldest first, into a new buffer of size c >= r.n.
func (r *ring[T]) resize(c int) {
	buf := make([]T, c)
	if r.n > 0 {
		k := copy(buf, r.buf[r.head:min(r.head+r.n, len(r.buf))])
		copy(buf[k:], r.buf[:r.n-k])
	}
	r.buf = buf
	r.head = 0
}

// NewFIFOStore returns the queue's default Store: a FIFO ring buffer that
// ignores Touch, zeroes popped slots and shrinks after a burst. It is useful
// to wrap or to hand to client-go. Like every Store it is not safe for
// concurrent use on its own.
func NewFIFOStore[T comparable]() Store[T] { return &ring[T]{} }

// reuse takes the last element off a free list of released elements (the
// stores keep a few to avoid allocating when a level or tenant comes and
// goes), or allocates a new zero one when the list is empty.
func reuse[E any](free *[]*E) *E {
	if n := len(*free); n > 0 {
		e := (*free)[n-1]
		(*free)[n-1] = nil
		*free = (*free)[:n-1]
		return e
	}
	return new(E)
}

// each calls yield with the items oldest first, until it returns false.
// It does not change the ring.
func (r *ring[T]) each(yield func(T) bool) {
	for i := range r.n {
		if !yield(r.buf[(r.head+i)&(len(r.buf)-1)]) {
			return
		}
	}
}

// claimed holds the stores that queues have taken, keyed by a weak pointer
// to each: a store is in it while it is alive and leaves it (a cleanup
// deletes its entry) once it is unreachable, so the set costs nothing for a
// store that is gone and never keeps one alive. Weak pointers, not
// addresses: two weak pointers are equal only if made from the same live
// object, so a new store allocated where a dead one was is never mistaken
// for it, however late the cleanup runs. Only NewWithConfig touches it,
// and only for a queue with a Store.
var claimed sync.Map // weak.Pointer[byte] -> struct{}

// claimStore records that a queue took s, and panics if a queue took it
// before. Only stores held by pointer can be told apart; a pointer to a
// zero-size type is skipped, since all of those may share one address (and
// such a store could not hold keys anyway), as is a store held by value,
// which is copied.
func claimStore[T comparable](s Store[T]) {
	v := reflect.ValueOf(s)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Type().Elem().Size() == 0 {
		return
	}
	p := (*byte)(v.UnsafePointer())
	w := weak.Make(p)
	if _, taken := claimed.LoadOrStore(w, struct{}{}); taken {
		panic("workqueue: Store already used by another queue")
	}
	runtime.AddCleanup(p, func(w weak.Pointer[byte]) { claimed.Delete(w) }, w)
}
