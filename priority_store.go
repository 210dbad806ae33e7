package workqueue

// The priority store keeps one FIFO per priority that has ready keys (a
// level), a max-heap of those levels, and an index from each key to its slot.
//
//   - A level is a ring (ring.go) of entries. Raise cannot cut an entry out
//     of the middle of a ring in O(1), so it leaves a hole: the entry is
//     zeroed in place (the key is no longer referenced) and Pop skips it.
//     The index records each key's position among the pushes to its level,
//     which turns into a ring slot in O(1) (prioLevel.at).
//   - Holes must not pile up, or memory would follow the number of Raise
//     calls instead of the live keys: the Raise or Pop after which a ring's
//     holes outnumber its live keys compacts it (shed). Each compaction
//     copies fewer live entries than it removes holes, and each hole was
//     made by one Raise, so the cost is O(1) amortized per Raise and a ring
//     never holds more than twice its live keys.
//   - A level is released the moment it has no live key, so the heap holds
//     only non-empty levels and its root is always the level to pop from,
//     found in O(1); a level's own holes are skipped at O(1) amortized
//     each, since each is skipped once. A few released levels
//     are kept for reuse (maxSpareLevels) so that a priority that comes and
//     goes, the usual case for "fresh events jump the resync", does not
//     allocate each time.
//
// A doubly linked list per level would let Raise unlink directly, but costs
// an allocation (or a slab with its own compaction) per key and a pointer
// chase per Pop; with the ring, a key costs one slot and one index entry, and
// Push and Pop do no more than the FIFO plus one index update. The index is
// the price of Raise: without it, finding a key would take a scan.

// maxSpareLevels bounds the released levels kept for reuse. Each holds at
// most minRing slots, so spares cost a constant amount of memory.
const maxSpareLevels = 8

// prioEntry is one slot of a level's ring. The zero entry is a hole: a key
// that was raised to another level.
type prioEntry[T comparable] struct {
	item T
	ok   bool // false for a hole
}

// prioSlot is where the index finds a key: its priority (so its level) and
// its position among the pushes to that level.
type prioSlot struct {
	prio int
	pos  uint64
}

// prioLevel is the FIFO of one priority that has ready keys.
type prioLevel[T comparable] struct {
	fifo ring[prioEntry[T]]
	// off is the position of the oldest entry of fifo. Positions number the
	// pushes to this level, so the entry at position p sits p-off slots
	// after the ring's head, wherever the ring has moved it.
	off  uint64
	live int // entries of fifo that are not holes; > 0 while in the heap
	heapPos
}

func (l *prioLevel[T]) pos() *heapPos { return &l.heapPos }

// at returns the ring slot of the entry at position pos, which is in fifo.
func (l *prioLevel[T]) at(pos uint64) *prioEntry[T] {
	r := &l.fifo
	return &r.buf[(r.head+int(pos-l.off))&(len(r.buf)-1)]
}

// priorityStore is the PriorityStore returned by NewPriorityStore.
//
// The zero value is an empty store ready to use. It is not safe for
// concurrent use: the queue calls it under its lock.
type priorityStore[T comparable] struct {
	index  shrinkingMap[T, prioSlot]             // every key in the store
	levels levelSet[prioLevel[T], *prioLevel[T]] // the non-empty levels (levels.go)
}

// NewPriorityStore returns a Store that hands out keys by priority, higher
// first, and within one priority in the order they became ready (FIFO). Use
// it as Config.Store; AddWithPriority and AddAfterWithPriority then pass
// their priority to it, and plain Add means priority 0. Any int is a valid
// priority, negative ones included.
//
// Raise moves a key to the back of its new, higher level; asking for a lower
// or equal priority, or raising a key the store does not hold, changes
// nothing, so a key is never demoted. Touch does nothing: a duplicate Add
// keeps the key's place.
//
// Costs, for n keys in L distinct priorities: Push, PushPriority and Raise
// are O(1) amortized, plus O(log L) when they create or empty a level; Pop is
// O(1) amortized, plus O(log L) when it empties a level; Len and Touch are
// O(1). Popped and raised-away slots are zeroed at once, so the store never
// keeps a key it no longer holds alive, and its memory (index, levels, heap)
// shrinks after a burst to follow the live keys.
//
// Like every Store it is not safe for concurrent use on its own; the queue
// calls it under its lock.
//
// A Queue given this store keeps the same levels, with the same order and
// costs, in its own key table instead, and never calls the store: the table
// already indexes every key, so the levels there cost 16 bytes a key and no
// second index (ordered_table.go). Pass a new store to each queue, as for
// any Store.
//
// It returns the PriorityStore interface rather than a concrete type, as
// NewFIFOStore returns Store: the interface is the concept (the name
// PriorityStore is taken by it), stores are only ever called through it (by
// this queue, or by client-go's), and the implementation has no methods
// beyond it, so an exported type would add a name and nothing a caller could
// use.
func NewPriorityStore[T comparable]() PriorityStore[T] {
	return &priorityStore[T]{}
}

