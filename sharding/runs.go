package sharding

import (
	"context"
	"sync"
	"time"
)

// This file is the runs' ledger: which shards admit keys now, the runs in
// flight, and the session they run in. Handler, Owns and the event
// handler (replica.go) ask it whether a key may run; the loop (loop.go)
// changes it as the ring decides (step.go). Everything that admits,
// cancels or drains a run happens here, under one lock, so that a run never
// starts after the decision that stops it.
//
// The ledger guarantees that a key runs only while the session is alive
// and its shard active, and that a shard is reported for release, or a
// lapsed session replaced, only once its runs have all returned; why that
// keeps two replicas from running one key is docs/contract.md, "Why two
// replicas never run one key at once".

// The states of one shard, as this replica sees it.
const (
	shardFree     uint8 = iota // not ours
	shardActive                // ours: keys admitted and run
	shardDraining              // being given up: no key admitted, runs finishing
)

type shard struct {
	state     uint8
	cancelled bool      // draining: the runs were cancelled at graceEnd
	inflight  int       // runs of this shard in flight
	graceEnd  time.Time // draining: runs are cancelled from here on
}

type run struct {
	shard  int
	cancel context.CancelCauseFunc
}

// ledger is the runs' bookkeeping. Its zero value holds no shard; init
// sizes it. All its methods are safe for concurrent use.
type ledger struct {
	mu sync.Mutex // protects the fields below
	// alive is true while the session is continuous: a renewal sent less
	// than RenewDeadline ago succeeded. Runs start only while it is true.
	alive    bool
	joined   bool      // a session has begun once
	deadline time.Time // alive ends here unless a renewal succeeds
	session  string    // the session the shard Leases name
	state    []shard   // one per shard
	flight   map[uint64]run
	nextRun  uint64
	inflight int            // runs in flight, all shards
	gone     map[string]int // deleted objects' keys waiting for a run → shard
	// isLeaving is set when Run's context ends: no shard is taken, and
	// each held one is handed over.
	isLeaving bool
	// informers are the running sharded informers; filled[s] is true
	// once every one of them has synced shard s (setFilled). A shard's
	// keys are admitted only while it is active and filled.
	informers []*informer
	infGen    int // counts the changes of informers
	filled    []bool
	// lapsed[s] is when the session ended while shard s was held (zero
	// if it was not, or s was held again since): see keepWarm.
	lapsed []time.Time
	// work and pending are the shards' load as it is measured (load.go):
	// the handler time of their runs, and the keys waiting for a run.
	// since[s] is when shard s was first observed held, and seed[s] the
	// work its previous holder reported when it was acquired.
	work    []workMeter
	since   []time.Time
	seed    []time.Duration
	pending pendingKeys
}

func (b *ledger) init(shards int) {
	b.state = make([]shard, shards)
	b.flight = make(map[uint64]run)
	b.gone = make(map[string]int)
	b.filled = make([]bool, shards)
	b.lapsed = make([]time.Time, shards)
	b.work = make([]workMeter, shards)
	b.since = make([]time.Time, shards)
	b.seed = make([]time.Duration, shards)
	b.pending.init(shards)
}

// admitsLocked reports whether keys of shard s may start running at now:
// held, synced in every running sharded informer, and alive. b.mu must be
// held.
func (b *ledger) admitsLocked(s int, now time.Time) bool {
	return b.alive && now.Before(b.deadline) && b.state[s].state == shardActive && b.filled[s]
}

// activeLocked returns the shards whose keys are admitted: active and
// filled. b.mu must be held.
func (b *ledger) activeLocked() []int {
	var out []int
	if !b.alive {
		return out
	}
	for i := range b.state {
		if b.state[i].state == shardActive && b.filled[i] {
			out = append(out, i)
		}
	}
	return out
}

// active returns the sorted shards whose keys are admitted now.
func (b *ledger) active() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.activeLocked()
}

// owns reports whether key, of shard s if found, would run at now; a key
// not found is looked up among the deleted ones.
func (b *ledger) owns(key string, s int, found bool, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !found {
		s, found = b.gone[key]
	}
	return found && b.admitsLocked(s, now)
}

// admit is owns, and records an owned key as waiting (queued) under the
// same lock: the caller adds it to the queue once admit returns, and a
// worker may begin it at once.
func (b *ledger) admit(key string, s int, found bool, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !found {
		s, found = b.gone[key]
	}
	ok := found && b.admitsLocked(s, now)
	if ok {
		b.queuedLocked(s, now, key)
	} else {
		b.oweLocked(key, s, found, now) // held, not admitted for now: run once it is (refusedLocked)
	}
	return ok
}

// event reports whether an informer event for key, of shard s, is admitted
// at now, and remembers the shard of a deleted key (for Handler and Owns).
// If queue is set, the caller adds an admitted key to the queue once event
// returns, and event records it as waiting (queued) under the same lock:
// before the Add, as a worker may begin it at once.
func (b *ledger) event(key string, s int, deleted, queue bool, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	ok := b.admitsLocked(s, now)
	if ok && deleted {
		b.gone[key] = s
	}
	if ok && queue {
		b.queuedLocked(s, now, key)
	}
	if !ok && queue && !deleted {
		b.oweLocked(key, s, true, now) // an add refused while the shard is held: run once it is admitted
	}
	return ok
}

