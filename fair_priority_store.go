package workqueue

import "time"

// The fair priority store is the priority store with a fair store inside
// each level, plus two optional rules: a bound on waiting and a cap on the
// keys of one tenant in flight.
//
//   - A lane is the FIFO of one tenant's keys at one priority: a ring
//     (ring.go) of entries with holes, as the priority store's levels
//     (priority_store.go), so that Raise and remove cut a key out in O(1)
//     and the index finds a key's slot from its position. A lane's front
//     entry is always live: a hole made at the front is popped at once, so
//     Pop never skips holes and a lane's oldest key is its front. Holes
//     behind the front are compacted away, as in the priority store, once
//     they outnumber the live keys, so a lane holds at most twice its live
//     keys plus the ring's minimum.
//   - A level is one priority with keys. Its active lanes (those of tenants
//     not at their cap) form its round, a circular doubly linked list served
//     from the front as the fair store serves its tenants: a lane hands out
//     up to Weight keys per turn, then moves to the back. Doubly linked
//     because a tenant reaching its cap leaves the round of every level it
//     has keys in, from wherever it is, in O(1) per level.
//   - Levels with available keys sit in a max-heap (levels.go), so the root
//     is the level Pop serves; a level whose lanes are all held leaves the
//     heap and comes back when one of them is freed.
//   - With MaxWait, each entry records when it entered its level and a
//     sequence number that orders all entries into levels. The fronts of
//     the active lanes sit in a min-heap by that number (the wait heap);
//     its root is the oldest available key, since a lane's front is its
//     oldest. Pop hands the root out first when it is older than MaxWait:
//     then every other available key is younger than it, which is the
//     guarantee. Stamps and the wait heap exist only with MaxWait; without
//     it the store never reads the clock.
//   - With MaxInFlight, a tenant record counts the tenant's keys in flight
//     and lists its lanes, so that reaching the cap and leaving it visit
//     only that tenant's lanes (one per level it has keys in).
//
// Push and Pop are O(1) amortized like the stores they combine, plus
// O(log L) when a level enters or leaves the heap (L levels), plus
// O(log H) with MaxWait (H active lanes). Reaching or leaving the cap costs
// O(1) per lane of the tenant, plus the heap costs of the levels that
// become (un)available.

// maxSpareLanes bounds the released lanes kept for reuse. Each holds at
// most minRing slots, so spares cost a constant amount of memory.
const maxSpareLanes = 8

// fpEntry is one slot of a lane. The zero entry (seq 0) is a hole.
type fpEntry[T comparable] struct {
	item T
	// seq numbers the entries into levels, from 1, in the order they
	// entered: within a lane it grows from front to back.
	seq uint64
	at  time.Duration // when it entered its level, since the store's epoch; MaxWait only
}

// fpSlot is where the index finds a key: its lane and its position among
// the pushes to that lane.
type fpSlot[T comparable] struct {
	lane *fpLane[T]
	pos  uint64
}

// fpLane is the FIFO of one tenant at one priority. It exists while it
// holds a key.
type fpLane[T comparable] struct {
	fifo  ring[fpEntry[T]] // front entry live; never empty while the lane exists
	off   uint64           // position of fifo's front entry (see prioLevel.off)
	live  int              // entries of fifo that are not holes
	level *fpLevel[T]
	name  string       // the tenant
	owner *fpTenant[T] // nil without MaxInFlight
	oi    int          // index in owner.lanes
	// prev and next link the active lanes of level into its round; nil
	// while the lane is held.
	prev, next *fpLane[T]
	credit     int // keys left in the current turn; 0: next turn not started
	wi         int // index in the wait heap, -1 when not in it
}

// fpLevel is one priority that has keys.
type fpLevel[T comparable] struct {
	heapPos
	inHeap bool       // avail > 0
	lanes  int        // lanes at this level, held or not
	avail  int        // keys in active lanes
	front  *fpLane[T] // front of the round; nil when no lane is active
}

func (l *fpLevel[T]) pos() *heapPos { return &l.heapPos }

