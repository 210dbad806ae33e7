package workqueue

// A level is the FIFO of the ready keys of one priority. Both places that
// keep levels, the priority store (a ring of keys per level) and the
// ordered table of a queue with the built-in priority store (a list linked
// through the log per level), keep only the levels that hold a ready key,
// in a max-heap by priority: the root is always the level Get takes from,
// found in O(1), and a level is added or dropped in O(log L) for L levels.
//
// The heap is written out rather than using container/heap: its interface
// calls cost more than the sift itself, and each level must learn its index
// (hi) to be removed from the middle when it empties out of turn (a Raise
// or a Remove). Levels have distinct priorities, so there are no ties to
// break.

// heapPos is what the heap needs of a level: its priority and where it
// sits in the heap.
type heapPos struct {
	prio int
	hi   int // index in the heap
}

// leveled is a level type: a pointer to a struct that embeds heapPos.
type leveled interface {
	comparable
	pos() *heapPos
}

// levelHeap is a max-heap of levels by priority.
type levelHeap[L leveled] []L

// push adds l to the heap.
func (h *levelHeap[L]) push(l L) {
	*h = append(*h, l)
	h.up(len(*h) - 1)
}

// up moves the level at i towards the root until its parent is higher.
func (h levelHeap[L]) up(i int) {
	l := h[i]
	prio := l.pos().prio
	for i > 0 {
		p := (i - 1) / 2
		if h[p].pos().prio > prio {
			break
		}
		h[i] = h[p]
		h[i].pos().hi = i
		i = p
	}
	h[i] = l
	l.pos().hi = i
}

// down moves the level at i towards the leaves until both children are
// lower.
func (h levelHeap[L]) down(i int) {
	l := h[i]
	prio := l.pos().prio
	for {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if c+1 < len(h) && h[c+1].pos().prio > h[c].pos().prio {
			c++
		}
		if h[c].pos().prio < prio {
			break
		}
		h[i] = h[c]
		h[i].pos().hi = i
		i = c
	}
	h[i] = l
	l.pos().hi = i
}

// remove takes the level at i out of the heap, and gives memory back when
// the heap has shrunk to a quarter of its capacity, so that a burst of many
// distinct priorities does not pin a large array.
func (h *levelHeap[L]) remove(i int) {
	s := *h
	last := len(s) - 1
	moved := s[last]
	var zero L
	s[last] = zero
	s = s[:last]
	if i != last {
		s[i] = moved
		moved.pos().hi = i
		s.down(i)
		if moved.pos().hi == i {
			s.up(i)
		}
	}
	if c := cap(s); c > 64 && len(s) <= c/4 {
		s = append(make(levelHeap[L], 0, c/2), s...)
	}
	*h = s
}

// below returns the level of the highest priority below prev's (any level
// when prev is the zero L), or the zero L if there is none: O(L), as the
// heap is not sorted. It lets a reader visit the levels in the order Get
// would, without changing or copying the heap.
func (h levelHeap[L]) below(prev L) L {
	var zero, l L
	for _, c := range h {
		if (prev == zero || c.pos().prio < prev.pos().prio) && (l == zero || c.pos().prio > l.pos().prio) {
			l = c
		}
	}
	return l
}

// levelSet is the levels of one priority structure: the non-empty ones, by
// priority and in the heap, the level used last (successive keys at one
// priority, the usual case, skip the map), and emptied levels kept for
// reuse, so that a priority that comes and goes (fresh events jumping a
// resync) does not allocate each time. E is the level type, L a pointer to
// it. The zero levelSet is empty.
type levelSet[E any, L interface {
	*E
	leveled
}] struct {
	byPrio shrinkingMap[int, L]
	heap   levelHeap[L]
	last   L
	spare  []*E // len <= maxSpareLevels
}

// find returns the level of priority p, or the zero L if p has no ready
// key.
func (s *levelSet[E, L]) find(p int) L {
	var zero L
	if l := s.last; l != zero && l.pos().prio == p {
		return l
	}
	return s.byPrio.m[p]
}

// get returns the level of priority p, making it (a spare one if there is
// one) if p has no ready key, and remembers it as the last used.
func (s *levelSet[E, L]) get(p int) L {
	var zero L
	l := s.find(p)
	if l == zero {
		l = L(reuse(&s.spare))
		l.pos().prio = p
		s.byPrio.put(p, l)
		s.heap.push(l)
	}
	s.last = l
	return l
}

// drop takes l, which has no ready key left, out of the set. It keeps l
// for reuse if reusable and there is room, and reports whether it did: the
// caller then empties l before it is handed out again.
func (s *levelSet[E, L]) drop(l L, reusable bool) (kept bool) {
	s.heap.remove(l.pos().hi)
	s.byPrio.del(l.pos().prio)
	if s.last == l {
		var zero L
		s.last = zero
	}
	if !reusable || len(s.spare) == maxSpareLevels {
		return false
	}
	s.spare = append(s.spare, (*E)(l))
	return true
}
