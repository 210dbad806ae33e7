package workqueue

// The dirty set and the processing set of client-go's queue are, here, two
// flags in one table keyed by the key. A key that needs (another) run is
// dirty; a key handed out by Get and not yet Done is processing. Keeping both
// facts (and whether the key waits for a deadline) in one table entry means
// Add, Get and Done hash the key once or twice each instead of four times,
// which is most of what separates a queue from the lock it is built on.
//
// The states of the state table (docs/protocol.md) map onto the flags as
// follows:
//
//	absent              no entry
//	ready               dirty                (the key is in the store)
//	waiting             waiting              (the key is in the delay heap)
//	processing          processing
//	processing+dirty    processing|dirty     (Done pushes it to the store)
//	processing+waiting  processing|waiting   (Done leaves it waiting)
//
// dirty and waiting are never both set: a key has at most one pending run.
//
// Every change of a key's flags is a method of the key table, one per cell
// of the state table: those of the dirty flag, with the predicates that
// read it and the queue's markDirty, are in dirty_set.go; the others that
// only change flags are below; those that also move the key's entry are in
// ordered_table.go (insert and insertAs: absent becomes ready or waiting;
// take and takeAt: Get; promote: a run becomes due for a key that waited
// or was processing; remove: the key leaves). The queue calls them and
// keeps its counts; nothing else writes a flag.

const (
	fDirty      uint8 = 1 << iota // a run is due now: ready, or due again at Done
	fWaiting                      // a run is due at a deadline in the delay heap
	fProcessing                   // handed out by Get, Done not yet called
	// fGhost, alone, marks the entry of a key that is absent but still has
	// a ghost in a user's Store (remove.go): the entry stays for its
	// count (the ghost column). find reports such a key absent, and no
	// other flag is ever set with fGhost; a key with a ghost and a state
	// has that state's flags, and is never ready (its ghost would be its
	// live entry again).
	fGhost
)

// keyState is what the queue knows of one key, read out of the key table's
// columns (orderedTable.entry) for the code that looks at a key rather than
// changes it: Inspect, State, the processing set's scrape. A column the
// table does not keep reads as zero.
type keyState struct {
	// at is, in queue clock nanoseconds, when a key that is not
	// processing became dirty (for queue latency), or when a processing
	// key's run started (for work duration and the age gauges). Kept
	// only when the queue has metrics.
	at int64
	// when is the deadline of a waiting key's run, in queue clock
	// nanoseconds, and wseq the seq of its one live delay entry: entries
	// left by earlier waits or earlier deadlines have other seqs.
	when int64
	wseq uint64
	// prio is the priority of the key's pending run (0 for plain Add). It
	// travels with a processing+dirty key to the store at Done.
	prio int
	// flags holds fDirty, fWaiting and fProcessing.
	flags uint8
	// gen is the generation of a processing key's run (with metrics), so
	// that the processing set can tell this run's record from an earlier
	// run's.
	gen uint16
}

// isWaiting reports whether the key at p has a run at a deadline: it is
// waiting, or processing+waiting.
func (t *orderedTable[T]) isWaiting(p int) bool { return t.flags[p]&fWaiting != 0 }

// isProcessing reports whether the key at p was handed out by Get and Done
// was not called yet.
func (t *orderedTable[T]) isProcessing(p int) bool { return t.flags[p]&fProcessing != 0 }

// isGhost reports whether the entry at p is only the count of a key's
// ghosts (fGhost): the key itself is absent.
func (t *orderedTable[T]) isGhost(p int) bool { return t.flags[p] == fGhost }

// waitAfterRun gives the processing key at p, which has no pending run, a
// run at a deadline: processing becomes processing+waiting (AddAfter). The
// caller sets the deadline.
func (t *orderedTable[T]) waitAfterRun(p int) { t.flags[p] |= fWaiting }

// endWait clears the run at a deadline of the waiting key at p, because a
// run due now replaces it (Add) or its deadline passed. The caller then
// makes it ready (promote) or, if it is processing, dirtyAfterRun.
func (t *orderedTable[T]) endWait(p int) { t.flags[p] &^= fWaiting }

// keepWaiting ends the run of the processing+waiting key at p: Done leaves
// it waiting for its deadline.
func (t *orderedTable[T]) keepWaiting(p int) { t.flags[p] = fWaiting }

// cancelWait cancels the run at a deadline of the key at pos (in slot):
// waiting becomes absent, processing+waiting becomes processing (Remove,
// and ShutDown for a key that is not debounced).
func (t *orderedTable[T]) cancelWait(slot, pos int) {
	if t.flags[pos] == fWaiting {
		t.remove(slot, pos)
		return
	}
	t.endWait(pos)
}
