package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
)

// refQueue is a reference model of the queue without delays, written from
// the protocol rather than from the implementation: a slice for the ready
// keys in order, and a map for what is known of each key. It is slow and
// obviously right.
type refQueue struct {
	ready []string
	state map[string]refState // absent keys are not in the map
	shut  bool
	// ghosts is set for a queue with a Store it calls (remove.go): Remove
	// of a ready key leaves its entry in ready as a ghost (in ghost) until
	// Get passes over it or the store is rebuilt, and the key added again
	// meanwhile takes the ghost's place.
	ghosts bool
	ghost  map[string]bool
}

type refState int

const (
	refReady           refState = iota + 1 // in ready
	refProcessing                          // handed out, not Done
	refProcessingDirty                     // handed out, added again since
)

func newRefQueue() *refQueue {
	return &refQueue{state: map[string]refState{}, ghost: map[string]bool{}}
}

// live counts the ready keys: the entries of ready less the ghosts.
func (m *refQueue) live() int { return len(m.ready) - len(m.ghost) }

// enqueue makes k ready: at the tail, or at its ghost's place.
func (m *refQueue) enqueue(k string) {
	m.state[k] = refReady
	if m.ghost[k] {
		delete(m.ghost, k)
		return
	}
	m.ready = append(m.ready, k)
}

// settle drops the ghosts once they outnumber the ready keys by more than
// the queue's bound, or once no key is ready, as the queue rebuilds its
// store.
func (m *refQueue) settle() {
	if n := len(m.ghost); n > m.live()+64 || m.live() == 0 && n > 0 {
		m.ready = slices.DeleteFunc(m.ready, func(k string) bool { return m.ghost[k] })
		clear(m.ghost)
	}
}

func (m *refQueue) add(k string) {
	if m.shut {
		return
	}
	switch m.state[k] {
	case 0:
		m.enqueue(k)
	case refProcessing:
		m.state[k] = refProcessingDirty
	}
}

// get returns what Get returns; ok is false when Get would block.
func (m *refQueue) get() (k string, shutdown, ok bool) {
	if m.live() == 0 {
		return "", m.shut, m.shut
	}
	for m.ghost[m.ready[0]] {
		delete(m.ghost, m.ready[0]) // Get drops a ghost
		m.ready = m.ready[1:]
	}
	k, m.ready = m.ready[0], m.ready[1:]
	m.state[k] = refProcessing
	m.settle()
	return k, false, true
}

// remove is Remove: it cancels a pending run and reports whether there
// was one.
func (m *refQueue) remove(k string) bool {
	switch m.state[k] {
	case refReady:
		delete(m.state, k)
		if m.ghosts {
			m.ghost[k] = true // its entry stays in the store
			m.settle()
		} else {
			m.ready = slices.DeleteFunc(m.ready, func(r string) bool { return r == k })
		}
		return true
	case refProcessingDirty:
		m.state[k] = refProcessing
		return true
	}
	return false
}

func (m *refQueue) done(k string) {
	switch m.state[k] {
	case refProcessing:
		delete(m.state, k)
	case refProcessingDirty:
		m.enqueue(k)
	}
}

