package linearizability

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The sequential specification: docs/protocol.md's state table for keys
// 0..nKeys-1, with the order in which Get hands ready keys out. Porcupine
// asks of every recorded history whether its operations can be put in one
// order, each at a point between its call and its return, in which every
// answer is the one this specification gives.
//
// The history is not partitioned by key: Get picks among keys, Len counts
// them all and the order (FIFO, round-robin, priority) is a relation between
// keys, so a per-key check would miss exactly the cross-key answers. Short
// histories over a few keys keep the whole-history check fast.

// nKeys is the number of keys the histories use: few, so that operations
// collide on the same key often.
const nKeys = 4

// keyState is a key's row of the state table. Waiting rows are not
// reachable: the histories use AddAfter with zero delay only, which is Add.
type keyState uint8

const (
	absent keyState = iota
	ready
	processing
	processingDirty
)

func (s keyState) String() string {
	return [...]string{"absent", "ready", "processing", "processing+dirty"}[s]
}

// state is the queue as the specification sees it. It is a comparable value
// (no slices or maps), so porcupine's Equal is ==, and Step returns a
// modified copy.
type state struct {
	shut bool
	keys [nKeys]keyState
	prio [nKeys]int8 // priority of the key's pending run (ready or processing+dirty)
	// ghost marks a key whose removed entry stays in a user's Store
	// (docs/protocol.md, Remove): the key is absent, and Add makes it
	// ready again at the ghost's place.
	ghost [nKeys]bool
	// order holds the store's entries, live and ghost, in the order they
	// entered it: the first n are used. Get takes from it as the
	// configuration's order says.
	order [nKeys]int8
	n     int8
	// round holds the tenants that have entries in the store, in the
	// order the fair store serves them: the first rn are used. With one
	// tenant it is the FIFO.
	round [nKeys]int8
	rn    int8
}

// order is how a configuration's Get chooses among the ready keys.
type order struct {
	// tenants is the number of tenants served round-robin, one key per
	// turn, FIFO within a tenant (NewFairStore); key k's tenant is
	// k % tenants. 1 is a FIFO.
	tenants int
	// prio: Get takes the oldest key of the highest priority, a raise
	// moves a key to the back of its new level (NewPriorityStore).
	prio bool
	// ghosts: Remove leaves the key's entry in the store as a ghost (a
	// Store given as Config.Store other than the built-in priority store).
	ghosts bool
}

type opKind uint8

const (
	opAdd opKind = iota
	opAddAfter
	opAddPrio
	opGet
	opGetCtx
	opDone
	opRemove
	opLen
	opShutDown
)

// input is an operation as called.
type input struct {
	kind opKind
	key  int8
	prio int8
}

// getEnd is how a Get or GetContext that returned no key ended.
type getEnd uint8

const (
	gotKey getEnd = iota
	endShutDown
	endCtx
)

// output is an operation's answer.
type output struct {
	key     int8   // Get: the key handed out
	prio    int8   // Get in a priority configuration: the run's priority
	hasPrio bool   // prio was reported
	end     getEnd // Get: a key, shutdown, or the context's error
	ok      bool   // Remove
	n       int    // Len
}

func (in input) String() string {
	switch in.kind {
	case opAdd:
		return fmt.Sprintf("Add(%d)", in.key)
	case opAddAfter:
		return fmt.Sprintf("AddAfter(%d, 0)", in.key)
	case opAddPrio:
		return fmt.Sprintf("AddWithPriority(%d, %d)", in.key, in.prio)
	case opGet:
		return "Get()"
	case opGetCtx:
		return "GetContext()"
	case opDone:
		return fmt.Sprintf("Done(%d)", in.key)
	case opRemove:
		return fmt.Sprintf("Remove(%d)", in.key)
	case opLen:
		return "Len()"
	default:
		return "ShutDown()"
	}
}

