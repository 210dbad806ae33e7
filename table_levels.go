package workqueue

// The priority levels of a leveled key table (ordered_table.go): each
// non-empty level is a list of its ready entries, linked through the next
// and prev columns, and the levels are in a max-heap (levels.go).

// raise gives the entry at pos the priority prio if that is higher than its
// own (never a demotion), moving a ready entry of a leveled table to the
// back of its new level. It reports whether the priority changed.
func (t *orderedTable[T]) raise(pos int, prio int) bool {
	if prio <= t.prioAt(pos) {
		return false
	}
	linked := t.leveled && t.isReady(pos)
	if linked {
		t.unlink(pos)
	}
	t.setPrio(pos, prio)
	if linked {
		t.link(pos)
	}
	return true
}

// tableLevel is one level: its oldest and newest ready entries (positions
// plus one) and how many it has.
type tableLevel struct {
	first, last uint32
	n           int
	heapPos
}

func (l *tableLevel) pos() *heapPos { return &l.heapPos }

// link puts the ready entry at p at the back of its priority's level,
// making the level if the priority had no ready key.
func (t *orderedTable[T]) link(p int) {
	l := t.lv.get(int(t.prio[p]))
	u := uint32(p + 1)
	t.prev[p], t.next[p] = l.last, 0
	if l.last == 0 {
		l.first = u
	} else {
		t.next[l.last-1] = u
	}
	l.last = u
	l.n++
}

// unlink takes the ready entry at p out of its level's list.
func (t *orderedTable[T]) unlink(p int) {
	t.unlinkFrom(t.lv.find(int(t.prio[p])), p)
}

// unlinkFrom is unlink for a caller that has found the level, l. A level
// that empties is dropped, and kept for reuse while there is room: a
// priority that comes and goes does not allocate each time.
func (t *orderedTable[T]) unlinkFrom(l *tableLevel, p int) {
	pv, nx := t.prev[p], t.next[p]
	if pv == 0 {
		l.first = nx
	} else {
		t.next[pv-1] = nx
	}
	if nx == 0 {
		l.last = pv
	} else {
		t.prev[nx-1] = pv
	}
	t.prev[p], t.next[p] = 0, 0
	if l.n--; l.n == 0 && t.lv.drop(l, true) {
		*l = tableLevel{}
	}
}

// countByPriority adds to m the number of ready keys at each priority.
// O(levels).
func (t *orderedTable[T]) countByPriority(m map[int]int) {
	for _, l := range t.lv.heap {
		m[l.prio] += l.n
	}
}
