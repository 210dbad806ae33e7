package sharding

import (
	"context"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// This file is the executor: it carries out the machine's actions
// (step.go) and tells it their answers. It makes the writes through
// leaseIO (leases.go), applies each answer to the view at once, changes
// the runs' ledger (runs.go), and keeps the queue and the sharded
// informers in line with the shards the ledger holds and admits (sync).
// It decides nothing the machine could: each method is one action.

// fence deletes the membership Lease of every member the machine found due
// (ownership case 3, docs/contract.md), and drops it from the view l.v:
// its shards are free in this decision. The delete is conditioned on the
// UID and resourceVersion seen, as the member's renewals are, so exactly
// one of the two wins.
func (l *loop) fence(ctx context.Context, fence []fenceWrite) {
	for _, w := range fence {
		err := l.io.deleteMember(ctx, w.id, w.ref)
		if err == nil || apierrors.IsNotFound(err) {
			klog.V(2).InfoS("sharding: fenced a member that stopped renewing", "ring", l.cfg.Name, "identity", l.cfg.Identity, "member", w.id)
			l.v.dropMember(w.id)
			l.ring.forget(w.id, w.ref)
			inc(l.cfg.Metrics.Fences)
			continue
		}
		l.m.fenceFailed(w)
	}
}

// carryOut carries out one step's actions, in their order.
func (l *loop) carryOut(ctx context.Context, a actions) {
	if a.modeChanged {
		l.logMode(a.mode, a.ring)
	}
	if w := a.ringWrite; w != nil {
		l.writeRing(ctx, *w, a.ring)
	}
	for _, w := range a.seal {
		out, err := l.io.sealShard(ctx, w, l.now())
		if err != nil {
			l.m.sealFailed(w)
			continue
		}
		l.ring.upsert(out)
	}
	if len(a.drain) > 0 {
		klog.V(2).InfoS("sharding: handing shards over", "ring", l.cfg.Name, "identity", l.cfg.Identity, "shards", a.drain)
		l.runs.drain(a.drain, a.graceEnd)
	}
	if f := l.cfg.Metrics.Moves; f != nil {
		for _, c := range a.moved {
			inc(f(c))
		}
	}
	for _, w := range a.acquire {
		l.acquire(ctx, w)
	}
}

// logMode follows the replica's mode in the ring: logged at default
// verbosity, and Metrics.Mismatch set, when it changes.
func (l *loop) logMode(mode ringMode, ri ringInfo) {
	if l.refusal.get() == nil {
		waiting := 0.0
		if mode == modeWaiting {
			waiting = 1
		}
		setGauge(l.cfg.Metrics.Mismatch, waiting)
	}
	switch mode {
	case modeWaiting:
		klog.InfoS("sharding: the ring has another shard count: this replica holds nothing, fills the share it will take, and waits until no replica of the ring's count remains",
			"ring", l.cfg.Name, "identity", l.cfg.Identity, "shards", l.shards, "ringShards", ri.conf.shards, "generation", ri.gen, "target", ri.target)
	case modeClosing:
		klog.InfoS("sharding: the ring is switching to another shard count: this replica releases its shards, sealed",
			"ring", l.cfg.Name, "identity", l.cfg.Identity, "shards", l.shards, "target", ri.target, "generation", ri.gen)
	default:
		klog.InfoS("sharding: the ring has this replica's shard count", "ring", l.cfg.Name, "identity", l.cfg.Identity, "shards", l.shards, "generation", ri.gen)
	}
}

// writeRing writes the ring's Lease, ri as the step saw it, to start or
// complete a switch of its count.
func (l *loop) writeRing(ctx context.Context, w ringWrite, ri ringInfo) {
	out, err := l.io.writeRing(ctx, w, l.now())
	if err != nil {
		l.m.ringFailed(w) // a Conflict: the watch brings the newer version
		return
	}
	l.ring.upsert(out)
	if w.start {
		klog.InfoS("sharding: started switching the ring's shard count: no replica of its count remains",
			"ring", l.cfg.Name, "identity", l.cfg.Identity, "from", ri.conf.shards, "to", l.shards, "generation", ri.gen)
	} else {
		klog.InfoS("sharding: switched the ring's shard count: every shard Lease of the old count is sealed",
			"ring", l.cfg.Name, "identity", l.cfg.Identity, "from", ri.conf.shards, "to", ri.target, "generation", ri.gen+1)
	}
}

// acquire writes shard w.i's Lease to name this replica and its session,
// on the condition that it is still the object and version the view
// showed (or still missing: a create, which fails if another replica was
// faster).
func (l *loop) acquire(ctx context.Context, w acquireWrite) {
	out, err := l.io.acquireShard(ctx, w, l.now())
	if err != nil {
		// Someone else was faster (the watch brings its version), or the
		// API failed, maybe after the write landed.
		l.m.acquireFailed(w, !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err))
		return
	}
	l.ring.upsert(out) // our write, from the server's answer
	l.runs.acquired(w.i, w.session)
	l.runs.seedWork(w.i, w.work)
	inc(l.cfg.Metrics.Gained)
	klog.V(2).InfoS("sharding: acquired a shard", "ring", l.cfg.Name, "identity", l.cfg.Identity, "shard", w.i)
}

