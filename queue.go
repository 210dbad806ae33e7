// Package workqueue is a generic, coalescing, keyed work queue for
// controllers: events become keys, a key is queued at most once however many
// events arrive, a key is never handed to two workers at once, and a key that
// changes while it is processed is processed once more after Done.
//
// It keeps the protocol of client-go's util/workqueue, so controllers move
// over by changing an import and a constructor, and it specifies every case
// that protocol left open: see the state table in README.md.
package workqueue

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"
)

// ErrShutDown is returned by GetContext once the queue has shut down and no
// ready key is left.
var ErrShutDown = errors.New("workqueue: shut down")

// ErrDrainInterrupted is returned by ShutDownWithDrainContext and
// ShutDownWithDrainAll when ShutDown
// was called while it waited: the caller asked to stop waiting, and keys may
// still be ready or processing.
var ErrDrainInterrupted = errors.New("workqueue: drain interrupted by ShutDown")

// Config configures a Queue. Its zero value is a plain FIFO queue without
// metrics.
type Config[T comparable] struct {
	// Name names the queue in metrics. An empty Name means no metrics.
	Name string
	// Metrics receives the queue's metrics when Name is not empty. Nil
	// means the process-wide default set by SetDefaultMetricsProvider, if
	// any, and else no metrics.
	Metrics MetricsProvider
	// Store holds the ready keys and decides their order. Nil means a FIFO
	// ring buffer. A Store must not be shared between queues:
	// NewWithConfig panics with "workqueue: Store already used by another
	// queue" when given one that another queue took.
	Store Store[T]
	// Debounce, with Quiet > 0, makes Add wait for a key's events to
	// settle: Add (and AddWithPriority) makes the key's run due at
	// min(last Add + Quiet, first Add + MaxWait), where the first Add is
	// the first since the key's last run started, so a burst of events
	// gives one run once the burst pauses for Quiet, and a burst that
	// never pauses still runs every MaxWait. AddAfter and AddRateLimited
	// keep their fixed times (d <= 0 is now), and a key has one pending
	// run, at the earliest time anyone asked for: a debounced Add never
	// puts a run off past a fixed time already asked for. While it waits,
	// a debounced key counts in Stats.Waiting. ShutDown makes debounced
	// keys ready at once rather than dropping them: their Add came before
	// it. NewWithConfig panics unless Quiet and MaxWait are both zero or
	// 0 < Quiet <= MaxWait. The zero value is off.
	Debounce Debounce
}

// Stats is a snapshot of a queue's counts, taken under its lock.
type Stats struct {
	// Ready counts keys waiting in the store for Get: Len().
	Ready int
	// Waiting counts keys whose run is delayed by AddAfter.
	Waiting int
	// Processing counts keys handed out by Get and not yet Done.
	Processing int
	// Dirty counts keys due for a run that Get has not handed out yet: the
	// ready keys and the processing keys added again since their Get.
	// This is client-go's depth metric.
	Dirty int
	// UnfinishedWork is the sum of the ages of the runs in progress, and
	// LongestRunning the age of the oldest. They are measured only when
	// the queue has metrics; otherwise they are zero.
	UnfinishedWork, LongestRunning time.Duration
}

// Queue is a coalescing work queue of keys of type T.
//
// The zero Queue is an empty FIFO queue without metrics, ready to use; New
// returns the same thing. A Queue must not be copied after first use. All
// methods are safe for concurrent use.
//
// A plain Queue starts no goroutine. While keys wait for an AddAfter
// deadline, one timer is armed for the earliest deadline.
type Queue[T comparable] struct {
	// mu guards every field below. cond.L is &mu; it is set on first wait
	// so that the zero Queue works. Get waits on cond for a ready key;
	// the ShutDownWithDrain* family waits on it for the queue to settle.
	//
	// The fields are in the order of how often Add, Get and Done touch
	// them: the lock and the counts, then what says how the queue is
	// configured, then the ordered table's hot part, so that the hot path
	// reads four cache lines of the queue, not eight spread over its
	// kilobyte (the cold parts follow: other tables, delays, debouncing,
	// metrics). When goroutines on two cores take turns at the lock, each
	// line an operation touches may have to come over from the other
	// core. The contended rows of cmd/compare did not move beyond their
	// noise when this was done; it is kept because it costs nothing.
	mu sync.Mutex

	dirty      int // keys with fDirty: ready, or processing and due again
	waiting    int // keys with fWaiting
	processing int // keys with fProcessing
	getters    int // goroutines waiting in Get or GetContext
	owed       int // Signals to send at unlock: keys made ready for getters
	drainers   int // goroutines waiting in ShutDownWithDrain*

	shuttingDown bool
	full         bool // see tab

	// metrics is nil without metrics; then procs and keyState.at are
	// unused and no clock is read on Add, Get or Done.
	metrics QueueMetrics
	// The ready keys are in tab (or in fifo, once the table is full)
	// unless Config.Store gave another store; prio is that store again
	// when it is a PriorityStore, else nil.
	store Store[T]
	// quiet and maxWait are Config.Debounce in nanoseconds (quiet == 0:
	// off), and bounce holds the debounced keys' bursts (debounce.go).
	quiet, maxWait int64

	// The key table: every key that is ready, waiting or processing, with
	// its flags, the dirty and processing sets (dirty_set.go). While full is
	// false it is lean: tab, which is also the FIFO, for a queue without a
	// Store, and also the priority levels (tab.leveled) for a queue with
	// the built-in priority store (ordered_table.go); lean, which holds
	// only the flags, for one with any other Store. Once a key needs more
	// than its table holds (a priority on a plain queue, a deadline or a
	// run start with another Store, Debounce) the table moves to keys, for
	// good (toFull). A leveled table never moves.
	tab  orderedTable[T]
	lean shrinkingMap[T, uint8]
	keys shrinkingMap[T, keyState]

	cond sync.Cond

	fifo ring[T]
	prio PriorityStore[T]
	// ghosts counts the entries that Remove left in the store, and
	// ghostKeys how many each key has (remove.go). Only keys with ghosts
	// are in it.
	ghosts    int
	ghostKeys shrinkingMap[T, int32]

	// delay holds the waiting keys, their heap and the timer (delay.go).
	delay delayState[T]

	bounce shrinkingMap[T, bounceState]

	// interrupts counts the ShutDown calls that found drainers waiting. A
	// drainer remembers it when it starts to wait and stops waiting when it
	// changes: ShutDown after ShutDownWithDrain ends the drain, as
	// client-go documents ("drain on the first signal, force on the
	// second").
	interrupts uint64

	// clock is the queue's time origin; times are kept as nanoseconds since
	// it (monotonic). Set when first needed.
	clock time.Time

	procs processingSet[T]
}

