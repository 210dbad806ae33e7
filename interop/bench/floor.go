package bench

import (
	"sync"
	"time"

	"github.com/go-coalesce/workqueue/internal/benchwork"
)

// The floors are measuring sticks, not queues anyone should use: each does
// the least work that the protocol of a workload cannot avoid, and nothing
// else (no priorities, no metrics hooks, no shrinking, no checks of misuse).
// Running them next to both libraries shows how much of a library's time is
// the protocol's and how much its own, and whether a goal is reachable at
// all on the machine: no queue can go below its floor, so a goal below the
// floor's ratio asks for the impossible there. The floors of Add, Get and
// Done are benchwork's (the core's benchmarks run them too); those of
// AddAfter are here.

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
	due   benchwork.FIFO[floorDeadline]
	ready benchwork.FIFO[uint32]
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
		f.due.Push(floorDeadline{s, when})
		f.arm(d)
	}
	f.mu.Unlock()
}

func (f *floorDelaying) fire() {
	f.mu.Lock()
	now := time.Since(f.origin)
	for f.due.Len() > 0 && f.due.Peek().when <= now {
		e := f.due.Pop()
		f.slots[e.slot].state = 2
		f.ready.Push(e.slot)
	}
	more := f.due.Len() > 0
	var next time.Duration
	if more {
		next = f.due.Peek().when - now
	}
	f.fired(more, next)
	f.mu.Unlock()
}

func (f *floorDelaying) Add(k string) { f.AddAfter(k, 0) }

func (f *floorDelaying) Get() (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.ready.Len() == 0 {
		if !f.wait() {
			return "", true
		}
	}
	s := f.ready.Pop()
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
	due   benchwork.FIFO[floorMapDeadline]
	ready benchwork.FIFO[string]
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
		f.due.Push(floorMapDeadline{k, when, f.seq})
		f.arm(d)
	}
	f.mu.Unlock()
}

func (f *floorDelayingMap) fire() {
	f.mu.Lock()
	now := time.Since(f.origin)
	for f.due.Len() > 0 && f.due.Peek().when <= now {
		e := f.due.Pop()
		if st, ok := f.keys[e.key]; ok && st.seq == e.seq && st.state == 1 {
			st.state = 2
			f.keys[e.key] = st
			f.ready.Push(e.key)
		}
	}
	more := f.due.Len() > 0
	var next time.Duration
	if more {
		next = f.due.Peek().when - now
	}
	f.fired(more, next)
	f.mu.Unlock()
}

func (f *floorDelayingMap) Add(k string) { f.AddAfter(k, 0) }

func (f *floorDelayingMap) Get() (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.ready.Len() == 0 {
		if !f.wait() {
			return "", true
		}
	}
	k := f.ready.Pop()
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
