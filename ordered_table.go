package workqueue

import "hash/maphash"

// orderedTable is the key table of every queue: each key that is ready,
// waiting or processing, with its flags (key_state.go) and whatever else
// the queue's configuration needs of it, in side columns allocated on first
// use. Where the order of the ready keys is the queue's own it is also
// the FIFO (a queue without a Store) or the priority levels (the built-in
// priority store, leveled below); with any other Store (storeOrder) the
// Store keeps the order and the table only the flags and the columns, so
// that Get pops the Store and finds the key here with one hash. A plain queue
// with a Go map for its flags and a ring for its order stores every ready
// key twice and hashes it about four times per Add/Get/Done; this table
// stores each key once and hashes it twice per cycle (Add and Done; Get
// hashes nothing). It is the compact ordered dict of CPython and others,
// turned into a queue:
//
//   - keys and flags are a log, in the order keys became ready (or started
//     to wait). An entry
//     whose flags are 0 is dead: its key was zeroed when it died, so the log
//     never keeps a key (and what it points to) alive.
//   - index is an open-addressing hash table with linear probing over the
//     live entries. A slot is 0 (empty) or hash<<32 | (position+1): the
//     stored 32 bits of the hash both place the slot (hash & mask) and
//     screen out most other keys before their log entry is read, and they
//     let a delete shift entries back and a rebuild re-place them without
//     hashing any key again. len(index) is twice len(keys), so the index
//     is at most half full and probes are short.
//   - head splits the log: entries before it were handed out by Get and
//     are processing, or dead, or waiting; entries from it to tail are
//     ready, or dead (left by Remove), or waiting. Every ready entry is at
//     or after head, in FIFO order. Get takes the first ready entry from
//     head on, passing over the others once each: no hashing, no search.
//     Done of a key added again while processing kills its entry and
//     appends a new one at the tail: "ready again, at the tail". A waiting
//     key whose deadline passes becomes ready where it is if no ready entry
//     comes after it (readyEnd), else at the tail.
//
// The log is compacted in place when it fills while at least a quarter of it
// is dead, and grows when it fills otherwise, so appends are O(1)
// amortized; a compaction rehashes the live keys, and a pure growth (no dead
// entry, the burst case) moves nothing and re-places index slots by their
// stored hash. When the table empties, positions restart at 0 without
// copying anything.
//
// Memory follows the live keys, with the same brake as shrinkingMap: the
// table shrinks once fewer than an eighth of its entries are live, and when
// it empties it lets go of its arrays, unless it is sized for a burst (of at
// most keepMax keys) that came before, which a controller's resync repeats.
//
// Per key, that is one log entry (the key and a byte) and two index slots
// of 8 bytes: for int keys about half of what a Go map of flags plus a ring
// hold, for string keys less.
//
// The side columns are arrays beside the log, moved with it, each
// allocated only once a key needs it, so a plain queue pays for none:
//
//   - timed (a queue with metrics): when a key became dirty (for queue
//     latency) or when its run started (for work duration and the age
//     gauges), and the generation of its run (for the processing set), in
//     at and gen;
//   - delayed (from the first AddAfter or debounced Add on): a waiting
//     key's deadline and the seq of its live delay entry, in when and wseq;
//   - prioritized (from the first priority other than 0, or from the start
//     when leveled): the priority of the key's pending run, in prio;
//   - bounced (a queue with Debounce): a waiting key's burst, in bounce
//     (debounce.go);
//   - ghosted (from the first ghost Remove leaves in a user's Store): how
//     many ghosts each key has, in ghost (remove.go). A key whose only
//     trace is its ghosts keeps an entry flagged fGhost for their count;
//     find reports it absent, and inserting the key again takes over the
//     slot and the count.
//
// A mode once on stays on: a column is not worth dropping while its table
// holds keys, and it goes with the arrays when the table empties.
//
// A leveled table is the key table of a queue whose Store is the built-in
// priority store (NewPriorityStore): the queue keeps the priority levels
// itself, in the table, instead of asking the store, which would keep a
// second index of every key (a Go map of 24-byte slots) beside the queue's
// own. Each entry also has the priority of its pending run (prio), and a
// ready entry is linked into the list of its level (next, prev: positions
// plus one, 0 for none); levels.go keeps the non-empty levels in a max-heap.
// Get takes the first entry of the highest level, a Raise unlinks an entry
// and links it at the back of its new level, Remove unlinks it: all O(1),
// plus O(log L) when a level of L appears or empties. Since the lists give
// the order, a leveled table never moves an entry to make it ready: Done of
// a key added again, and a deadline that passes, link it where it is, and
// head and readyEnd play no part. Compaction renumbers positions, so it
// renumbers the links too (moveLive). Per key that is 16 more bytes than a
// plain table (an int priority and two 32-bit links), with no per-key
// allocation. The priority is a full int, not an int32, so that every int priority has a level of its own, as in
// controller-runtime: 4 more bytes a key.
//
// The zero orderedTable is empty and allocates nothing until its first key.
// Not safe for concurrent use; the queue calls it under its lock.
type orderedTable[T comparable] struct {
	// The fields Add, Get and Done use come first, together (see Queue).
	head int // first entry that may be ready
	tail int // next entry to append
	// readyEnd is one past the last entry made ready: every ready entry
	// lies before it, so a waiting entry at or after both head and
	// readyEnd can become ready where it is without breaking FIFO order.
	readyEnd int
	live     int // keys in the table: live entries, and occupied index slots
	ready    int // ready entries: at or after head, in a level, or in the Store
	timed    bool
	// prioritized is set by the first priority other than 0 (and before
	// the first key when leveled): from then on the table keeps prio.
	prioritized bool
	// delayed is set by the first AddAfter: from then on the table keeps
	// deadlines, and waiting keys have entries anywhere in the log (Get
	// passes over them; the timer moves them to the tail when they
	// become ready).
	delayed bool
	// leveled is set for a queue with the built-in priority store, before
	// the first key: the table keeps priorities and levels (lv).
	leveled bool
	// bounced is set for a queue with Debounce, before the first key: the
	// table keeps each waiting key's debounce state (bounce).
	bounced bool
	// storeOrder is set for a queue with a Store (Config.Store other than
	// the built-in priority store), before the first key: the Store keeps
	// the ready keys' order, so a key made ready stays where it is in the
	// log, and head and readyEnd play no part.
	storeOrder bool
	// ghosted is set by the first ghost (storeOrder only): from then on
	// the table keeps ghost counts.
	ghosted bool
	seed    maphash.Seed
	index   []uint64
	columns[T]
	lv levelSet[tableLevel, *tableLevel] // leveled only: the non-empty levels (levels.go)

	burst     int // most live keys since the table was last empty
	lastBurst int // burst's value when the table last emptied
}