// New returns an empty FIFO queue without metrics.
func New[T comparable]() *Queue[T] { return &Queue[T]{} }

// NewWithConfig returns an empty queue configured by cfg. Metrics are on
// when cfg.Name is not empty and cfg.Metrics, or else the default set by
// SetDefaultMetricsProvider, is not nil.
func NewWithConfig[T comparable](cfg Config[T]) *Queue[T] {
	cfg.Debounce.validate()
	if cfg.Store != nil {
		claimStore(cfg.Store)
	}
	q := &Queue[T]{quiet: int64(cfg.Debounce.Quiet), maxWait: int64(cfg.Debounce.MaxWait)}
	if _, ok := cfg.Store.(*priorityStore[T]); ok && q.quiet == 0 {
		// The built-in priority store: the queue keeps the levels in
		// its own key table, which then needs no second index of the
		// keys (ordered_table.go). The store itself is not called.
		q.tab.leveled = true
	} else if cfg.Store != nil {
		q.store = cfg.Store
		q.prio, _ = cfg.Store.(PriorityStore[T])
	}
	if mp := metricsFor(cfg.Name, cfg.Metrics); mp != nil {
		if pm, ok := mp.(PriorityMetricsProvider); ok && (q.prio != nil || q.tab.leveled) {
			q.metrics = pm.NewPriorityQueueMetrics(cfg.Name, q.Stats, q.dirtyByPriority)
		} else {
			q.metrics = mp.NewQueueMetrics(cfg.Name, q.Stats)
		}
		// Metrics keep every key's dirty time or run start: a plain
		// queue keeps them in its ordered table, one with a Store in
		// the full table.
		if q.metrics != nil {
			q.tab.timed = q.store == nil
			q.full = q.store != nil
		}
	}
	if q.quiet > 0 {
		q.full = true // debounced keys wait for a deadline
	}
	return q
}

// Add marks item dirty: it will be handed out by Get once, however many
// times it is added before then. A key that is processing is handed out
// again after its Done. A key waiting for an AddAfter deadline becomes ready
// now. After ShutDown, Add does nothing.
func (q *Queue[T]) Add(item T) {
	if !q.mu.TryLock() { // q.lock(), spelled out: it is over the inlining budget
		lockContended(&q.mu)
	}
	if q.store == nil && q.metrics == nil && q.quiet == 0 && !q.shuttingDown {
		// The common cases of a plain queue, spelled out: a new key is
		// pushed, a key already in the FIFO keeps its place.
		if !q.full {
			// A key already due (a hot key's next event) is found
			// here and let go with a plain Unlock, as it made nothing
			// ready and so owes no Signal. Each call level it skips
			// (addOrdered, unlock) costs about what the hash does. In
			// a leveled table a run below priority 0 is due but must
			// still be raised to 0.
			h, slot, pos := q.tab.find(item)
			if pos >= 0 && q.tab.flags[pos]&fDirty != 0 && (!q.tab.leveled || q.tab.prio[pos] >= 0) {
				q.mu.Unlock()
				return
			}
			q.addOrdered(item, 0, h, slot, pos)
			q.unlock()
			return
		}
		q.addPlainFull(item)
		return
	}
	q.addLocked(item, 0)
}

// addPlainFull is Add's fast path for a plain queue whose key table is
// full: a new key is pushed, a key already in the FIFO keeps its place.
// It releases q.mu. It lives out of Add so that Add's ordered path keeps a
// small frame and runs straight through (together worth several ns per
// duplicate Add, as much as the hash).
func (q *Queue[T]) addPlainFull(item T) {
	st, ok := q.keys.m[item]
	if !ok {
		q.keys.put(item, keyState{flags: fDirty})
		q.dirty++
		q.fifo.Push(item)
		q.wake()
		q.unlock()
		return
	}
	if st.flags == fDirty {
		q.mu.Unlock()
		return
	}
	q.markDirtyState(item, st, ok, 0, false)
	q.unlock()
}

