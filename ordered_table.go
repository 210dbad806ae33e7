package workqueue

import "hash/maphash"

// orderedTable is the key table and the FIFO of a queue without a Store (and
// without priorities or Debounce, which need the map table), with or
// without metrics and delays, in one structure. A plain queue
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
// A queue with metrics also needs, per key, when it became dirty (for queue
// latency) or when its run started (for work duration and the age gauges),
// and the generation of its run (for the processing set): a timed table
// keeps them in two more arrays beside the log, at and gen, moved with it.
// A delayed table (from the first AddAfter on) likewise keeps a waiting
// key's deadline and the seq of its live delay entry in when and wseq.
//
// The zero orderedTable is empty and allocates nothing until its first key.
// Not safe for concurrent use; the queue calls it under its lock.
type orderedTable[T comparable] struct {
	seed  maphash.Seed
	index []uint64
	keys  []T
	flags []uint8
	at    []int64  // timed only: dirty time of a ready key, start of a run
	gen   []uint16 // timed only: generation of a processing key's run
	timed bool
	when  []int64  // delayed only: a waiting key's deadline
	wseq  []uint64 // delayed only: the seq of its live delay entry
	// delayed is set by the first AddAfter: from then on the table keeps
	// deadlines, and waiting keys have entries anywhere in the log (Get
	// passes over them; the timer moves them to the tail when they
	// become ready).
	delayed bool

	head int // first entry that may be ready
	tail int // next entry to append
	// readyEnd is one past the last entry made ready: every ready entry
	// lies before it, so a waiting entry at or after both head and
	// readyEnd can become ready where it is without breaking FIFO order.
	readyEnd int
	live     int // keys in the table: live entries, and occupied index slots
	ready    int // live entries at or after head

	burst int // most live keys since the table was last empty
	prev  int // burst's value when the table last emptied
}

// minLog is the smallest log the table allocates.
const minLog = 16

// maxLog bounds the log so that a position fits the index's 32 bits.
const maxLog = 1 << 31

// find looks item up. It returns its hash (computed only when the table
// holds keys), the index slot where it is or where it would go, and its
// log position, or -1 if it is absent. A slot of -1 means nothing was
// hashed.
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
				return h, i, p
			}
		}
	}
}

// insert appends item, which is absent, as a ready key, and returns its
// position. h and slot are what find returned for it.
func (t *orderedTable[T]) insert(item T, h uint32, slot int) int {
	return t.insertAs(item, h, slot, fDirty)
}

