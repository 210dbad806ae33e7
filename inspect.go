package workqueue

import (
	"slices"
	"strconv"
	"time"
)

// Inspecting a queue answers the questions a stalled controller raises:
// which keys are being processed and since when, which keys wait and until
// when, which keys are next. Nothing here runs unless asked: Add, Get and
// Done do no extra work for it, not even a branch, so a queue that is never
// inspected pays nothing.
//
// A snapshot is taken under the queue's lock, and its cost is bounded by
// what it returns, not by the keys the queue holds, wherever the queue
// keeps its keys in order:
//
//   - processing keys, oldest run first, are the first live records of the
//     processing set (processing_set.go), which a queue with metrics keeps
//     in start order;
//   - waiting keys, due soonest first, come from the delay state
//     (delay.go): the first live entries of its sorted ring, and the top
//     levels of its heap, down to the first level that comes entirely
//     after the keys kept so far, which are kept in a bounded max-heap
//     inside the returned slice (partial selection: no sort of all the
//     deadlines);
//   - ready keys come straight from the FIFO ring or the priority store, in
//     the order Get takes them.
//
// Two things are only in the key table and cost a walk of it, which stops
// as soon as it has found what it needs: the processing keys of a queue
// without metrics (which keeps no start order, so any of them will do),
// and the ready keys of a store that cannot be read without popping (the
// fair store, a user's Store), in no particular order. Either way nothing
// is allocated beyond the returned slice.
//
// Run starts are measured only by a queue with metrics (Config.Name and
// Config.Metrics): measuring them always would add a clock read to every
// Get, a large part of a plain Add/Get/Done cycle, to answer a question
// most queues never ask.
// Without metrics, KeyInfo.Started is zero and processing keys come in no
// particular order.

// KeyState is the state of one key in a queue: the rows of the state table
// in docs/protocol.md. Its zero value is KeyAbsent.
type KeyState uint8

// The states of a key. A key is absent, ready or waiting, and independently
// it may be processing; a processing key's pending run (if any) is either
// due at Done (dirty) or at a deadline (waiting).
const (
	KeyAbsent            KeyState = iota // not in the queue
	KeyReady                             // in the store, for Get to hand out
	KeyWaiting                           // due at a deadline (AddAfter, AddRateLimited)
	KeyProcessing                        // handed out by Get, Done not yet called
	KeyProcessingDirty                   // processing, and added again: ready again at Done
	KeyProcessingWaiting                 // processing, and due again at a deadline
)

var keyStateNames = [...]string{
	KeyAbsent:            "absent",
	KeyReady:             "ready",
	KeyWaiting:           "waiting",
	KeyProcessing:        "processing",
	KeyProcessingDirty:   "processing+dirty",
	KeyProcessingWaiting: "processing+waiting",
}

// String returns the state's name as the state table writes it: "absent",
// "ready", "waiting", "processing", "processing+dirty" or
// "processing+waiting".
func (s KeyState) String() string {
	if int(s) < len(keyStateNames) {
		return keyStateNames[s]
	}
	return "KeyState(" + strconv.Itoa(int(s)) + ")"
}

// Processing reports whether a key in state s has been handed out by Get
// and not yet Done.
func (s KeyState) Processing() bool { return s >= KeyProcessing && s <= KeyProcessingWaiting }

