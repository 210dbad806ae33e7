package sharding

import (
	"cmp"
	"slices"
	"time"
)

// This file is the replica's state machine: every decision the loop
// (loop.go) takes on the ring, as a step of (the observed ring, the
// machine's own state, now) that returns actions as data. A step does no
// I/O, reads no clock, starts no goroutine and takes no lock; the
// executor (exec.go) carries its actions out and tells the machine their
// answers (the answer methods below), which the next step reads. The
// functions it is built of (decide.go, session.go, shardcount.go) are
// pure as well, and tested against tables.
//
// A decision has two halves, because the runs' ledger adopts the view in
// between, under its lock (ledger.adopt: the session's deadline timer may
// end the session at any instant, and the ledger alone decides what a
// shard's state is then). Adoption stays out of the machine on purpose: a
// decision of it made here, on the session as read before, could reach
// the ledger after the timer ended that session, and carried out then
// would hold again a shard the timer has just freed; so the ledger would
// have to check again, under its lock, that the session is still the one
// decided for, and decide again otherwise: the decision twice, for a
// second lock and a copy of the shard states per decision.
//
//  1. check: a refusal of the ring, and the members to fence. The
//     executor fences them, and drops those it fenced from the view.
//  2. Step: the count switch, the plan, the shards to drain, to acquire
//     and to prefetch, from the view and the session as the ledger has it.

// settledTicks is the number of ticks a session has lasted before its
// replica takes shards, or starts a switch of the ring's count: the others
// count it from its first renewal, its second tick, so a newcomer waits
// one more tick to see the renewals of the members that started with it,
// and replicas started together deal each shard out once.
const settledTicks = 3

// machineConf is what the machine knows of its replica's Config.
type machineConf struct {
	self            string   // Config.Identity
	ring, namespace string   // Config.Name and Namespace, for refusals
	own             ringConf // Config.Shards and Config.Field
	// Config.LeaseDuration, HandoffTimeout and GracePeriod.
	leaseDuration, handoffWait, grace time.Duration
	balance                           Balance // Config.Balance
}

// machine is one replica's decisions and the state they carry from one
// step to the next. Touched only by the loop goroutine.
type machine struct {
	conf     machineConf
	aliveFor int       // ticks since the session began
	plans    planned   // the ring's planned moves
	tried    tried     // writes that failed since the last tick
	fenceAt  time.Time // the next time a member may be fenced; zero if none
	leaveAt  time.Time // when the leave began; zero while not leaving
	// sessionStart is when the join that started the session was sent:
	// the acquireTime of every renewal of the session.
	sessionStart time.Time
	// stopped is set once the replica leaves on an error (a refusal, a
	// request refused for LeaseDuration): the ring is refused no more.
	stopped bool
	// work is each shard's work as a report last showed it (0 unknown),
	// given to the ledger with an acquisition (ledger.seedWork).
	work []time.Duration
	// bal is the step's balance, kept for its storage only (balance.fill).
	bal balance
}

func newMachine(c machineConf) machine {
	return machine{conf: c, tried: newTried(c.own.shards), work: make([]time.Duration, c.own.shards)}
}

// observation is the ring and the session as one step sees them.
type observation struct {
	now  time.Time
	tick bool  // a period's tick (else a reaction to a change)
	v    *view // the ring, as the watch has it, less the members fenced
	// session and active are the ledger's, after it adopted v.
	session sessionState
	active  []int
}

// fenceWrite deletes a member's Lease at the version the view has.
type fenceWrite struct {
	id  string
	ref leaseRef
}

// acquireWrite makes shard i's Lease name this replica in session, on
// the condition that it is still s. work is the shard's work as the last
// report showed it (0 unknown), which its measure starts from
// (ledger.seedWork).
type acquireWrite struct {
	i       int
	s       shardInfo
	session string
	work    time.Duration
}

// ringWrite sets the ring's Lease, at ref, to the count shards in
// generation gen, switching to target (0: none); start is true for the
// write that starts a switch, false for the one that completes it.
type ringWrite struct {
	ref                 leaseRef
	shards, gen, target int
	start               bool
}

// sealWrite seals shard k, whose Lease is s, in generation gen.
type sealWrite struct {
	k   shardKey
	s   shardInfo
	gen int
}