// AddWithPriority is Add with a priority for the key's pending run, for a
// queue whose Config.Store is a PriorityStore (such as NewPriorityStore).
// Higher runs first. When the key is already due, it keeps the higher of
// the two priorities: a raise moves it to the back of its new level, a lower
// priority changes nothing. With any other store it is Add. Every int is a
// priority of its own, math.MinInt to math.MaxInt, as in controller-runtime.
func (q *Queue[T]) AddWithPriority(item T, priority int) {
	q.addPrio(item, priority)
}

func (q *Queue[T]) addPrio(item T, prio int) {
	q.lock()
	q.addLocked(item, prio)
}

// addLocked is Add for a caller that holds q.mu, which it releases.
func (q *Queue[T]) addLocked(item T, prio int) {
	if q.shuttingDown {
		q.mu.Unlock()
		return
	}
	if q.quiet > 0 {
		// The key waits for its burst to settle; it is counted as
		// added when its run becomes due.
		q.addDebounced(item, prio)
		q.unlock()
		return
	}
	added := q.markDirty(item, prio)
	q.unlock()
	if added && q.metrics != nil {
		q.metrics.Added()
	}
}

// markDirty gives item a run due now, at priority prio, following the Add
// column of the state table. It reports whether the key became dirty (an
// "add" for metrics). q.mu must be held and the queue not shut down.
func (q *Queue[T]) markDirty(item T, prio int) bool {
	if !q.full {
		if prio == 0 || q.tab.leveled {
			return q.markDirtyLean(item, prio)
		}
		q.toFull()
	}
	st, ok := q.keys.m[item]
	return q.markDirtyState(item, st, ok, prio, false)
}

// markDirtyLean is markDirty for a lean table (the ordered table, or the
// map of flags of a queue with a Store, where no key waits), at priority 0
// unless the ordered table is leveled: absent becomes ready, processing
// becomes processing+dirty, a waiting key becomes ready, and a key already
// due stays so. q.mu must be held.
func (q *Queue[T]) markDirtyLean(item T, prio int) bool {
	if q.store == nil {
		h, slot, pos := q.tab.find(item)
		return q.addOrdered(item, prio, h, slot, pos)
	}
	f, ok := q.lean.m[item]
	if ok && f&fDirty != 0 {
		if f&fProcessing == 0 {
			q.touch(item)
		}
		return false
	}
	f |= fDirty
	q.lean.put(item, f)
	q.dirty++
	if f&fProcessing == 0 {
		q.push(item, 0)
	}
	return true
}

// addOrdered is markDirtyLean for a queue whose lean table is the
// orderedTable: absent becomes ready (at the tail, or the back of its
// level), processing becomes processing+dirty, a key already due stays so
// (raised to prio in a leveled table, if that is higher). One hash, none
// for the first key of an empty queue: h, slot and pos are what q.tab.find
// returned for item. prio is 0 unless the table is leveled. q.mu must be
// held.
func (q *Queue[T]) addOrdered(item T, prio int, h uint32, slot, pos int) bool {
	switch {
	case pos < 0:
		p := q.tab.insert(item, h, slot, prio)
		if q.tab.timed {
			q.tab.at[p] = q.now() // queue latency counts from here
		}
	case q.tab.flags[pos]&fDirty != 0:
		if q.tab.leveled {
			q.tab.raise(pos, prio)
		}
		return false
	case q.tab.flags[pos]&fWaiting != 0:
		// The run due now replaces the one at the deadline, whose
		// delay entry stays behind, stale.
		q.delay.stale++
		q.makeReadyOrdered(slot, pos, prio)
		q.sweepDelay()
		return true
	default: // processing: due again at Done
		q.tab.flags[pos] |= fDirty
		if q.tab.leveled {
			q.tab.prio[pos] = prio // the run's own priority was handed out
		}
		q.dirty++
		if q.tab.timed {
			q.procs.dirtied(item, q.now()) // at[pos] is the run's start
		}
		return true
	}
	q.dirty++
	q.wake()
	return true
}

// makeReadyOrdered makes the waiting key at pos (in slot) of the ordered table
// due now: a key that is only waiting becomes ready (see promote); a
// processing one becomes processing+dirty. In a leveled table its run
// keeps the higher of its priority and prio (the timer passes the lowest
// there is, so a fired run keeps its own). The caller accounts for its
// delay entry. q.mu must be held.
func (q *Queue[T]) makeReadyOrdered(slot, pos int, prio int) {
	t := &q.tab
	if t.leveled {
		t.prio[pos] = max(t.prio[pos], prio)
	}
	t.flags[pos] &^= fWaiting
	q.waiting--
	q.dirty++
	if t.flags[pos]&fProcessing != 0 {
		t.flags[pos] |= fDirty
		if t.timed {
			q.procs.dirtied(t.keys[pos], q.now()) // at[pos] is the run's start
		}
		return
	}
	p := t.promote(slot, pos)
	if t.timed {
		t.at[p] = q.now() // queue latency counts from here
	}
	q.wake()
}