// minLog is the smallest log the table allocates.
const minLog = 16

// maxLog bounds the log so that a position fits the index's 32 bits.
const maxLog = 1 << 31

// find looks item up. It returns its hash (computed only when the table
// holds keys), the index slot where it is or where it would go, and its
// log position, or -1 if it is absent. A slot of -1 means nothing was
// hashed. The slot of an absent key is empty, unless the key has only
// ghosts (ghostAt).
func (t *orderedTable[T]) find(item T) (h uint32, slot, pos int) {
	if t.live == 0 {
		return 0, -1, -1 // nothing to find: skip the hash
	}
	h = uint32(maphash.Comparable(t.seed, item))
	mask := len(t.index) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		e := t.index[i]
		if e == 0 {
			return h, i, -1
		}
		if uint32(e>>32) == h {
			if p := int(uint32(e)) - 1; t.keys[p] == item {
				if t.ghosted && t.flags[p] == fGhost {
					return h, i, -1 // only ghosts: absent (see ghostAt)
				}
				return h, i, p
			}
		}
	}
}

// insert appends item, which is absent, as a ready key, and returns its
// position. h and slot are what find returned for it. prio is the
// priority of its run, which the table keeps once it is prioritized.
func (t *orderedTable[T]) insert(item T, h uint32, slot int, prio int) int {
	return t.insertAs(item, h, slot, fDirty, prio)
}

