package workqueue

// Remove cancels a key's pending run. Where the run waits in the delay heap,
// that is the lazy deletion the heap already uses: the entry goes stale. A
// ready key is harder: it sits in the store, and Store has client-go's
// method set (Push, Pop, Len, Touch), so a store cannot be asked to delete
// from the middle, and searching it would be O(n).
//
// So a removed ready key leaves a ghost: its entry stays in the store, the
// queue counts it (ghosts, and per key in the key table's ghost column,
// where a key with nothing left but its ghost keeps an fGhost entry for
// it), and Get drops it when it comes out. Len, Stats and every "is a key
// ready" test subtract the ghosts, so they are exact at every moment.
//
// A key removed and then made ready again (by Add, or by a deadline that
// passes) while its ghost is still in the store is not pushed: Store's contract is that Push gets only an item the store does
// not hold, and a store that indexes its keys would lose or double it. The
// ghost turns back into the key's live entry instead, and the store hears
// what it hears for a duplicate Add: Touch, or, with a PriorityStore and a
// higher priority than the ghost's, Raise. So the key runs once, at its
// ghost's place in the store's order (where client-go's Queue, with the
// same Push and Touch rule, would keep a key added twice), and with a
// PriorityStore at the higher of the ghost's priority and the new one,
// since a store cannot be asked to lower a priority. A store therefore
// holds at most one entry per key at every moment, live or ghost, and a
// ready key has no ghost. No ghost is left where the key table keeps the
// order (a queue without a Store, or with the built-in priority store,
// whose levels it keeps): the removed entry dies, or is unlinked from its
// level, and the key comes back at the tail (of its level).
//
// Ghosts must not pile up (a key added and removed over and over with no
// Get would grow the store without bound), so once they outnumber the live
// entries by more than a constant, the store is rebuilt: every entry is
// popped and the live ones pushed back in the order they came out. That
// copies fewer live entries than it drops ghosts, so it is O(1) amortized
// per Remove, and the store never holds more than about twice its live keys.
//
// A store that can remove a key itself (the fair priority store, through
// its heldStore hooks) is asked to, and leaves no ghost.
//
// A queue that never calls Remove pays one integer test in Get and nothing
// in Add or Done.

// maxGhosts is how many more ghosts than live entries the store may hold
// before it is rebuilt: a constant, so small stores are not rebuilt on
// every Remove.
const maxGhosts = 64

// Remove cancels item's pending run and reports whether it had one: a ready
// key leaves the queue, a waiting key's deadline is dropped, and a key that
// is processing and was added again (or given a deadline) since its Get is
// not handed out again at Done. The run in progress, if any, is not
// touched: Remove of a key that is only processing returns false and
// changes nothing. Remove does not touch a rate limiter's memory of the key
// (that is Forget).
//
//	state               after         returns
//	absent              absent        false
//	ready               absent        true
//	waiting             absent        true
//	processing          processing    false
//	processing+dirty    processing    true
//	processing+waiting  processing    true
//
// Remove works after ShutDown too, so a drain has less to wait for. Its
// cost is O(1) amortized with any Store (see remove.go), and the metrics
// follow at once: depth and the waiting gauge drop, and a removed key
// records no queue latency.
func (q *Queue[T]) Remove(item T) bool {
	q.lock()
	defer q.mu.Unlock()
	t := &q.tab
	_, slot, pos := t.find(item)
	if pos < 0 {
		return false
	}
	switch {
	case t.isWaiting(pos):
		q.unbounce(pos)
		q.dropWait(slot, pos)
		q.delay.stale++ // its delay entry stays behind
		q.sweepDelay()
		if q.waiting == 0 {
			q.arm(0) // no key waits any more: stop the timer
		}
	case t.isDue(pos):
		q.dirty--
		if t.isReady(pos) {
			switch {
			case q.held != nil:
				q.held.remove(item) // a store that can remove leaves no ghost
				q.endHeldWaits()    // it may have been the last ready key
			case q.store != nil:
				q.leaveGhost(pos) // the entry stays, as fGhost
			}
			t.remove(slot, pos)
			if q.store != nil {
				q.settleGhosts()
			}
		} else {
			t.cancelRerun(pos) // only the run after the one in progress
			if t.timed {
				q.procs.requeued(item) // forget when it was added again
			}
		}
	default:
		return false // only processing
	}
	q.wakeDrainers()
	return true
}

// leaveGhost leaves the entry of the ready key at pos behind in the store
// as a ghost, counted at pos. q.mu must be held.
func (q *Queue[T]) leaveGhost(pos int) {
	t := &q.tab
	if !t.ghosted {
		t.enableGhosts()
	}
	t.ghost[pos]++
	q.ghosts++
	if p := t.prioAt(pos); p != 0 && q.prio != nil {
		if q.ghostPrio == nil {
			q.ghostPrio = make(map[T]int)
		}
		q.ghostPrio[t.keys[pos]] = p // the priority its entry has in the store
	}
}

// revive turns the ghost of item, just made ready in the key table at
// priority prio, back into its live entry, and reports whether it had one
// (else the caller pushes it). The store hears Touch, or Raise for a
// priority above the ghost's; below it, the key's run takes the ghost's
// priority, which is where the store has it. q.mu must be held and
// q.ghosts > 0.
func (q *Queue[T]) revive(item T, prio int) bool {
	t := &q.tab
	_, _, pos := t.find(item)
	if t.ghost[pos] == 0 {
		return false
	}
	t.ghost[pos]--
	q.ghosts--
	if q.prio != nil {
		g := q.ghostPrio[item]
		delete(q.ghostPrio, item)
		if prio > g {
			q.prio.Raise(item, prio)
			return true
		}
		t.setPrio(pos, g)
	}
	q.store.Touch(item)
	return true
}

// popGhost looks up item, just popped from the store. If it is a ghost, it
// forgets that ghost (and the key's fGhost entry with it) and reports
// true; else it returns the key's position in the key table. The store
// holds one entry per key, so what comes out for a key with a ghost is
// that ghost. q.mu must be held and q.ghosts > 0.
func (q *Queue[T]) popGhost(item T) (pos int, ghost bool) {
	t := &q.tab
	_, slot, pos := t.find(item)
	if pos < 0 {
		pos = t.ghostAt(slot)
	}
	if t.ghost[pos] == 0 {
		return pos, false
	}
	t.ghost[pos]--
	q.ghosts--
	if q.ghostPrio != nil {
		delete(q.ghostPrio, item)
	}
	if t.ghost[pos] == 0 && t.isGhost(pos) {
		t.remove(slot, pos)
	}
	return -1, true
}

// settleGhosts rebuilds the store without its ghosts once they outnumber
// its live entries by more than maxGhosts, or once nothing else is left in
// it: a queue with no ready key then holds no ghost, and its key table no
// fGhost entry. q.mu must be held, and positions in the key table found
// before it are stale after it.
func (q *Queue[T]) settleGhosts() {
	if r := q.ready(); q.ghosts > r+maxGhosts || r == 0 && q.ghosts > 0 {
		q.exorcise()
	}
}

// exorcise rebuilds the store without its ghosts, keeping the live entries
// in the order the store hands them out. q.mu must be held.
func (q *Queue[T]) exorcise() {
	for range q.store.Len() {
		item := q.store.Pop()
		if pos, ghost := q.popGhost(item); !ghost {
			q.pushEntry(item, q.tab.prioAt(pos))
		}
	}
}
