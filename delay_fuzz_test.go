package workqueue

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// deadlineModel is the waiting keys' deadlines written the obvious way: a
// slice sorted by deadline, then by arrival.
type deadlineModel struct {
	entries []deadline[uint8]
	arrived uint64
}

func deadlineCmp(a, b deadline[uint8]) int {
	return cmp.Or(cmp.Compare(a.when, b.when), cmp.Compare(a.seq, b.seq))
}

func (m *deadlineModel) push(key uint8, when int64) {
	m.arrived++
	e := deadline[uint8]{key, when, m.arrived}
	i, _ := slices.BinarySearchFunc(m.entries, e, deadlineCmp)
	m.entries = slices.Insert(m.entries, i, e)
}

// deadlineCheck compares ds with the model and checks the structure's own
// invariants. It returns a description of the first difference, or "".
func deadlineCheck(ds *delayState[uint8], m *deadlineModel) string {
	if ds.len() != len(m.entries) {
		return fmt.Sprintf("len %d, model %d", ds.len(), len(m.entries))
	}
	if len(m.entries) > 0 && ds.peek() != m.entries[0] {
		return fmt.Sprintf("peek %v, model %v", ds.peek(), m.entries[0])
	}
	for i := 1; i < ds.inOrder.Len(); i++ {
		a := ds.inOrder.buf[(ds.inOrder.head+i-1)&(len(ds.inOrder.buf)-1)]
		b := ds.inOrder.buf[(ds.inOrder.head+i)&(len(ds.inOrder.buf)-1)]
		if b.before(a) {
			return fmt.Sprintf("in-order ring out of order at %d: %v then %v", i, a, b)
		}
	}
	for i := 1; i < len(ds.heap); i++ {
		if ds.heap[i].before(ds.heap[(i-1)/2]) {
			return fmt.Sprintf("heap[%d] is before its parent", i)
		}
	}
	// Memory: the heap array is at most four times its entries (or
	// small), and slots past its length hold no key.
	if cap(ds.heap) > 64 && len(ds.heap) < cap(ds.heap)/4 {
		return fmt.Sprintf("heap array cap %d for %d entries", cap(ds.heap), len(ds.heap))
	}
	for i, e := range ds.heap[len(ds.heap):cap(ds.heap)] {
		if e != (deadline[uint8]{}) {
			return fmt.Sprintf("heap slot %d past the end still holds %v", len(ds.heap)+i, e)
		}
	}
	return ""
}

// FuzzDeadlines drives the waiting keys' deadlines (push, pop, sweep) and a
// sorted-slice model with the same operations, and compares them after
// every one. Each operation takes three bytes: op, key, value. Deadlines
// are drawn from a small range so that equal and out-of-order deadlines
// are common, and both the in-order ring and the heap are used.
func FuzzDeadlines(f *testing.F) {
	f.Add([]byte{0, 1, 10, 0, 2, 5, 0, 3, 10, 1, 0, 0, 1, 0, 0})
	f.Add([]byte{0, 1, 10, 0, 1, 5, 0, 1, 20, 1, 0, 0, 2, 1, 0, 1, 0, 0})
	f.Add([]byte{0, 1, 7, 0, 2, 7, 0, 3, 7, 1, 2, 0, 0, 2, 7, 1, 0, 7})
	// A burst well past 64 entries, half of them out of order, then a
	// drain: exercises the heap's shrink.
	burst := []byte{}
	for i := range 200 {
		burst = append(burst, 0, byte(i), byte(i*7))
	}
	for range 200 {
		burst = append(burst, 1, 0, 0)
	}
	f.Add(burst)
	// A burst, then a sweep that keeps a few.
	partial := []byte{}
	for i := range 200 {
		partial = append(partial, 0, byte(i), byte(200-i))
	}
	partial = append(partial, 2, 7, 0, 1, 0, 0)
	f.Add(partial)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 3*400 {
			data = data[:3*400]
		}
		var ds delayState[uint8]
		var m deadlineModel
		for n := 0; len(data) >= 3; n++ {
			op, key, val := data[0], data[1], data[2]
			data = data[3:]
			desc := func() string {
				names := [...]string{"push", "pop", "sweep"}
				return fmt.Sprintf("op %d: %s(key %d, val %d)", n, names[op%3], key, val)
			}
			switch op % 3 {
			case 0:
				ds.push(key, int64(val%32))
				m.push(key, int64(val%32))
			case 1:
				if len(m.entries) == 0 {
					break
				}
				if got, want := ds.pop(), m.entries[0]; got != want {
					t.Fatalf("%s: popped %v, model %v", desc(), got, want)
				}
				m.entries = m.entries[1:]
			case 2: // keep the keys whose remainder mod (key%4+2) is 0
				mod := key%4 + 2
				live := func(e deadline[uint8]) bool { return e.item%mod == 0 }
				ds.sweep(live)
				m.entries = slices.DeleteFunc(m.entries, func(e deadline[uint8]) bool { return !live(e) })
			}
			if diff := deadlineCheck(&ds, &m); diff != "" {
				t.Fatalf("after %s: %s", desc(), diff)
			}
		}
	})
}