// insertAs is insert with the entry's flags: fDirty (ready) or fWaiting.
// A key that has only ghosts takes over its fGhost entry's slot and ghost
// count, at a new position (where a user's Store keeps the order, the
// position does not matter).
func (t *orderedTable[T]) insertAs(item T, h uint32, slot int, f uint8, prio int) int {
	if prio != 0 && !t.prioritized {
		t.enablePrio()
	}
	if t.tail == len(t.keys) {
		t.makeRoom()
		slot = -1 // the index was rebuilt
	}
	if slot < 0 && t.ghosted && t.live > 0 {
		h, slot, _ = t.find(item) // an fGhost entry may hold the key's slot
	}
	if slot < 0 {
		h = uint32(maphash.Comparable(t.seed, item))
		slot = t.emptySlot(h)
	}
	p := t.tail
	t.tail++
	if old := t.ghostAt(slot); old >= 0 {
		var zero T
		t.keys[old], t.flags[old] = zero, 0
		t.ghost[p], t.ghost[old] = t.ghost[old], 0
		t.live--
	}
	t.keys[p], t.flags[p] = item, f
	t.index[slot] = uint64(h)<<32 | uint64(p+1)
	t.live++
	if t.prioritized {
		t.prio[p] = prio
	}
	if f == fDirty {
		t.ready++
		t.readyEnd = p + 1
		if t.leveled {
			t.link(p)
		}
	}
	t.burst = max(t.burst, t.live)
	return p
}

// emptySlot returns the first empty index slot on h's probe sequence.
func (t *orderedTable[T]) emptySlot(h uint32) int {
	mask := len(t.index) - 1
	i := int(h) & mask
	for t.index[i] != 0 {
		i = (i + 1) & mask
	}
	return i
}

// take hands out the oldest ready key, marks it processing and returns it
// and its position. ready > 0.
func (t *orderedTable[T]) take() (T, int) {
	if t.leveled {
		l := t.lv.heap[0]
		p := int(l.first - 1)
		t.unlinkFrom(l, p)
		t.takeAt(p)
		return t.keys[p], p
	}
	for !t.isReady(t.head) {
		t.head++ // dead (left by Remove), or waiting for a deadline
	}
	p := t.head
	t.head++
	t.takeAt(p)
	return t.keys[p], p
}

// takeAt marks the ready entry at p processing: Get. take calls it, and
// the queue does for a key that the Store handed out (storeOrder).
func (t *orderedTable[T]) takeAt(p int) {
	t.flags[p] = fProcessing
	t.ready--
}

// requeue makes the key at pos (in slot) ready, at the tail of the log,
// and returns its new position.
func (t *orderedTable[T]) requeue(slot, pos int) int {
	item := t.keys[pos]
	if t.tail < len(t.keys) {
		// Move the entry; the index slot keeps its hash.
		var zero T
		t.keys[pos], t.flags[pos] = zero, 0
		p := t.tail
		t.tail++
		t.keys[p], t.flags[p] = item, fDirty
		if t.prioritized {
			t.prio[p] = t.prio[pos]
		}
		t.index[slot] = t.index[slot]&^(1<<32-1) | uint64(p+1)
		t.ready++
		t.readyEnd = p + 1
		return p
	}
	prio := t.prioAt(pos)
	t.kill(slot, pos)
	return t.insert(item, 0, -1, prio)
}

// readyAt makes the entry at pos, which is not ready, ready where it is: in
// a leveled table, at the back of its level; with storeOrder, the caller
// pushes it to the Store. It returns pos.
func (t *orderedTable[T]) readyAt(pos int) int {
	t.flags[pos] = fDirty
	t.ready++
	t.readyEnd = max(t.readyEnd, pos+1)
	if t.leveled {
		t.link(pos)
	}
	return pos
}

// promote makes the key at pos (in slot), which is waiting or was
// processing, ready, and returns its position. Where the log is the FIFO,
// that is where it is if no ready entry comes after it (deadlines that
// pass in the order their AddAfter came, the usual case, then move
// nothing), else at the tail: a processing entry lies before head, so Done
// of a key added again moves it to the tail, "ready again, at the tail".
// Where the levels or a Store give the order, it stays where it is.
func (t *orderedTable[T]) promote(slot, pos int) int {
	if t.leveled || t.storeOrder || pos >= t.head && pos >= t.readyEnd {
		return t.readyAt(pos)
	}
	return t.requeue(slot, pos)
}