// toFull moves the key table from lean to keys, the first time a key needs
// more than its flags: O(keys) once, after which every path uses keys. q.mu
// must be held.
func (q *Queue[T]) toFull() {
	if q.full {
		return
	}
	if q.tab.leveled {
		// Only a Store or a map table could take the levels over, and
		// every path of a leveled queue stays on its table.
		panic("workqueue: internal error: a leveled table moved to the map")
	}
	q.full = true
	if q.store == nil {
		// The ordered table lists the processing keys first and then
		// the ready ones in FIFO order, which the ring takes over.
		if q.tab.live > 0 {
			q.keys.m = make(map[T]keyState, q.tab.live)
			t := &q.tab
			t.each(func(p int) bool {
				k, st := t.keys[p], t.entry(p)
				q.keys.m[k] = st
				if st.flags == fDirty {
					q.fifo.Push(k)
				}
				return true
			})
		}
		q.keys.peak, q.keys.burst, q.keys.prev = len(q.keys.m), q.tab.burst, q.tab.lastBurst
		q.tab = orderedTable[T]{}
		return
	}
	if len(q.lean.m) > 0 {
		q.keys.m = make(map[T]keyState, len(q.lean.m))
		for k, f := range q.lean.m {
			q.keys.m[k] = keyState{flags: f}
		}
	}
	q.keys.peak, q.keys.burst, q.keys.prev = len(q.keys.m), q.lean.burst, q.lean.prev
	q.lean = shrinkingMap[T, uint8]{}
}

// markDirtyState is markDirty for a caller that has looked item up already:
// st, ok is its entry in the key table. fired is set by the timer, which
// has just popped the key's live deadline entry ("deadline passes" in the
// state table).
func (q *Queue[T]) markDirtyState(item T, st keyState, ok bool, prio int, fired bool) bool {
	if ok && st.flags&fDirty != 0 {
		// Already due: ready, or processing+dirty. Only the priority
		// may merge upwards; a ready key that no PriorityStore moved is
		// a duplicate add, which the store hears about as Touch.
		if !q.raise(item, st, prio) && st.flags&fProcessing == 0 {
			q.touch(item)
		}
		return false
	}
	var since int64 // when the key was first asked for, if not now
	var debounced bool
	if ok && st.flags&fWaiting != 0 {
		// The run due now replaces the one at the deadline, keeping the
		// higher priority. Unless the timer popped it, the deadline
		// entry stays behind, stale.
		prio = max(prio, st.prio)
		st.flags &^= fWaiting
		q.waiting--
		if !fired {
			q.delay.stale++
			q.sweepDelay()
		}
		since, debounced = q.unbounce(item)
	}
	st.flags |= fDirty
	st.prio = prio
	if q.metrics != nil {
		// Queue latency counts from when the key became due, or, for a
		// debounced key, from the first Add of its burst.
		if !debounced {
			since = q.now()
		}
		if st.flags&fProcessing != 0 {
			q.procs.dirtied(item, since) // st.at is the run's start
		} else {
			st.at = since
		}
	}
	q.keys.put(item, st)
	q.dirty++
	if st.flags&fProcessing == 0 {
		q.push(item, prio)
	}
	return true
}

// push puts item into the store and wakes one getter. q.mu must be held.
func (q *Queue[T]) push(item T, prio int) {
	q.pushEntry(item, prio)
	q.wake()
}

// pushEntry puts item into the store at priority prio. q.mu must be held.
func (q *Queue[T]) pushEntry(item T, prio int) {
	switch {
	case q.store == nil:
		q.fifo.Push(item)
	case q.prio != nil && prio != 0:
		q.prio.PushPriority(item, int(prio))
	default:
		q.store.Push(item)
	}
}

// wake owes one waiting getter a wake-up for a key just made ready, unless
// every waiting getter is owed one already. q.mu must be held, and released
// with unlock, which pays what is owed.
//
// The Signal is sent after the lock is released, not under it: a getter
// woken while the lock is still held runs (on another core) only to find the
// lock taken, and parks again on the mutex, which both costs it a second
// sleep and wakeup and, when goroutines outnumber cores, adds a waiter to
// the mutex's queue (see the contention notes in README.md). Sending it after
// the Unlock loses no wake-up: a getter counted in getters registered with
// cond before it released the lock, so the Signal finds it (or a getter that
// came later; either rechecks for a key).
//
// Drainers wait on the same cond, but they never steal this Signal from a
// getter: getters stop waiting once the queue shuts down, and drainers only
// wait after it has.
func (q *Queue[T]) wake() {
	if q.getters > q.owed {
		q.owed++
	}
}

// unlock releases q.mu and then sends the Signals that wake owed.
func (q *Queue[T]) unlock() {
	n := q.owed
	q.owed = 0
	q.mu.Unlock()
	for range n {
		q.cond.Signal()
	}
}

func (q *Queue[T]) touch(item T) {
	if q.store != nil {
		q.store.Touch(item)
	}
}

