package sharding

import (
	"container/heap"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// A deterministic simulation of whole rings: N replicas, each the real
// machine (step.go), ledger (runs.go) and view (ringview.go), against a
// simulated Lease store with resourceVersion semantics, on a simulated
// clock. One seed draws every choice: watch delays and stalls, lost
// answers, expire timers that fire late, partitions, crashes, joins,
// graceful leaves, and runs (some outliving GracePeriod, some slow to
// honour their cancellation). After every event it checks that no shard
// is admitted or run by two replicas at once; once the faults stop, that
// every shard is admitted within a bound.
//
// The executor here is the simulation's (sim.renew, sim.decide,
// sim.progress mirror exec.go's, with each request answered at once or
// lost): the simulation tests the decisions and the ledger, not the I/O.
// It models one shard count, runs that return at once, and clocks that
// agree.

const (
	simShards   = 8
	simRetry    = 2 * time.Second
	simRenew    = 10 * time.Second
	simLease    = 15 * time.Second
	simGrace    = 5 * time.Second
	simHandoff  = 15 * time.Second
	simFaultFor = 3 * time.Minute // faults are drawn until then
	// simStop is the longest a cancelled run takes to return: within
	// LeaseDuration − RenewDeadline, the timing assumption (the clocks
	// agree here).
	simStop = 4 * time.Second
	// simSettle is the bound on admitting every shard once the faults
	// stop: a LeaseDuration to fence the dead, the handoff bound, and a
	// few periods to deal and take.
	simSettle = simLease + simHandoff + 10*simRetry
)

// simRec is one Lease of the simulated store.
type simRec struct {
	ref leaseRef
	p   parsed
}

// simStore is the Lease store: conditional updates and deletes by UID and
// resourceVersion, creates that fail on an existing name, and a log of
// changes that each replica's watch delivers.
type simStore struct {
	rv   int
	recs map[string]simRec
	log  []simChange
}

type simChange struct {
	p       parsed
	ref     leaseRef
	deleted bool
}

var simGR = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

func (s *simStore) put(name string, p parsed, cond *leaseRef) (leaseRef, error) {
	cur, ok := s.recs[name]
	switch {
	case cond == nil && ok:
		return leaseRef{}, apierrors.NewAlreadyExists(simGR, name)
	case cond != nil && (!ok || cur.ref != *cond):
		return leaseRef{}, apierrors.NewConflict(simGR, name, fmt.Errorf("precondition"))
	}
	s.rv++
	ref := leaseRef{uid: types.UID(name + "/" + strconv.Itoa(s.rv)), rv: strconv.Itoa(s.rv)}
	if ok {
		ref.uid = cur.ref.uid
	}
	s.recs[name] = simRec{ref: ref, p: p}
	s.log = append(s.log, simChange{p: p, ref: ref})
	return ref, nil
}

func (s *simStore) del(name string, cond leaseRef) error {
	cur, ok := s.recs[name]
	switch {
	case !ok:
		return apierrors.NewNotFound(simGR, name)
	case cur.ref != cond:
		return apierrors.NewConflict(simGR, name, fmt.Errorf("precondition"))
	}
	s.rv++
	delete(s.recs, name)
	s.log = append(s.log, simChange{p: cur.p, ref: leaseRef{rv: strconv.Itoa(s.rv)}, deleted: true})
	return nil
}

// simReplica is one replica: its machine, ledger and view, and the
// simulation's record of its process.
type simReplica struct {
	id      string
	m       machine
	led     *ledger
	ring    *ringView
	member  leaseRef
	seen    int       // the store's log entries its watch delivered
	watchAt time.Time // when its watch delivers next (FIFO)
	cutOff  time.Time // partitioned until then
	dead    bool
	leaving bool
	// A membership write in flight: its answer comes at answerAt (the
	// loop waits for it, deciding nothing meanwhile); nextTick is when the
	// tick after it is due.
	pending  *simAnswer
	nextTick time.Time
	// runs in flight, by number, and whether a cancelled one's return
	// is scheduled already.
	runs     map[int]ticket
	stopping map[int]bool
}

// simAnswer is a membership write whose answer is on its way.
type simAnswer struct {
	st   sessionState
	w    memberPut
	p    parsed
	sent time.Time
	ref  leaseRef
	err  error
	tick bool // the write of a tick (else of the leave)
}

type simEvent struct {
	at   time.Time
	seq  int
	kind string // tick, deliver, fault
	id   string
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type sim struct {
	rnd      *rand.Rand
	now      time.Time
	seq      int
	q        simQueue
	store    simStore
	reps     map[string]*simReplica
	order    []string // the identities, in order of start
	next     int      // the next identity's number
	trace    []string
	events   int
	violated string
}

func newSim(seed uint64) *sim {
	s := &sim{rnd: rand.New(rand.NewPCG(seed, 0x5eed)), now: t0, reps: make(map[string]*simReplica),
		store: simStore{recs: make(map[string]simRec)}}
	_, _ = s.store.put("ring", parsed{shard: -1, ring: true, r: ringInfo{exists: true, conf: ringConf{shards: simShards, field: FieldUID}}}, nil)
	return s
}

func (s *sim) at(d time.Duration, kind, id string) {
	s.seq++
	heap.Push(&s.q, simEvent{at: s.now.Add(d), seq: s.seq, kind: kind, id: id})
}

func (s *sim) start() {
	id := fmt.Sprintf("r%02d", s.next)
	s.next++
	rp := &simReplica{id: id, led: &ledger{}, ring: newRingView("sim", simShards),
		m: newMachine(machineConf{self: id, ring: "sim", namespace: "ns", own: ringConf{shards: simShards, field: FieldUID},
			leaseDuration: simLease, handoffWait: simHandoff, grace: simGrace})}
	rp.led.init(simShards)
	rp.runs, rp.stopping = make(map[int]ticket), make(map[int]bool)
	s.reps[id] = rp
	s.order = append(s.order, id)
	s.deliver(rp, len(s.store.log)) // its first list
	s.at(time.Duration(s.rnd.Int64N(int64(simRetry))), "tick", id)
}

// reach reports whether a request of rp lands, and whether its answer
// comes back.
func (s *sim) reach(rp *simReplica) (lands, answered bool) {
	if s.now.Before(rp.cutOff) {
		return false, false
	}
	return true, !s.faulty() || s.rnd.IntN(20) != 0 // one answer in twenty lost
}

// faulty reports whether faults are still drawn.
func (s *sim) faulty() bool {
	return s.now.Sub(t0) < simFaultFor
}

var simTimeout = apierrors.NewTimeoutError("lost", 1)

func (s *sim) write(rp *simReplica, name string, p parsed, cond *leaseRef) (leaseRef, error) {
	lands, answered := s.reach(rp)
	if !lands {
		return leaseRef{}, simTimeout
	}
	ref, err := s.store.put(name, p, cond)
	if err == nil && !answered {
		return leaseRef{}, simTimeout
	}
	s.changed()
	return ref, err
}

// changed schedules every live replica's watch to deliver the log so far.
func (s *sim) changed() {
	for _, id := range s.ids() {
		rp := s.reps[id]
		if rp.dead {
			continue
		}
		d := time.Duration(s.rnd.Int64N(int64(200 * time.Millisecond)))
		if s.faulty() && s.rnd.IntN(50) == 0 {
			d = time.Duration(s.rnd.Int64N(int64(2 * simLease))) // a stalled watch
		}
		at := s.now.Add(d)
		if at.Before(rp.watchAt) {
			at = rp.watchAt
		}
		rp.watchAt = at
		s.seq++
		heap.Push(&s.q, simEvent{at: at, seq: s.seq, kind: "deliver", id: id + "@" + strconv.Itoa(len(s.store.log))})
	}
}

func (s *sim) deliver(rp *simReplica, upTo int) {
	g := rp.ring
	g.mu.Lock()
	for ; rp.seen < upTo; rp.seen++ {
		c := s.store.log[rp.seen]
		if c.deleted {
			g.removeLocked(c.p, c.ref)
			continue
		}
		p := c.p
		p.m.ref, p.s.ref, p.r.ref = c.ref, c.ref, c.ref
		g.setLocked(p, s.now)
	}
	g.mu.Unlock()
}

// apply applies our own write's answer to rp's view at once, as upsert does.
func (s *sim) apply(rp *simReplica, p parsed, ref leaseRef) {
	p.m.ref, p.s.ref, p.r.ref = ref, ref, ref
	rp.ring.mu.Lock()
	rp.ring.setLocked(p, s.now)
	rp.ring.mu.Unlock()
}

// ids returns every replica's identity, in order of start (and of name).
func (s *sim) ids() []string { return s.order }

// renew mirrors exec.go's renew: it sends the membership write, whose
// answer (answer) comes after a delay drawn from the seed, sometimes
// longer than RenewDeadline.
func (s *sim) renew(rp *simReplica, tick bool) bool {
	st := rp.led.status()
	w, ok := rp.m.renewal(st, s.now, fmt.Sprintf("%s-%d", rp.id, s.seq))
	if !ok {
		return false
	}
	p := parsed{member: rp.id, shard: -1, m: memberInfo{session: w.session, confirmed: !w.start.Equal(w.now),
		conf: ringConf{shards: simShards, field: FieldUID}, synced: slices.Clone(w.mark.synced), leaving: w.mark.leaving}}
	var cond *leaseRef
	if rp.member.known() {
		c := rp.member
		cond = &c
	}
	ref, err := s.write(rp, "member-"+rp.id, p, cond)
	d := time.Duration(s.rnd.Int64N(int64(100 * time.Millisecond)))
	if s.faulty() && s.rnd.IntN(30) == 0 {
		d = time.Duration(s.rnd.Int64N(int64(2 * simRenew))) // a slow answer
	}
	if d > simRenew {
		d, err = simRenew, simTimeout // the request's context ends at RenewDeadline
	}
	rp.pending = &simAnswer{st: st, w: w, p: p, sent: s.now, ref: ref, err: err, tick: tick}
	s.at(d, "answer", rp.id)
	return true
}

// answer applies the answer of rp's membership write in flight.
func (s *sim) answer(rp *simReplica) {
	pa := rp.pending
	rp.pending = nil
	if pa.err != nil {
		gone := false
		switch afterMemberError(pa.err) {
		case memberGone:
			rp.member, gone = leaseRef{}, true
		case memberRead:
			if lands, answered := s.reach(rp); lands && answered {
				cur, ok := s.store.recs["member-"+rp.id]
				switch {
				case !ok:
					rp.member, gone = leaseRef{}, true
				case rp.member.known() && cur.ref.uid != rp.member.uid:
					rp.member, gone = cur.ref, true
				default:
					rp.member = cur.ref
				}
			}
		}
		if gone && pa.st.alive {
			rp.led.lose(true, s.now)
		}
		return
	}
	rp.member = pa.ref
	s.apply(rp, pa.p, pa.ref)
	switch rp.led.answered(sentWrite{at: pa.sent, wasAlive: pa.st.alive, session: pa.w.session}, s.now, simRenew) {
	case answerIgnored:
		return
	case answerJoined:
		rp.m.joined(pa.w)
	}
	late := time.Duration(0) // the expire timer, which may fire late
	if s.rnd.IntN(10) == 0 {
		late = time.Duration(s.rnd.Int64N(int64(time.Second)))
	}
	s.seq++
	heap.Push(&s.q, simEvent{at: pa.sent.Add(simRenew + late), seq: s.seq, kind: "expire", id: rp.id})
}

// decide mirrors loop.go's decide and exec.go's carryOut.
func (s *sim) decide(rp *simReplica, tick bool) {
	var v view
	rp.ring.snapshot(&v)
	fence, refuse := rp.m.check(&v, s.now)
	if refuse != nil {
		s.violated = "refused: " + refuse.Error()
		return
	}
	for _, w := range fence {
		lands, answered := s.reach(rp)
		var err error = simTimeout
		if lands {
			err = s.store.del("member-"+w.id, w.ref)
			s.changed()
			if !answered {
				err = simTimeout
			}
		}
		if err == nil || apierrors.IsNotFound(err) {
			v.dropMember(w.id)
			rp.ring.forget(w.id, w.ref)
			continue
		}
		rp.m.fenceFailed(w)
	}
	if !rp.led.adopt(&v, rp.id, rp.m.tried.unknown, s.now) {
		rp.led.lose(true, s.now)
		return
	}
	active, _ := rp.led.states()
	a := rp.m.Step(observation{now: s.now, tick: tick, v: &v, session: rp.led.status(), active: active})
	if len(a.drain) > 0 {
		rp.led.drain(a.drain, a.graceEnd)
	}
	for _, w := range a.acquire {
		p := parsed{shard: w.i, count: simShards, s: shardInfo{exists: true, holder: rp.id, session: w.session,
			transitions: w.s.transitions + 1, conf: ringConf{shards: simShards, field: FieldUID}}}
		var cond *leaseRef
		if w.s.exists {
			c := w.s.ref
			cond = &c
		}
		ref, err := s.write(rp, "shard-"+strconv.Itoa(w.i), p, cond)
		if err != nil {
			rp.m.acquireFailed(w, !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err))
			continue
		}
		s.apply(rp, p, ref)
		rp.led.acquired(w.i, w.session)
	}
}

// progress mirrors exec.go's progress, and marks every held shard filled.
func (s *sim) progress(rp *simReplica) {
	release, session, _ := rp.led.drainScan(s.now)
	ds := make([]drained, len(release))
	for k, i := range release {
		ds[k] = drained{i: i, s: rp.ring.shard(i)}
	}
	for _, w := range rp.m.releases(ds, session, rp.ring.ringInfo()) {
		p := parsed{shard: w.i, count: simShards, s: shardInfo{exists: true, next: w.next, conf: ringConf{shards: simShards, field: FieldUID}}}
		ref := w.ref
		out, err := s.write(rp, "shard-"+strconv.Itoa(w.i), p, &ref)
		if err != nil {
			rp.m.releaseFailed(w)
			continue
		}
		s.apply(rp, p, out)
		rp.led.released(w.i)
		rp.m.releaseDone(w.i)
	}
	filled := make([]bool, simShards)
	for _, i := range rp.led.held() {
		filled[i] = true
	}
	rp.led.setFilled(filled, 0)
}

// admitters returns, for each shard, the live replicas that admit it now.
func (s *sim) admitters() [][]string {
	out := make([][]string, simShards)
	for _, id := range s.ids() {
		rp := s.reps[id]
		if rp.dead {
			continue
		}
		rp.led.mu.Lock()
		for i := range simShards {
			if rp.led.admitsLocked(i, s.now) {
				out[i] = append(out[i], id)
			}
		}
		rp.led.mu.Unlock()
	}
	return out
}

// fault draws one fault at a time while faults last.
func (s *sim) fault() {
	ids := s.ids()
	var live []string
	for _, id := range ids {
		if !s.reps[id].dead && !s.reps[id].leaving {
			live = append(live, id)
		}
	}
	switch k := s.rnd.IntN(10); {
	case k < 3 || len(live) < 2:
		s.start()
		s.trace = append(s.trace, fmt.Sprintf("%v join r%02d", s.now.Sub(t0), s.next-1))
	case k < 5:
		id := live[s.rnd.IntN(len(live))]
		s.reps[id].dead = true
		clear(s.reps[id].runs) // its runs die with it
		s.trace = append(s.trace, fmt.Sprintf("%v crash %s", s.now.Sub(t0), id))
	case k < 7:
		id := live[s.rnd.IntN(len(live))]
		d := time.Duration(s.rnd.Int64N(int64(3 * simLease)))
		s.reps[id].cutOff = s.now.Add(d)
		s.trace = append(s.trace, fmt.Sprintf("%v partition %s for %v", s.now.Sub(t0), id, d))
	default:
		id := live[s.rnd.IntN(len(live))]
		rp := s.reps[id]
		rp.leaving = true
		rp.m.leaveAt = s.now
		rp.led.leave()
		if rp.pending == nil {
			s.renew(rp, false)
		}
		s.trace = append(s.trace, fmt.Sprintf("%v leave %s", s.now.Sub(t0), id))
	}
	if s.faulty() {
		s.at(time.Duration(s.rnd.Int64N(int64(20*time.Second))), "fault", "")
	}
}

// run runs the ring for d of simulated time and returns the first
// violation ("" none).
func (s *sim) run(d time.Duration) string {
	for range 3 {
		s.start()
	}
	s.trace = append(s.trace, "0s start r00 r01 r02")
	s.at(10*time.Second, "fault", "")
	end := t0.Add(d)
	var unsettledSince time.Time
	for s.q.Len() > 0 && s.violated == "" {
		e := heap.Pop(&s.q).(simEvent)
		if e.at.After(end) {
			break
		}
		s.now = e.at
		s.events++
		switch e.kind {
		case "fault":
			s.fault()
		case "deliver":
			id, n, _ := cutLast(e.id)
			if rp := s.reps[id]; !rp.dead {
				s.deliver(rp, n)
				if rp.pending == nil {
					s.step(rp, false)
				}
			}
		case "expire":
			rp := s.reps[e.id]
			if !rp.dead && rp.led.alive && !s.now.Before(rp.led.deadline) {
				rp.led.lose(false, s.now)
			}
		case "runend":
			id, n, _ := cutLast(e.id)
			rp := s.reps[id]
			if tk, ok := rp.runs[n]; ok && !rp.dead {
				delete(rp.runs, n)
				delete(rp.stopping, n)
				rp.led.end(tk, nil)
				tk.cancel(nil)
				if rp.pending == nil {
					s.progress(rp)
				}
			}
		case "answer":
			rp := s.reps[e.id]
			if rp.dead {
				continue
			}
			tick := rp.pending.tick
			s.answer(rp)
			s.step(rp, tick)
			s.after(rp)
		case "tick":
			rp := s.reps[e.id]
			if rp.dead {
				continue
			}
			if rp.pending != nil {
				continue // the answer's event ticks again
			}
			rp.nextTick = s.now.Add(simRetry + time.Duration(s.rnd.Int64N(int64(jitterMax(simRetry, simRenew))+1)))
			if rp.led.alive && !s.now.Before(rp.led.deadline) {
				rp.led.lose(false, s.now) // the expire timer
			}
			rp.m.newTick()
			if s.renew(rp, true) {
				continue // decides once the answer is in
			}
			s.step(rp, true)
			s.after(rp)
		}
		s.cancelled()
		for i, a := range s.admitters() {
			for _, id := range s.ids() {
				rp := s.reps[id]
				if rp.dead || slices.Contains(a, id) {
					continue
				}
				for _, tk := range rp.runs {
					if tk.shard == i {
						a = append(a, id+" (a run)")
						break
					}
				}
			}
			if len(a) > 1 {
				s.violated = fmt.Sprintf("at %v shard %d admitted or run by %v", s.now.Sub(t0), i, a)
			}
		}
		if s.now.Sub(t0) > simFaultFor+time.Minute {
			complete := true
			for _, a := range s.admitters() {
				complete = complete && len(a) == 1
			}
			switch {
			case complete:
				unsettledSince = time.Time{}
			case unsettledSince.IsZero():
				unsettledSince = s.now
			case s.now.Sub(unsettledSince) > simSettle:
				s.violated = fmt.Sprintf("at %v not every shard admitted for %v: %v\n%s", s.now.Sub(t0), simSettle, s.admitters(), s.dump())
			}
		}
	}
	return s.violated
}

// after ends a tick: a leaver whose shards are all released deletes its
// membership Lease and stops; the others tick again at nextTick.
func (s *sim) after(rp *simReplica) {
	if rp.leaving && !rp.led.busy() {
		rp.led.lose(true, s.now)
		if lands, _ := s.reach(rp); lands && rp.member.known() {
			_ = s.store.del("member-"+rp.id, rp.member)
			s.changed()
		}
		rp.dead = true
		return
	}
	s.seq++
	at := rp.nextTick
	if at.Before(s.now) {
		at = s.now
	}
	heap.Push(&s.q, simEvent{at: at, seq: s.seq, kind: "tick", id: rp.id})
}

// step is one decision of rp, as the loop takes it after an event.
func (s *sim) step(rp *simReplica, tick bool) {
	if rp.led.alive && !s.now.Before(rp.led.deadline) {
		rp.led.lose(false, s.now)
	}
	s.decide(rp, tick)
	s.progress(rp)
	s.startRuns(rp)
}

// startRuns starts a run on some of the shards rp admits, each lasting
// 0–4 s (one in ten outlives GracePeriod), unless cancelled first.
func (s *sim) startRuns(rp *simReplica) {
	for i := range simShards {
		if s.rnd.IntN(3) != 0 {
			continue
		}
		tk, ok := rp.led.begin(context.Background(), "k"+strconv.Itoa(i), i, true, s.now)
		if !ok {
			continue
		}
		s.seq++
		n := s.seq
		rp.runs[n] = tk
		d := time.Duration(s.rnd.Int64N(int64(4 * time.Second)))
		if s.rnd.IntN(10) == 0 {
			d = simGrace + time.Duration(s.rnd.Int64N(int64(simGrace)))
		}
		heap.Push(&s.q, simEvent{at: s.now.Add(d), seq: n, kind: "runend", id: rp.id + "@" + strconv.Itoa(n)})
	}
}

// cancelled schedules the return of every run whose context was cancelled:
// mostly within 300 ms, sometimes up to simStop.
func (s *sim) cancelled() {
	for _, id := range s.ids() {
		rp := s.reps[id]
		for _, n := range slices.Sorted(maps.Keys(rp.runs)) {
			if rp.runs[n].ctx.Err() == nil || rp.stopping[n] {
				continue
			}
			rp.stopping[n] = true
			d := time.Duration(s.rnd.Int64N(int64(300 * time.Millisecond)))
			if s.rnd.IntN(5) == 0 {
				d = time.Duration(s.rnd.Int64N(int64(simStop))) // slow to honour it
			}
			s.seq++
			heap.Push(&s.q, simEvent{at: s.now.Add(d), seq: n, kind: "runend", id: id + "@" + strconv.Itoa(n)})
		}
	}
}

func cutLast(s string) (string, int, bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '@' {
			n, err := strconv.Atoi(s[i+1:])
			return s[:i], n, err == nil
		}
	}
	return s, 0, false
}