func describe(in input, out output) string {
	switch in.kind {
	case opGet, opGetCtx:
		switch {
		case out.end == endShutDown:
			return in.String() + " -> shutdown"
		case out.end == endCtx:
			return in.String() + " -> ctx error"
		case out.hasPrio:
			return fmt.Sprintf("%s -> %d (priority %d)", in, out.key, out.prio)
		default:
			return fmt.Sprintf("%s -> %d", in, out.key)
		}
	case opRemove:
		return fmt.Sprintf("%s -> %t", in, out.ok)
	case opLen:
		return fmt.Sprintf("%s -> %d", in, out.n)
	}
	return in.String()
}

func (s state) String() string {
	var b strings.Builder
	if s.shut {
		b.WriteString("shut down; ")
	}
	for k, ks := range s.keys {
		if ks != absent {
			fmt.Fprintf(&b, "%d %s (priority %d); ", k, ks, s.prio[k])
		}
	}
	b.WriteString("store [")
	for i := range s.n {
		k := s.order[i]
		if s.ghost[k] {
			fmt.Fprintf(&b, " ghost %d", k)
		} else {
			fmt.Fprintf(&b, " %d", k)
		}
	}
	b.WriteString(" ]")
	return b.String()
}

// newModel returns the specification of a queue whose Get follows o.
func newModel(o order) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return state{} },
		Step: func(st, in, out any) (bool, any) {
			s := st.(state)
			ok := o.step(&s, in.(input), out.(output))
			return ok, s
		},
		Equal: func(a, b any) bool { return a.(state) == b.(state) },
		Hash: func(st any) uint64 {
			s := st.(state)
			h := uint64(s.n)<<8 | uint64(s.rn)
			if s.shut {
				h |= 1 << 16
			}
			for k := range nKeys {
				h = h*131 + uint64(s.keys[k]) + uint64(uint8(s.prio[k]))<<3
				h = h*131 + uint64(s.order[k]) + uint64(s.round[k])<<8
				if s.ghost[k] {
					h ^= 1 << (20 + k)
				}
			}
			return h
		},
		DescribeOperation: func(in, out any) string { return describe(in.(input), out.(output)) },
		DescribeState:     func(st any) string { return st.(state).String() },
	}
}

// step applies one operation to s and reports whether out is an answer the
// specification allows.
func (o order) step(s *state, in input, out output) bool {
	k := in.key
	switch in.kind {
	case opAdd, opAddAfter, opAddPrio:
		// AddAfter with d <= 0 is Add; plain Add is priority 0.
		if !s.shut {
			o.add(s, k, in.prio)
		}
		return true
	case opGet, opGetCtx:
		switch out.end {
		case endCtx:
			// GetContext may end on its context at any point, also
			// with a key ready (the context may end before it looks);
			// what it must not do is take a key it does not return.
			return in.kind == opGetCtx
		case endShutDown:
			return s.shut && s.readyCount() == 0
		}
		got, prio, ok := o.take(s)
		if !ok || got != out.key {
			return false // a Get that finds nothing waits: it cannot return here
		}
		return !out.hasPrio || out.prio == prio
	case opDone:
		switch s.keys[k] {
		case processing:
			s.keys[k] = absent
			s.prio[k] = 0
		case processingDirty:
			s.keys[k] = ready // at the tail
			o.push(s, k)
		}
		return true // a stray Done changes nothing
	case opRemove:
		switch s.keys[k] {
		case ready:
			s.keys[k] = absent
			s.prio[k] = 0
			if o.ghosts {
				s.ghost[k] = true
				o.settle(s)
			} else {
				o.cut(s, k)
			}
			return out.ok
		case processingDirty:
			s.keys[k] = processing
			s.prio[k] = 0
			return out.ok
		}
		return !out.ok
	case opLen:
		return out.n == s.readyCount()
	case opShutDown:
		s.shut = true
		return true
	}
	return false
}

