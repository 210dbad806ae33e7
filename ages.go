package workqueue

import "time"

// The ready ages of a queue: for each priority level with a ready key, how
// long the oldest key at the front of one of the level's FIFOs has been
// ready. A level keeps its keys in one FIFO (a plain queue,
// NewPriorityStore) or in one per tenant (NewFairPriorityStore), and a
// FIFO's front is the first of its keys to have entered the level, so this
// is the age of the level's oldest key by arrival. A level that Get serves
// shows the age of a key about to go; a level that Get passes over (a
// lower priority while higher ones keep arriving, a tenant whose turn does
// not come, or a tenant held at its MaxInFlight cap, whose keys are ready
// and wait) shows an age that grows without bound, which is what a
// starvation alert looks for. A key moved to the back of a FIFO (raised to
// a higher level, or added again while it was processing) keeps the ready
// time of its run, which may be older than its FIFO's front: it shows once
// it reaches the front.
//
// Nothing is counted for it on Add, Get or Done: the age is read when
// asked, under the queue's lock, from the key table's at column (when the
// key's run became due; kept only with metrics, see ordered_table.go), at
// the front of each FIFO:
//
//   - a queue whose table keeps the levels (NewPriorityStore) reads the
//     first entry of each level's list: O(levels);
//   - a Store that can name the front of each of its FIFOs (frontStore,
//     which NewFairPriorityStore is) names them, and each is found in the
//     table with one hash: O(FIFOs), one per tenant and level with ready
//     keys (one per level without Tenant);
//   - a plain FIFO reads its first ready entry, as priority 0 (its
//     priorities are not an order): O(1) amortized, as the entries Get
//     would pass over on its way to that entry are passed over once, for
//     good, as Get passes them;
//   - any other Store keeps an order the queue cannot see, and reports no
//     age.

// ReadyAges stores in m, for each priority level that has a ready key, how
// long the oldest key at the front of the level's FIFOs has been ready (one
// FIFO per level, or with NewFairPriorityStore one per tenant, those of
// tenants at their MaxInFlight cap included): since its run became due
// (the Add that made it ready, the deadline that passed, or, for a key
// added again while it was processing, that Add), as
// workqueue_queue_duration_seconds counts it. Where m already holds an age
// for a priority, the larger of the two is kept, so the queues of one name
// combine in one map. A queue whose Store is not a PriorityStore reports
// its ready keys at priority 0.
//
// It reports whether the queue measures these ages: only a queue with
// metrics keeps the times (Config.Name and a MetricsProvider; MeasureOnly
// keeps them without exporting anything), and only a plain FIFO,
// NewPriorityStore and NewFairPriorityStore let the queue see the fronts of
// their FIFOs; any other queue adds nothing to m and returns false. It
// takes the queue's lock and costs O(priority levels) whatever the number
// of keys, or with NewFairPriorityStore O(tenants' FIFOs).
func (q *Queue[T]) ReadyAges(m map[int]time.Duration) bool {
	q.lock()
	defer q.mu.Unlock()
	t := &q.tab
	if q.metrics == nil || !t.timed {
		return false
	}
	fronts, _ := q.store.(frontStore[T])
	if q.store != nil && !t.leveled && fronts == nil {
		return false
	}
	if t.ready == 0 {
		return true
	}
	now := q.now()
	keep := func(prio, p int) {
		age := time.Duration(now - t.at[p])
		if a, ok := m[prio]; !ok || age > a {
			m[prio] = age
		}
	}
	switch {
	case t.leveled:
		for _, l := range t.lv.heap {
			keep(l.prio, int(l.first-1))
		}
	case q.store == nil:
		keep(0, t.firstReady())
	default:
		fronts.fronts(func(prio int, item T) bool {
			if _, _, p := t.find(item); p >= 0 && t.isReady(p) {
				keep(prio, p)
			}
			return true
		})
	}
	return true
}

// firstReady returns the position of the ready entry a FIFO table hands
// out next, moving head past the entries before it, which take would pass
// over too (dead, or waiting: they are no longer ready at or after head).
// ready > 0, and the table is neither leveled nor in storeOrder.
func (t *orderedTable[T]) firstReady() int {
	for !t.isReady(t.head) {
		t.head++
	}
	return t.head
}