// progress releases the draining shards whose runs have all returned, as
// the machine decides (releases), and cancels the runs of those whose
// grace period is over (drainStep). It returns when it next needs to run
// (the earliest grace end still ahead), or zero.
func (l *loop) progress(api context.Context) time.Time {
	now := l.now()
	release, session, wakeAt := l.runs.drainScan(now)
	if len(release) == 0 {
		return wakeAt
	}
	ctx, cancel := context.WithTimeout(api, l.cfg.RenewDeadline)
	defer cancel()
	ds := make([]drained, len(release))
	for k, i := range release {
		ds[k] = drained{i: i, s: l.ring.shard(i)}
	}
	for _, w := range l.m.releases(ds, session, l.ring.ringInfo()) {
		out, err := l.io.releaseShard(ctx, w, now)
		if err != nil {
			// Changed or deleted under us (a deleted Lease answers 409
			// too, for the UID): the session is over, or this is our own
			// earlier release whose answer was lost. Either way the
			// watch brings the newer version, and adopt frees the shard
			// then: freeing it now, while the view may still show the
			// version that names us, would let adopt take it back.
			// Another failure is retried after the next tick.
			l.m.releaseFailed(w)
			continue
		}
		l.ring.upsert(out) // our write, from the server's answer
		l.runs.released(w.i)
		l.m.releaseDone(w.i)
		inc(l.cfg.Metrics.Released)
		klog.V(2).InfoS("sharding: released a shard", "ring", l.cfg.Name, "identity", l.cfg.Identity, "shard", w.i)
	}
	return wakeAt
}

// renew renews the membership Lease, or, if the session has lapsed and
// every run of it has returned, starts a new session (ownership case 2);
// the machine says which (renewal). A session never comes back
// once it has ended: an update carries the UID and resourceVersion of our
// Lease (leaseRef), so it cannot re-create a Lease another replica
// deleted, and finding the Lease gone ends the session at once; a
// renewal's success counts only if the session is still alive when the
// answer arrives (acceptAnswer).
func (l *loop) renew(ctx context.Context) {
	if w, ok := l.sendRenewal(ctx); ok {
		l.renewed(ctx, w)
	}
}

// renewal is a membership write sent, with its answer: the simulation
// (sim_test.go) holds it back for a while before renewed.
type renewal struct {
	w        memberPut
	wasAlive bool      // the session was alive when it was sent
	sent     time.Time // when it was sent
	out      *coordinationv1.Lease
	err      error
}

// sendRenewal makes the membership write the machine decides, if any.
func (l *loop) sendRenewal(ctx context.Context) (renewal, bool) {
	st := l.runs.status()
	sent := l.now()
	w, ok := l.m.renewal(st, sent, l.newSession())
	if !ok {
		return renewal{}, false
	}
	w.known = l.member
	out, err := l.io.writeMember(ctx, w)
	return renewal{w: w, wasAlive: st.alive, sent: sent, out: out, err: err}, true
}