// refusedLocked records that key, of shard s if found, was refused at now
// (a run, or an event's add) and returns the catch-up keys to feed. A key
// of a shard still held in a live session, only not admitted for now (a
// renewal's answer awaited past the deadline, a sharded informer being
// filled), is owed a run: fed again once the shard is admitted, dropped
// with it if it is not (the session ends, the shard is given up, and its
// next holder catches it up). Forgotten, it would be lost: the queue has
// let it go, and no gain will enqueue it, as the shard was never lost.
// Any other key waits no more. b.mu must be held.
func (b *ledger) refusedLocked(key string, s int, found bool, now time.Time) []string {
	if b.pending.at == nil {
		return nil
	}
	if !b.oweLocked(key, s, found, now) {
		b.pending.begun(key)
	}
	return b.feedLocked(now)
}

// oweLocked records key, of shard s if found, as owed a run if its shard
// is held in a live session (see refusedLocked), and reports whether it
// did. The caller feeds the queue, or leaves it to the next begin or the
// loop's next sync. b.mu must be held.
func (b *ledger) oweLocked(key string, s int, found bool, now time.Time) bool {
	if b.pending.at == nil || !found || !b.alive || b.state[s].state != shardActive {
		return false
	}
	b.pending.idleUntil(now)
	b.pending.owe(key, s, now)
	return true
}

// ticket is one admitted run, from begin to end.
type ticket struct {
	id    uint64
	shard int
	key   string
	found bool // the key's object was in the store at begin
	start time.Time
	// catchUp is set on the run of a gained shard's key (load.go): its
	// time is not counted as the shard's work.
	catchUp bool
	// feed is the catch-up keys for the caller to add to the queue, once
	// begin has returned (also when it refused the run): one more for the
	// run that began (pendingKeys.take).
	feed []string
	// ctx is the run's context, which lose, adopt and drainScan cancel;
	// cancel is for the caller, once the run has returned and end has
	// recorded it.
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// begin starts a run of key (of shard s if found) at now, if it is
// admitted, and returns its ticket.
func (b *ledger) begin(ctx context.Context, key string, s int, found bool, now time.Time) (ticket, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tk := ticket{shard: s, key: key, found: found, start: now}
	if !found {
		tk.shard, found = b.gone[key]
	}
	if !found || !b.admitsLocked(tk.shard, now) {
		return ticket{feed: b.refusedLocked(key, tk.shard, found, now)}, false
	}
	tk.id = b.nextRun
	b.nextRun++
	tk.ctx, tk.cancel = context.WithCancelCause(ctx)
	b.flight[tk.id] = run{shard: tk.shard, cancel: tk.cancel}
	b.state[tk.shard].inflight++
	b.inflight++
	if b.pending.at != nil {
		if tk.catchUp = b.pending.begun(key); tk.catchUp {
			b.pending.moved = now
		}
		tk.feed = b.feedLocked(now)
	}
	return tk, true
}

// end records the end of run tk, which returned err at now, and counts
// its time as its shard's work (load.go). A deleted key (not found at
// begin) whose run succeeded is forgotten. It reports whether the
// loop waits for this: the shard's last run while it drains, or the last
// run while the session is over or the replica leaving.
func (b *ledger) end(tk ticket, err error, now time.Time) (poke bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := tk.shard
	if b.work != nil && !tk.catchUp { // a catch-up is the move's cost, not the shard's load (load.go)
		b.work[s].add(max(0, now.Sub(tk.start)), now)
	}
	delete(b.flight, tk.id)
	b.state[s].inflight--
	b.inflight--
	if !tk.found && err == nil {
		delete(b.gone, tk.key)
	}
	return (b.state[s].state == shardDraining && b.state[s].inflight == 0) ||
		(b.inflight == 0 && (!b.alive || b.isLeaving))
}

// cancelShardLocked cancels the runs of shard i. b.mu must be held.
func (b *ledger) cancelShardLocked(i int, cause error) {
	for _, r := range b.flight {
		if r.shard == i {
			r.cancel(cause)
		}
	}
}

// lose ends the session: no key of any shard is admitted any more and
// every run in flight is cancelled (ErrLeaseLost). Unless force, only once
// its deadline has passed at now. It reports whether it ended the session.
func (b *ledger) lose(force bool, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.alive || (!force && now.Before(b.deadline)) {
		return false
	}
	if !b.isLeaving {
		for i := range b.state {
			if b.state[i].state != shardFree {
				b.lapsed[i] = now
			}
		}
	}
	b.freeAllLocked()
	clear(b.gone)
	return true
}

// abandon stops everything without writing, as a crash would.
func (b *ledger) abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.freeAllLocked()
}