// releaseWrite empties shard i's Lease at ref, naming the planned taker
// next ("" none), sealed in generation seal if not negative.
type releaseWrite struct {
	i           int
	ref         leaseRef
	next        string
	seal        int
	transitions int32 // the Lease's LeaseTransitions, kept by the release
}

// actions is what one step asks of the executor, in this order: the
// ring's Lease and the seals of a count switch, the shards to drain (no
// key admitted from now on, runs cancelled at graceEnd), then the
// acquisitions. modeChanged tells it to log the new mode.
type actions struct {
	modeChanged bool
	mode        ringMode
	ring        ringInfo // the ring's Lease the step saw
	ringWrite   *ringWrite
	seal        []sealWrite
	drain       []int
	graceEnd    time.Time
	acquire     []acquireWrite
	// moved are the causes of the planned moves whose drain begins
	// (Metrics.Moves), one per move.
	moved []string
}

// check is the first half of a decision on v at now: the members to
// fence (fences), or a refusal of the ring (ringConflict). A fence that
// failed since the last tick is not tried again at that version. It sets
// the next instant a fence falls due.
func (m *machine) check(v *view, now time.Time) (fence []fenceWrite, refuse error) {
	if !m.stopped {
		if err := ringConflict(v, m.conf.ring, m.conf.namespace, m.conf.self, m.conf.own); err != nil {
			return nil, err
		}
	}
	due, next := fences(v, m.conf.self, m.conf.leaseDuration, now, m.tried.fence)
	m.fenceAt = next
	for _, id := range due {
		fence = append(fence, fenceWrite{id: id, ref: v.members[id].ref})
	}
	return fence, nil
}

// Step is the second half: it moves towards this replica's fair share. It
// fills the shards planned for it (prefetch, in m.plans), hands over those
// planned for others once their taker has synced them (handoffs), and
// takes free shards; at a tick it counts the tick for a newcomer's wait
// (moves). A leaving replica only hands over. A replica whose count is
// not the ring's takes no shard and gives up its own (shardcount.go).
func (m *machine) Step(o observation) actions {
	var a actions
	st, v, now, self := o.session, o.v, o.now, m.conf.self
	if !st.alive {
		m.plans.reset(m.conf.own.shards)
		return a
	}
	if o.tick && !st.leaving {
		m.aliveFor++
	}
	a.mode = m.reshape(v, &a)
	if me, ok := v.members[self]; ok && st.leaving && me.session == st.session && !me.leaving {
		// The leave is written but the watch has not shown it yet: plan
		// as the others will once it has (their copies of the plan then
		// name the same takers), rather than give every shard up at once
		// with no taker, a move that costs its taker a list. v is this
		// decision's copy of the ring.
		me.leaving = true
		v.members[self] = me
	}
	m.bal.fill(v, m.conf.own.shards)
	b := &m.bal
	to, causes := m.plan(v, b)
	m.plans.update(to, causes, now)
	k, counted := slices.BinarySearch(b.ids, self)
	m.plans.counted = counted && v.members[self].session == st.session
	if m.plans.counted {
		m.plans.share = b.share(k)
		if b.byLoad {
			m.plans.share = b.loadShare(v, to, k)
		}
	}
	give, acquire := moves(v, *b, to, mover{self: self, aliveFor: m.aliveFor, active: o.active, failed: m.tried.shard})
	drain, next := handoffs(v, to, give, handoffClock{since: m.plans.since, now: now, wait: m.conf.handoffWait})
	m.plans.handoffAt = next
	if st.leaving {
		// Leaving, the shards no one is planned to take (no other member
		// counts) are given up at once, as are all of them once the
		// leave's bound is over.
		m.plans.prefetch, acquire = nil, nil
		bound := m.leaveAt.Add(m.conf.handoffWait)
		for _, i := range o.active {
			if to[i] == "" || !now.Before(bound) {
				drain = append(drain, i)
			}
		}
		if now.Before(bound) { // a bound past would wake the loop at once, for ever
			m.plans.handoffAt = earliest(m.plans.handoffAt, bound)
		}
	} else {
		m.plans.prefetch = prefetch(v, to, self)
	}
	if a.mode != modeLive {
		// The ring's count is switching away from this replica's
		// (closing) or is another (waiting): no shard of this count is
		// taken, and an active one is given up at once, with no taker
		// (its release seals it, shardcount.go). Waiting, the replica
		// fills the share it will be dealt once the ring has its count.
		acquire, drain, to = nil, o.active, make([]string, len(to))
		m.plans.handoffAt, m.plans.prefetch = time.Time{}, nil
		if a.mode == modeWaiting && !st.leaving && counted {
			m.plans.prefetch = b.deal(v)[k]
		}
	}
	drain = slices.Compact(slices.Sorted(slices.Values(drain))) // a leaver's bound may name a shard twice
	for _, i := range drain {
		m.plans.giveTo[i] = to[i]
		if to[i] != "" {
			a.moved = append(a.moved, cmp.Or(m.plans.cause[i], causeLoad))
		}
	}
	a.drain, a.graceEnd = drain, now.Add(m.conf.grace)
	for _, i := range acquire {
		a.acquire = append(a.acquire, acquireWrite{i: i, s: v.shards[i], session: st.session, work: m.work[i]})
	}
	return a
}