// delayQueueModel is the state table (docs/protocol.md) written the obvious way, for
// one queue with the default FIFO store, or with the priority store.
type delayQueueModel struct {
	// quiet and maxWait are Config.Debounce (quiet 0: off); bounce holds
	// a debounced key's first Add and earliest fixed time.
	quiet, maxWait int64
	bounce         map[uint8][2]int64

	// prios is set for a queue with the priority store: prio holds the
	// priority of each key's pending run (or of the run it is in), and
	// Get takes the first ready key of the highest priority.
	prios bool
	prio  map[uint8]int

	// ghosts is set for a queue with a Store it calls (remove.go): Remove
	// of a ready key leaves its entry in ready as a ghost, listed in ghost
	// with the priority it has in the store, until Get passes over it or
	// the store is rebuilt; the key made ready again meanwhile takes the
	// ghost's place, raised to the back of its level by a higher priority,
	// else at the ghost's priority.
	ghosts bool
	ghost  map[uint8]int

	now      int64
	ready    []uint8 // FIFO, ghosts included
	dirty    map[uint8]bool
	proc     map[uint8]bool
	waiting  map[uint8]int64 // key -> deadline
	arrival  map[uint8]int   // key -> order it asked for its current deadline
	arrived  int
	shutdown bool
}

func newDelayQueueModel() *delayQueueModel {
	return &delayQueueModel{
		dirty:   map[uint8]bool{},
		proc:    map[uint8]bool{},
		waiting: map[uint8]int64{},
		arrival: map[uint8]int{},
		bounce:  map[uint8][2]int64{},
		prio:    map[uint8]int{},
		ghost:   map[uint8]int{},
	}
}

// live counts the ready keys: the entries of ready less the ghosts.
func (m *delayQueueModel) live() int { return len(m.ready) - len(m.ghost) }

// enqueue makes k, just made dirty and not processing, ready: at the tail,
// or at its ghost's place.
func (m *delayQueueModel) enqueue(k uint8) {
	g, ok := m.ghost[k]
	if !ok {
		m.ready = append(m.ready, k)
		return
	}
	delete(m.ghost, k)
	if !m.prios {
		return
	}
	if m.prio[k] > g {
		i := slices.Index(m.ready, k)
		m.ready = append(slices.Delete(m.ready, i, i+1), k) // Raise
		return
	}
	m.prio[k] = g
}

// settle drops the ghosts once they outnumber the ready keys by more
// than the queue's bound, or once no key is ready, as the queue rebuilds
// its store.
func (m *delayQueueModel) settle() {
	if n := len(m.ghost); n > m.live()+64 || m.live() == 0 && n > 0 {
		m.ready = slices.DeleteFunc(m.ready, func(k uint8) bool { _, g := m.ghost[k]; return g })
		clear(m.ghost)
	}
}

// noPrio is the priority a run that asks for none merges with: a deadline
// that passes keeps its run's own.
const noPrio = math.MinInt