// remove takes the key at pos (in slot) out of the table. A key that has
// ghosts leaves an fGhost entry behind for their count, until the last of
// them is popped (remove.go).
func (t *orderedTable[T]) remove(slot, pos int) {
	if t.flags[pos] == fDirty {
		t.ready--
		if t.leveled {
			t.unlink(pos)
		}
	}
	if t.ghosted && t.ghost[pos] > 0 {
		t.flags[pos] = fGhost
		return
	}
	t.kill(slot, pos)
	if t.live == 0 {
		// Every entry is dead and zeroed: start the log over.
		t.head, t.tail, t.readyEnd = 0, 0, 0
		t.lastBurst, t.burst = t.burst, 0
	}
	if n := len(t.keys); n > minLog && t.live < n/8 && !t.recurring() {
		t.resize(max(minLog, ceilPow2(2*t.live)))
	}
}

// kill zeroes the entry at pos and deletes its index slot, shifting back
// the entries after it in the same probe run (so that no lookup needs a
// tombstone to keep probing).
func (t *orderedTable[T]) kill(slot, pos int) {
	var zero T
	t.keys[pos], t.flags[pos] = zero, 0
	t.live--
	mask := len(t.index) - 1
	hole := slot
	for j := (slot + 1) & mask; ; j = (j + 1) & mask {
		e := t.index[j]
		if e == 0 {
			break
		}
		// e may fill the hole if the hole lies on its probe sequence:
		// between its home slot and j.
		if home := int(uint32(e>>32)) & mask; (j-home)&mask >= (j-hole)&mask {
			t.index[hole] = e
			hole = j
		}
	}
	t.index[hole] = 0
}

// recurring reports whether the table is sized for a burst that came
// before and is small enough to keep room for (see shrinkingMap).
func (t *orderedTable[T]) recurring() bool {
	n := len(t.keys)
	return n <= keepMax && t.lastBurst <= keepMax && 2*t.lastBurst >= n
}

// makeRoom makes the log able to take one more entry at the tail.
func (t *orderedTable[T]) makeRoom() {
	n := len(t.keys)
	switch {
	case n == 0:
		if t.seed == (maphash.Seed{}) {
			t.seed = maphash.MakeSeed()
		}
		t.resize(minLog)
	case t.live == t.tail:
		t.grow() // no dead entry: positions stay
	case t.live <= n-n/4:
		t.compact()
	default:
		t.resize(2 * n)
	}
}

// grow doubles a log that has no dead entry. Positions do not change, so
// the index slots are re-placed by their stored hash, without hashing, and
// the links of a leveled table stay as they are.
func (t *orderedTable[T]) grow() {
	n := 2 * len(t.keys)
	if n > maxLog {
		panic("workqueue: more than 2^31 keys in one queue")
	}
	c := t.makeColumns(n)
	t.columns.copyPrefix(&c, t.tail)
	index := make([]uint64, 2*n)
	mask := len(index) - 1
	for _, e := range t.index {
		if e != 0 {
			i := int(uint32(e>>32)) & mask
			for index[i] != 0 {
				i = (i + 1) & mask
			}
			index[i] = e
		}
	}
	t.columns, t.index = c, index
}

// compact moves the live entries to the front of the log, in order, and
// rebuilds the index in place: no allocation, so a steady queue whose log
// fills with dead entries does not allocate.
func (t *orderedTable[T]) compact() {
	tail := t.tail
	t.moveLive(&t.columns)
	c := &t.columns
	clear(c.keys[t.tail:tail])
	clear(c.flags[t.tail:tail])
	if c.bounce != nil {
		clear(c.bounce[t.tail:tail]) // a dead entry has no burst
	}
	if c.next != nil {
		clear(c.next[t.tail:tail]) // a dead entry has no links
		clear(c.prev[t.tail:tail])
	}
	if c.ghost != nil {
		clear(c.ghost[t.tail:tail]) // a dead entry has no ghosts
	}
	clear(t.index)
	t.reindex()
}