// simRingMinutes is the simulated time of one seed's run.
const simRingMinutes = simFaultFor + 3*time.Minute

// TestSimRing runs a fixed number of seeds of a ring under random faults,
// simRingMinutes each; SHARDING_SIM_SECONDS=n runs seeds for n seconds
// instead (hours, say), from SHARDING_SIM_FROM (default 0). A failing seed
// is named: TestSimReplay replays one (SHARDING_SIM_SEED).
func TestSimRing(t *testing.T) {
	seeds, budget := uint64(50), time.Duration(0)
	if v, err := strconv.Atoi(os.Getenv("SHARDING_SIM_SECONDS")); err == nil {
		seeds, budget = ^uint64(0), time.Duration(v)*time.Second
	}
	from, _ := strconv.ParseUint(os.Getenv("SHARDING_SIM_FROM"), 10, 64)
	start := time.Now()
	events, n := 0, 0
	for seed := from; seed-from < seeds; seed++ {
		if budget > 0 && time.Since(start) > budget {
			break
		}
		s := newSim(seed)
		if v := s.run(simRingMinutes); v != "" {
			t.Fatalf("seed %d: %s\nfaults:\n%s", seed, v, join(s.trace))
		}
		events += s.events
		n++
	}
	el := time.Since(start)
	t.Logf("%d seeds, %d events, %.0f simulated ring-minutes per second", n, events,
		float64(n)*simRingMinutes.Minutes()/el.Seconds())
}