// userAdd is what the Add method does: a run due now, or, with Debounce,
// due once the key's adds pause for quiet, at most maxWait after the first
// of them, never after a fixed time already asked for.
func (m *delayQueueModel) userAdd(k uint8) {
	if m.quiet == 0 {
		m.add(k)
		return
	}
	if m.shutdown || m.dirty[k] {
		return
	}
	w, waiting := m.waiting[k]
	b, has := m.bounce[k]
	if !has {
		b = [2]int64{m.now, math.MaxInt64}
		if waiting {
			b[1] = w
		}
		m.bounce[k] = b
	}
	when := min(m.now+m.quiet, b[0]+m.maxWait, b[1])
	if !waiting || when != w {
		m.arrived++
		m.waiting[k] = when
		m.arrival[k] = m.arrived
	}
}

func (m *delayQueueModel) add(k uint8) { m.addPrio(k, 0) }

// addPrio is Add at priority p: a ready key is raised (to the back of its
// new level) if p is higher, a waiting key's run keeps the higher of the two.
func (m *delayQueueModel) addPrio(k uint8, p int) {
	if m.shutdown {
		return
	}
	if m.dirty[k] {
		m.raise(k, p)
		return
	}
	if _, ok := m.waiting[k]; ok {
		p = max(p, m.prio[k])
	}
	m.prio[k] = p
	delete(m.waiting, k)
	delete(m.bounce, k)
	m.dirty[k] = true
	if !m.proc[k] {
		m.enqueue(k)
	}
}

// raise gives dirty k's run the priority p if that is higher.
func (m *delayQueueModel) raise(k uint8, p int) {
	if !m.prios || p <= m.prio[k] {
		return
	}
	m.prio[k] = p
	if i := slices.Index(m.ready, k); i >= 0 {
		m.ready = append(slices.Delete(m.ready, i, i+1), k)
	}
}

func (m *delayQueueModel) addAfter(k uint8, d time.Duration) { m.addAfterPrio(k, d, 0) }

func (m *delayQueueModel) addAfterPrio(k uint8, d time.Duration, p int) {
	if m.shutdown {
		return
	}
	if d <= 0 {
		m.addPrio(k, p)
		return
	}
	when := m.now + int64(d)
	switch w, ok := m.waiting[k]; {
	case m.dirty[k]:
		m.raise(k, p)
	case ok:
		m.prio[k] = max(m.prio[k], p)
		if b, has := m.bounce[k]; has && when < b[1] {
			m.bounce[k] = [2]int64{b[0], when}
		}
		if when < w {
			// A key moved to an earlier deadline is ordered among
			// equal deadlines by when it asked for this one.
			m.arrived++
			m.waiting[k] = when
			m.arrival[k] = m.arrived
		}
	default:
		m.arrived++
		m.waiting[k] = when
		m.arrival[k] = m.arrived
		m.prio[k] = p
	}
}

// advance moves the clock by d: due keys fire by deadline, then arrival.
func (m *delayQueueModel) advance(d time.Duration) {
	m.now += int64(d)
	var due []uint8
	for k, w := range m.waiting {
		if w <= m.now {
			due = append(due, k)
		}
	}
	slices.SortFunc(due, func(a, b uint8) int {
		return cmp.Or(cmp.Compare(m.waiting[a], m.waiting[b]), cmp.Compare(m.arrival[a], m.arrival[b]))
	})
	for _, k := range due {
		m.addPrio(k, noPrio)
	}
}

// get hands out the first ready key, of the highest priority when the
// model has priorities, and the priority of its run.
func (m *delayQueueModel) get() (uint8, int) {
	prio := func(k uint8) int {
		if g, ok := m.ghost[k]; ok {
			return g
		}
		return m.prio[k]
	}
	for {
		i := 0
		for j, k := range m.ready {
			if m.prios && prio(k) > prio(m.ready[i]) {
				i = j
			}
		}
		k := m.ready[i]
		m.ready = slices.Delete(m.ready, i, i+1)
		if _, ok := m.ghost[k]; ok {
			delete(m.ghost, k) // the store hands out a ghost, which Get drops
			continue
		}
		delete(m.dirty, k)
		m.proc[k] = true
		m.settle()
		return k, m.prio[k]
	}
}

