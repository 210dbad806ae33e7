package workqueue

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
// peak, and never keeps more than keepMax slots for it (shrinking_map.go; the
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

// each calls yield with the items oldest first, until it returns false.
// It does not change the ring.
func (r *ring[T]) each(yield func(T) bool) {
	for i := range r.n {
		if !yield(r.buf[(r.head+i)&(len(r.buf)-1)]) {
			return
		}
	}
}

// NewFIFOStore returns the queue's default Store: a FIFO ring buffer that
// ignores Touch, zeroes popped slots and shrinks after a burst. It is useful
// to wrap or to hand to client-go. Like every Store it is not safe for
// concurrent use on its own.
func NewFIFOStore[T comparable]() Store[T] { return &ring[T]{} }
