// Package workqueue is a generic, coalescing, keyed work queue for
// controllers: events become keys, a key is queued at most once however many
// events arrive, a key is never handed to two workers at once, and a key that
// changes while it is processed is processed once more after Done.
//
// It keeps the protocol of client-go's util/workqueue, so controllers move
// over by changing an import and a constructor, and it specifies every case
// that protocol left open: see the state table in docs/protocol.md.
//
// The files follow the state table: this file builds a queue (config.go
// holds its Config) and has the transitions of Add, Get and Done; delay.go
// those of AddAfter and of a deadline that passes, debounce.go debounced
// Adds, remove.go Remove, shutdown.go ShutDown and the drains;
// dirty_set.go marks a key dirty. Each transition of a key's flags is a
// method of the one key table every configuration uses (key_state.go,
// dirty_set.go, ordered_table.go).
package workqueue

import (
	"context"
	"sync"
	"time"
)

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
	// them (the lock and the counts, the configuration, the key table's
	// hot part; the cold parts follow), so that the hot path reads few
	// cache lines of the queue: under contention each line it touches may
	// have to come over from the other core.
	mu sync.Mutex

	dirty      int // keys with fDirty: ready, or processing and due again
	waiting    int // keys with fWaiting
	processing int // keys with fProcessing
	getters    int // goroutines waiting in Get or GetContext
	owed       int // Signals to send at unlock: keys made ready for getters
	drainers   int // goroutines waiting in ShutDownWithDrain*

	shuttingDown bool
	stopGets     bool // Config.GetStopsAtShutDown

	// metrics is nil without metrics; then procs and the table's timed
	// columns are unused and no clock is read on Add, Get or Done.
	metrics QueueMetrics
	// The ready keys are in tab (its FIFO, or its levels for the built-in
	// priority store) unless Config.Store gave another store; prio is that
	// store again when it is a PriorityStore, else nil.
	store Store[T]
	// quiet and maxWait are Config.Debounce in nanoseconds (quiet == 0:
	// off); the table's bounce column holds the debounced keys' bursts
	// (debounce.go).
	quiet, maxWait int64

	// tab is the key table of every configuration: every key that is
	// ready, waiting or processing, with its flags, the dirty and
	// processing sets (key_state.go), and the side columns its
	// configuration needs (ordered_table.go). Without a Store it is also
	// the FIFO, and with the built-in priority store the priority levels.
	tab orderedTable[T]

	cond sync.Cond

	prio PriorityStore[T]
	// held is the store again when it may hold keys back (a tenant at its
	// cap: heldStore), else nil. Such a store also removes keys itself, so
	// it never has ghosts.
	held heldStore[T]
	// ghosts counts the entries that Remove left in the store; the key
	// table's ghost column says which keys have one (remove.go), and
	// ghostPrio, with a PriorityStore, the priority of each ghost
	// not at priority 0.
	ghosts    int
	ghostPrio map[T]int

	// delay holds the waiting keys, their heap and the timer (delay.go).
	delay delayState[T]

	// interrupts counts the ShutDown calls that found drainers waiting. A
	// drainer remembers it when it starts to wait and stops waiting when it
	// changes: ShutDown after ShutDownWithDrain ends the drain, as
	// client-go documents ("drain on the first signal, force on the
	// second").
	interrupts uint64

	// clock is the queue's time origin; times are kept as nanoseconds since
	// it (monotonic). Set when first needed.
	clock time.Time
	// clk is Config.Clock: nil reads package time directly.
	clk Clock

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
	q := &Queue[T]{
		quiet:    int64(cfg.Debounce.Quiet),
		maxWait:  int64(cfg.Debounce.MaxWait),
		stopGets: cfg.GetStopsAtShutDown,
		clk:      cfg.Clock,
	}
	if q.clk != nil {
		q.clock = q.clk.Now()
	}
	q.tab.bounced = q.quiet > 0
	if _, ok := cfg.Store.(*priorityStore[T]); ok {
		// The built-in priority store: the queue keeps the levels in
		// its own key table, which then needs no second index of the
		// keys (ordered_table.go). The store itself is not called.
		q.tab.leveled, q.tab.prioritized = true, true
	} else if cfg.Store != nil {
		q.store = cfg.Store
		q.prio, _ = cfg.Store.(PriorityStore[T])
		q.held, _ = cfg.Store.(heldStore[T])
		q.tab.storeOrder = true
		if c, ok := cfg.Store.(clockedStore); ok && cfg.Clock != nil {
			c.useClock(cfg.Clock)
		}
	}
	if mp := metricsFor(cfg.Name, cfg.Metrics); mp != nil {
		q.metrics = q.newMetrics(cfg.Name, mp)
		// Metrics keep every key's dirty time or run start, in the
		// key table's timed columns.
		q.tab.timed = q.metrics != nil
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
		// The common case of a queue whose table is its order, spelled
		// out to save two call levels: a key already due (a hot key's
		// next event) is let go with a plain Unlock, as it made nothing
		// ready and so owes no Signal. A run below priority 0 is due but
		// must still be raised to 0.
		t := &q.tab
		h, slot, pos := t.find(item)
		if pos >= 0 && t.isDue(pos) && (!t.prioritized || t.prio[pos] >= 0) {
			q.mu.Unlock()
			return
		}
		q.markDirty(item, 0, h, slot, pos, false)
		q.unlock()
		return
	}
	q.addLocked(item, 0)
}