// TestSimReplay runs one seed twice (SHARDING_SIM_SEED, default 7): the
// runs must be the same event for event.
func TestSimReplay(t *testing.T) {
	seed, err := strconv.ParseUint(os.Getenv("SHARDING_SIM_SEED"), 10, 64)
	if err != nil {
		seed = 7
	}
	a, b := newSim(seed), newSim(seed)
	va, vb := a.run(simRingMinutes), b.run(simRingMinutes)
	if va != vb || a.events != b.events || !slices.Equal(a.trace, b.trace) || a.store.rv != b.store.rv || a.dump() != b.dump() {
		t.Fatalf("seed %d ran twice differently: %q after %d events, %q after %d", seed, va, a.events, vb, b.events)
	}
	if va != "" {
		t.Errorf("seed %d: %s\nfaults:\n%s", seed, va, join(a.trace))
	}
}

func join(lines []string) string {
	out := ""
	for _, l := range lines {
		out += "  " + l + "\n"
	}
	return out
}

// dump describes the store and every replica, for a failure.
func (s *sim) dump() string {
	out := ""
	for i := range simShards {
		r := s.store.recs["shard-"+strconv.Itoa(i)]
		out += fmt.Sprintf("  shard %d: holder %q session %q next %q rv %s\n", i, r.p.s.holder, r.p.s.session, r.p.s.next, r.ref.rv)
	}
	for _, id := range s.ids() {
		rp := s.reps[id]
		m, ok := s.store.recs["member-"+id]
		active, draining := rp.led.states()
		out += fmt.Sprintf("  %s: dead %v leaving %v alive %v session %q deadline %v active %v draining %v aliveFor %d; lease %v %q confirmed %v; cutOff %v\n",
			id, rp.dead, rp.leaving, rp.led.alive, rp.led.session, rp.led.deadline.Sub(t0), active, draining, rp.m.aliveFor, ok, m.p.m.session, m.p.m.confirmed, rp.cutOff.Sub(t0))
	}
	return out
}