// plan decides the ring's planned moves on v, and the cause of each (by
// shard), by load or by count as Config.Balance and the view say
// (planLoad, plan); it sets b.byLoad while by load, keeps the plan by
// load for Status, and the shards' work as last reported.
func (m *machine) plan(v *view, b *balance) (to, causes []string) {
	var lp loadPlan
	if m.conf.balance.byLoad() {
		to, lp = b.planLoad(v)
	} else {
		lp.work, lp.known = shardWork(v)
		lp.fallback = "Config.Balance: by count"
	}
	for i, w := range lp.work {
		if lp.known[i] {
			m.work[i] = w
		}
	}
	m.plans.load = lp
	if to == nil {
		to = b.plan(v)
		return to, b.causes(v, to)
	}
	b.byLoad = true
	causes = make([]string, len(to))
	for _, mv := range lp.moves {
		causes[mv.shard] = mv.cause
	}
	return to, causes
}

// reshape decides this replica's writes in a switch of the ring's count
// (reshard) on v, into a, and follows its mode. It returns the mode.
func (m *machine) reshape(v *view, a *actions) ringMode {
	ri := v.ringLease
	own := m.conf.own.shards
	mode := modeOf(ri, own)
	a.ring = ri
	if mode != m.plans.mode {
		m.plans.mode, a.modeChanged = mode, true
	}
	step := reshard(v, m.conf.self, own, m.aliveFor >= settledTicks)
	if (step.start || step.complete) && m.tried.ring != ri.ref.rv {
		w := ringWrite{ref: ri.ref, shards: ri.conf.shards, gen: ri.gen, target: own, start: step.start}
		if step.complete {
			w.shards, w.gen, w.target = ri.target, ri.gen+1, 0
		}
		a.ringWrite = &w
	}
	live := ri.conf.shards
	for _, i := range step.seal {
		s := leaseOf(v, own, live, i)
		k := shardKey{live, i}
		if m.tried.seal[k] == versionOf(s) {
			continue
		}
		a.seal = append(a.seal, sealWrite{k: k, s: s, gen: ri.gen})
	}
	return mode
}

// drained is a shard whose runs have all returned, with its Lease as
// the view has it now.
type drained struct {
	i int
	s shardInfo
}

// releases decides which drained shards are released in session, with ri
// the ring's Lease: a switch of the count away from this replica's seals
// each release in the ring's generation.
func (m *machine) releases(ds []drained, session string, ri ringInfo) []releaseWrite {
	seal := -1
	if modeOf(ri, m.conf.own.shards) != modeLive {
		seal = ri.gen
	}
	var out []releaseWrite
	for _, d := range ds {
		if !mayRelease(d.s, m.conf.self, session, m.tried.shard[d.i]) {
			continue
		}
		out = append(out, releaseWrite{i: d.i, ref: d.s.ref, next: m.plans.giveTo[d.i], seal: seal, transitions: d.s.transitions})
	}
	return out
}

// The answers: the executor tells the machine how each write ended.