// pop takes the next ready key out of the store, passing over the ghosts
// that Remove left. q.mu must be held and q.ready() > 0.
func (q *Queue[T]) pop() T {
	item := q.popEntry()
	for q.ghosts > 0 && q.isGhost(item) {
		item = q.popEntry()
	}
	return item
}

// popEntry takes the next entry out of the store, ghost or not.
func (q *Queue[T]) popEntry() T {
	if q.store == nil {
		return q.fifo.Pop()
	}
	return q.store.Pop()
}

// ordered reports whether the key table is a plain queue's ordered table
// (ordered_table.go), which is then also the FIFO of ready keys.
func (q *Queue[T]) ordered() bool { return !q.full && q.store == nil }

// ready counts the ready keys: the store's entries less the ghosts.
func (q *Queue[T]) ready() int {
	if q.store == nil {
		if !q.full {
			return q.tab.ready // Remove leaves no ghost there
		}
		return q.fifo.Len() - q.ghosts
	}
	return q.store.Len() - q.ghosts
}

// sweepDelay drops the stale deadline entries once they outnumber the live
// ones. q.mu must be held.
func (q *Queue[T]) sweepDelay() {
	if q.delay.stale <= q.waiting+64 {
		return
	}
	q.delay.sweep(q.isLive)
}

// isLive reports whether e is the live entry of a waiting key. q.mu must be
// held.
func (q *Queue[T]) isLive(e deadline[T]) bool {
	_, ok := q.waitingEntry(e)
	return ok
}

// waitingEntry returns the table entry of e's key if e is its live delay
// entry, from whichever table the queue uses. q.mu must be held.
func (q *Queue[T]) waitingEntry(e deadline[T]) (keyState, bool) {
	if q.ordered() {
		if _, pos := q.tab.liveWait(e); pos >= 0 {
			return q.tab.entry(pos), true
		}
		return keyState{}, false
	}
	st, ok := q.keys.m[e.item]
	return st, liveIn(e, st, ok)
}

// liveIn reports whether e is the live entry of the key whose table entry
// is st, ok.
func liveIn[T comparable](e deadline[T], st keyState, ok bool) bool {
	return ok && st.flags&fWaiting != 0 && st.wseq == e.seq
}

// now returns the queue clock in nanoseconds. q.mu must be held.
func (q *Queue[T]) now() int64 {
	if q.clock.IsZero() {
		q.clock = time.Now()
	}
	return int64(time.Since(q.clock))
}

// wakeWhenDone makes the end of ctx wake every waiter on cond, so that a
// goroutine waiting for a key or a drain can see ctx.Err(). It returns the
// function that cancels this. The callback takes the lock before it
// broadcasts, so a waiter that saw ctx alive and went to wait is woken. A
// context that cannot end costs nothing.
func (q *Queue[T]) wakeWhenDone(ctx context.Context) (stop func() bool) {
	if ctx.Done() == nil {
		return func() bool { return false }
	}
	return context.AfterFunc(ctx, func() {
		q.lock()
		q.cond.Broadcast()
		q.mu.Unlock()
	})
}

// wait blocks on cond. q.mu must be held.
func (q *Queue[T]) wait() {
	if q.cond.L == nil {
		q.cond.L = &q.mu
	}
	q.cond.Wait()
}

// Get blocks until a key is ready, marks it processing and returns it. The
// caller must call Done(item) when it has finished with it. Once the queue
// is shut down and no key is ready, Get returns shutdown == true; until
// then it keeps handing out the keys that were ready.
func (q *Queue[T]) Get() (item T, shutdown bool) {
	item, _, shutdown = q.get(false)
	return item, shutdown
}

// GetWithPriority is Get that also returns the priority of the run it hands
// out: the highest that AddWithPriority or AddAfterWithPriority asked for
// since the key's last run (0 for plain Add). It is what controller-runtime's
// priority queue interface calls.
func (q *Queue[T]) GetWithPriority() (item T, priority int, shutdown bool) {
	item, prio, shutdown := q.get(true)
	return item, int(prio), shutdown
}

func (q *Queue[T]) get(wantPrio bool) (item T, prio int, shutdown bool) {
	if !q.mu.TryLock() { // q.lock(), spelled out: it is over the inlining budget
		lockContended(&q.mu)
	}
	for q.ready() == 0 && !q.shuttingDown {
		q.getters++
		q.wait()
		q.getters--
	}
	if q.ready() == 0 {
		q.mu.Unlock()
		return item, 0, true
	}
	item, prio, waited := q.take(wantPrio)
	q.mu.Unlock()
	if q.metrics != nil {
		q.metrics.Waited(waited)
	}
	return item, prio, false
}