func (m *delayQueueModel) done(k uint8) {
	if !m.proc[k] {
		return
	}
	delete(m.proc, k)
	if m.dirty[k] {
		m.enqueue(k)
	}
}

// remove is Remove's column of the state table.
func (m *delayQueueModel) remove(k uint8) bool {
	switch _, waiting := m.waiting[k]; {
	case m.dirty[k]:
		delete(m.dirty, k)
		switch {
		case m.proc[k]:
		case m.ghosts:
			m.ghost[k] = m.prio[k] // its entry stays in the store
			m.settle()
		default:
			m.ready = slices.DeleteFunc(m.ready, func(r uint8) bool { return r == k })
		}
		return true
	case waiting:
		delete(m.waiting, k)
		delete(m.arrival, k)
		delete(m.bounce, k)
		return true
	}
	return false
}

// shutDown drops the waiting keys, except debounced ones, which become
// ready in deadline order.
func (m *delayQueueModel) shutDown() {
	var flush []uint8
	for k := range m.bounce {
		flush = append(flush, k)
	}
	slices.SortFunc(flush, func(a, b uint8) int {
		return cmp.Or(cmp.Compare(m.waiting[a], m.waiting[b]), cmp.Compare(m.arrival[a], m.arrival[b]))
	})
	for _, k := range flush {
		m.addPrio(k, noPrio)
	}
	m.shutdown = true
	clear(m.waiting)
}

func (m *delayQueueModel) stats() Stats {
	return Stats{Ready: m.live(), Waiting: len(m.waiting), Processing: len(m.proc), Dirty: len(m.dirty)}
}

// otherPriorityStore is the priority store behind a type the queue does not
// know, so that the queue uses it as it would a user's PriorityStore: the
// key table keeps the flags and the store the order.
type otherPriorityStore[T comparable] struct{ *priorityStore[T] }

// ghostingStore is a FIFO store behind a type that hides its remove, as a
// user's Store would: Remove of a ready key leaves a ghost (remove.go).
type ghostingStore[T comparable] struct{ Store[T] }