// AddWithPriority is Add with a priority for the key's pending run, for a
// queue whose Config.Store is a PriorityStore (such as NewPriorityStore).
// Higher runs first. When the key is already due, it keeps the higher of
// the two priorities: a raise moves it to the back of its new level, a lower
// priority changes nothing. With any other store it is Add, except that
// GetWithPriority reports the priority. Every int is a priority of its own,
// math.MinInt to math.MaxInt, as in controller-runtime.
func (q *Queue[T]) AddWithPriority(item T, priority int) {
	q.lock()
	q.addLocked(item, priority)
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
	h, slot, pos := q.tab.find(item)
	added := q.markDirty(item, prio, h, slot, pos, false)
	q.unlock()
	if added && q.metrics != nil {
		q.metrics.Added()
	}
}

// raise gives the dirty key at pos the priority prio if that is higher
// than its own, and reports whether it moved it in a PriorityStore given
// as Config.Store (the levels of the table move it themselves). q.mu must
// be held.
func (q *Queue[T]) raise(item T, pos int, prio int) (moved bool) {
	if !q.tab.raise(pos, prio) || q.tab.isProcessing(pos) || q.prio == nil {
		return false
	}
	q.prio.Raise(item, prio)
	return true
}

// enqueue puts item, just made ready in the table, into the Store if the
// queue has one, and wakes one getter, unless a store that holds keys back
// holds this one. q.mu must be held.
func (q *Queue[T]) enqueue(item T, prio int) {
	if q.store != nil {
		if q.ghosts == 0 || !q.revive(item, prio) {
			q.pushEntry(item, prio)
		}
		if q.held != nil {
			q.wakeHeld(min(q.held.available(), 1))
			return
		}
	}
	q.wake()
}

// pushEntry puts item into the Store at priority prio. q.mu must be held.
func (q *Queue[T]) pushEntry(item T, prio int) {
	if q.prio != nil && prio != 0 {
		q.prio.PushPriority(item, prio)
		return
	}
	q.store.Push(item)
}