// GetContext is Get that gives up when ctx ends. It returns ctx.Err() if ctx
// is done before a key is taken (also when it is done on entry, so a worker
// loop stops taking keys as soon as its context ends), and ErrShutDown once
// the queue has shut down and no key is ready. A key is either returned,
// marked processing, or left ready for another getter: never lost.
func (q *Queue[T]) GetContext(ctx context.Context) (T, error) {
	var zero T
	q.lock()
	if err := ctx.Err(); err != nil {
		q.mu.Unlock()
		return zero, err
	}
	if q.ready() == 0 && !q.shuttingDown {
		defer q.wakeWhenDone(ctx)()
		for q.ready() == 0 && !q.shuttingDown {
			if err := ctx.Err(); err != nil {
				q.mu.Unlock()
				return zero, err
			}
			q.getters++
			q.wait()
			q.getters--
		}
		if err := ctx.Err(); err != nil {
			// A Signal meant for some getter may have woken this one:
			// pass it on, so the ready key is not left unclaimed.
			if q.ready() > 0 && q.getters > 0 {
				q.cond.Signal()
			}
			q.mu.Unlock()
			return zero, err
		}
	}
	if q.ready() == 0 {
		q.mu.Unlock()
		return zero, ErrShutDown
	}
	item, _, waited := q.take(false)
	q.mu.Unlock()
	if q.metrics != nil {
		q.metrics.Waited(waited)
	}
	return item, nil
}

// take pops the next ready key and marks it processing. It returns the
// priority of the key's run when wantPrio is set, and how long the key was
// dirty when the queue has metrics. q.mu must be held and a key must be
// ready.
func (q *Queue[T]) take(wantPrio bool) (item T, prio int, waited time.Duration) {
	q.dirty--
	q.processing++
	if !q.full {
		// A ready key has only fDirty, and lean keys have priority 0
		// unless the ordered table is leveled.
		if q.store == nil {
			item, p := q.tab.take()
			if q.tab.timed {
				now := q.now()
				waited = time.Duration(now - q.tab.at[p])
				q.tab.at[p], q.tab.gen[p] = now, q.procs.start(item, now)
			}
			if q.tab.leveled {
				prio = q.tab.prio[p]
			}
			return item, prio, waited
		}
		item = q.pop()
		q.lean.m[item] = fProcessing
		return item, 0, 0
	}
	item = q.pop()
	if q.metrics == nil && !wantPrio {
		// A ready key has only fDirty: overwriting the entry is exact
		// and hashes the key once.
		q.keys.m[item] = keyState{flags: fProcessing}
		return item, 0, 0
	}
	st := q.keys.m[item]
	next := keyState{flags: fProcessing}
	if q.metrics != nil {
		now := q.now()
		next.at, next.gen = now, q.procs.start(item, now)
		waited = time.Duration(now - st.at)
	}
	q.keys.m[item] = next
	return item, st.prio, waited
}

// Done marks item as no longer processing. If it was added again meanwhile
// it becomes ready (at the tail of the store), or waiting if it was added
// with AddAfter. Done of a key that is not processing does nothing.
func (q *Queue[T]) Done(item T) {
	if !q.mu.TryLock() { // q.lock(), spelled out: it is over the inlining budget
		lockContended(&q.mu)
	}
	if !q.full {
		q.doneLean(item)
		return
	}
	if q.dirty == 0 && q.waiting == 0 && q.metrics == nil {
		// No key is dirty or waiting, so every key in the table is
		// processing and nothing else: if item is there, Done just
		// removes it, and if it is not, Done is ignored. One hash
		// instead of a lookup and a delete.
		if q.keys.delPresent(item) {
			q.processing--
			q.wakeDrainers()
		}
		q.mu.Unlock()
		return
	}
	st, ok := q.keys.m[item]
	if !ok || st.flags&fProcessing == 0 {
		q.mu.Unlock()
		return
	}
	q.processing--
	st.flags &^= fProcessing
	var worked time.Duration
	if q.metrics != nil {
		worked = time.Duration(q.now() - st.at)
		q.procs.finish(item, st.at, st.gen, q, q.processing)
		if st.flags&fDirty != 0 {
			// Its queue latency counts from the add that dirtied it
			// while it was processing, as in client-go.
			st.at = q.procs.requeued(item)
		}
	}
	switch {
	case st.flags != 0:
		q.keys.m[item] = st
		if st.flags&fDirty != 0 {
			q.push(item, st.prio)
		}
	default:
		q.keys.del(item)
	}
	q.wakeDrainers()
	q.unlock()
	if q.metrics != nil {
		q.metrics.Worked(worked)
	}
}

// doneLean is Done on a lean table, which releases q.mu: the ordered
// table, or the map of flags of a queue with a Store, where no key waits
// and metrics are off.
func (q *Queue[T]) doneLean(item T) {
	if q.store == nil {
		q.doneOrdered(item)
		return
	}
	var f uint8
	if q.dirty == 0 {
		// Every key in the table is processing and nothing else: one
		// hash, as in Done.
		if !q.lean.delPresent(item) {
			q.mu.Unlock()
			return
		}
	} else {
		var ok bool
		if f, ok = q.lean.m[item]; !ok || f&fProcessing == 0 {
			q.mu.Unlock()
			return
		}
		if f &^= fProcessing; f != 0 {
			q.lean.m[item] = f // dirty: ready again, at the tail
			q.push(item, 0)
		} else {
			q.lean.del(item)
		}
	}
	q.processing--
	q.wakeDrainers()
	q.unlock()
}