// insertAs is insert with the entry's flags: fDirty (ready) or fWaiting.
func (t *orderedTable[T]) insertAs(item T, h uint32, slot int, f uint8) int {
	if t.tail == len(t.keys) {
		t.makeRoom()
		slot = -1 // the index was rebuilt
	}
	if slot < 0 {
		h = uint32(maphash.Comparable(t.seed, item))
		slot = t.emptySlot(h)
	}
	p := t.tail
	t.tail++
	t.keys[p], t.flags[p] = item, f
	t.index[slot] = uint64(h)<<32 | uint64(p+1)
	t.live++
	if f == fDirty {
		t.ready++
		t.readyEnd = p + 1
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
	for t.flags[t.head] != fDirty {
		t.head++ // dead (left by Remove), or waiting for a deadline
	}
	p := t.head
	t.head++
	t.flags[p] = fProcessing
	t.ready--
	return t.keys[p], p
}

// requeue makes the key at pos (in slot) ready, at the tail, and returns
// its new position: Done of a key added again while it was processing, or
// a waiting key whose run became due.
func (t *orderedTable[T]) requeue(slot, pos int) int {
	item := t.keys[pos]
	if t.tail < len(t.keys) {
		// Move the entry; the index slot keeps its hash.
		var zero T
		t.keys[pos], t.flags[pos] = zero, 0
		p := t.tail
		t.tail++
		t.keys[p], t.flags[p] = item, fDirty
		t.index[slot] = t.index[slot]&^(1<<32-1) | uint64(p+1)
		t.ready++
		t.readyEnd = p + 1
		return p
	}
	t.kill(slot, pos)
	return t.insert(item, 0, -1)
}

// promote makes the waiting key at pos (in slot) ready, and returns its
// position: where it is if no ready entry comes after it (deadlines that
// pass in the order their AddAfter came, the usual case, then move
// nothing), else at the tail.
func (t *orderedTable[T]) promote(slot, pos int) int {
	if pos >= t.head && pos >= t.readyEnd {
		t.flags[pos] = fDirty
		t.ready++
		t.readyEnd = pos + 1
		return pos
	}
	return t.requeue(slot, pos)
}

// remove takes the key at pos (in slot) out of the table.
func (t *orderedTable[T]) remove(slot, pos int) {
	if t.flags[pos] == fDirty {
		t.ready--
	}
	t.kill(slot, pos)
	if t.live == 0 {
		// Every entry is dead and zeroed: start the log over.
		t.head, t.tail, t.readyEnd = 0, 0, 0
		t.prev, t.burst = t.burst, 0
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
	return n <= keepMax && t.prev <= keepMax && 2*t.prev >= n
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
// the index slots are re-placed by their stored hash, without hashing.
func (t *orderedTable[T]) grow() {
	n := 2 * len(t.keys)
	if n > maxLog {
		panic("workqueue: more than 2^31 keys in one queue")
	}
	keys := make([]T, n)
	flags := make([]uint8, n)
	copy(keys, t.keys[:t.tail])
	copy(flags, t.flags[:t.tail])
	if t.timed {
		at, gen := make([]int64, n), make([]uint16, n)
		copy(at, t.at[:t.tail])
		copy(gen, t.gen[:t.tail])
		t.at, t.gen = at, gen
	}
	if t.delayed {
		when, wseq := make([]int64, n), make([]uint64, n)
		copy(when, t.when[:t.tail])
		copy(wseq, t.wseq[:t.tail])
		t.when, t.wseq = when, wseq
	}
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
	t.keys, t.flags, t.index = keys, flags, index
}

// compact moves the live entries to the front of the log, in order, and
// rebuilds the index in place: no allocation, so a steady queue whose log
// fills with dead entries does not allocate.
func (t *orderedTable[T]) compact() {
	t.moveLive(t.keys, t.flags, t.at, t.gen, t.when, t.wseq)
	clear(t.keys[t.tail:])
	clear(t.flags[t.tail:])
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
		t.keys, t.flags, t.at, t.gen, t.when, t.wseq, t.index = nil, nil, nil, nil, nil, nil, nil
		t.head, t.tail, t.readyEnd = 0, 0, 0
		return
	}
	keys := make([]T, n)
	flags := make([]uint8, n)
	var at, when []int64
	var gen []uint16
	var wseq []uint64
	if t.timed {
		at, gen = make([]int64, n), make([]uint16, n)
	}
	if t.delayed {
		when, wseq = make([]int64, n), make([]uint64, n)
	}
	t.moveLive(keys, flags, at, gen, when, wseq)
	t.keys, t.flags, t.at, t.gen, t.when, t.wseq = keys, flags, at, gen, when, wseq
	t.index = make([]uint64, 2*n)
	t.reindex()
}

// moveLive copies the live entries of the log, in order, to the front of
// keys, flags, at, gen, when and wseq (which may be the log itself; at and
// gen are nil unless the table is timed, when and wseq unless it is
// delayed), and sets head and tail for them.
func (t *orderedTable[T]) moveLive(keys []T, flags []uint8, at []int64, gen []uint16, when []int64, wseq []uint64) {
	n, head, readyEnd := 0, 0, 0
	for p := range t.tail {
		if p == t.head {
			head = n
		}
		if t.flags[p] != 0 {
			if t.flags[p] == fDirty {
				readyEnd = n + 1
			}
			keys[n], flags[n] = t.keys[p], t.flags[p]
			if t.timed {
				at[n], gen[n] = t.at[p], t.gen[p]
			}
			if t.delayed {
				when[n], wseq[n] = t.when[p], t.wseq[p]
			}
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

// each calls yield with the position of every live entry, processing keys
// first and then the ready ones in the order Get takes them, until yield
// returns false.
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
	for p := t.head; p < t.tail; p++ {
		if t.flags[p] == fDirty && !yield(t.keys[p]) {
			return
		}
	}
}

// entry returns the live entry at p as the full table's keyState.
func (t *orderedTable[T]) entry(p int) keyState {
	st := keyState{flags: t.flags[p]}
	if t.timed {
		st.at, st.gen = t.at[p], t.gen[p]
	}
	if t.delayed {
		st.when, st.wseq = t.when[p], t.wseq[p]
	}
	return st
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