// fpTenant is the in-flight count and the lanes of one tenant that has
// keys in flight or in the store (MaxInFlight only).
type fpTenant[T comparable] struct {
	name     string
	inflight int
	held     bool // inflight reached the cap: its lanes are out of the rounds
	lanes    []*fpLane[T]
}

// laneKey names a lane: a tenant at a priority.
type laneKey struct {
	tenant string
	prio   int
}

// FairPriority configures NewFairPriorityStore. The zero value is a store
// that behaves as NewPriorityStore.
type FairPriority[T comparable] struct {
	// Tenant names a key's tenant (Kubernetes: its namespace). Nil: every key
	// is one tenant, so each priority level is a plain FIFO.
	Tenant func(T) string
	// Weight as NewWeightedFairStore: up to Weight(tenant) keys in a row per
	// turn inside a level (values < 1 count as 1). Nil: 1.
	Weight func(tenant string) int
	// MaxWait > 0 bounds waiting behind higher priorities: a key ready for
	// longer than MaxWait (counted from when it entered its current level)
	// is handed out before any key that entered a level after it, among
	// tenants not at their cap. 0: strict priority, as NewPriorityStore.
	MaxWait time.Duration
	// MaxInFlight > 0 caps how many keys of one tenant are processing at once
	// (handed out by Get and not yet Done). Needs Tenant. A tenant at its cap
	// is skipped by Get without blocking others; its keys stay ready, keep
	// coalescing, count in Len; Done of one of its keys lets the next through.
	MaxInFlight int
}

// fairPriorityStore is the PriorityStore returned by NewFairPriorityStore.
//
// The zero value is not usable; use the constructor. It is not safe for
// concurrent use: the queue calls it under its lock.
type fairPriorityStore[T comparable] struct {
	tenant      func(T) string // nil: one tenant, ""
	weight      func(string) int
	maxWait     time.Duration
	maxInFlight int
	epoch       time.Time // origin of fpEntry.at; MaxWait only
	clk         Clock     // the queue's Config.Clock; nil: package time

	index   shrinkingMap[T, fpSlot[T]]         // every key in the store
	lanes   shrinkingMap[laneKey, *fpLane[T]]  // every lane
	levels  shrinkingMap[int, *fpLevel[T]]     // every level, by priority
	heap    levelHeap[*fpLevel[T]]             // the levels with available keys
	tenants shrinkingMap[string, *fpTenant[T]] // MaxInFlight only
	wait    []*fpLane[T]                       // min-heap of active lanes by front seq; MaxWait only
	last    *fpLane[T]                         // lane of the latest push, or nil
	seq     uint64                             // seq of the latest entry
	avail   int                                // keys in active lanes

	spareLanes   []*fpLane[T]   // len <= maxSpareLanes
	spareLevels  []*fpLevel[T]  // len <= maxSpareLevels
	spareTenants []*fpTenant[T] // len <= maxSpareTenants
}