// renewed applies the answer of the membership write r.
func (l *loop) renewed(ctx context.Context, r renewal) {
	if r.err != nil {
		l.obs.memberWrite(r.err)
		if l.memberLost(ctx, r.err) && r.wasAlive {
			l.lose(true)
		}
		return
	}
	l.obs.memberWrite(nil)
	l.member = refOf(r.out)
	l.ring.upsert(r.out) // our write, from the server's answer
	switch l.runs.answered(sentWrite{at: r.sent, wasAlive: r.wasAlive, session: r.w.session}, l.now(), l.cfg.RenewDeadline) {
	case answerIgnored:
		return
	case answerJoined:
		l.m.joined(r.w)
	}
	deadline := r.sent.Add(l.cfg.RenewDeadline)
	if l.expireAt != nil {
		l.expireAt(deadline) // the simulation's timer
		return
	}
	if l.expire == nil {
		rp := l.Replica
		l.expire = time.AfterFunc(time.Until(deadline), func() {
			klog.V(2).InfoS("sharding: no renewal answered within RenewDeadline: stops admitting keys", "ring", rp.cfg.Name, "identity", rp.cfg.Identity)
			rp.lose(false)
		})
	} else {
		l.expire.Reset(time.Until(deadline))
	}
}

// memberLost learns what became of our membership Lease after a write of
// it failed with err (afterMemberError, afterMemberGet: session.go), and
// reports whether the Lease it named is gone: our session, if any, is then
// over.
func (l *loop) memberLost(ctx context.Context, err error) bool {
	switch afterMemberError(err) {
	case memberGone:
		l.member = leaseRef{} // create it next time
		return true
	case memberRead:
		cur, gerr := l.io.getMember(ctx)
		next, gone := afterMemberGet(l.member, cur, gerr)
		l.member = next
		return gone
	}
	return false
}

// refuseRing records the refusal err: Ready fails with it from now on,
// Metrics.Mismatch is 1, and it is logged at default verbosity.
func (l *loop) refuseRing(err error) {
	if !l.refusal.set(err) {
		return
	}
	setGauge(l.cfg.Metrics.Mismatch, 1)
	klog.ErrorS(err, "sharding: refusing the ring: it has another field, or was mixed outside its protocol",
		"ring", l.cfg.Name, "identity", l.cfg.Identity, "namespace", l.cfg.Namespace, "shards", l.shards, "field", l.field)
}

// sync brings the queue and the sharded informers in line with the
// shards held, in three steps:
//
//  1. The keys of the shards no longer admitted (given up, lost) leave
//     the queue, while their objects are still in the informers (a
//     draining shard keeps its objects until it is released).
//  2. Every running sharded informer follows the held shards (active or
//     draining), the warm ones (lost with a lapsed session, see keepWarm)
//     and the prefetched ones (planned for this replica, see plan): it
//     drops the objects of the others, without events, and starts filling
//     the gained ones.
//  3. A held shard is filled once every running sharded informer has
//     synced it; a shard that becomes admitted (active and filled) owes
//     all its objects a run, since their events went to another replica,
//     or came before the shard was admitted: they are fed to the queue
//     as runs begin, so that events do not wait behind them (load.go).
//
// It then tells OnChange.
func (l *loop) sync() {
	l.admitted()
	held := l.runs.held()
	fill := l.warm(held)
	var pre []int // prefetched: filled for a planned move, not held
	for _, s := range l.m.plans.prefetch {
		if !slices.Contains(fill, s) {
			pre = append(pre, s)
		}
	}
	fill = append(fill, pre...)
	slices.Sort(fill)
	infs, gen := l.runs.running()
	// Nothing is filled until the primary informer runs: before that
	// (controller-runtime has not started it yet), the cache lacks every
	// shard.
	filled := make([]bool, l.shards)
	if slices.Contains(infs, l.primaryInformer()) {
		for _, s := range fill {
			filled[s] = true
		}
	}
	for _, inf := range infs {
		inf.SetShards(fill)
		for _, s := range fill {
			filled[s] = filled[s] && inf.Synced(s)
		}
	}
	// A prefetched shard is never admitted (the ledger admits held shards
	// only); that it is synced is said to its holder with the next
	// membership write (memberMark), which lets it hand the shard over.
	p := &l.m.plans
	p.synced = p.synced[:0]
	for _, s := range pre {
		if filled[s] {
			p.synced = append(p.synced, s)
		}
	}
	for _, s := range fill {
		filled[s] = filled[s] && slices.Contains(held, s)
	}
	l.runs.setFilled(filled, gen)
	l.admitted()
	// The replica's share is filled (Ready) the first time it admits as
	// many shards as its share while its session counts in the ring; a
	// replica waiting for the ring to take its count, once the share it
	// will take is in its cache.
	if p.counted && !l.runs.leaving() {
		if p.mode == modeWaiting {
			l.share.set(len(p.synced), p.share)
		} else {
			l.share.set(len(l.prev), p.share)
		}
	}
	l.obs.observe(&l.runs, l.primaryInformer())
}

