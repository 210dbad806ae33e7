package bench

import (
	"sync"
	"time"
)

// The floors are measuring sticks, not queues anyone should use: each does
// the least work that the protocol of a workload cannot avoid, and nothing
// else (no priorities, no metrics hooks, no shrinking, no checks of misuse).
// Running them next to both libraries shows how much of a library's time is
// the protocol's and how much its own, and whether a goal is reachable at
// all on the machine: no queue can go below its floor, so a goal below the
// floor's ratio asks for the impossible there.

// floorQueue is the floor of Add, Get and Done: one lock per call, one map
// entry per key, a FIFO of ready keys. It coalesces only what the
// workloads need (a key is never added twice while in flight).
//
// With clock set it also reads the clock where exact metrics must: when a
// key becomes dirty (its queue latency starts), at Get (latency ends, work
// starts) and at Done (work ends). floor-with-clock ÷ floor is then the
// least that metrics with exact durations can cost over none.
type floorQueue struct {
	mu     sync.Mutex
	keys   map[string]floorKey
	fifo   fifo[string]
	clock  bool
	origin time.Time
	sum    time.Duration // durations measured, kept so that no read is dead code
}

type floorKey struct {
	processing bool
	at         time.Duration
}

func newFloorQueue(clock bool) *floorQueue {
	return &floorQueue{keys: map[string]floorKey{}, clock: clock, origin: time.Now()}
}

func (f *floorQueue) now() time.Duration {
	if !f.clock {
		return 0
	}
	return time.Since(f.origin)
}

func (f *floorQueue) Add(k string) {
	f.mu.Lock()
	f.keys[k] = floorKey{at: f.now()}
	f.fifo.push(k)
	f.mu.Unlock()
}

// Get and Done look the key up first only with the clock: the start times
// are what metrics add, and the plain floor overwrites or deletes the entry
// with one hash.
func (f *floorQueue) Get() (string, bool) {
	f.mu.Lock()
	k := f.fifo.pop()
	st := floorKey{processing: true}
	if f.clock {
		st.at = f.now()
		f.sum += st.at - f.keys[k].at
	}
	f.keys[k] = st
	f.mu.Unlock()
	return k, false
}

func (f *floorQueue) Done(k string) {
	f.mu.Lock()
	if f.clock {
		f.sum += f.now() - f.keys[k].at
	}
	delete(f.keys, k)
	f.mu.Unlock()
}

func (f *floorQueue) ShutDown() {}

// floorCoalescing is floorQueue whose Add looks the key up first and does
// nothing for a key already queued: the floor of hot-key-x10, whose Adds
// mostly find the key queued. One lock and one map lookup per duplicate.
type floorCoalescing struct{ floorQueue }

func newFloorCoalescing() *floorCoalescing {
	return &floorCoalescing{floorQueue{keys: map[string]floorKey{}}}
}

func (f *floorCoalescing) Add(k string) {
	f.mu.Lock()
	if _, ok := f.keys[k]; !ok {
		f.keys[k] = floorKey{}
		f.fifo.push(k)
	}
	f.mu.Unlock()
}

// floorTimer is what both delaying floors share: the lock, the one timer
// armed for the earliest deadline, and the getters waiting for a key. The
// floors differ only in how they keep the state of a key.
type floorTimer struct {
	mu       sync.Mutex
	cond     sync.Cond
	origin   time.Time
	fire     func() // the floor's fire, bound once: a method value per AddAfter would allocate
	timer    *time.Timer
	armed    bool
	getters  int
	shutDown bool
}

func (t *floorTimer) init(fire func()) {
	t.cond.L = &t.mu
	t.origin = time.Now()
	t.fire = fire
}

// arm sets the timer to fire in d, unless it is set already for an earlier
// deadline (deadlines arrive in order in the workload). t.mu must be held.
func (t *floorTimer) arm(d time.Duration) {
	if t.armed {
		return
	}
	t.armed = true
	if t.timer == nil {
		t.timer = time.AfterFunc(d, t.fire)
	} else {
		t.timer.Reset(d)
	}
}

// fired ends a fire that made keys ready: the timer is set again for the
// next deadline, in d, if more is due, and a waiting getter is woken. t.mu
// must be held.
func (t *floorTimer) fired(more bool, d time.Duration) {
	t.armed = false
	if more && !t.shutDown {
		t.arm(d)
	}
	if t.getters > 0 {
		t.cond.Signal()
	}
}

// wait blocks a getter until a fire or ShutDown wakes it; it reports false,
// without waiting, once the floor is shut down. t.mu must be held.
func (t *floorTimer) wait() bool {
	if t.shutDown {
		return false
	}
	t.getters++
	t.cond.Wait()
	t.getters--
	return true
}

func (t *floorTimer) ShutDown() {
	t.mu.Lock()
	t.shutDown = true
	if t.timer != nil {
		t.timer.Stop()
	}
	t.cond.Broadcast()
	t.mu.Unlock()
}

// floorDelaying is the floor of AddAfter followed by Get and Done, and
// leaner than any full queue can be: the key table maps a key to a slot in
// an array, so the timer and Get reach a key's state without hashing it;
// the one hash lookup and insert per AddAfter and the lookup and delete per
// Done are all that remain. One clock read per AddAfter, one timer armed
// for the earliest deadline, deadlines in arrival order (all delays are
// equal in the workload), keys made ready on the timer's goroutine as the
// libraries do.
type floorDelaying struct {
	floorTimer
	keys  map[string]uint32
	slots []floorSlot
	free  []uint32
	due   fifo[floorDeadline]
	ready fifo[uint32]
}