// resize moves the live entries into a log of n entries (n >= live) and
// an index of 2n slots. n == 0 lets go of every array.
func (t *orderedTable[T]) resize(n int) {
	if n > maxLog {
		panic("workqueue: more than 2^31 keys in one queue")
	}
	if t.live == 0 && !t.recurring() && len(t.keys) > minLog {
		n = 0 // empty, and not kept for a burst: hold nothing
	}
	if n == 0 {
		t.columns, t.index = columns[T]{}, nil
		t.head, t.tail, t.readyEnd = 0, 0, 0
		return
	}
	c := t.makeColumns(n)
	t.moveLive(&c)
	t.columns = c
	t.index = make([]uint64, 2*n)
	t.reindex()
}

// moveLive copies the live entries of the log, in order, to the front of
// d (which may be the log's own columns, or columns of the same modes),
// and sets head and tail for them.
//
// In a leveled table the links and the levels' ends are positions, so
// they are renumbered. The new position of each live entry is written
// first into the old index, which the caller rebuilds or drops afterwards
// anyway: renumbering then costs no allocation, and the entries still
// move in one forward pass (an entry's new position is never after its
// old one, so in place nothing is overwritten before it is read).
func (t *orderedTable[T]) moveLive(d *columns[T]) {
	var remap []uint64
	if t.leveled {
		remap = t.index
		n := 0
		for p := range t.tail {
			if t.flags[p] != 0 {
				n++
				remap[p] = uint64(n)
			}
		}
		for _, l := range t.lv.heap {
			l.first, l.last = renumber(l.first, remap), renumber(l.last, remap)
		}
	}
	n, head, readyEnd := 0, 0, 0
	for p := range t.tail {
		if p == t.head {
			head = n
		}
		if t.flags[p] != 0 {
			if t.flags[p] == fDirty {
				readyEnd = n + 1
			}
			t.columns.move(d, n, p, remap)
			n++
		}
	}
	if t.head >= t.tail {
		head = n
	}
	t.head, t.tail, t.readyEnd = head, n, readyEnd
}

// reindex places every live entry in an empty index, hashing its key.
func (t *orderedTable[T]) reindex() {
	for p := range t.tail {
		h := uint32(maphash.Comparable(t.seed, t.keys[p]))
		t.index[t.emptySlot(h)] = uint64(h)<<32 | uint64(p+1)
	}
}

// each calls yield with the position of every live entry, until yield
// returns false: processing keys first and then the ready ones in the
// order Get takes them, except in a leveled table, where the levels give
// that order (eachReady) and the log does not. An fGhost entry is passed
// too: its flags hold no state, and every caller picks entries by state.
func (t *orderedTable[T]) each(yield func(p int) bool) {
	for p := range t.tail {
		if t.flags[p] != 0 && !yield(p) {
			return
		}
	}
}

// eachReady calls yield with the ready keys in the order Get takes them,
// until it returns false.
func (t *orderedTable[T]) eachReady(yield func(T) bool) {
	if t.leveled {
		for l := t.lv.heap.below(nil); l != nil; l = t.lv.heap.below(l) {
			for u := l.first; u != 0; u = t.next[u-1] {
				if !yield(t.keys[u-1]) {
					return
				}
			}
		}
		return
	}
	for p := t.head; p < t.tail; p++ {
		if t.flags[p] == fDirty && !yield(t.keys[p]) {
			return
		}
	}
}

// liveWait returns the position of item if e is its live delay entry: the
// key waits, for that entry. slot is where the index holds it.
func (t *orderedTable[T]) liveWait(e deadline[T]) (slot, pos int) {
	_, slot, pos = t.find(e.item)
	if pos < 0 || t.flags[pos]&fWaiting == 0 || t.wseq[pos] != e.seq {
		return slot, -1
	}
	return slot, pos
}

// ceilPow2 returns the least power of two >= n, for n >= 1.
func ceilPow2(n int) int {
	c := 1
	for c < n {
		c <<= 1
	}
	return c
}