// NewFairPriorityStore returns a Store that hands out keys by priority,
// higher first; within one priority, round-robin across tenants (up to
// Weight keys per tenant per turn, as NewWeightedFairStore), and FIFO
// within one tenant. Use it as Config.Store; AddWithPriority and
// AddAfterWithPriority pass their priority to it, and plain Add means
// priority 0.
//
// Raise moves a key to the back of its tenant's FIFO in the higher level,
// and restarts its wait; a lower or equal priority, or a key the store does
// not hold, changes nothing. Touch does nothing.
//
// With MaxWait > 0, a key that has been ready for longer than MaxWait
// (counted from when it entered its current level) is handed out before
// any key that entered a level after it, whatever their priorities and
// tenants, as long as its tenant is not at its cap: a low priority waits
// at most MaxWait plus the time to hand out the keys that were ready
// before it. Overdue keys go out oldest first and do not use up their
// tenant's turn. With MaxWait 0 the order is strict priority, as
// NewPriorityStore, and the store never reads the clock.
//
// With MaxInFlight > 0, a Queue using the store hands out at most
// MaxInFlight keys of one tenant at a time: Get skips a tenant at its cap,
// whose keys stay ready (they count in Len and coalesce), and the Done of
// one of its keys puts the tenant back at the back of the rounds of its
// levels.
//
// Costs, for L levels: Push, PushPriority, Raise and Pop are O(1) amortized
// plus O(log L) when a level appears or empties, plus O(log H) with MaxWait
// for H tenants' FIFOs with available keys. Tenant is called once per Push
// and PushPriority, and with MaxInFlight once more per Get and per Done;
// Weight when a tenant's turn starts; both are called under the queue's
// lock and must be cheap, must not block, and must not call into the
// queue. Popped and removed slots are zeroed at once, and the store's
// memory shrinks after a burst to follow the live keys.
//
// NewFairPriorityStore panics if MaxWait or MaxInFlight is negative, or
// MaxInFlight is set without Tenant. Like every Store it is not safe for
// concurrent use on its own, and serves one queue.
func NewFairPriorityStore[T comparable](cfg FairPriority[T]) PriorityStore[T] {
	switch {
	case cfg.MaxWait < 0:
		panic("workqueue: NewFairPriorityStore: negative MaxWait")
	case cfg.MaxInFlight < 0:
		panic("workqueue: NewFairPriorityStore: negative MaxInFlight")
	case cfg.MaxInFlight > 0 && cfg.Tenant == nil:
		panic("workqueue: NewFairPriorityStore: MaxInFlight needs a Tenant function")
	}
	s := &fairPriorityStore[T]{
		tenant:      cfg.Tenant,
		weight:      cfg.Weight,
		maxWait:     cfg.MaxWait,
		maxInFlight: cfg.MaxInFlight,
	}
	if s.maxWait > 0 {
		s.epoch = time.Now()
	}
	return s
}

// useClock makes MaxWait follow the queue's Config.Clock: the queue calls
// it before it pushes any key, so every entry's time is on that clock.
func (s *fairPriorityStore[T]) useClock(c Clock) {
	if s.maxWait > 0 {
		s.clk, s.epoch = c, c.Now()
	}
}

// since is the time since the store's epoch, on its clock; MaxWait only.
func (s *fairPriorityStore[T]) since() time.Duration {
	if s.clk != nil {
		return s.clk.Since(s.epoch)
	}
	return time.Since(s.epoch)
}

// Push adds item, which is not in the store, at priority 0.
func (s *fairPriorityStore[T]) Push(item T) { s.PushPriority(item, 0) }

// PushPriority adds item, which is not in the store, at the back of its
// tenant's FIFO in priority's level.
func (s *fairPriorityStore[T]) PushPriority(item T, priority int) {
	var name string
	if s.tenant != nil {
		name = s.tenant(item)
	}
	ln := s.last
	if ln == nil || ln.level.prio != priority || ln.name != name {
		ln = s.lane(name, priority)
		s.last = ln
	}
	s.add(ln, item)
}

// Raise moves item to the back of its tenant's FIFO in priority's level if
// the store holds it at a lower priority, and otherwise does nothing.
func (s *fairPriorityStore[T]) Raise(item T, priority int) {
	sl, ok := s.index.m[item]
	if !ok || priority <= sl.lane.level.prio {
		return
	}
	name := sl.lane.name
	s.cut(sl)
	s.add(s.lane(name, priority), item) // overwrites the index entry
}

// Pop removes and returns the next key to hand out: the oldest available
// key if it is older than MaxWait, else the front of the round of the
// highest level with available keys. available() > 0.
func (s *fairPriorityStore[T]) Pop() T {
	var ln *fpLane[T]
	if s.maxWait > 0 {
		if w := s.wait[0]; s.since()-w.fifo.peek().at > s.maxWait {
			ln = w // overdue: out of turn
		}
	}
	inTurn := ln == nil
	if inTurn {
		ln = s.heap[0].front
		if ln.credit == 0 {
			ln.credit = 1
			if s.weight != nil {
				ln.credit = max(1, s.weight(ln.name))
			}
		}
		ln.credit--
	}
	lv := ln.level
	e := ln.fifo.Pop()
	ln.off++
	ln.live--
	s.index.del(e.item)
	s.avail--
	lv.avail--
	s.trim(ln)
	if ln.live == 0 {
		s.releaseLane(ln)
	} else {
		if inTurn && ln.credit == 0 {
			lv.front = ln.next // turn used up: the front becomes the back
		}
		if ln.wi >= 0 {
			s.waitFix(ln.wi)
		}
		s.shed(ln)
	}
	s.settle(lv)
	return e.item
}