// processing returns the processing keys in a fixed order.
func (m *refQueue) processing() []string {
	var ks []string
	for k, s := range m.state {
		if s == refProcessing || s == refProcessingDirty {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

func (m *refQueue) stats() workqueue.Stats {
	s := workqueue.Stats{Ready: m.live()}
	for _, st := range m.state {
		switch st {
		case refProcessing:
			s.Processing++
		case refProcessingDirty:
			s.Processing++
			s.Dirty++
		}
	}
	s.Dirty += m.live()
	return s
}

var fuzzKeys = []string{"a", "b", "c", "d"}

// FuzzQueue drives five queues (the default ring, one with metrics, the
// priority store, and two that call a Store: NewFIFOStore and a user's)
// and the reference model of each group with the same operations, and compares every answer: the key and flag Get returns, GetContext's error,
// what Remove reports, Len, Stats, ShuttingDown and what a drain returns.
//
// Each byte is one operation: the low 3 bits choose it, the next 2 bits a
// key, the top 3 bits a variant.
func FuzzQueue(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		{0x00, 0x08, 0x10, 0x02, 0x02, 0x02, 0x03, 0x0b},                   // add a b c, three gets, done a b
		{0x00, 0x02, 0x00, 0x00, 0x03, 0x02, 0x03, 0x03},                   // a processing+dirty, Done twice
		{0x00, 0x02, 0x08, 0x00, 0x04, 0x02, 0x02},                         // re-add while processing, Done via op 4
		{0x00, 0x08, 0x02, 0x05, 0x00, 0x02, 0x02, 0x03, 0x0b, 0x02},       // ShutDown with a and b
		{0x00, 0x02, 0x00, 0x05, 0x02, 0x03, 0x02, 0x02},                   // processing+dirty across ShutDown
		{0x00, 0x02, 0x07, 0x04, 0x02, 0x07},                               // drain with a cancelled context
		{0x10, 0x18, 0x22, 0x06, 0x06, 0x06, 0x47, 0x2f},                   // GetContext, cancelled GetContext
		{0x03, 0x0f, 0x00, 0x00, 0x08, 0x10, 0x18, 0x02, 0x26, 0x06, 0x04}, // Done of absent keys, GetContext
		{0x00, 0x02, 0x00, 0x04, 0x02, 0x00, 0x04, 0x02, 0x04, 0x27, 0x02},
		{0x00, 0x08, 0x01, 0x00, 0x02, 0x02}, // Remove of a ready key, Add again
		// With a cap: x/b held while x/a runs, ShutDown, a Get waits
		// for x/b, Remove x/b must end it; then two waiting getters,
		// of which the one that does not get x/b must end.
		{0x00, 0x08, 0x02, 0x05, 0x02, 0x09, 0x03},
		{0x00, 0x08, 0x02, 0x05, 0x02, 0x06, 0x03},
		[]byte("the quick brown fox jumps over the lazy dog"),
	} {
		f.Add(seed)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	f.Fuzz(func(t *testing.T, ops []byte) {
		// The queues whose key table keeps the order, and those that
		// call a Store (where Remove leaves ghosts), each beside its model.
		fuzzQueue(t, ops, cancelled, newRefQueue(),
			workqueue.New[string](),
			workqueue.NewWithConfig(workqueue.Config[string]{Name: "fuzz", Metrics: &countingMetrics{}}),
			// Remove cuts keys out of the priority store.
			workqueue.NewWithConfig(workqueue.Config[string]{Store: workqueue.NewPriorityStore[string]()}),
		)
		ghosted := newRefQueue()
		ghosted.ghosts = true
		fuzzQueue(t, ops, cancelled, ghosted,
			workqueue.NewWithConfig(workqueue.Config[string]{Store: workqueue.NewFIFOStore[string]()}),
			workqueue.NewWithConfig(workqueue.Config[string]{Store: newRawStore()}),
		)
		// The fair priority store, with tenants, weights, a bound on
		// waiting and a cap, beside its own model.
		fuzzFair(t, ops, cancelled)
	})
}

// fuzzQueue runs ops on qs and m, the model of every queue in qs, and
// compares their answers (see FuzzQueue).
func fuzzQueue(t *testing.T, ops []byte, cancelled context.Context, m *refQueue, qs ...*workqueue.Queue[string]) {
	var trace []string // what happened so far, for failure messages

	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("after %v: %s", trace, fmt.Sprintf(format, args...))
	}
	// get calls Get (or GetContext) on every queue when the model says
	// it will not block, and compares the answers.
	get := func(withCtx bool) {
		k, shutdown, ok := m.get()
		if !ok {
			return
		}
		trace = append(trace, "Get")
		for i, q := range qs {
			if withCtx {
				gk, err := q.GetContext(context.Background())
				wantErr := error(nil)
				if shutdown {
					wantErr = workqueue.ErrShutDown
				}
				if gk != k || !errors.Is(err, wantErr) || (wantErr == nil) != (err == nil) {
					fail("queue %d: GetContext = %q, %v; model %q, %v", i, gk, err, k, wantErr)
				}
				continue
			}
			gk, gs := q.Get()
			if gk != k || gs != shutdown {
				fail("queue %d: Get = %q, %v; model %q, %v", i, gk, gs, k, shutdown)
			}
		}
	}

	for _, b := range ops {
		key := fuzzKeys[(b>>3)&3]
		variant := b >> 5
		switch b & 7 {
		case 1:
			// Add stays the most common operation: half of these
			// are Remove.
			if variant < 4 {
				trace = append(trace, "Remove "+key)
				want := m.remove(key)
				for i, q := range qs {
					if got := q.Remove(key); got != want {
						fail("queue %d: Remove(%q) = %v; model %v", i, key, got, want)
					}
				}
				break
			}
			fallthrough
		case 0:
			trace = append(trace, "Add "+key)
			m.add(key)
			for _, q := range qs {
				q.Add(key)
			}
		case 2:
			if variant&1 == 1 {
				// A context that ended takes nothing, ready key or not.
				trace = append(trace, "GetContext(cancelled)")
				for i, q := range qs {
					if k, err := q.GetContext(cancelled); !errors.Is(err, context.Canceled) || k != "" {
						fail("queue %d: GetContext(cancelled) = %q, %v; want context.Canceled", i, k, err)
					}
				}
				continue
			}
			get(false)
		case 6:
			get(true)
		case 3:
			trace = append(trace, "Done "+key)
			m.done(key)
			for _, q := range qs {
				q.Done(key)
			}
		case 4:
			// Done of a processing key, so that Done is not mostly a
			// no-op on random keys.
			ps := m.processing()
			if len(ps) == 0 {
				continue
			}
			k := ps[int(variant)%len(ps)]
			trace = append(trace, "Done "+k)
			m.done(k)
			for _, q := range qs {
				q.Done(k)
			}
		case 5:
			if variant != 0 {
				continue // Len and Stats are compared after every op
			}
			trace = append(trace, "ShutDown")
			m.shut = true
			for _, q := range qs {
				q.ShutDown()
			}
		case 7:
			s := m.stats()
			empty := s.Ready == 0 && s.Processing == 0
			switch {
			case variant == 0:
				// A drain that cannot wait: nil if no key is
				// processing (ready keys are left to Get: the drain
				// of ShutDownWithDrainContext waits only for runs in
				// progress), else the context's error. Either way,
				// shut down.
				trace = append(trace, "ShutDownWithDrainContext(cancelled)")
				m.shut = true
				idle := s.Processing == 0
				for i, q := range qs {
					err := q.ShutDownWithDrainContext(cancelled)
					if idle && err != nil || !idle && !errors.Is(err, context.Canceled) {
						fail("queue %d: ShutDownWithDrainContext(cancelled) = %v with stats %+v", i, err, s)
					}
				}
			case variant == 1 && empty:
				trace = append(trace, "ShutDownWithDrain")
				m.shut = true
				for _, q := range qs {
					q.ShutDownWithDrain()
				}
			default:
				trace = append(trace, "Done "+key)
				m.done(key)
				for _, q := range qs {
					q.Done(key)
				}
			}
		}
		want := m.stats()
		for i, q := range qs {
			if got := trimStats(q.Stats()); got != want {
				fail("queue %d: Stats = %+v; model %+v", i, got, want)
			}
			if n := q.Len(); n != want.Ready {
				fail("queue %d: Len = %d; model %d", i, n, want.Ready)
			}
			if q.ShuttingDown() != m.shut {
				fail("queue %d: ShuttingDown = %v; model %v", i, q.ShuttingDown(), m.shut)
			}
			if _, err := workqueue.CheckTable(q); err != nil {
				fail("queue %d: key table: %v", i, err)
			}
		}
	}

	// Finish: shut down, then hand out and finish everything, in the
	// model's order; every queue must end empty and report shutdown.
	trace = append(trace, "ShutDown, drain")
	m.shut = true
	for _, q := range qs {
		q.ShutDown()
	}
	for {
		for _, k := range m.processing() {
			m.done(k)
			for _, q := range qs {
				q.Done(k)
			}
		}
		k, shutdown, _ := m.get()
		for i, q := range qs {
			if gk, gs := q.Get(); gk != k || gs != shutdown {
				fail("queue %d: Get while draining = %q, %v; model %q, %v", i, gk, gs, k, shutdown)
			}
		}
		if shutdown {
			break
		}
	}
	for i, q := range qs {
		if got := trimStats(q.Stats()); got != (workqueue.Stats{}) {
			fail("queue %d: Stats after the drain = %+v; want empty", i, got)
		}
		if err := q.ShutDownWithDrainContext(cancelled); err != nil {
			fail("queue %d: drain of an empty queue = %v", i, err)
		}
		// Nothing outlives the drain: no key, and no fGhost entry
		// once its ghosts came out of the store.
		if n, err := workqueue.CheckTable(q); n != 0 || err != nil {
			fail("queue %d: key table after the drain: %d entries, %v", i, n, err)
		}
	}
}

// refFair is a reference model of a queue whose Store is
// NewFairPriorityStore, written from that store's rules rather than from
// its code: slices and maps, searched from scratch on every Get.
//
//   - A lane is the FIFO of one tenant's ready keys at one priority; it
//     exists while it holds a key. A level's round lists the tenants whose
//     lanes there are active, front first: a lane becomes active (at the
//     back, its turn not started) when it gets its first key while its
//     tenant is under its cap, or when its tenant's cap is lifted, and
//     leaves the round when it empties or its tenant reaches its cap.
//   - Get: if the oldest available key (the first to enter a level, among
//     active lanes) has been in its level longer than MaxWait, it goes out
//     of turn (no credit used, the round does not move). Otherwise the
//     front of the round of the highest level with an active lane hands
//     out its oldest key, using one credit of its turn (a turn is Weight
//     keys); a lane whose turn is used up moves to the back.
//   - Raise (a higher AddWithPriority while ready) moves the key to the
//     back of its tenant's lane in the higher level, entering it now.
//   - A tenant reaches its cap when a Get hands out its MaxInFlight-th key
//     in flight, and leaves it at the Done of one of them, before the key
//     is made ready again if it was added meanwhile.
//   - Remove takes a ready key out of its lane (no ghost).
type refFair struct {
	tenant  func(string) string
	weight  func(string) int
	maxWait time.Duration
	cap     int
	now     time.Duration // since the queue was made

	state    map[string]refState
	prio     map[string]int // priority of the key's pending run
	entry    map[string]refEntry
	levels   map[int]*refLevel
	inflight map[string]int
	seq      int
	shut     bool
}

type refEntry struct {
	level, seq int
	at         time.Duration
}

type refLevel struct {
	lanes  map[string][]string // tenant -> its ready keys here, oldest first
	round  []string            // tenants with active lanes, front first
	credit map[string]int      // keys left in the tenant's turn; 0: not started
}

func newRefFair(cfg workqueue.FairPriority[string]) *refFair {
	tenant := cfg.Tenant
	if tenant == nil {
		tenant = func(string) string { return "" }
	}
	return &refFair{
		tenant: tenant, weight: cfg.Weight, maxWait: cfg.MaxWait, cap: cfg.MaxInFlight,
		state: map[string]refState{}, prio: map[string]int{}, entry: map[string]refEntry{},
		levels: map[int]*refLevel{}, inflight: map[string]int{},
	}
}

func (m *refFair) held(tenant string) bool { return m.cap > 0 && m.inflight[tenant] >= m.cap }

// push makes k ready at priority p, at the back of its lane.
func (m *refFair) push(k string, p int) {
	m.state[k], m.prio[k] = refReady, p
	m.seq++
	m.entry[k] = refEntry{p, m.seq, m.now}
	lv := m.levels[p]
	if lv == nil {
		lv = &refLevel{lanes: map[string][]string{}, credit: map[string]int{}}
		m.levels[p] = lv
	}
	t := m.tenant(k)
	if len(lv.lanes[t]) == 0 && !m.held(t) {
		lv.round = append(lv.round, t)
		lv.credit[t] = 0
	}
	lv.lanes[t] = append(lv.lanes[t], k)
}

// cut takes the ready key k out of its lane.
func (m *refFair) cut(k string) {
	e := m.entry[k]
	delete(m.entry, k)
	lv, t := m.levels[e.level], m.tenant(k)
	lv.lanes[t] = slices.DeleteFunc(lv.lanes[t], func(r string) bool { return r == k })
	if len(lv.lanes[t]) == 0 {
		delete(lv.lanes, t)
		m.leaveRound(lv, t)
		if len(lv.lanes) == 0 {
			delete(m.levels, e.level)
		}
	}
}

func (m *refFair) leaveRound(lv *refLevel, t string) {
	lv.round = slices.DeleteFunc(lv.round, func(r string) bool { return r == t })
	delete(lv.credit, t)
}

func (m *refFair) ready() int { return len(m.entry) }

func (m *refFair) available() int {
	n := 0
	for k := range m.entry {
		if !m.held(m.tenant(k)) {
			n++
		}
	}
	return n
}

func (m *refFair) add(k string, p int) {
	if m.shut {
		return
	}
	switch m.state[k] {
	case 0:
		m.push(k, p)
	case refReady:
		if p > m.prio[k] {
			m.cut(k)
			m.push(k, p)
		}
	case refProcessing:
		m.state[k], m.prio[k] = refProcessingDirty, p
	case refProcessingDirty:
		m.prio[k] = max(m.prio[k], p)
	}
}

// get returns what GetWithPriority returns; ok is false when it would
// wait: nothing is available, and the queue is not shut down or keys are
// held back (their tenant's Done will let them through).
func (m *refFair) get() (k string, prio int, shutdown, ok bool) {
	if m.available() == 0 {
		if m.shut && m.ready() == 0 {
			return "", 0, true, true
		}
		return "", 0, false, false
	}
	if m.maxWait > 0 {
		oldest, best := "", 0
		for r, e := range m.entry {
			if !m.held(m.tenant(r)) && (oldest == "" || e.seq < best) {
				oldest, best = r, e.seq
			}
		}
		if m.now-m.entry[oldest].at > m.maxWait {
			k = oldest
		}
	}
	if k == "" {
		top := 0
		var lv *refLevel
		for p, l := range m.levels {
			if len(l.round) > 0 && (lv == nil || p > top) {
				top, lv = p, l
			}
		}
		t := lv.round[0]
		if lv.credit[t] == 0 {
			lv.credit[t] = 1
			if m.weight != nil {
				lv.credit[t] = max(1, m.weight(t))
			}
		}
		lv.credit[t]--
		k = lv.lanes[t][0]
		if len(lv.lanes[t]) > 1 && lv.credit[t] == 0 {
			lv.round = append(lv.round[1:], t) // turn used up
		}
	}
	prio = m.prio[k]
	m.cut(k)
	m.state[k] = refProcessing
	t := m.tenant(k)
	m.inflight[t]++
	if m.held(t) {
		for _, lv := range m.levels {
			m.leaveRound(lv, t)
		}
	}
	return k, prio, false, true
}

func (m *refFair) done(k string) {
	st := m.state[k]
	if st != refProcessing && st != refProcessingDirty {
		return
	}
	t := m.tenant(k)
	was := m.held(t)
	m.inflight[t]--
	if was {
		for _, lv := range m.levels {
			if len(lv.lanes[t]) > 0 {
				lv.round = append(lv.round, t)
				lv.credit[t] = 0
			}
		}
	}
	if st == refProcessing {
		delete(m.state, k)
		delete(m.prio, k)
		return
	}
	m.push(k, m.prio[k])
}

func (m *refFair) remove(k string) bool {
	switch m.state[k] {
	case refReady:
		m.cut(k)
		delete(m.state, k)
		delete(m.prio, k)
		return true
	case refProcessingDirty:
		m.state[k] = refProcessing
		return true
	}
	return false
}

func (m *refFair) processing() []string {
	var ks []string
	for k, s := range m.state {
		if s == refProcessing || s == refProcessingDirty {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

func (m *refFair) stats() workqueue.Stats {
	s := workqueue.Stats{Ready: m.ready(), Dirty: m.ready()}
	for _, st := range m.state {
		switch st {
		case refProcessing:
			s.Processing++
		case refProcessingDirty:
			s.Processing++
			s.Dirty++
		}
	}
	return s
}

// The keys of the fair queues' fuzzing: three tenants, x weighing 2.
var fairKeys = []string{"x/a", "x/b", "x/c", "y/a", "y/b", "z/a", "z/b", "z/c"}

func fairWeight(t string) int {
	if t == "x" {
		return 2
	}
	return 1
}

// fairPriorities are AddWithPriority's priorities in the fuzzing.
var fairPriorities = [...]int{0, -100, 10, 5}

// maxParked bounds the getters that wait at once in each queue of the
// fair queues' fuzzing: two, so that one taking the last key must end the
// other's wait.
const maxParked = 2

// fuzzFair drives queues built with NewFairPriorityStore (tenants,
// weights, MaxWait, MaxInFlight; and with neither tenants nor a bound, as
// NewPriorityStore, beside the built-in priority store) against refFair,
// inside a synctest bubble so that the ops can move the clock MaxWait
// reads. Each byte is one operation: the low 3 bits choose it, the next 3
// a key, the top 2 a variant.
func fuzzFair(t *testing.T, ops []byte, cancelled context.Context) {
	synctest.Test(t, func(t *testing.T) {
		type group struct {
			m  *refFair
			qs []*workqueue.Queue[string]
			// parked counts the getters that wait in each queue of
			// the group (the model said Get would wait), and got has,
			// per queue, what they returned.
			parked int
			got    []chan getResult[string]
		}
		fair := func(cfg workqueue.FairPriority[string]) *workqueue.Queue[string] {
			return workqueue.NewWithConfig(workqueue.Config[string]{Store: workqueue.NewFairPriorityStore(cfg)})
		}
		tenants := workqueue.FairPriority[string]{Tenant: tenantOf, Weight: fairWeight}
		bounded := tenants
		bounded.MaxWait = 3 * time.Second
		capped := tenants
		capped.MaxInFlight = 1
		both := bounded
		both.MaxInFlight = 2
		var groups []group
		for _, cfg := range []workqueue.FairPriority[string]{tenants, bounded, capped, both} {
			groups = append(groups, group{m: newRefFair(cfg), qs: []*workqueue.Queue[string]{fair(cfg)}})
		}
		groups[3].qs = append(groups[3].qs, workqueue.NewWithConfig(workqueue.Config[string]{
			Name: "fuzz", Metrics: &countingMetrics{}, Store: workqueue.NewFairPriorityStore(both),
		}))
		groups = append(groups, group{m: newRefFair(workqueue.FairPriority[string]{}), qs: []*workqueue.Queue[string]{
			fair(workqueue.FairPriority[string]{}),
			workqueue.NewWithConfig(workqueue.Config[string]{Store: workqueue.NewPriorityStore[string]()}),
		}})

		for gi := range groups {
			for range groups[gi].qs {
				groups[gi].got = append(groups[gi].got, make(chan getResult[string], maxParked))
			}
		}

		var trace []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("after %v: %s", trace, fmt.Sprintf(format, args...))
		}
		// park starts, in each queue of g, a getter that waits, as the
		// model said it would: what ends its wait is checked by settle.
		park := func(g *group, withCtx bool) {
			g.parked++
			for i, q := range g.qs {
				go func() {
					if withCtx {
						k, err := q.GetContext(context.Background())
						g.got[i] <- getResult[string]{k, errors.Is(err, workqueue.ErrShutDown)}
						return
					}
					k, _, shutdown := q.GetWithPriority()
					g.got[i] <- getResult[string]{k, shutdown}
				}()
			}
		}
		// settle lets the parked getters run, and checks that exactly
		// those that the model says no longer wait have returned, with
		// what the model hands them: a key, or shutdown once no key is
		// left that Get could take (also the last held one, removed).
		settle := func() {
			if !slices.ContainsFunc(groups, func(g group) bool { return g.parked > 0 }) {
				return
			}
			synctest.Wait()
			for gi := range groups {
				g := &groups[gi]
				var want []string
				for g.parked > 0 {
					k, _, shutdown, ok := g.m.get()
					if !ok {
						break
					}
					g.parked--
					want = append(want, fmt.Sprint(getResult[string]{k, shutdown}))
				}
				slices.Sort(want)
				for i := range g.qs {
					var got []string
					for len(g.got[i]) > 0 {
						got = append(got, fmt.Sprint(<-g.got[i]))
					}
					slices.Sort(got)
					if !slices.Equal(got, want) {
						fail("group %d queue %d: waiting getters returned %v; model %v (%d still wait)", gi, i, got, want, g.parked)
					}
				}
			}
		}
		get := func(withCtx bool) {
			for gi := range groups {
				g := &groups[gi]
				k, prio, shutdown, ok := g.m.get()
				if !ok {
					if g.parked < maxParked {
						trace = append(trace, fmt.Sprintf("(group %d waits)", gi))
						park(g, withCtx)
					}
					continue
				}
				for i, q := range g.qs {
					if withCtx {
						gk, err := q.GetContext(context.Background())
						if gk != k || shutdown != errors.Is(err, workqueue.ErrShutDown) || !shutdown && err != nil {
							fail("group %d queue %d: GetContext = %q, %v; model %q, shutdown %v", gi, i, gk, err, k, shutdown)
						}
						continue
					}
					gk, gp, gs := q.GetWithPriority()
					if gk != k || gp != prio || gs != shutdown {
						fail("group %d queue %d: GetWithPriority = %q, %d, %v; model %q, %d, %v", gi, i, gk, gp, gs, k, prio, shutdown)
					}
				}
			}
		}
		done := func(k string) {
			for _, g := range groups {
				g.m.done(k)
				for _, q := range g.qs {
					q.Done(k)
				}
			}
		}
		shutDown := func() {
			for _, g := range groups {
				g.m.shut = true
				for _, q := range g.qs {
					q.ShutDown()
				}
			}
		}

		for _, b := range ops {
			key := fairKeys[(b>>3)&7]
			variant := int(b >> 6)
			switch b & 7 {
			case 0:
				p := fairPriorities[variant]
				trace = append(trace, fmt.Sprintf("Add %s %d", key, p))
				for _, g := range groups {
					g.m.add(key, p)
					for _, q := range g.qs {
						if p == 0 {
							q.Add(key)
						} else {
							q.AddWithPriority(key, p)
						}
					}
				}
			case 1:
				if variant >= 2 {
					d := time.Duration(variant-1) * 2 * time.Second
					trace = append(trace, "Sleep "+d.String())
					time.Sleep(d)
					for _, g := range groups {
						g.m.now += d
					}
					break
				}
				trace = append(trace, "Remove "+key)
				for gi, g := range groups {
					want := g.m.remove(key)
					for i, q := range g.qs {
						if got := q.Remove(key); got != want {
							fail("group %d queue %d: Remove(%q) = %v; model %v", gi, i, key, got, want)
						}
					}
				}
			case 2:
				if variant == 3 {
					trace = append(trace, "GetContext(cancelled)")
					for _, g := range groups {
						for i, q := range g.qs {
							if k, err := q.GetContext(cancelled); !errors.Is(err, context.Canceled) || k != "" {
								fail("queue %d: GetContext(cancelled) = %q, %v; want context.Canceled", i, k, err)
							}
						}
					}
					break
				}
				trace = append(trace, "Get")
				get(false)
			case 6:
				trace = append(trace, "GetContext")
				get(true)
			case 3:
				trace = append(trace, "Done "+key)
				done(key)
			case 4:
				for gi, g := range groups { // the groups differ: each picks its own
					ps := g.m.processing()
					if len(ps) == 0 {
						continue
					}
					k := ps[(variant+int(b>>3))%len(ps)]
					trace = append(trace, fmt.Sprintf("Done %s in group %d", k, gi))
					g.m.done(k)
					for _, q := range g.qs {
						q.Done(k)
					}
				}
			case 5:
				if (b>>3)&7 == 0 {
					trace = append(trace, "ShutDown")
					shutDown()
					break
				}
				d := time.Duration((b>>3)&7) * 500 * time.Millisecond
				trace = append(trace, "Sleep "+d.String())
				time.Sleep(d)
				for _, g := range groups {
					g.m.now += d
				}
			case 7:
				if variant != 0 {
					trace = append(trace, "Done "+key)
					done(key)
					break
				}
				// A drain that cannot wait: nil once no key is
				// processing, else the context's error.
				trace = append(trace, "ShutDownWithDrainContext(cancelled)")
				for gi, g := range groups {
					g.m.shut = true
					idle := g.m.stats().Processing == 0
					for i, q := range g.qs {
						err := q.ShutDownWithDrainContext(cancelled)
						if idle && err != nil || !idle && !errors.Is(err, context.Canceled) {
							fail("group %d queue %d: ShutDownWithDrainContext(cancelled) = %v", gi, i, err)
						}
					}
				}
			}
			settle()
			for gi, g := range groups {
				want := g.m.stats()
				for i, q := range g.qs {
					if got := trimStats(q.Stats()); got != want {
						fail("group %d queue %d: Stats = %+v; model %+v", gi, i, got, want)
					}
					if n := q.Len(); n != want.Ready {
						fail("group %d queue %d: Len = %d; model %d", gi, i, n, want.Ready)
					}
					if q.ShuttingDown() != g.m.shut {
						fail("group %d queue %d: ShuttingDown = %v; model %v", gi, i, q.ShuttingDown(), g.m.shut)
					}
					if _, err := workqueue.CheckTable(q); err != nil {
						fail("group %d queue %d: key table: %v", gi, i, err)
					}
				}
			}
		}

		// Finish: shut down, then a drain on its own goroutine while
		// everything is handed out and finished in the model's order;
		// the drain returns, and every queue ends empty.
		trace = append(trace, "ShutDown, drain")
		shutDown()
		settle()
		for gi, g := range groups {
			drained := make([]chan error, len(g.qs))
			for i, q := range g.qs {
				drained[i] = make(chan error, 1)
				go func() { drained[i] <- q.ShutDownWithDrainAll(context.Background()) }()
			}
			for {
				for _, k := range g.m.processing() {
					g.m.done(k)
					for _, q := range g.qs {
						q.Done(k)
					}
					// A waiting getter may take what this Done let
					// through before the next Done changes the order.
					settle()
				}
				if len(g.m.processing()) > 0 {
					continue // a getter that waited took a key
				}
				k, prio, shutdown, ok := g.m.get()
				if !ok {
					fail("group %d: the model waits with nothing processing", gi)
				}
				for i, q := range g.qs {
					if gk, gp, gs := q.GetWithPriority(); gk != k || gp != prio || gs != shutdown {
						fail("group %d queue %d: Get while draining = %q, %d, %v; model %q, %d, %v", gi, i, gk, gp, gs, k, prio, shutdown)
					}
				}
				if shutdown {
					break
				}
			}
			synctest.Wait()
			for i, q := range g.qs {
				select {
				case err := <-drained[i]:
					if err != nil {
						fail("group %d queue %d: ShutDownWithDrainAll = %v", gi, i, err)
					}
				default:
					fail("group %d queue %d: ShutDownWithDrainAll still waits on an empty queue", gi, i)
				}
				if got := trimStats(q.Stats()); got != (workqueue.Stats{}) {
					fail("group %d queue %d: Stats after the drain = %+v; want empty", gi, i, got)
				}
				if n, err := workqueue.CheckTable(q); n != 0 || err != nil {
					fail("group %d queue %d: key table after the drain: %d entries, %v", gi, i, n, err)
				}
			}
		}
	})
}