// fenceFailed records a fence that failed: it is not tried again at that
// version before the next tick.
func (m *machine) fenceFailed(w fenceWrite) { m.tried.fence[w.id] = w.ref }

// acquireFailed records an acquisition that failed; unknown is true when
// the failure says nothing of whether it landed (not a Conflict, not an
// AlreadyExists): the Lease may then name this session (adoptShard).
func (m *machine) acquireFailed(w acquireWrite, unknown bool) {
	m.tried.shard[w.i] = versionOf(w.s)
	if unknown {
		m.tried.unknown[w.i] = w.session
	}
}

// releaseFailed records a release that failed: it is not tried again at
// that version before the next tick.
func (m *machine) releaseFailed(w releaseWrite) { m.tried.shard[w.i] = w.ref.rv }

// releaseDone records a release that was answered.
func (m *machine) releaseDone(i int) { m.plans.giveTo[i] = "" }

// ringFailed and sealFailed record a count switch's write that failed.
func (m *machine) ringFailed(w ringWrite) { m.tried.ring = w.ref.rv }
func (m *machine) sealFailed(w sealWrite) { m.tried.seal[w.k] = versionOf(w.s) }

// renewal decides the tick's membership write at now, for the session st
// as the ledger has it (membershipWrite, session.go): a renewal of st's
// session, a join in session fresh (a new token the executor drew), or
// nothing (false). The executor fills in the version it writes over.
func (m *machine) renewal(st sessionState, now time.Time, fresh string) (memberPut, bool) {
	write, join := membershipWrite(st.alive, st.leaving, st.inflight)
	if !write {
		return memberPut{}, false
	}
	w := memberPut{session: st.session, start: m.sessionStart, now: now,
		mark: memberMark{synced: m.plans.synced, leaving: st.leaving}}
	if join {
		w.session, w.start = fresh, now
	}
	return w, true
}

// joined records that the join w was answered: a new session begins.
func (m *machine) joined(w memberPut) { m.aliveFor, m.sessionStart = 0, w.start }

// newTick starts a period: the writes that failed may be tried again.
func (m *machine) newTick() { m.tried.reset() }

// wakeAt is when the machine next needs a step without a change of the
// view: a fence or a planned move's bound falls due (zero if none).
func (m *machine) wakeAt() time.Time { return earliest(m.fenceAt, m.plans.handoffAt) }

// planned is the machine's record of the ring's planned moves (plan,
// decide.go).
type planned struct {
	to    []string    // the plan at the last decision
	since []time.Time // when shard i was first seen planned for to[i]
	// giveTo[i] is the taker a draining shard was handed over to, named
	// in its release (annotationNext); "" none.
	giveTo []string
	// prefetch are the shards filled for a planned move, not held;
	// synced those of them every sharded informer has synced (sync,
	// exec.go), written with the next membership write (memberMark).
	prefetch, synced []int
	handoffAt        time.Time // the next handoffWait bound due; zero if none
	// counted is whether this replica's session counted in the ring at
	// the last decision (counts, decide.go), and share its share then.
	counted bool
	share   int
	// mode is the replica's mode in the ring at the last decision
	// (shardcount.go), kept across reset (a lapse does not change the
	// ring's count).
	mode ringMode
	// cause[i] is the cause of shard i's planned move, as it was when the
	// move was first planned; load the last plan by load (or why the ring
	// balances by count), for Status.
	cause []string
	load  loadPlan
}

// reset forgets the plan (the session is over: nothing is prefetched).
func (p *planned) reset(shards int) {
	p.to, p.since, p.giveTo = make([]string, shards), make([]time.Time, shards), make([]string, shards)
	p.cause = make([]string, shards)
	p.prefetch, p.synced, p.handoffAt, p.counted = nil, nil, time.Time{}, false
}

// update records the plan to, and its causes, decided at now.
func (p *planned) update(to, causes []string, now time.Time) {
	if len(p.to) != len(to) {
		p.reset(len(to))
	}
	for i := range to {
		if to[i] != p.to[i] {
			p.to[i], p.since[i], p.cause[i] = to[i], now, causes[i]
		}
	}
}

// earliest returns the earlier of a and b, ignoring a zero one.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