// Len reports the number of keys in the store, held ones included.
func (s *fairPriorityStore[T]) Len() int { return len(s.index.m) }

// Touch does nothing: a duplicate Add keeps the key's place.
func (s *fairPriorityStore[T]) Touch(T) {}

// available reports how many keys Pop may return now: those of tenants
// not at their cap.
func (s *fairPriorityStore[T]) available() int { return s.avail }

// handedOut counts item, just popped, as in flight for its tenant, and
// takes the tenant's lanes out of the rounds if that reaches the cap.
func (s *fairPriorityStore[T]) handedOut(item T) {
	if s.maxInFlight == 0 {
		return
	}
	t := s.tenantRec(s.tenant(item))
	t.inflight++
	if t.held || t.inflight < s.maxInFlight {
		return
	}
	t.held = true
	for _, ln := range t.lanes {
		s.deactivate(ln)
		s.avail -= ln.live
		ln.level.avail -= ln.live
		s.settle(ln.level)
	}
}

// finished counts the end of item's run and, if that frees its tenant from
// the cap, puts the tenant's lanes back at the back of their rounds. It
// returns how many keys became available.
func (s *fairPriorityStore[T]) finished(item T) int {
	if s.maxInFlight == 0 {
		return 0
	}
	t := s.tenants.m[s.tenant(item)]
	if t == nil || t.inflight == 0 {
		return 0 // not handed out: nothing to count
	}
	t.inflight--
	n := 0
	if t.held && t.inflight < s.maxInFlight {
		t.held = false
		for _, ln := range t.lanes {
			s.activate(ln)
			s.avail += ln.live
			ln.level.avail += ln.live
			s.settle(ln.level)
			n += ln.live
		}
	}
	s.releaseTenant(t)
	return n
}

// remove takes item out of the store, leaving a hole as Raise does. It does
// nothing if the store does not hold item.
func (s *fairPriorityStore[T]) remove(item T) {
	sl, ok := s.index.m[item]
	if !ok {
		return
	}
	s.cut(sl)
	s.index.del(item)
}

// fronts calls yield, for each lane (in no particular order), with its
// priority and its front key, until yield returns false. Every lane is
// visited, those of tenants at their cap too: their keys are ready and
// wait, and a level whose every lane is held must still show its age. A
// lane's front is its oldest key, the first to have entered the level
// among the tenant's keys there; the key the level's round hands out next
// is one of the fronts, but with turns not always the oldest of them.
// O(lanes): one per tenant and priority with keys.
func (s *fairPriorityStore[T]) fronts(yield func(prio int, item T) bool) {
	for _, ln := range s.lanes.m {
		if !yield(ln.level.prio, ln.fifo.peek().item) {
			return
		}
	}
}

// lane returns the lane of tenant name at priority p, making it (and its
// level, and its tenant record) if needed.
func (s *fairPriorityStore[T]) lane(name string, p int) *fpLane[T] {
	k := laneKey{tenant: name, prio: p}
	if ln := s.lanes.m[k]; ln != nil {
		return ln
	}
	lv := s.levels.m[p]
	if lv == nil {
		lv = reuse(&s.spareLevels)
		lv.prio = p
		s.levels.put(p, lv)
	}
	ln := reuse(&s.spareLanes)
	ln.name, ln.level, ln.wi = name, lv, -1
	lv.lanes++
	if s.maxInFlight > 0 {
		t := s.tenantRec(name)
		ln.owner, ln.oi = t, len(t.lanes)
		t.lanes = append(t.lanes, ln)
	}
	s.lanes.put(k, ln)
	return ln
}