// floorSlot is a key's state. Nothing reads state (no stale deadline can
// exist in the workload), but a queue must record each transition, and
// writing it is the cost that the floor keeps.
type floorSlot struct {
	key   string
	state uint8 // 1 waiting, 2 ready, 3 processing
}

type floorDeadline struct {
	slot uint32
	when time.Duration
}

func newFloorDelaying() *floorDelaying {
	f := &floorDelaying{keys: map[string]uint32{}}
	f.init(f.fire)
	return f
}

func (f *floorDelaying) AddAfter(k string, d time.Duration) {
	f.mu.Lock()
	if _, ok := f.keys[k]; !ok && !f.shutDown {
		when := time.Since(f.origin) + d
		var s uint32
		if n := len(f.free); n > 0 {
			s, f.free = f.free[n-1], f.free[:n-1]
		} else {
			s = uint32(len(f.slots))
			f.slots = append(f.slots, floorSlot{})
		}
		f.keys[k] = s
		f.slots[s] = floorSlot{key: k, state: 1}
		f.due.push(floorDeadline{s, when})
		f.arm(d)
	}
	f.mu.Unlock()
}

func (f *floorDelaying) fire() {
	f.mu.Lock()
	now := time.Since(f.origin)
	for f.due.len() > 0 && f.due.peek().when <= now {
		e := f.due.pop()
		f.slots[e.slot].state = 2
		f.ready.push(e.slot)
	}
	more := f.due.len() > 0
	var next time.Duration
	if more {
		next = f.due.peek().when - now
	}
	f.fired(more, next)
	f.mu.Unlock()
}

func (f *floorDelaying) Add(k string) { f.AddAfter(k, 0) }

func (f *floorDelaying) Get() (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.ready.len() == 0 {
		if !f.wait() {
			return "", true
		}
	}
	s := f.ready.pop()
	f.slots[s].state = 3
	return f.slots[s].key, false
}

func (f *floorDelaying) Done(k string) {
	f.mu.Lock()
	if s, ok := f.keys[k]; ok {
		delete(f.keys, k)
		f.slots[s] = floorSlot{}
		f.free = append(f.free, s)
	}
	f.mu.Unlock()
}

// floorDelayingMap is floorDelaying with the key table laid out as ours is:
// the state of a key is a value in the map, so the timer and Get find it by
// hashing the key (twice each: read, then write back), and a deadline entry
// carries the key and a sequence number to tell a live entry from one a
// later AddAfter replaced. It bounds what a queue built on such a table can
// reach, however little else it does.
type floorDelayingMap struct {
	floorTimer
	keys  map[string]floorMapState
	due   fifo[floorMapDeadline]
	ready fifo[string]
	seq   uint64
}

type floorMapState struct {
	seq   uint64
	state uint8 // 1 waiting, 2 ready, 3 processing
}

type floorMapDeadline struct {
	key  string
	when time.Duration
	seq  uint64
}

func newFloorDelayingMap() *floorDelayingMap {
	f := &floorDelayingMap{keys: map[string]floorMapState{}}
	f.init(f.fire)
	return f
}

func (f *floorDelayingMap) AddAfter(k string, d time.Duration) {
	f.mu.Lock()
	if _, ok := f.keys[k]; !ok && !f.shutDown {
		when := time.Since(f.origin) + d
		f.seq++
		f.keys[k] = floorMapState{f.seq, 1}
		f.due.push(floorMapDeadline{k, when, f.seq})
		f.arm(d)
	}
	f.mu.Unlock()
}

func (f *floorDelayingMap) fire() {
	f.mu.Lock()
	now := time.Since(f.origin)
	for f.due.len() > 0 && f.due.peek().when <= now {
		e := f.due.pop()
		if st, ok := f.keys[e.key]; ok && st.seq == e.seq && st.state == 1 {
			st.state = 2
			f.keys[e.key] = st
			f.ready.push(e.key)
		}
	}
	more := f.due.len() > 0
	var next time.Duration
	if more {
		next = f.due.peek().when - now
	}
	f.fired(more, next)
	f.mu.Unlock()
}

func (f *floorDelayingMap) Add(k string) { f.AddAfter(k, 0) }

func (f *floorDelayingMap) Get() (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.ready.len() == 0 {
		if !f.wait() {
			return "", true
		}
	}
	k := f.ready.pop()
	st := f.keys[k]
	st.state = 3
	f.keys[k] = st
	return k, false
}

func (f *floorDelayingMap) Done(k string) {
	f.mu.Lock()
	if st, ok := f.keys[k]; ok && st.state == 3 {
		delete(f.keys, k)
	}
	f.mu.Unlock()
}

// fifo is a slice used as a queue that restarts at the front whenever it
// empties, which the workloads make it do at the end of every batch.
type fifo[E any] struct {
	buf  []E
	head int
}

func (q *fifo[E]) push(e E) { q.buf = append(q.buf, e) }
func (q *fifo[E]) len() int { return len(q.buf) - q.head }
func (q *fifo[E]) peek() E  { return q.buf[q.head] }
func (q *fifo[E]) pop() E {
	e := q.buf[q.head]
	q.head++
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	}
	return e
}