func (b *ledger) freeAllLocked() {
	b.alive = false
	for i := range b.state {
		b.state[i].state = shardFree
	}
	for _, r := range b.flight {
		r.cancel(ErrLeaseLost)
	}
}

// sessionState is what the loop's decisions need of the session.
type sessionState struct {
	alive    bool   // the session is continuous (see ledger.alive)
	session  string // its token
	inflight int    // runs in flight, all shards
	leaving  bool   // the replica leaves (Run's context ended)
}

// status returns the session's state.
func (b *ledger) status() sessionState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return sessionState{alive: b.alive, session: b.session, inflight: b.inflight, leaving: b.isLeaving}
}

// leaving reports whether the replica leaves.
func (b *ledger) leaving() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.isLeaving
}

// readiness returns whether a session has begun once, and whether one is
// alive now.
func (b *ledger) readiness() (joined, alive bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.joined, b.alive
}

// answered applies the success of membership write w, whose answer
// arrived at now, as acceptAnswer (session.go) decides; the session's
// deadline it sets is renewDeadline after w was sent.
func (b *ledger) answered(w sentWrite, now time.Time, renewDeadline time.Duration) answer {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := acceptAnswer(w, now, renewDeadline, liveSession{alive: b.alive, session: b.session, deadline: b.deadline})
	switch a {
	case answerJoined:
		b.alive, b.joined, b.session = true, true, w.session
	case answerIgnored:
		return a
	}
	b.deadline = w.at.Add(renewDeadline)
	return a
}

// leave marks the replica leaving: it takes no shard from now on, and
// keeps none warm. The loop drains its shards as it hands them over.
func (b *ledger) leave() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.isLeaving = true
	clear(b.lapsed)
}

// drain starts giving up the given active shards: no key of theirs is
// admitted from now on, and their runs are cancelled at end (drainScan).
func (b *ledger) drain(shards []int, end time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, i := range shards {
		if b.state[i].state == shardActive {
			b.state[i] = shard{state: shardDraining, inflight: b.state[i].inflight, graceEnd: end}
		}
	}
}

// busy reports whether a shard is held or a run is in flight.
func (b *ledger) busy() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inflight > 0 {
		return true
	}
	for i := range b.state {
		if b.state[i].state != shardFree {
			return true
		}
	}
	return false
}

// states returns the active and the draining shards.
func (b *ledger) states() (active, draining []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.state {
		switch b.state[i].state {
		case shardActive:
			active = append(active, i)
		case shardDraining:
			draining = append(draining, i)
		}
	}
	return active, draining
}

// held returns the shards held, active or draining.
func (b *ledger) held() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	for i := range b.state {
		if b.state[i].state != shardFree {
			out = append(out, i)
		}
	}
	return out
}

// adopt brings the shard states in line with v, as sessionOver and
// adoptShard (session.go) decide, at now; unknown is the machine's
// tried.unknown, whose entries it clears for the shards it takes. It
// returns false if v shows the session is over: the caller ends it.
func (b *ledger) adopt(v *view, self string, unknown []string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if sessionOver(v, self, b.alive, b.session) {
		return false
	}
	me := adopter{self: self, session: b.session, alive: b.alive, leaving: b.isLeaving}
	for i := range v.shards {
		st := &b.state[i]
		switch adoptShard(v.shards[i], me, st.state, unknown[i]) {
		case adoptFree:
			st.state = shardFree
			b.cancelShardLocked(i, ErrLeaseLost)
		case adoptActive:
			st.state = shardActive
			b.lapsed[i] = time.Time{}
			unknown[i] = ""
		case adoptDraining:
			*st = shard{state: shardDraining, inflight: st.inflight, graceEnd: now}
			unknown[i] = ""
		}
	}
	return true
}

// acquired records that shard i's acquisition in session was answered: it
// is held, unless the session ended or the replica started leaving since.
func (b *ledger) acquired(i int, session string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.alive && b.session == session && !b.isLeaving && b.state[i].state == shardFree {
		b.state[i] = shard{state: shardActive, inflight: b.state[i].inflight}
		b.lapsed[i] = time.Time{}
	}
}

// drainScan applies drainStep (session.go) to every shard at now: it
// cancels the runs of the draining shards whose grace period is over, and
// returns those to release (no run left), the session they were held in,
// and the earliest grace end still ahead (zero if none).
func (b *ledger) drainScan(now time.Time) (release []int, session string, wakeAt time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.state {
		s := &b.state[i]
		switch drainStep(*s, now) {
		case drainRelease:
			release = append(release, i)
		case drainCancel:
			s.cancelled = true
			b.cancelShardLocked(i, ErrGraceOver)
		case drainWait:
			if wakeAt.IsZero() || s.graceEnd.Before(wakeAt) {
				wakeAt = s.graceEnd
			}
		}
	}
	return release, b.session, wakeAt
}

// released records that shard i's release was answered.
func (b *ledger) released(i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state[i].state == shardDraining {
		b.state[i].state = shardFree
	}
}