// held reports whether ln's tenant is at its cap.
func (ln *fpLane[T]) held() bool { return ln.owner != nil && ln.owner.held }

// add appends item at the back of ln, stamps it, and indexes it.
func (s *fairPriorityStore[T]) add(ln *fpLane[T], item T) {
	s.seq++
	e := fpEntry[T]{item: item, seq: s.seq}
	if s.maxWait > 0 {
		e.at = s.since()
	}
	first := ln.fifo.Len() == 0
	s.index.put(item, fpSlot[T]{lane: ln, pos: ln.off + uint64(ln.fifo.Len())})
	ln.fifo.Push(e)
	ln.live++
	if ln.held() {
		return
	}
	s.avail++
	ln.level.avail++
	if first {
		s.activate(ln)
	}
	s.settle(ln.level)
}

// cut leaves a hole where sl points, and gives back what its lane and level
// no longer need. The caller updates the index.
func (s *fairPriorityStore[T]) cut(sl fpSlot[T]) {
	ln, lv := sl.lane, sl.lane.level
	r := &ln.fifo
	r.buf[(r.head+int(sl.pos-ln.off))&(len(r.buf)-1)] = fpEntry[T]{}
	ln.live--
	if !ln.held() {
		s.avail--
		lv.avail--
	}
	if sl.pos == ln.off {
		s.trim(ln)
		if ln.wi >= 0 && ln.live > 0 {
			s.waitFix(ln.wi)
		}
	}
	if ln.live == 0 {
		s.releaseLane(ln)
	} else {
		s.shed(ln)
	}
	s.settle(lv)
}

// trim pops the holes at the front of ln, so that its front is live.
func (s *fairPriorityStore[T]) trim(ln *fpLane[T]) {
	for ln.fifo.Len() > 0 && ln.fifo.peek().seq == 0 {
		ln.fifo.Pop()
		ln.off++
	}
}

// shed compacts ln once its holes outnumber its live keys: it rotates the
// ring once, pushing back the live entries at new positions.
func (s *fairPriorityStore[T]) shed(ln *fpLane[T]) {
	if ln.fifo.Len() <= 2*ln.live {
		return
	}
	for range ln.fifo.Len() {
		e := ln.fifo.Pop()
		ln.off++
		if e.seq != 0 {
			pos := ln.off + uint64(ln.fifo.Len())
			ln.fifo.Push(e)
			s.index.m[e.item] = fpSlot[T]{lane: ln, pos: pos}
		}
	}
}

// activate puts ln, which has keys, at the back of its level's round and
// in the wait heap.
func (s *fairPriorityStore[T]) activate(ln *fpLane[T]) {
	lv := ln.level
	if f := lv.front; f == nil {
		ln.prev, ln.next = ln, ln
		lv.front = ln
	} else {
		ln.prev, ln.next = f.prev, f
		f.prev.next = ln
		f.prev = ln
	}
	ln.credit = 0
	if s.maxWait > 0 {
		ln.wi = len(s.wait)
		s.wait = append(s.wait, ln)
		s.waitUp(ln.wi)
	}
}

// deactivate takes ln out of its level's round and the wait heap.
func (s *fairPriorityStore[T]) deactivate(ln *fpLane[T]) {
	lv := ln.level
	if ln.next == ln {
		lv.front = nil
	} else {
		ln.prev.next = ln.next
		ln.next.prev = ln.prev
		if lv.front == ln {
			lv.front = ln.next
		}
	}
	ln.prev, ln.next, ln.credit = nil, nil, 0
	if ln.wi >= 0 {
		s.waitRemove(ln.wi)
	}
}