// add is the Add column of the state table, with the priority merge.
func (o order) add(s *state, k, p int8) {
	switch s.keys[k] {
	case absent:
		s.keys[k] = ready
		s.prio[k] = p
		if s.ghost[k] {
			// Its ghost turns back into its entry, in its place.
			s.ghost[k] = false
			return
		}
		o.push(s, k)
	case ready:
		if o.prio && p > s.prio[k] {
			// A raise moves the key to the back of its new level.
			s.prio[k] = p
			o.cut(s, k)
			o.push(s, k)
		}
	case processing:
		s.keys[k] = processingDirty
		s.prio[k] = p
	case processingDirty:
		s.prio[k] = max(s.prio[k], p)
	}
}

// push appends k's entry to the store, its tenant joining the back of the
// round if it had no entry.
func (o order) push(s *state, k int8) {
	t := int8(int(k) % o.tenants)
	if !o.prio && !s.hasTenant(t, o) {
		s.round[s.rn] = t
		s.rn++
	}
	s.order[s.n] = k
	s.n++
}

// take hands out the next ready key, marks it processing and reports it
// and its run's priority; ok is false when no key is ready.
func (o order) take(s *state) (k, prio int8, ok bool) {
	if s.readyCount() == 0 {
		return -1, 0, false
	}
	if o.prio {
		// The oldest entry of the highest priority. (No ghosts: the
		// queue keeps the built-in priority store's levels itself.)
		best := -1
		for i := range int(s.n) {
			if best < 0 || s.prio[s.order[i]] > s.prio[s.order[best]] {
				best = i
			}
		}
		k = s.order[best]
		s.cut(k)
	} else {
		for {
			// The front tenant's oldest entry; the tenant goes to the
			// back of the round, or leaves it with its last entry. A
			// ghost is dropped and costs its tenant its turn.
			t := s.round[0]
			i := 0
			for int(s.order[i])%o.tenants != int(t) {
				i++
			}
			k = s.order[i]
			s.cut(k)
			copy(s.round[:], s.round[1:s.rn])
			s.rn--
			s.round[s.rn] = 0
			if s.hasTenant(t, o) {
				s.round[s.rn] = t
				s.rn++
			}
			if !s.ghost[k] {
				break
			}
			s.ghost[k] = false
		}
	}
	s.keys[k] = processing
	prio = s.prio[k]
	s.prio[k] = 0 // the next Add gives it its next run's priority
	o.settle(s)
	return k, prio, true
}

// settle drops every ghost once no live entry is left in the store: the
// queue then rebuilds it empty. (It also rebuilds a store whose ghosts
// outnumber its live entries by a constant far above nKeys.)
func (o order) settle(s *state) {
	if o.ghosts && s.readyCount() == 0 {
		s.n, s.rn = 0, 0
		s.order, s.round = [nKeys]int8{}, [nKeys]int8{}
		s.ghost = [nKeys]bool{}
	}
}

// cut removes k's entry from the store's order, and its tenant from the
// round if that was the tenant's last entry.
func (o order) cut(s *state, k int8) {
	s.cut(k)
	t := int8(int(k) % o.tenants)
	if o.prio || s.hasTenant(t, o) {
		return
	}
	for i := range int(s.rn) {
		if s.round[i] == t {
			copy(s.round[i:], s.round[i+1:s.rn])
			s.rn--
			s.round[s.rn] = 0
			return
		}
	}
}

// cut removes k's entry from the store's order, leaving the round alone.
func (s *state) cut(k int8) {
	for i := range int(s.n) {
		if s.order[i] == k {
			copy(s.order[i:], s.order[i+1:s.n])
			s.n--
			s.order[s.n] = 0
			return
		}
	}
}

func (s *state) hasTenant(t int8, o order) bool {
	for i := range int(s.n) {
		if int(s.order[i])%o.tenants == int(t) {
			return true
		}
	}
	return false
}

func (s *state) readyCount() int {
	n := 0
	for _, ks := range s.keys {
		if ks == ready {
			n++
		}
	}
	return n
}