// MarshalText returns String(), so that JSON shows states by name.
func (s KeyState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// stateOf maps the flags of a key table entry to its KeyState.
func stateOf(flags uint8) KeyState {
	switch flags {
	case 0:
		return KeyAbsent
	case fDirty:
		return KeyReady
	case fWaiting:
		return KeyWaiting
	case fProcessing:
		return KeyProcessing
	case fProcessing | fDirty:
		return KeyProcessingDirty
	default: // fProcessing | fWaiting: dirty and waiting are never both set
		return KeyProcessingWaiting
	}
}

// KeyInfo is what a snapshot says of one key.
type KeyInfo[T comparable] struct {
	Key   T
	State KeyState
	// Priority is the priority of the key's pending run (ready, waiting,
	// or due again at Done): the highest that AddWithPriority or
	// AddAfterWithPriority asked for, 0 for plain Add. A processing key
	// with no pending run (KeyProcessing) has 0, whatever the priority of
	// the run in progress (GetWithPriority returned that), with every
	// Store.
	Priority int
	// Due is when a waiting key's run is due (KeyWaiting and
	// KeyProcessingWaiting); zero otherwise.
	Due time.Time
	// Started is when a processing key's run began, if the queue has
	// metrics (see the package's note on Inspect); zero otherwise.
	Started time.Time
	// Requeues is the rate limiter's NumRequeues for the key, filled in
	// only by RateLimitingQueue's Inspect and InspectLimited, after the
	// snapshot: the limiter is not called under the queue's lock.
	Requeues int

	// ord and seq order the keys of one part while the snapshot selects
	// them (run start, deadline and its tie-break); zero once returned.
	ord int64
	seq uint64
}

// InspectLimits bounds each part of a snapshot: at most Processing
// processing keys (oldest run first), Waiting waiting keys (due soonest
// first) and Ready ready keys (in the order Get takes them, where the store
// can say). Zero or negative means none of that part.
type InspectLimits struct {
	Processing, Waiting, Ready int
}

// Inspect returns a snapshot of at most limit keys of the queue, taken at
// one moment under its lock: first the processing keys, oldest run first
// (in no particular order without metrics), then the waiting keys, due
// soonest first (keys with equal deadlines in the order they were given
// them), then the ready keys in the order Get would hand them out for the
// default FIFO, NewFIFOStore and NewPriorityStore, and in no particular
// order for any other Store. The limit is filled in that order: processing
// keys first. A processing key whose next run waits for a deadline is
// listed among the processing keys, with its Due set.
//
// It holds the lock meanwhile and allocates only the slice it returns
// (nil when it is empty). With metrics on and the default FIFO or a
// priority store it costs about O(limit · log keys), plus the stale
// entries it skips, whatever the number of keys; without
// metrics, finding the processing keys costs a walk of the key table (see
// the note at the top of inspect.go). It is meant for debugging and for
// tests, not for every Get.
func (q *Queue[T]) Inspect(limit int) []KeyInfo[T] {
	return q.inspect(InspectLimits{limit, limit, limit}, limit)
}

// InspectLimited is Inspect with a separate limit for each part, so that
// many processing keys cannot crowd out the waiting ones (what a debug page
// wants). The parts come in Inspect's order and are ordered the same way.
// A part whose limit is zero costs nothing.
func (q *Queue[T]) InspectLimited(l InspectLimits) []KeyInfo[T] {
	return q.inspect(l, max(l.Processing, 0)+max(l.Waiting, 0)+max(l.Ready, 0))
}

// State returns the state of item: one lookup in the key table, O(1), with
// the lock held only for that lookup. It answers "is this key queued?"
// (client-go has no such question: IsEnqueued, IsAdded) without a
// snapshot.
func (q *Queue[T]) State(item T) KeyState {
	q.lock()
	st, ok := q.entry(item)
	q.mu.Unlock()
	if !ok {
		return KeyAbsent
	}
	return stateOf(st.flags)
}

// entry returns item's entry in the key table. q.mu must be held.
func (q *Queue[T]) entry(item T) (keyState, bool) {
	if _, _, pos := q.tab.find(item); pos >= 0 {
		return q.tab.entry(pos), true
	}
	return keyState{}, false
}

// eachEntry calls yield with every key of the key table and its entry,
// until yield returns false. q.mu must be held.
func (q *Queue[T]) eachEntry(yield func(T, keyState) bool) {
	q.tab.each(func(p int) bool { return yield(q.tab.keys[p], q.tab.entry(p)) })
}

// eachReady calls each with the ready keys in the order Get takes them,
// until it returns false, and reports whether that order can be read (the
// table's own order can, and so can NewFIFOStore's). It may pass entries
// that are no longer ready (the caller checks the key table). q.mu must be
// held.
func (q *Queue[T]) eachReady(each func(T) bool) (ordered bool) {
	switch s := q.store.(type) {
	case nil:
		q.tab.eachReady(each)
	case *ring[T]:
		s.each(each)
	default:
		return false
	}
	return true
}

// readyOrdered reports whether eachReady can list the ready keys in order.
func (q *Queue[T]) readyOrdered() bool {
	switch q.store.(type) {
	case nil, *ring[T]:
		return true
	}
	return false
}

// inspect takes the snapshot: at most l.Processing, l.Waiting and l.Ready
// keys of each part, and at most total in all, filled in that order.
func (q *Queue[T]) inspect(l InspectLimits, total int) []KeyInfo[T] {
	q.lock()
	defer q.mu.Unlock()
	total = max(total, 0)
	np := min(max(l.Processing, 0), q.processing) // l.Processing <= total
	// Waiting keys that are also processing are listed with the
	// processing ones, so fewer than q.waiting may be found: room is made
	// for the most there can be, and the part is closed up afterwards.
	nw := min(max(l.Waiting, 0), q.waiting, total-np)
	ordered := q.readyOrdered()
	nr := min(max(l.Ready, 0), q.ready(), total-np)
	if np+nw+nr == 0 {
		return nil
	}
	// Ready keys read from an ordered store go after the walk, and take
	// only what the waiting keys leave; read from the table, they need
	// their own room during the walk.
	walkReady := 0
	if !ordered {
		walkReady = nr
	}
	out := make([]KeyInfo[T], np+nw+walkReady, np+nw+nr)
	procs, waits, readys := out[:0:np], out[np:np:np+nw], out[np+nw:np+nw:np+nw+walkReady]

	timed := q.metrics != nil
	if np > 0 && timed {
		// The processing set holds the runs oldest first: the first np
		// live records are the answer, no walk needed.
		q.procs.order.each(func(r startRecord[T]) bool {
			if st, ok := q.entry(r.item); ok && st.flags&fProcessing != 0 && st.gen == r.gen {
				e := info(r.item, st)
				e.ord = r.at
				procs = append(procs, e)
			}
			return len(procs) < np
		})
	}
	if (np > 0 && !timed) || walkReady > 0 {
		// Without metrics nothing but the key table knows which keys are
		// processing; nor does it know their order, so the first np found
		// are as good as any. The walk stops once both parts are full.
		q.eachEntry(func(k T, st keyState) bool {
			switch {
			case st.flags&fProcessing != 0 && !timed && len(procs) < np:
				procs = append(procs, info(k, st))
			case st.flags == fDirty && len(readys) < walkReady:
				readys = append(readys, info(k, st))
			}
			return !((timed || len(procs) == np) && len(readys) == walkReady)
		})
	}
	if nw > 0 {
		waits = q.soonest(waits)
	}
	sortPart(waits)

	n := len(procs)
	n += copy(out[n:], waits)
	room := min(total-n, max(l.Ready, 0))
	if ordered {
		out = out[:n]
		if room > 0 {
			q.eachReady(func(k T) bool {
				st, ok := q.entry(k)
				if !ok || st.flags != fDirty {
					return true // not ready: a ghost Remove left, which the store will skip
				}
				out = append(out, info(k, st))
				return len(out) < n+room
			})
		}
	} else {
		n += copy(out[n:], readys[:min(len(readys), room)])
		out = out[:n]
	}
	for i := range out {
		e := &out[i]
		switch e.State {
		case KeyWaiting:
			e.Due = q.clock.Add(time.Duration(e.ord))
		case KeyProcessingWaiting:
			st, _ := q.entry(e.Key)
			e.Due = q.clock.Add(time.Duration(st.when))
		}
		if e.State.Processing() && q.metrics != nil {
			e.Started = q.clock.Add(time.Duration(e.ord))
		}
		e.ord, e.seq = 0, 0
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// soonest fills part, empty with room for the keys wanted, with the
// waiting keys (not processing) due soonest, in no particular order. The
// delay state has them without a walk of the key table: its in-order ring
// is sorted, so its first live entries are the soonest it holds, and its
// heap (deadlines that came early) is read level by level from the root.
// An entry that comes after every key kept is not looked up, and neither
// are its children, which come later still; once a whole level comes
// after, so does everything below it, and the search stops. When
// deadlines arrive in random order the k soonest lie in the top levels, so
// this reads a few times k entries, not all of them; at worst (deadlines
// given in decreasing order, each a new root) it compares every entry once,
// still without looking their keys up. Stale entries, left behind when a
// key became ready or moved earlier, are told apart by the key table.
// q.mu must be held.
func (q *Queue[T]) soonest(part []KeyInfo[T]) []KeyInfo[T] {
	found := 0
	q.delay.inOrder.each(func(e deadline[T]) bool {
		if st, ok := q.waitingEntry(e); ok && st.flags&fProcessing == 0 {
			part = keep(part, e.item, st, e.when, e.seq)
			found++
		}
		return found < cap(part) // the rest of the ring comes later
	})
	h := q.delay.heap
	for lo := 0; lo < len(h); lo = 2*lo + 1 {
		sooner := false
		for _, e := range h[lo:min(2*lo+1, len(h))] {
			if len(part) == cap(part) && !after(part[0], KeyInfo[T]{ord: e.when, seq: e.seq}) {
				continue // e, and all below it, come after every key kept
			}
			sooner = true
			if st, ok := q.waitingEntry(e); ok && st.flags&fProcessing == 0 {
				part = keep(part, e.item, st, e.when, e.seq)
			}
		}
		if !sooner {
			break
		}
	}
	return part
}

// info returns what a snapshot says of k, whose table entry is st, before
// the times are converted. A processing key with no pending run reports
// priority 0: its prio column still holds the last priority set for it,
// which is its run's, or that of a re-run that Remove cancelled, or of a
// deadline that ShutDown dropped, so it names no run of the key.
func info[T comparable](k T, st keyState) KeyInfo[T] {
	ki := KeyInfo[T]{Key: k, State: stateOf(st.flags)}
	if st.flags != fProcessing {
		ki.Priority = int(st.prio)
	}
	return ki
}

// keep offers k (table entry st, ordered by ord then seq) to part, a
// max-heap of the cap(part) smallest keys offered so far: while there is
// room k is added, and after that it replaces the largest if it is
// smaller. O(log cap(part)).
func keep[T comparable](part []KeyInfo[T], k T, st keyState, ord int64, seq uint64) []KeyInfo[T] {
	e := info(k, st)
	e.ord, e.seq = ord, seq
	if len(part) < cap(part) {
		part = append(part, e)
		for i := len(part) - 1; i > 0; { // sift up
			p := (i - 1) / 2
			if !after(part[i], part[p]) {
				break
			}
			part[i], part[p] = part[p], part[i]
			i = p
		}
		return part
	}
	if !after(part[0], e) {
		return part // not among the smallest
	}
	part[0] = e
	for i := 0; ; { // sift down
		c := 2*i + 1
		if c >= len(part) {
			break
		}
		if c+1 < len(part) && after(part[c+1], part[c]) {
			c++
		}
		if !after(part[c], part[i]) {
			break
		}
		part[i], part[c] = part[c], part[i]
		i = c
	}
	return part
}

// after orders the keys of one part: later run start or deadline, then
// later seq.
func after[T comparable](a, b KeyInfo[T]) bool {
	return a.ord > b.ord || a.ord == b.ord && a.seq > b.seq
}

// sortPart sorts a part by ord, then seq, ascending.
func sortPart[T comparable](part []KeyInfo[T]) {
	slices.SortFunc(part, func(a, b KeyInfo[T]) int {
		switch {
		case after(b, a):
			return -1
		case after(a, b):
			return 1
		}
		return 0
	})
}

// Inspect is Queue.Inspect with each key's Requeues filled in from the
// rate limiter. The limiter is asked after the snapshot, outside the
// queue's lock (a limiter may block or call back into the queue), so the
// counts are read a moment after the states.
func (q *RateLimitingQueue[T]) Inspect(limit int) []KeyInfo[T] {
	return q.requeues(q.Queue.Inspect(limit))
}

// InspectLimited is Queue.InspectLimited with each key's Requeues filled in,
// as Inspect does.
func (q *RateLimitingQueue[T]) InspectLimited(l InspectLimits) []KeyInfo[T] {
	return q.requeues(q.Queue.InspectLimited(l))
}

func (q *RateLimitingQueue[T]) requeues(keys []KeyInfo[T]) []KeyInfo[T] {
	for i := range keys {
		keys[i].Requeues = q.limiter.NumRequeues(keys[i].Key)
	}
	return keys
}