// releaseLane drops ln, which has no live key, from its round, tenant and
// the lane map, and keeps it for reuse if there is room. The caller settles
// its level.
func (s *fairPriorityStore[T]) releaseLane(ln *fpLane[T]) {
	if ln.next != nil {
		s.deactivate(ln)
	}
	if t := ln.owner; t != nil {
		last := len(t.lanes) - 1
		t.lanes[ln.oi] = t.lanes[last]
		t.lanes[ln.oi].oi = ln.oi
		t.lanes[last] = nil
		t.lanes = t.lanes[:last]
		s.releaseTenant(t)
	}
	s.lanes.del(laneKey{tenant: ln.name, prio: ln.level.prio})
	ln.level.lanes--
	if s.last == ln {
		s.last = nil
	}
	if len(s.spareLanes) == maxSpareLanes || len(ln.fifo.buf) > minRing {
		return
	}
	*ln = fpLane[T]{fifo: ln.fifo} // the ring is empty (its front would be live) and its slots zero
	s.spareLanes = append(s.spareLanes, ln)
}

// settle puts lv in the heap or takes it out after its counts changed, and
// releases it once it has no lane.
func (s *fairPriorityStore[T]) settle(lv *fpLevel[T]) {
	switch {
	case lv.lanes == 0:
		if lv.inHeap {
			s.heap.remove(lv.hi)
		}
		s.levels.del(lv.prio)
		if len(s.spareLevels) < maxSpareLevels {
			*lv = fpLevel[T]{}
			s.spareLevels = append(s.spareLevels, lv)
		}
	case lv.avail == 0 && lv.inHeap:
		s.heap.remove(lv.hi)
		lv.inHeap = false
	case lv.avail > 0 && !lv.inHeap:
		s.heap.push(lv)
		lv.inHeap = true
	}
}

// tenantRec returns the record of tenant name, making it if needed.
func (s *fairPriorityStore[T]) tenantRec(name string) *fpTenant[T] {
	t := s.tenants.m[name]
	if t == nil {
		t = reuse(&s.spareTenants)
		t.name = name
		s.tenants.put(name, t)
	}
	return t
}

// releaseTenant drops t if it has nothing in flight and no keys.
func (s *fairPriorityStore[T]) releaseTenant(t *fpTenant[T]) {
	if t.inflight > 0 || len(t.lanes) > 0 {
		return
	}
	s.tenants.del(t.name)
	if len(s.spareTenants) < maxSpareTenants && cap(t.lanes) <= minRing {
		*t = fpTenant[T]{lanes: t.lanes}
		s.spareTenants = append(s.spareTenants, t)
	}
}

// The wait heap: a min-heap of lanes by the seq of their front entry.

func (s *fairPriorityStore[T]) waitLess(i, j int) bool {
	return s.wait[i].fifo.peek().seq < s.wait[j].fifo.peek().seq
}

func (s *fairPriorityStore[T]) waitSwap(i, j int) {
	h := s.wait
	h[i], h[j] = h[j], h[i]
	h[i].wi, h[j].wi = i, j
}

func (s *fairPriorityStore[T]) waitUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.waitLess(i, p) {
			return
		}
		s.waitSwap(i, p)
		i = p
	}
}

func (s *fairPriorityStore[T]) waitDown(i int) {
	n := len(s.wait)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && s.waitLess(c+1, c) {
			c++
		}
		if !s.waitLess(c, i) {
			return
		}
		s.waitSwap(i, c)
		i = c
	}
}

// waitFix restores the heap after the front of the lane at i changed.
func (s *fairPriorityStore[T]) waitFix(i int) {
	s.waitDown(i)
	s.waitUp(i)
}

// waitRemove takes the lane at i out of the wait heap, and gives memory
// back when the heap has shrunk to a quarter of its capacity.
func (s *fairPriorityStore[T]) waitRemove(i int) {
	h := s.wait
	last := len(h) - 1
	h[i].wi = -1
	if i != last {
		h[i] = h[last]
		h[i].wi = i
	}
	h[last] = nil
	s.wait = h[:last]
	if i != last {
		s.waitFix(i)
	}
	if c := cap(s.wait); c > 64 && len(s.wait) <= c/4 {
		s.wait = append(make([]*fpLane[T], 0, c/2), s.wait...)
	}
}

// The queue finds the hooks by type assertion; these keep them in place.
var (
	_ heldStore[int]  = (*fairPriorityStore[int])(nil)
	_ clockedStore    = (*fairPriorityStore[int])(nil)
	_ frontStore[int] = (*fairPriorityStore[int])(nil)
)