// warm returns the shards the informers fill: held, and those kept warm
// (keepWarm, session.go); it sets l.warmUntil to when the first warm one
// expires (zero if none), for the loop to wake then and drop it.
func (l *loop) warm(held []int) []int {
	fill := slices.Clone(held)
	l.warmUntil = time.Time{}
	for s, until := range l.warmShards(held, l.now()) {
		fill = append(fill, s)
		l.warmUntil = earliest(l.warmUntil, until)
	}
	slices.Sort(fill)
	return fill
}

// admitted compares the admitted shards with those of the last call: it
// removes the queued keys of the shards no longer admitted and owes a
// catch-up run to every object of the newly admitted ones, from the
// primary informer (fed to the queue a few at a time, load.go), then
// tells OnChange and the Shards gauge.
func (l *loop) admitted() {
	now := l.Shards()
	gained, lost := diff(l.prev, now), diff(now, l.prev)
	l.prev = now
	if len(gained)+len(lost) == 0 {
		l.feed()
		return
	}
	klog.V(2).InfoS("sharding: admitted shards changed", "ring", l.cfg.Name, "identity", l.cfg.Identity, "admitted", now, "gained", gained, "lost", lost)
	gone := l.runs.dropGone(lost)
	if inf := l.primaryInformer(); inf != nil {
		each := func(shards []int, do func(s int, key string)) {
			for _, s := range shards {
				for _, obj := range inf.ByShard(s) {
					if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
						do(s, key)
					}
				}
			}
		}
		each(lost, func(_ int, key string) { l.cfg.Queue.Remove(key) })
		at := l.now()
		for _, s := range gained {
			var keys []string
			each([]int{s}, func(_ int, key string) { keys = append(keys, key) })
			// Recorded before the first Adds, as a worker may begin a
			// key at once; the rest are fed as runs begin (load.go).
			for _, key := range l.runs.gained(s, at, keys) {
				l.cfg.Queue.Add(key)
			}
		}
	}
	for _, k := range gone {
		l.cfg.Queue.Remove(k)
	}
	l.feed()
	setGauge(l.cfg.Metrics.Shards, float64(len(now)))
	if l.cfg.OnChange != nil {
		l.cfg.OnChange(slices.Clone(now))
	}
}

// feed adds the next catch-up keys to the queue, if any is due: runs
// feed them as they begin (Replica.Handler), and the loop here, for a feed
// that stopped at a shard not admitted then (a session's gap, an
// informer's start) or whose fed keys were dropped with their shard.
func (l *loop) feed() {
	for _, key := range l.runs.feed(l.now()) {
		l.cfg.Queue.Add(key)
	}
}

// diff returns the elements of b not in a; both are sorted.
func diff(a, b []int) []int {
	var out []int
	for _, x := range b {
		if _, found := slices.BinarySearch(a, x); !found {
			out = append(out, x)
		}
	}
	return out
}
