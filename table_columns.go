package workqueue

// The side columns of the key table (ordered_table.go): the arrays beside
// its log that hold what only some configurations need of a key, each
// allocated on first use, and moved with the log when it compacts or
// grows.

// columns are the arrays of the log, one entry per position. Those a mode
// does not use are nil.
type columns[T comparable] struct {
	keys  []T
	flags []uint8
	at    []int64  // timed only: dirty time of a ready key, start of a run
	gen   []uint16 // timed only: generation of a processing key's run
	when  []int64  // delayed only: a waiting key's deadline
	wseq  []uint64 // delayed only: the seq of its live delay entry
	// prioritized only: the priority of the key's pending run (or of the
	// run it is processing, until it is added again).
	prio []int
	// leveled only: the links of a ready entry in its level's list.
	next, prev []uint32
	// bounced only: a waiting key's debounce state. Cleared whenever the
	// key stops waiting, so an entry is never made or killed with one.
	bounce []bounceState
	// ghosted only: how many ghosts Remove left in a user's Store for the
	// key (remove.go). 0 in every dead entry.
	ghost []uint32
}

// makeColumns allocates the columns the table's modes use, n entries each.
func (t *orderedTable[T]) makeColumns(n int) columns[T] {
	c := columns[T]{keys: make([]T, n), flags: make([]uint8, n)}
	if t.timed {
		c.at, c.gen = make([]int64, n), make([]uint16, n)
	}
	if t.delayed {
		c.when, c.wseq = make([]int64, n), make([]uint64, n)
	}
	if t.prioritized {
		c.prio = make([]int, n)
	}
	if t.leveled {
		c.next, c.prev = make([]uint32, n), make([]uint32, n)
	}
	if t.bounced {
		c.bounce = make([]bounceState, n)
	}
	if t.ghosted {
		c.ghost = make([]uint32, n)
	}
	return c
}

// move copies entry p of c to entry n of d (the same columns, or columns
// the same modes allocated), with the links of a ready entry renumbered by
// remap (see moveLive).
func (c *columns[T]) move(d *columns[T], n, p int, remap []uint64) {
	d.keys[n], d.flags[n] = c.keys[p], c.flags[p]
	if c.at != nil {
		d.at[n], d.gen[n] = c.at[p], c.gen[p]
	}
	if c.when != nil {
		d.when[n], d.wseq[n] = c.when[p], c.wseq[p]
	}
	if c.prio != nil {
		d.prio[n] = c.prio[p]
	}
	if c.next != nil {
		d.next[n], d.prev[n] = renumber(c.next[p], remap), renumber(c.prev[p], remap)
	}
	if c.bounce != nil {
		d.bounce[n] = c.bounce[p]
	}
	if c.ghost != nil {
		d.ghost[n] = c.ghost[p]
	}
}

// copyPrefix copies the first n entries of c to d, positions unchanged.
func (c *columns[T]) copyPrefix(d *columns[T], n int) {
	copy(d.keys, c.keys[:n])
	copy(d.flags, c.flags[:n])
	if c.at != nil {
		copy(d.at, c.at[:n])
		copy(d.gen, c.gen[:n])
	}
	if c.when != nil {
		copy(d.when, c.when[:n])
		copy(d.wseq, c.wseq[:n])
	}
	if c.prio != nil {
		copy(d.prio, c.prio[:n])
	}
	if c.next != nil {
		copy(d.next, c.next[:n])
		copy(d.prev, c.prev[:n])
	}
	if c.bounce != nil {
		copy(d.bounce, c.bounce[:n])
	}
	if c.ghost != nil {
		copy(d.ghost, c.ghost[:n])
	}
}

// renumber returns the link u (a position plus one, or 0) after a
// compaction, which remap gives for every live position.
func renumber(u uint32, remap []uint64) uint32 {
	if u == 0 || remap == nil {
		return u
	}
	return uint32(remap[u-1])
}

// entry returns the live entry at p, read out of its columns.
func (t *orderedTable[T]) entry(p int) keyState {
	st := keyState{flags: t.flags[p]}
	if t.timed {
		st.at, st.gen = t.at[p], t.gen[p]
	}
	if t.delayed {
		st.when, st.wseq = t.when[p], t.wseq[p]
	}
	if t.prioritized {
		st.prio = t.prio[p]
	}
	return st
}

// setDeadline records that the waiting key at p has its run at when, and
// that the delay entry with seq seq is its live one.
func (t *orderedTable[T]) setDeadline(p int, when int64, seq uint64) {
	t.when[p], t.wseq[p] = when, seq
}

// enableDelays makes the table keep deadlines, from now on.
func (t *orderedTable[T]) enableDelays() {
	if t.delayed {
		return
	}
	t.delayed = true
	if n := len(t.keys); n > 0 {
		t.when, t.wseq = make([]int64, n), make([]uint64, n)
	}
}

// enablePrio makes the table keep priorities, from now on. The keys it
// holds have priority 0.
func (t *orderedTable[T]) enablePrio() {
	t.prioritized = true
	if n := len(t.keys); n > 0 {
		t.prio = make([]int, n)
	}
}

// enableGhosts makes the table keep ghost counts, from now on.
func (t *orderedTable[T]) enableGhosts() {
	t.ghosted = true
	if n := len(t.keys); n > 0 {
		t.ghost = make([]uint32, n)
	}
}

// ghostAt returns the position of the entry held by slot, which find
// returned for an absent key: the entry of a key that has only ghosts
// (fGhost), or -1 if the slot is empty (the key has no entry at all).
func (t *orderedTable[T]) ghostAt(slot int) int {
	if slot < 0 || t.index[slot] == 0 {
		return -1
	}
	return int(uint32(t.index[slot])) - 1
}

// prioAt returns the priority of the entry at p: 0 until a priority other
// than 0 was asked for.
func (t *orderedTable[T]) prioAt(p int) int {
	if !t.prioritized {
		return 0
	}
	return t.prio[p]
}

// setPrio sets the priority of the entry at p, which is not linked in a
// level (not ready in a leveled table: use raise).
func (t *orderedTable[T]) setPrio(p, prio int) {
	if !t.prioritized {
		if prio == 0 {
			return
		}
		t.enablePrio()
	}
	t.prio[p] = prio
}