// Waits and wake-ups. Two kinds of goroutine wait on cond, each in a loop
// over its own condition, and each also until its context ends
// (wakeWhenDone broadcasts then):
//
//   - a getter (Get, GetContext) while no key is available and keepsWaiting
//     holds: the queue is not shut down, or it is, its store holds keys
//     back, and keys are still ready (held; their tenant's Done lets them
//     through);
//   - a drainer (drain, in shutdown.go) while a key is processing or, for
//     ShutDownWithDrainAll, ready, unless a ShutDown interrupted it.
//
// The rule: every transition that can make a waiter's condition false
// wakes every waiter it may end, at the place where it happens. The
// transitions, and who wakes whom:
//
//   - a key becomes available (Add, an AddAfter or Debounce deadline
//     passing, ShutDown flushing the debounced keys, Done of a key added
//     again while it was processing): enqueue wakes one getter (wake, or
//     wakeHeld for a store that holds keys back);
//   - a tenant's cap lifts (Done of one of its keys): wakeHeld, one getter
//     for each key let through;
//   - the last ready key leaves a shut-down queue whose store holds keys
//     back (a Get takes it, or Remove cancels it): endHeldWaits wakes every
//     getter, since each must now report shutdown;
//   - the queue shuts down (the first ShutDown or drain): shutDownLocked
//     wakes every waiter; a ShutDown while drains wait wakes every waiter,
//     which interrupts the drains;
//   - no key is processing any more (Done), or none is ready while none is
//     processing (Remove): wakeDrainers wakes every drainer.
//
// Nothing else can end a wait: reaching a cap, or taking a key that is not
// the last ready one, only makes fewer keys available; a raise or a Touch
// moves a ready key within the store without changing which keys are
// available; Add and AddAfter do nothing after ShutDown. A queue without a Store never holds keys back, so
// its getters stop waiting at ShutDown, and before it only a key made
// available wakes them: its Add, Get and Done pay for no other wake-up.

// wake owes one waiting getter a wake-up for a key just made ready, unless
// every waiting getter is owed one already. q.mu must be held, and released
// with unlock, which pays what is owed.
//
// The Signal is sent after the lock is released, not under it: a getter
// woken while the lock is still held runs (on another core) only to find the
// lock taken and park again on the mutex, a second sleep and wakeup. Sending
// it after the Unlock loses no wake-up: a getter counted in getters
// registered with cond before it released the lock, so the Signal finds it
// (or a getter that came later; either rechecks for a key).
//
// Drainers wait on the same cond, but they never steal this Signal from a
// getter: getters stop waiting once the queue shuts down, and drainers only
// wait after it has. (A store that holds keys back is the exception: its
// getters may wait after ShutDown, and its wakes go through wakeHeld.)
func (q *Queue[T]) wake() {
	if q.getters > q.owed {
		q.owed++
	}
}

// wakeHeld wakes getters for n keys that a store holding keys back (a
// heldStore) just made available. After ShutDown a getter of such a queue
// may still wait (for a held key whose tenant's runs are going) while a
// drainer waits on the same cond, and a Signal may wake the drainer instead
// of the getter: so while anyone drains, every waiter is woken, and each
// rechecks its own condition. q.mu must be held.
func (q *Queue[T]) wakeHeld(n int) {
	if n <= 0 {
		return
	}
	if q.drainers > 0 {
		q.cond.Broadcast()
		return
	}
	for range n {
		q.wake()
	}
}