// doneOrdered is doneLean for a plain queue: one hash to find the key, and
// its entry either dies or moves to the tail. It releases q.mu.
func (q *Queue[T]) doneOrdered(item T) {
	_, slot, pos := q.tab.find(item)
	if pos < 0 || q.tab.flags[pos]&fProcessing == 0 {
		q.mu.Unlock()
		return
	}
	q.processing--
	var worked time.Duration
	if q.tab.timed {
		at := q.tab.at[pos]
		worked = time.Duration(q.now() - at)
		q.procs.finish(item, at, q.tab.gen[pos], q, q.processing)
	}
	switch f := q.tab.flags[pos]; {
	case f&fDirty != 0:
		p := q.tab.requeue(slot, pos) // ready again, at the tail
		if q.tab.timed {
			// Its queue latency counts from the add that dirtied it
			// while it was processing, as in client-go.
			q.tab.at[p] = q.procs.requeued(item)
		}
		q.wake()
	case f&fWaiting != 0:
		q.tab.flags[pos] = fWaiting // it keeps its deadline
	default:
		q.tab.remove(slot, pos)
	}
	q.wakeDrainers()
	q.unlock()
	if q.metrics != nil { // not q.tab.timed: another goroutine may change the table once unlocked
		q.metrics.Worked(worked)
	}
}

// runOf reports whether item is processing and the generation of its run,
// for the processing set. q.mu must be held.
func (q *Queue[T]) runOf(item T) (gen uint16, ok bool) {
	if !q.full {
		_, _, pos := q.tab.find(item)
		if pos < 0 || q.tab.flags[pos]&fProcessing == 0 || !q.tab.timed {
			return 0, false
		}
		return q.tab.gen[pos], true
	}
	st, ok := q.keys.m[item]
	return st.gen, ok && st.flags&fProcessing != 0
}

// Len returns the number of ready keys, as client-go's Len does: keys
// waiting for a deadline or processing are not counted (see Stats).
func (q *Queue[T]) Len() int {
	q.lock()
	defer q.mu.Unlock()
	return q.ready()
}

// Stats returns the queue's counts, all taken at one moment.
func (q *Queue[T]) Stats() Stats {
	q.lock()
	defer q.mu.Unlock()
	s := Stats{
		Ready:      q.ready(),
		Waiting:    q.waiting,
		Processing: q.processing,
		Dirty:      q.dirty,
	}
	if q.metrics != nil {
		u, l := q.procs.ages(q.now(), q, q.processing)
		s.UnfinishedWork, s.LongestRunning = time.Duration(u), time.Duration(l)
	}
	return s
}

// dirtyByPriority adds to m the number of dirty keys at each priority: see
// PriorityMetricsProvider. Nothing is counted on the hot path for it, so
// Add, Get and Done pay nothing and no path that changes a key's priority
// or dirty flag has to remember it; a scrape asks instead. Dirty keys are
// the ready ones, which the built-in priority store counts per level, and
// the processing keys added again, which the processing set lists: with
// both, the answer costs O(priorities + processing keys). Any other store
// (or a queue whose provider gave no QueueMetrics, so no processing set)
// costs one pass over the key table, about 60 ns a key.
func (q *Queue[T]) dirtyByPriority(m map[int]int) {
	q.lock()
	defer q.mu.Unlock()
	if q.dirty == 0 {
		return
	}
	c, _ := q.prio.(interface{ countByPriority(map[int]int) })
	if q.tab.leveled {
		c = &q.tab
	}
	if c == nil || q.metrics == nil {
		q.scanDirtyByPriority(m)
		return
	}
	c.countByPriority(m)
	q.procs.eachLive(q.entry, func(st keyState) {
		if st.flags&fDirty != 0 {
			m[int(st.prio)]++
		}
	})
}

// scanDirtyByPriority is dirtyByPriority by one pass over the key table.
// q.mu must be held.
func (q *Queue[T]) scanDirtyByPriority(m map[int]int) {
	if q.tab.leveled {
		t := &q.tab
		t.each(func(p int) bool {
			if t.flags[p]&fDirty != 0 {
				m[int(t.prio[p])]++
			}
			return true
		})
		return
	}
	if !q.full {
		m[0] += q.dirty // other lean tables' keys all have priority 0
		return
	}
	for _, st := range q.keys.m {
		if st.flags&fDirty != 0 {
			m[int(st.prio)]++
		}
	}
}

// ShutDown stops the queue from accepting keys: Add and AddAfter are ignored
// from now on, keys waiting for an AddAfter deadline are dropped (debounced
// keys become ready instead: see Config.Debounce) and the delay timer is
// stopped. Get
// keeps handing out the ready keys and then reports shutdown; Done still
// works, and a key added again while processing is still handed out once
// more. ShutDown does not wait; it may be called more than once.
//
// ShutDown also ends every ShutDownWithDrain* that is waiting at that moment:
// they return at once (ShutDownWithDrainContext and ShutDownWithDrainAll
// with ErrDrainInterrupted),
// leaving the keys still ready or processing to the workers. This is the
// "drain on the first signal, force on the second" of client-go.
func (q *Queue[T]) ShutDown() {
	q.lock()
	first, flushed := q.shutDownLocked()
	if q.drainers > 0 {
		q.interrupts++
		q.cond.Broadcast()
	}
	q.unlock()
	if first {
		q.reportShutDown(flushed)
	}
}