// FuzzQueueDelay drives a Queue, a Queue with Debounce, two with a priority
// store (kept in the table, and called as a store), two with a user's FIFO
// store (plain and debounced, where Remove leaves ghosts), and the state-table
// model of each with the same random Add, AddAfter, passing of time, Get,
// Done, Remove and ShutDown, inside a
// synctest bubble, and compares the counts and every key handed out after
// each operation. Each operation takes three bytes: op, key, value.
func FuzzQueueDelay(f *testing.F) {
	// Rows of the state table, one seed each; op codes as in the switch.
	f.Add([]byte{1, 0, 5, 2, 0, 4, 2, 0, 1, 3, 0, 0, 4, 0, 0})                   // absent+AddAfter, fire at the deadline
	f.Add([]byte{0, 0, 0, 1, 0, 5, 2, 0, 7, 3, 0, 0, 4, 0, 0})                   // ready+AddAfter
	f.Add([]byte{1, 0, 5, 0, 0, 0, 3, 0, 0, 4, 0, 0, 2, 0, 7, 2, 0, 7})          // waiting+Add: one run
	f.Add([]byte{1, 0, 5, 1, 0, 3, 2, 0, 3, 1, 1, 3, 1, 1, 5, 2, 0, 7})          // waiting+AddAfter both orders
	f.Add([]byte{0, 0, 0, 3, 0, 0, 1, 0, 3, 4, 0, 0, 2, 0, 7, 3, 0, 0})          // processing+AddAfter, Done
	f.Add([]byte{0, 0, 0, 3, 0, 0, 1, 0, 3, 2, 0, 7, 4, 0, 0, 3, 0, 0})          // deadline passes while processing
	f.Add([]byte{0, 0, 0, 3, 0, 0, 1, 0, 3, 0, 0, 0, 2, 0, 7, 4, 0, 0})          // processing+waiting + Add
	f.Add([]byte{0, 0, 0, 3, 0, 0, 0, 0, 0, 1, 0, 3, 4, 0, 0, 2, 0, 7})          // processing+dirty + AddAfter
	f.Add([]byte{1, 0, 3, 1, 1, 3, 1, 2, 3, 2, 0, 3, 3, 0, 0, 3, 0, 0})          // equal deadlines
	f.Add([]byte{1, 0, 5, 0, 1, 0, 7, 0, 0, 2, 0, 7, 3, 0, 0, 3, 0, 0})          // shutdown drops waiting
	f.Add([]byte{5, 0, 9, 6, 1, 3, 6, 0, 2, 2, 0, 7, 3, 0, 0, 3, 0, 0})          // priority variants
	f.Add([]byte{1, 0, 0, 1, 1, 255, 2, 0, 15, 3, 0, 0, 4, 0, 0, 3, 0, 0})       // d <= 0, advance by ms-1ns
	f.Add([]byte{1, 1, 5, 7, 1, 0, 2, 0, 7, 0, 2, 0, 7, 2, 0, 3, 0, 0})          // Remove of a waiting, then a ready key
	f.Add([]byte{0, 1, 0, 3, 0, 0, 1, 1, 3, 7, 1, 0, 0, 1, 0, 7, 1, 0})          // Remove of processing+waiting, +dirty
	f.Add([]byte{0, 1, 0, 0, 0, 0, 7, 1, 0, 0, 1, 0, 3, 0, 0, 3, 0, 0})          // ready+Remove+Add: the ghost's place in a Store
	f.Add([]byte{5, 1, 5, 0, 2, 0, 7, 1, 0, 5, 1, 1, 3, 0, 0, 3, 0, 0})          // ... added again at a lower priority
	f.Add([]byte{5, 1, 1, 0, 2, 0, 7, 1, 0, 5, 1, 9, 3, 0, 0, 3, 0, 0})          // ... at a higher one: Raise
	f.Add([]byte{0, 1, 0, 0, 2, 0, 7, 1, 0, 1, 1, 2, 2, 0, 3, 3, 0, 0, 3, 0, 0}) // ... made ready by a deadline
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 3*200 {
			data = data[:3*200]
		}
		synctest.Test(t, func(t *testing.T) {
			// The same operations drive a plain queue and a debounced one,
			// each beside its model.
			type pair struct {
				q *Queue[uint8]
				m *delayQueueModel
			}
			plain := pair{New[uint8](), newDelayQueueModel()}
			bounced := pair{NewWithConfig(Config[uint8]{Debounce: Debounce{Quiet: 2 * time.Millisecond, MaxWait: 5 * time.Millisecond}}), newDelayQueueModel()}
			bounced.m.quiet, bounced.m.maxWait = int64(2*time.Millisecond), int64(5*time.Millisecond)
			// The built-in priority store, whose levels the queue keeps
			// in its key table, and the same store seen as any other
			// PriorityStore, which keeps the order itself.
			leveled := pair{NewWithConfig(Config[uint8]{Store: NewPriorityStore[uint8]()}), newDelayQueueModel()}
			stored := pair{NewWithConfig(Config[uint8]{Store: otherPriorityStore[uint8]{&priorityStore[uint8]{}}}), newDelayQueueModel()}
			leveled.m.prios, stored.m.prios = true, true
			stored.m.ghosts = true
			// A user's FIFO store, plain and debounced: the order of the
			// plain models, with ghosts in the store and the key table.
			ghosted := pair{NewWithConfig(Config[uint8]{Store: ghostingStore[uint8]{NewFIFOStore[uint8]()}}), newDelayQueueModel()}
			ghostedBounced := pair{NewWithConfig(Config[uint8]{
				Store:    ghostingStore[uint8]{NewFIFOStore[uint8]()},
				Debounce: Debounce{Quiet: 2 * time.Millisecond, MaxWait: 5 * time.Millisecond},
			}), newDelayQueueModel()}
			ghostedBounced.m.quiet, ghostedBounced.m.maxWait = bounced.m.quiet, bounced.m.maxWait
			ghosted.m.ghosts, ghostedBounced.m.ghosts = true, true
			pairs := []pair{plain, bounced, leveled, stored, ghosted, ghostedBounced}
			var log []string
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("after %v: %s", log, fmt.Sprintf(format, args...))
			}
			for len(data) >= 3 {
				op, key, val := data[0], data[1]%4, data[2]
				data = data[3:]
				// d in -1ms..6ms, sometimes 1ns short of a whole ms.
				d := time.Duration(int(val%8)-1)*time.Millisecond - time.Duration(val/8%2)
				switch op % 8 {
				case 0:
					log = append(log, fmt.Sprintf("Add(%d)", key))
				case 1:
					log = append(log, fmt.Sprintf("AddAfter(%d, %v)", key, d))
				case 2:
					log = append(log, fmt.Sprintf("advance(%v)", max(d, 0)))
					delayAdvance(max(d, 0))
				case 3:
					log = append(log, "Get()")
				case 4:
					log = append(log, fmt.Sprintf("Done(%d)", key))
				case 5:
					log = append(log, fmt.Sprintf("AddWithPriority(%d, %d)", key, int8(val)))
				case 6:
					log = append(log, fmt.Sprintf("AddAfterWithPriority(%d, %v, %d)", key, d, int8(val)))
				case 7:
					if key != 0 { // keep shutdown rare
						log = append(log, fmt.Sprintf("Remove(%d)", key))
					} else {
						log = append(log, "ShutDown()")
					}
				}
				for i, p := range pairs {
					q, m := p.q, p.m
					switch op % 8 {
					case 0:
						q.Add(key)
						m.userAdd(key)
					case 1:
						q.AddAfter(key, d)
						m.addAfter(key, d)
					case 2:
						m.advance(max(d, 0))
					case 3:
						if m.live() == 0 && !m.shutdown {
							break // Get would block
						}
						got, prio, shutdown := q.GetWithPriority()
						if m.live() == 0 {
							if !shutdown {
								fail("queue %d: Get handed out %d, the model reports shutdown", i, got)
							}
							break
						}
						want, wantPrio := m.get()
						if shutdown || got != want {
							fail("queue %d: Get = (%d, %v), model hands out %d", i, got, shutdown, want)
						}
						if m.prios && prio != wantPrio {
							fail("queue %d: GetWithPriority = (%d, %d), model's priority %d", i, got, prio, wantPrio)
						}
					case 4:
						q.Done(key)
						m.done(key)
					case 5:
						q.AddWithPriority(key, int(int8(val)))
						if m.prios {
							m.addPrio(key, int(int8(val)))
						} else {
							m.userAdd(key)
						}
					case 6:
						q.AddAfterWithPriority(key, d, int(int8(val)))
						m.addAfterPrio(key, d, int(int8(val)))
					case 7:
						if key != 0 {
							if got, want := q.Remove(key), m.remove(key); got != want {
								fail("queue %d: Remove(%d) = %v, model %v", i, key, got, want)
							}
							break
						}
						q.ShutDown()
						m.shutDown()
					}
					if got, want := q.Stats(), m.stats(); got != want {
						fail("queue %d: Stats = %+v, model %+v", i, got, want)
					}
					if got, want := q.Len(), m.live(); got != want {
						fail("queue %d: Len = %d, model %d", i, got, want)
					}
					if _, err := CheckTable(q); err != nil {
						fail("queue %d: key table: %v", i, err)
					}
				}
			}
			// Let every deadline pass and hand out what is left: the
			// queues and the models must agree to the end.
			delayAdvance(time.Hour)
			for i, p := range pairs {
				q, m := p.q, p.m
				m.advance(time.Hour)
				for m.live() > 0 {
					got, _ := q.Get()
					if want, _ := m.get(); got != want {
						fail("queue %d: final drain: Get = %d, model %d", i, got, want)
					}
					q.Done(got)
					m.done(got)
				}
				if got, want := q.Stats(), m.stats(); got != want {
					fail("queue %d: after the final drain: Stats = %+v, model %+v", i, got, want)
				}
				if n, err := CheckTable(q); err != nil || n != m.stats().Processing+m.stats().Waiting {
					fail("queue %d: key table after the final drain: %d entries, %v", i, n, err)
				}
				q.ShutDown()
			}
		})
	})
}