// Push adds item, which is not in the store, at priority 0.
func (s *priorityStore[T]) Push(item T) { s.PushPriority(item, 0) }

// PushPriority adds item, which is not in the store, at the back of
// priority's level.
func (s *priorityStore[T]) PushPriority(item T, priority int) {
	s.add(s.level(priority), item)
}

// Raise moves item to the back of priority's level if the store holds it at
// a lower priority, and otherwise does nothing.
func (s *priorityStore[T]) Raise(item T, priority int) {
	sl, ok := s.index.m[item]
	if !ok || priority <= sl.prio {
		return
	}
	s.cut(sl)
	s.add(s.level(priority), item)
}

// cut leaves a hole where the index says a key sits (sl), and sheds what
// its level no longer needs. The caller updates the index.
func (s *priorityStore[T]) cut(sl prioSlot) {
	l := s.levels.find(sl.prio)
	*l.at(sl.pos) = prioEntry[T]{}
	l.live--
	s.shed(l)
}

// Pop removes and returns the oldest key of the highest priority. Len() > 0.
func (s *priorityStore[T]) Pop() T {
	l := s.levels.heap[0]
	e := l.fifo.Pop()
	l.off++
	for !e.ok { // skip holes left by Raise
		e = l.fifo.Pop()
		l.off++
	}
	l.live--
	s.index.del(e.item)
	s.shed(l)
	return e.item
}

// Len reports the number of keys in the store.
func (s *priorityStore[T]) Len() int { return len(s.index.m) }

// Touch does nothing: a duplicate Add neither moves nor raises a key.
func (s *priorityStore[T]) Touch(T) {}

// add appends item at the back of l and indexes it.
func (s *priorityStore[T]) add(l *prioLevel[T], item T) {
	pos := l.off + uint64(l.fifo.Len())
	l.fifo.Push(prioEntry[T]{item: item, ok: true})
	l.live++
	s.index.put(item, prioSlot{prio: l.prio, pos: pos})
}

// level returns the level of priority p, creating it (and putting it in the
// heap) if p has no ready key.
func (s *priorityStore[T]) level(p int) *prioLevel[T] { return s.levels.get(p) }

// shed gives back what l no longer needs after it lost a live key: the
// whole level if that was its last one, else its holes once they outnumber
// its live keys. Pop checks too, not only Raise: pops at the front can leave
// a few live keys ahead of many holes, which would otherwise wait for the
// level to empty.
func (s *priorityStore[T]) shed(l *prioLevel[T]) {
	if l.live == 0 {
		s.release(l)
	} else if l.fifo.Len() > 2*l.live {
		s.compact(l)
	}
}

// release removes l, which has no live key, from the heap and the levels
// map, and keeps it for reuse if there is room and its ring is small.
func (s *priorityStore[T]) release(l *prioLevel[T]) {
	if !s.levels.drop(l, len(l.fifo.buf) <= minRing) {
		return // dropped with whatever holes it still has
	}
	clear(l.fifo.buf) // only holes remain, already zero; cheap at minRing
	l.fifo.head, l.fifo.n = 0, 0
	l.off, l.live = 0, 0
}

// compact drops the holes of l, keeping its live entries in order, and
// re-indexes them. It rotates the ring once: each entry is popped and, if
// live, pushed back, which gives it a new position.
func (s *priorityStore[T]) compact(l *prioLevel[T]) {
	for range l.fifo.Len() {
		e := l.fifo.Pop()
		l.off++
		if e.ok {
			pos := l.off + uint64(l.fifo.Len())
			l.fifo.Push(e)
			s.index.m[e.item] = prioSlot{prio: l.prio, pos: pos}
		}
	}
}