// endHeldWaits wakes every getter once the last ready key has left a
// shut-down queue whose store holds keys back: a getter there may wait for
// a held key after ShutDown, and with no key left it must report shutdown
// instead. The key's leaving frees no tenant (it was not running), so no
// Done would wake the getter later. q.mu must be held, and the queue must
// have a heldStore.
func (q *Queue[T]) endHeldWaits() {
	if q.shuttingDown && q.getters > 0 && q.ready() == 0 {
		q.cond.Broadcast()
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

// pop takes the next ready key out of the Store, passing over the ghosts
// that Remove left, and returns it with its position in the key table.
// q.mu must be held, the queue must have a Store and q.ready() > 0.
func (q *Queue[T]) pop() (T, int) {
	for {
		item := q.store.Pop()
		if q.ghosts == 0 {
			_, _, p := q.tab.find(item)
			return item, p
		}
		if p, ghost := q.popGhost(item); !ghost {
			return item, p
		}
	}
}

// ready counts the ready keys: the table's, or the Store's entries less
// the ghosts. Keys a heldStore holds back are ready: Len, Stats and the
// drains count them.
func (q *Queue[T]) ready() int {
	if q.store == nil {
		return q.tab.ready // Remove leaves no ghost there
	}
	return q.store.Len() - q.ghosts
}

// available counts the ready keys Get may take now: the ready ones, less
// those a heldStore holds back (it leaves no ghosts). It is small enough
// to inline, so that a Get from a queue without a Store reads one field,
// as ready does.
func (q *Queue[T]) available() int {
	if q.store == nil {
		return q.tab.ready
	}
	return q.storeAvailable()
}

func (q *Queue[T]) storeAvailable() int {
	if q.held != nil {
		return q.held.available()
	}
	return q.store.Len() - q.ghosts
}

// keepsWaiting reports whether a Get that finds no key available waits:
// while the queue is not shut down, and after ShutDown while keys held
// back are ready, which Get still hands out (unless
// Config.GetStopsAtShutDown) once the runs of their tenant end; those
// runs' Done wakes it. q.mu must be held.
func (q *Queue[T]) keepsWaiting() bool {
	return !q.shuttingDown || q.held != nil && !q.stopGets && q.ready() > 0
}

// now returns the queue clock in nanoseconds. q.mu must be held.
func (q *Queue[T]) now() int64 {
	if q.clk != nil {
		return q.clockNow()
	}
	if q.clock.IsZero() {
		q.clock = time.Now()
	}
	return int64(time.Since(q.clock))
}

// clockNow is now under Config.Clock, whose origin NewWithConfig set (a
// fake clock may well start at the zero time). q.mu must be held.
func (q *Queue[T]) clockNow() int64 {
	return int64(q.clk.Since(q.clock))
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
// then it keeps handing out the keys that were ready (unless
// Config.GetStopsAtShutDown is set: then it reports shutdown at once).
// With a per-tenant cap (FairPriority.MaxInFlight), a key whose tenant is
// at its cap is ready but not handed out: Get waits for the Done of one
// of that tenant's keys, also after ShutDown.
func (q *Queue[T]) Get() (item T, shutdown bool) {
	item, _, shutdown = q.get()
	return item, shutdown
}

// GetWithPriority is Get that also returns the priority of the run it hands
// out: the highest that AddWithPriority or AddAfterWithPriority asked for
// since the key's last run (0 for plain Add). It is what controller-runtime's
// priority queue interface calls.
func (q *Queue[T]) GetWithPriority() (item T, priority int, shutdown bool) {
	return q.get()
}

func (q *Queue[T]) get() (item T, prio int, shutdown bool) {
	if !q.mu.TryLock() { // q.lock(), spelled out: it is over the inlining budget
		lockContended(&q.mu)
	}
	for q.available() == 0 && q.keepsWaiting() {
		q.getters++
		q.wait()
		q.getters--
	}
	if q.getEnds() {
		q.mu.Unlock()
		return item, 0, true
	}
	item, prio, waited := q.take()
	q.mu.Unlock()
	if q.metrics != nil {
		q.metrics.Waited(waited)
	}
	return item, prio, false
}

// getEnds reports whether a Get that no longer waits must report shutdown
// rather than take a key: none is available, or Config.GetStopsAtShutDown
// holds the ready ones back. q.mu must be held.
func (q *Queue[T]) getEnds() bool {
	return q.available() == 0 || q.shuttingDown && q.stopGets
}

// GetContext is Get that gives up when ctx ends. It returns ctx.Err() if ctx
// is done before a key is taken (also when it is done on entry, so a worker
// loop stops taking keys as soon as its context ends), and ErrShutDown once
// the queue has shut down and no key is ready (or at once, with
// Config.GetStopsAtShutDown). A key is either returned, marked processing,
// or left ready for another getter: never lost.
func (q *Queue[T]) GetContext(ctx context.Context) (T, error) {
	var zero T
	q.lock()
	if err := ctx.Err(); err != nil {
		q.mu.Unlock()
		return zero, err
	}
	if q.available() == 0 && q.keepsWaiting() {
		defer q.wakeWhenDone(ctx)()
		for q.available() == 0 && q.keepsWaiting() {
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
			if q.available() > 0 && q.getters > 0 {
				if q.held != nil && q.drainers > 0 {
					q.cond.Broadcast() // a Signal may find a drainer (see wakeHeld)
				} else {
					q.cond.Signal()
				}
			}
			q.mu.Unlock()
			return zero, err
		}
	}
	if q.getEnds() {
		q.mu.Unlock()
		return zero, ErrShutDown
	}
	item, _, waited := q.take()
	q.mu.Unlock()
	if q.metrics != nil {
		q.metrics.Waited(waited)
	}
	return item, nil
}

// take hands out the next ready key and marks it processing. It returns
// the priority of the key's run, and how long the key was dirty when the
// queue has metrics. q.mu must be held and a key must be ready.
func (q *Queue[T]) take() (item T, prio int, waited time.Duration) {
	q.dirty--
	q.processing++
	t := &q.tab
	var p int
	if q.store == nil {
		item, p = t.take()
	} else {
		item, p = q.pop()
		t.takeAt(p)
		if q.held != nil {
			q.held.handedOut(item)
			q.endHeldWaits() // it may have been the last ready key
		}
	}
	if t.timed {
		now := q.now()
		waited = time.Duration(now - t.at[p])
		t.at[p], t.gen[p] = now, q.procs.start(item, now)
	}
	prio = t.prioAt(p)
	if q.ghosts > 0 {
		q.settleGhosts() // the last live entry may have left only ghosts
	}
	return item, prio, waited
}

// Done marks item as no longer processing. If it was added again meanwhile
// it becomes ready (at the tail of the store), or waiting if it was added
// with AddAfter. Done of a key that is not processing does nothing.
func (q *Queue[T]) Done(item T) {
	if !q.mu.TryLock() { // q.lock(), spelled out: it is over the inlining budget
		lockContended(&q.mu)
	}
	t := &q.tab
	_, slot, pos := t.find(item)
	if pos < 0 || !t.isProcessing(pos) {
		q.mu.Unlock()
		return
	}
	q.processing--
	if q.held != nil {
		// Before the key is made ready again below, so that it counts
		// against its tenant's cap as a key that is no longer running.
		q.wakeHeld(q.held.finished(item))
	}
	var worked time.Duration
	if t.timed {
		at := t.at[pos]
		worked = time.Duration(q.now() - at)
		q.procs.finish(item, at, t.gen[pos], q, q.processing)
	}
	switch {
	case t.isDue(pos):
		p := t.promote(slot, pos) // ready again, at the tail
		if t.timed {
			// Its queue latency counts from the add that dirtied it
			// while it was processing, as in client-go.
			t.at[p] = q.procs.requeued(item)
		}
		q.enqueue(item, t.prioAt(p))
	case t.isWaiting(pos):
		t.keepWaiting(pos)
	default:
		t.remove(slot, pos)
	}
	q.wakeDrainers()
	q.unlock()
	if q.metrics != nil { // not t.timed: another goroutine may change the table once unlocked
		q.metrics.Worked(worked)
	}
}

// runOf reports whether item is processing and the generation of its run,
// for the processing set. q.mu must be held.
func (q *Queue[T]) runOf(item T) (gen uint16, ok bool) {
	t := &q.tab
	_, _, pos := t.find(item)
	if pos < 0 || !t.isProcessing(pos) || !t.timed {
		return 0, false
	}
	return t.gen[pos], true
}

// Len returns the number of ready keys, as client-go's Len does: keys
// waiting for a deadline or processing are not counted (see Stats).
func (q *Queue[T]) Len() int {
	q.lock()
	defer q.mu.Unlock()
	return q.ready()
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
// PriorityMetricsProvider. It is computed when a scrape asks, so that Add,
// Get and Done count nothing for it. With the built-in priority store it
// costs O(priorities + processing keys): the table's levels count the ready
// keys, and the processing set lists the processing ones added again. Any
// other store costs one pass over the key table.
func (q *Queue[T]) dirtyByPriority(m map[int]int) {
	q.lock()
	defer q.mu.Unlock()
	switch {
	case q.dirty == 0:
	case q.tab.leveled && q.metrics != nil:
		q.tab.countByPriority(m)
		q.procs.eachLive(q.entry, func(st keyState) {
			if st.flags&fDirty != 0 {
				m[st.prio]++
			}
		})
	default:
		q.scanDirtyByPriority(m)
	}
}

// scanDirtyByPriority is dirtyByPriority by one pass over the key table
// (none while every key has priority 0). q.mu must be held.
func (q *Queue[T]) scanDirtyByPriority(m map[int]int) {
	t := &q.tab
	if !t.prioritized {
		if q.dirty > 0 {
			m[0] += q.dirty
		}
		return
	}
	t.each(func(p int) bool {
		if t.isDue(p) {
			m[t.prio[p]]++
		}
		return true
	})
}
