package workqueue

// The dirty set of client-go's queue is, here, the fDirty flag of the key
// table (key_state.go): a key is in it while a run of it is due now, either
// ready (in the store) or processing and due again at its Done. q.dirty
// counts it; it is client-go's depth. This file holds the flag's
// transitions and the predicates that read it, as processing_set.go holds
// the processing side:
//
//   - markDirty gives a key a run due now (Add, and a deadline that
//     passes): absent or waiting becomes ready, processing becomes
//     processing+dirty (dirtyAfterRun), and a key already due only merges
//     its priority upwards;
//   - Get (the table's take, ordered_table.go) hands a ready key out, its
//     flag becoming fProcessing; Done makes a processing+dirty key ready
//     again (promote);
//   - Remove cancels the run a processing+dirty key has due at its Done
//     (cancelRerun), and takes a ready key out of the table (remove.go).
//
// The flag sits in the same table entry as the key's other flags, so that
// one lookup finds a key's whole state: a set of its own, as client-go
// keeps, would cost Add, Get and Done another lookup each.

// markDirty gives item a run due now, at priority prio: the Add column of
// the state table, and the "deadline passes" one when fired is set (the
// timer, or ShutDown for a debounced key, has just popped the key's live
// deadline entry). Absent becomes ready, waiting becomes ready (keeping the
// higher priority), processing becomes processing+dirty, and a key already
// due stays so, its priority merged upwards. h, slot and pos are what
// q.tab.find returned for item. It reports whether the key became dirty (an
// "add" for metrics). q.mu must be held.
func (q *Queue[T]) markDirty(item T, prio int, h uint32, slot, pos int, fired bool) bool {
	t := &q.tab
	if pos < 0 {
		p := t.insert(item, h, slot, prio)
		if t.timed {
			t.at[p] = q.now() // queue latency counts from here
		}
		q.dirty++
		q.enqueue(item, prio)
		return true
	}
	if t.isDue(pos) {
		// Already due: ready, or processing+dirty. Only the priority
		// may merge upwards; a ready key that no PriorityStore moved is
		// a duplicate add, which a Store hears about as Touch.
		if !q.raise(item, pos, prio) && !t.isProcessing(pos) {
			q.touch(item)
		}
		return false
	}
	var since int64 // when the key was first asked for, if not now
	debounced := false
	if t.isWaiting(pos) {
		// The run due now replaces the one at the deadline, keeping the
		// higher priority. Unless the timer popped it, the deadline
		// entry stays behind, stale.
		prio = max(prio, t.prioAt(pos))
		t.endWait(pos)
		q.waiting--
		if !fired {
			q.delay.stale++
			q.sweepDelay()
		}
		since, debounced = q.unbounce(pos)
	}
	if t.timed && !debounced {
		// Queue latency counts from when the key became due, or, for
		// a debounced key, from the first Add of its burst.
		since = q.now()
	}
	q.dirty++
	t.setPrio(pos, prio) // not ready, so in no level
	if t.isProcessing(pos) {
		t.dirtyAfterRun(pos)
		if t.timed {
			q.procs.dirtied(item, since) // at[pos] is the run's start
		}
		return true
	}
	p := t.promote(slot, pos)
	if t.timed {
		t.at[p] = since
	}
	q.enqueue(item, prio)
	return true
}

// isDue reports whether the key at p has a run due now: it is ready, or
// processing+dirty.
func (t *orderedTable[T]) isDue(p int) bool { return t.flags[p]&fDirty != 0 }

// isReady reports whether the key at p is ready: due now and not
// processing.
func (t *orderedTable[T]) isReady(p int) bool { return t.flags[p] == fDirty }

// dirtyAfterRun gives the processing key at p, which has no pending run, a
// run due at its Done: processing becomes processing+dirty (Add, or the
// deadline of processing+waiting passing once endWait has cleared it).
func (t *orderedTable[T]) dirtyAfterRun(p int) { t.flags[p] |= fDirty }

// cancelRerun cancels the run that the processing+dirty key at p has due
// at its Done: it becomes processing (Remove).
func (t *orderedTable[T]) cancelRerun(p int) { t.flags[p] &^= fDirty }