// reportShutDown tells the metrics that the queue shut down, after the
// debounced keys that it made ready (flushed) were added. q.mu must not be
// held.
func (q *Queue[T]) reportShutDown(flushed int) {
	if q.metrics == nil {
		return
	}
	for range flushed {
		q.metrics.Added()
	}
	q.metrics.ShutDown()
}

// shutDownLocked shuts the queue down and reports whether this call did it,
// and how many debounced keys it made ready. q.mu must be held.
func (q *Queue[T]) shutDownLocked() (first bool, flushed int) {
	if q.shuttingDown {
		return false, 0
	}
	q.shuttingDown = true
	for q.waiting > 0 {
		e := q.delay.pop()
		if q.ordered() {
			// A plain queue's waiting keys are never debounced.
			if slot, pos := q.tab.liveWait(e); pos >= 0 {
				q.waiting--
				if q.tab.flags[pos]&fProcessing != 0 {
					q.tab.flags[pos] &^= fWaiting
				} else {
					q.tab.remove(slot, pos)
				}
			}
			continue
		}
		st, ok := q.keys.m[e.item]
		if !liveIn(e, st, ok) {
			continue
		}
		if _, debounced := q.bounce.m[e.item]; debounced {
			// Its Add came before ShutDown; debouncing only merges
			// adds, so the run is not lost but due now, in deadline
			// order.
			q.markDirtyState(e.item, st, ok, math.MinInt, true) // it keeps its priority
			flushed++
			continue
		}
		q.waiting--
		if st.flags &^= fWaiting; st.flags == 0 {
			q.keys.del(e.item)
		} else {
			q.keys.m[e.item] = st
		}
	}
	q.arm(0) // no key waits: drops the entries and stops the timer
	q.cond.Broadcast()
	return true, flushed
}

// ShutDownWithDrain shuts the queue down like ShutDown and then waits until
// no key is processing: every key handed out by Get has been Done. Keys still
// ready when it returns stay ready, and Get keeps handing them out, as after
// ShutDown. This is client-go's rule, kept for the code written for it: a
// controller whose workers stop on their context and whose main goroutine
// then drains (for ctx.Err() == nil { key, _ := q.Get(); ...; q.Done(key) },
// then ShutDownWithDrain on exit) must return, not hang, when the workers
// leave keys queued. To wait until every queued key has run, use
// ShutDownWithDrainAll (Run's RunConfig.Drain does).
//
// Every concurrent caller returns once no key is processing, and every
// caller returns at once when ShutDown is called while it waits.
//
// An earlier version waited until no key was ready either; that rule is
// ShutDownWithDrainAll's now, because it hangs the shape above forever.
func (q *Queue[T]) ShutDownWithDrain() {
	_ = q.ShutDownWithDrainContext(context.Background())
}

// ShutDownWithDrainContext is ShutDownWithDrain that gives up when ctx ends,
// returning ctx.Err(), or when ShutDown is called while it waits, returning
// ErrDrainInterrupted. The queue stays shut down either way; keys still
// ready or processing are left to the workers. A second drain neither ends
// nor is ended by the first: each waits for its own condition.
func (q *Queue[T]) ShutDownWithDrainContext(ctx context.Context) error {
	return q.drain(ctx, false)
}

// ShutDownWithDrainAll shuts the queue down like ShutDown and then waits
// until no key is ready and none is processing: every key already due when
// it was called (and every key added again while processing) has been
// handed out and Done. Workers must keep calling Get and Done meanwhile, or
// it returns only when ctx ends, with ctx.Err(). A ShutDown called while it
// waits ends it at once with ErrDrainInterrupted ("drain on the first
// signal, force on the second"). Either way the queue stays shut down and
// no key is dropped: the keys left stay ready for Get.
//
// This is the drain of a controller that wants every queued key run before
// it exits; Run uses it for RunConfig.Drain. Code that stops its workers
// before it drains must use ShutDownWithDrain, which does not wait for the
// ready keys.
func (q *Queue[T]) ShutDownWithDrainAll(ctx context.Context) error {
	return q.drain(ctx, true)
}

// drain is the ShutDownWithDrain* family: it waits until no key is
// processing and, if all, none is ready.
func (q *Queue[T]) drain(ctx context.Context, all bool) error {
	q.lock()
	// Shutting down and starting to wait happen under one hold of the
	// lock: a ShutDown that comes after this drain has shut the queue
	// down (ShuttingDown reports true) always finds it waiting.
	first, flushed := q.shutDownLocked()
	busy := func() bool { return q.processing > 0 || all && q.ready() > 0 }
	waiting := busy()
	epoch := q.interrupts
	if waiting {
		q.drainers++
	}
	q.unlock()
	if first {
		q.reportShutDown(flushed)
	}
	if !waiting {
		return nil
	}

	var err error
	q.lock()
	defer q.wakeWhenDone(ctx)()
	for busy() {
		if q.interrupts != epoch {
			err = ErrDrainInterrupted
			break
		}
		if err = ctx.Err(); err != nil {
			break
		}
		q.wait()
	}
	q.drainers--
	q.mu.Unlock()
	return err
}

// ShuttingDown reports whether ShutDown (or a drain) has been called.
func (q *Queue[T]) ShuttingDown() bool {
	q.lock()
	defer q.mu.Unlock()
	return q.shuttingDown
}
