package sharding

import (
	"context"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// This file is the replica's loop: one goroutine per replica, whatever the
// number of shards. Per-shard state is a slice indexed by shard; timers
// are one per replica (the loop's, and the expire timer of the session).

// The loop reads the ring from a watch, not from a LIST per period: a
// reflector keeps r.ring (leases.go) up to date, and every change it
// delivers wakes the loop, which decides again at once. So a member that
// stops renewing is fenced LeaseDuration after the watch delivered its
// last change (the loop wakes at that instant, see fenceAt), and a shard
// released by another replica is taken at the event, not a period later.
//
// What a change may trigger is bounded so that the writes stay within one
// membership write per RetryPeriod plus the writes of shards that move:
//
//   - the membership Lease is written only at a tick, once per period;
//   - a shard Lease is written (acquired or released) only when the view
//     shows it should move, conditioned on the version the view has; one
//     that fails is not written again at that version until the next tick
//     (a Conflict means the watch is about to deliver a newer version,
//     which is then decided on; another failure is retried a period
//     later);
//   - a fence that fails is not retried at that version until the next
//     tick either.
//
// A quiet ring's decisions therefore write nothing, however many renewals
// the watch delivers.

// tried records the writes that failed since the last tick, so that a
// change of the view does not retry them at the version they failed on.
type tried struct {
	fence map[string]leaseRef // member → the version a fence of it failed at
	shard []string            // shard → the resourceVersion a write failed at ("-": missing); "" none
	// unknown[i] is the session in which an acquisition of shard i got
	// no answer: it may have landed. Only such a shard is taken as held
	// when the view shows it names this replica's session (adopt): any
	// other Lease that names the session is a version from before this
	// replica released it, not yet superseded in the view.
	unknown []string
}

func newTried(shards int) tried {
	return tried{fence: make(map[string]leaseRef), shard: make([]string, shards), unknown: make([]string, shards)}
}

func (t *tried) reset() {
	clear(t.fence)
	clear(t.shard)
}

// versionOf names the version of shard Lease s a write is conditioned on.
func versionOf(s shardInfo) string {
	if !s.exists {
		return "-"
	}
	return s.ref.rv
}

// watchRing starts the watch of the ring's Leases and waits until its
// first list is in. It returns a function that stops the watch and waits
// for it, and false if ctx ended first.
func (r *Replica) watchRing(ctx context.Context) (stop func(), synced bool) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { r.ring.watch(wctx, r.cfg.Client, r.cfg.Namespace) })
	stop = func() {
		cancel()
		wg.Wait()
	}
	select {
	case <-r.ring.synced:
		return stop, true
	case <-ctx.Done():
		return stop, false
	}
}

// tick is one period of the loop: renew, then decide on the ring as the
// watch has it.
func (r *Replica) tick(api context.Context) {
	ctx, cancel := context.WithTimeout(api, r.cfg.RenewDeadline)
	defer cancel()
	r.tried.reset()
	r.renew(ctx)
	r.decide(ctx, true)
}

// react decides between ticks, when the ring changed or a fence is due; a
// wake-up for anything else (a run returned) decides nothing.
func (r *Replica) react(api context.Context, now time.Time, changed bool) {
	if !changed && (r.fenceAt.IsZero() || now.Before(r.fenceAt)) {
		return
	}
	ctx, cancel := context.WithTimeout(api, r.cfg.RenewDeadline)
	defer cancel()
	r.decide(ctx, false)
}

// decide fences the members that stopped renewing, brings the local shard
// states in line with the ring, then gives up or takes shards towards this
// replica's fair share. At a tick it also counts the tick for a newcomer's
// wait (see plan).
func (r *Replica) decide(ctx context.Context, tick bool) {
	// The changes that led here are all in the copy taken now; drop the
	// pending poke so that they do not wake the loop again.
	select {
	case <-r.ring.changed:
	default:
	}
	v := &r.v
	r.ring.snapshot(v)
	r.fence(ctx, v, time.Now())
	if !r.adopt(v) {
		return
	}
	r.mu.Lock()
	alive, session := r.alive, r.session
	r.mu.Unlock()
	if !alive || r.leaving {
		return
	}
	if tick {
		r.aliveFor++
	}
	r.plan(ctx, v, session)
}

// renew renews the membership Lease, or, if the session has lapsed and
// every run of it has returned, starts a new session (ownership case 2).
//
// Only an alive session is renewed (acquireTime is the session's start,
// before renewTime). A replica that has gone RenewDeadline without an
// answered write does not renew: it writes a join (acquireTime =
// renewTime, a new session each time), which the others do not count in
// the shares (see plan). Its writes may still land when only their
// answers are lost, and it may learn its Lease's resourceVersion back from
// a Conflict and a Get, so it cannot rely on its Lease going still to be
// fenced; writing joins is how it stops holding a share it cannot use.
//
// A session never comes back once it has ended (issue #24):
//
//   - An update carries the UID and resourceVersion of our Lease (see
//     leaseRef), so it cannot re-create a Lease another replica deleted.
//     Finding the Lease gone ends the session at once: another replica
//     fenced it and may hold its shards. Only a Create makes a new Lease,
//     and it is always a join.
//   - A renewal's success is accepted only if the session is still alive
//     when the answer arrives: less than RenewDeadline since the renewal
//     was sent, and before the session's own deadline (the expire timer
//     may not have fired yet). An answer that comes later proves nothing
//     about now: the session's runs may have been cancelled, and another
//     replica may have fenced it and taken its shards in between. The
//     next write is then a join.
func (r *Replica) renew(ctx context.Context) {
	r.mu.Lock()
	alive, inflight, session := r.alive, r.inflight, r.session
	r.mu.Unlock()
	sent := time.Now()
	start := r.sessionStart
	if !alive {
		if r.leaving || inflight > 0 {
			return
		}
		session, start = newSession(), sent // a join
	}
	leases := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace)
	lease := r.memberLease(session, start, sent)
	var out *coordinationv1.Lease
	var err error
	if !r.member.known() {
		out, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	} else {
		out, err = leases.Update(ctx, r.member.on(lease), metav1.UpdateOptions{})
	}
	if err != nil {
		if r.memberGone(ctx, err) && alive {
			r.lose(true)
		}
		return
	}
	r.member = refOf(out)
	r.ring.upsert(out) // our write, from the server's answer
	now := time.Now()
	deadline := sent.Add(r.cfg.RenewDeadline)
	r.mu.Lock()
	switch {
	case !now.Before(deadline):
		// Too late for the deadline it would set.
		r.mu.Unlock()
		return
	case !alive:
		// A join, answered in time: a new session begins.
		r.alive = true
		r.session = session
		r.sessionStart = start
		r.aliveFor = 0
	case r.alive && r.session == session && now.Before(r.deadline):
		// A renewal of the session, which is still alive.
	default:
		// A renewal of a session that ended while it was in flight
		// (or whose deadline has passed, the timer about to end it).
		r.mu.Unlock()
		return
	}
	r.deadline = deadline
	r.mu.Unlock()
	if r.expire == nil {
		r.expire = time.AfterFunc(time.Until(deadline), func() { r.lose(false) })
	} else {
		r.expire.Reset(time.Until(deadline))
	}
}

// memberGone learns what became of our membership Lease after a write of
// it failed with err, and reports whether the Lease it named is gone: our
// session, if any, is then over.
func (r *Replica) memberGone(ctx context.Context, err error) bool {
	switch {
	case apierrors.IsNotFound(err):
		r.member = leaseRef{} // create it next time
		return true
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		// A Conflict is a stale resourceVersion (our own earlier write
		// whose answer was lost: only this replica writes its Lease,
		// others only delete it) or a UID that is not the Lease's any
		// more (it was deleted). AlreadyExists is a Lease left by an
		// earlier run of this identity, or our own create whose answer
		// was lost. The Lease as it is now tells which.
		cur, gerr := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace).Get(ctx,
			memberLeaseName(r.cfg.Name, r.cfg.Identity), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			r.member = leaseRef{}
			return true
		case gerr != nil:
			return false // the next write tells
		case r.member.known() && cur.UID != r.member.uid:
			// Deleted, and created again by a join of ours whose
			// answer was lost: the next write builds on it.
			r.member = refOf(cur)
			return true
		default:
			r.member = refOf(cur)
		}
	}
	return false
}

// fence deletes the membership Lease of every other member whose Lease
// the watch has not shown changing for LeaseDuration (ownership case 3),
// and drops it from v: its shards are free. The delete is conditioned on
// the UID and resourceVersion seen, as the member's renewals are, so
// exactly one of the two wins: a member whose renewal wins keeps its
// Lease, and the watch delivers the new version; a renewal that comes
// after the fence is refused, and cannot re-create the Lease. It sets
// r.fenceAt to the next instant a fence may be due.
//
// LeaseDuration is counted from when this replica first saw the version
// (memberInfo.at), never from the Lease's renewTime: that is the
// holder's clock, and the timing argument needs only that the version was
// written before it was seen, which a watch (or a list) guarantees.
func (r *Replica) fence(ctx context.Context, v *view, now time.Time) {
	r.fenceAt = time.Time{}
	for id, m := range v.members {
		if id == r.cfg.Identity {
			continue
		}
		if due := m.at.Add(r.cfg.LeaseDuration); now.Before(due) {
			if r.fenceAt.IsZero() || due.Before(r.fenceAt) {
				r.fenceAt = due
			}
			continue
		}
		if ref, ok := r.tried.fence[id]; ok && ref == m.ref {
			continue
		}
		err := r.deleteMemberOf(ctx, id, m.ref)
		if err == nil || apierrors.IsNotFound(err) {
			delete(v.members, id)
			r.ring.forget(id, m.ref)
			continue
		}
		r.tried.fence[id] = m.ref
	}
}

// adopt brings the local shard states in line with v: a shard Lease that
// names this replica's session, after an acquisition whose answer was
// lost, is held; and a held or draining shard whose Lease names someone
// else (or no one) is dropped (which the protocol never lets happen to an
// active shard while the session is alive; a draining one is dropped so
// when its release's answer was lost). It returns false, after ending the
// session, if v shows the session is over.
//
// Only a shard whose acquisition got no answer is taken from the view: a
// view behind the server may still show the version of a shard Lease from
// before this replica released it, naming its session, and taking that
// for held would run keys of a shard another replica may have acquired.
func (r *Replica) adopt(v *view) bool {
	me, present := v.members[r.cfg.Identity]
	r.mu.Lock()
	if r.alive && (!present || me.session != r.session) {
		r.mu.Unlock()
		r.lose(true)
		return false
	}
	now := time.Now()
	for i := range v.shards {
		mine := r.alive && v.shards[i].holder == r.cfg.Identity && v.shards[i].session == r.session
		lost := mine && r.tried.unknown[i] == r.session
		st := &r.state[i]
		switch {
		case !mine && st.state != shardFree:
			st.state = shardFree
			r.cancelShardLocked(i, ErrLeaseLost)
		case lost && st.state == shardFree && !r.leaving:
			st.state = shardActive
			r.tried.unknown[i] = ""
		case lost && st.state == shardFree && r.leaving:
			*st = shard{state: shardDraining, inflight: st.inflight, graceEnd: now}
			r.tried.unknown[i] = ""
		}
	}
	r.mu.Unlock()
	return true
}

// cancelShardLocked cancels the runs of shard i. r.mu must be held.
func (r *Replica) cancelShardLocked(i int, cause error) {
	for _, run := range r.runs {
		if run.shard == i {
			run.cancel(cause)
		}
	}
}

// plan computes every live member's fair share from v and moves this
// replica towards its own: it starts draining the shards it has beyond
// its share that others are waiting for, and acquires free shards up to
// its share.
//
// Shares are ⌊S/N⌋ or ⌈S/N⌉: the S mod N members first in identity order
// get one more. That order does not depend on who holds what, so every
// replica computes the same shares from the same view, and a join never
// makes an old member's share grow (at most the newcomer's share moves),
// nor does a leave make one shrink (only the leaver's shards move).
//
// Free shards are dealt out in identity order too: the member at position
// k takes the free shards after the deficits of the members before it, so
// replicas working from the same view never race for the same shard.
//
// Only confirmed members get a share (issue #14). A replica renews its
// session only while it is alive, that is while one of its writes was
// answered less than RenewDeadline ago; a replica that lapsed writes joins,
// each with a new session. So a membership Lease that is a join (its
// renewTime is its acquireTime) may come from a replica that never learns
// whether its writes land: its requests reach the API server but the
// answers are lost. Such a replica cannot take a shard, and, since it
// keeps writing, nobody ever fences it; if it had a share, that share
// would wait for it while the fault lasts. Leaving joins out costs a
// healthy newcomer one RetryPeriod: the others count it from its first
// renewal, its second write. A join frees the shards of the replica's
// previous session all the same (their Leases name a session that is not
// the member's), which is safe: a replica starts a new session only once
// every run of the old one has returned (ownership case 2).
func (r *Replica) plan(ctx context.Context, v *view, session string) {
	ids := make([]string, 0, len(v.members))
	for id, m := range v.members {
		if m.confirmed {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	held := make(map[string]int, len(ids))
	var free []int
	for i, s := range v.shards {
		m, ok := v.members[s.holder]
		if s.exists && s.holder != "" && ok && m.session == s.session {
			held[s.holder]++
			continue
		}
		free = append(free, i)
	}
	n := len(ids)
	share := func(k int) int {
		t := r.shards / n
		if k < r.shards%n {
			t++
		}
		return t
	}
	me := slices.Index(ids, r.cfg.Identity)
	if me < 0 {
		return
	}

	// Give up what others are waiting for.
	if over := held[r.cfg.Identity] - share(me); over > 0 {
		wanted := -len(free)
		for k, id := range ids {
			if k != me {
				wanted += max(0, share(k)-held[id])
			}
		}
		var active, draining []int
		r.mu.Lock()
		for i := range r.state {
			switch r.state[i].state {
			case shardActive:
				active = append(active, i)
			case shardDraining:
				draining = append(draining, i)
			}
		}
		r.mu.Unlock()
		if k := min(over, wanted) - len(draining); k > 0 {
			r.drain(active[max(0, len(active)-k):])
		}
		return
	}

	// Take free shards two ticks after joining: the others count a
	// member from its first renewal (its second tick), so a newcomer
	// waits one more tick to see the renewals of the members that
	// started with it.
	if r.aliveFor < 3 {
		return
	}
	offset := 0
	for k := range me {
		offset += max(0, share(k)-held[ids[k]])
	}
	want := max(0, share(me)-held[r.cfg.Identity])
	if offset >= len(free) || want == 0 {
		return
	}
	for _, i := range free[offset:min(len(free), offset+want)] {
		if r.tried.shard[i] == versionOf(v.shards[i]) {
			continue // failed at this version: wait for a newer one, or the next tick
		}
		r.acquire(ctx, i, v.shards[i], session)
	}
}

// acquire writes shard i's Lease to name this replica and its session, on
// the condition that it is still the object and version v showed (or
// still missing: a create, which fails if another replica was faster).
func (r *Replica) acquire(ctx context.Context, i int, s shardInfo, session string) {
	leases := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace)
	lease := r.shardLease(i, r.cfg.Identity, session, s.transitions+1, time.Now())
	var out *coordinationv1.Lease
	var err error
	if !s.exists {
		out, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	} else {
		out, err = leases.Update(ctx, s.ref.on(lease), metav1.UpdateOptions{})
	}
	if err != nil {
		// Someone else was faster (the watch brings its version), or the
		// API failed, maybe after the write landed.
		r.tried.shard[i] = versionOf(s)
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			r.tried.unknown[i] = session
		}
		return
	}
	r.ring.upsert(out) // our write, from the server's answer
	r.mu.Lock()
	if r.alive && r.session == session && !r.leaving && r.state[i].state == shardFree {
		r.state[i] = shard{state: shardActive, inflight: r.state[i].inflight}
	}
	r.mu.Unlock()
}

// drain starts giving up the given active shards: no key of theirs is
// admitted from now on, sync removes their keys from the queue, and
// progress releases each once its runs have returned.
func (r *Replica) drain(shards []int) {
	end := time.Now().Add(r.cfg.GracePeriod)
	r.mu.Lock()
	for _, i := range shards {
		if r.state[i].state == shardActive {
			r.state[i] = shard{state: shardDraining, inflight: r.state[i].inflight, graceEnd: end}
		}
	}
	r.mu.Unlock()
}

// progress releases the draining shards whose runs have all returned and
// cancels the runs of those whose grace period is over. It returns when
// it next needs to run (the earliest grace end still ahead), or zero.
func (r *Replica) progress(api context.Context) time.Time {
	now := time.Now()
	var release []int
	var wakeAt time.Time
	r.mu.Lock()
	session := r.session
	for i := range r.state {
		s := &r.state[i]
		switch {
		case s.state != shardDraining:
		case s.inflight == 0:
			release = append(release, i)
		case !now.Before(s.graceEnd):
			if !s.cancelled {
				s.cancelled = true
				r.cancelShardLocked(i, ErrGraceOver)
			}
		case wakeAt.IsZero() || s.graceEnd.Before(wakeAt):
			wakeAt = s.graceEnd
		}
	}
	r.mu.Unlock()
	if len(release) == 0 {
		return wakeAt
	}
	ctx, cancel := context.WithTimeout(api, r.cfg.RenewDeadline)
	defer cancel()
	leases := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace)
	for _, i := range release {
		s := r.ring.shard(i)
		// Release only the version that names this replica's session.
		// The view may have moved on since the shard began draining (our
		// session ended and another replica took the shard, or a release
		// whose answer was lost landed): emptying that version would take
		// the shard from its new holder. adopt frees the shard then.
		if !s.exists || s.holder != r.cfg.Identity || s.session != session || r.tried.shard[i] == versionOf(s) {
			continue
		}
		lease := r.shardLease(i, "", "", 0, now)
		lease.Spec.AcquireTime = nil
		out, err := leases.Update(ctx, s.ref.on(lease), metav1.UpdateOptions{})
		if err != nil {
			// Changed or deleted under us (a deleted Lease answers 409
			// too, for the UID): the session is over, or this is our own
			// earlier release whose answer was lost. Either way the
			// watch brings the newer version, and adopt frees the shard
			// then: freeing it now, while the view may still show the
			// version that names us, would let adopt take it back.
			// Another failure is retried after the next tick.
			r.tried.shard[i] = versionOf(s)
			continue
		}
		r.ring.upsert(out) // our write, from the server's answer
		r.mu.Lock()
		if r.state[i].state == shardDraining {
			r.state[i].state = shardFree
		}
		r.mu.Unlock()
	}
	return wakeAt
}

// sync brings the queue and the sharded informers in line with the
// shards held, in three steps:
//
//  1. The keys of the shards no longer admitted (given up, lost) leave
//     the queue, while their objects are still in the informers (a
//     draining shard keeps its objects until it is released).
//  2. Every running sharded informer follows the held shards (active or
//     draining): it drops the objects of the released ones, without
//     events, and starts filling the gained ones.
//  3. A held shard is filled once every running sharded informer has
//     synced it; a shard that becomes admitted (active and filled) has
//     all its objects enqueued, since their events went to another
//     replica, or came before the shard was admitted.
//
// It then tells OnChange.
func (r *Replica) sync() {
	r.admitted()
	r.mu.Lock()
	var held []int
	for i := range r.state {
		if r.state[i].state != shardFree {
			held = append(held, i)
		}
	}
	infs, gen := slices.Clone(r.informers), r.infGen
	r.mu.Unlock()
	// Nothing is filled until the primary informer runs: before that
	// (controller-runtime has not started it yet), the cache lacks every
	// shard.
	filled := make([]bool, r.shards)
	if slices.Contains(infs, r.primaryInformer()) {
		for _, s := range held {
			filled[s] = true
		}
	}
	for _, inf := range infs {
		inf.SetShards(held)
		for _, s := range held {
			filled[s] = filled[s] && inf.Synced(s)
		}
	}
	r.mu.Lock()
	// An informer that started since infs was taken cleared filled; it
	// is counted at the next sync (it poked the loop).
	if r.infGen == gen {
		copy(r.filled, filled)
	}
	r.mu.Unlock()
	r.admitted()
}

// admitted compares the admitted shards with those of the last call: it
// removes the queued keys of the shards no longer admitted and enqueues
// every object of the newly admitted ones from the primary informer, then
// tells OnChange and the Shards gauge.
func (r *Replica) admitted() {
	now := r.Shards()
	gained, lost := diff(r.prev, now), diff(now, r.prev)
	r.prev = now
	if len(gained)+len(lost) == 0 {
		return
	}
	var gone []string
	r.mu.Lock()
	inf := r.primary
	if len(lost) > 0 {
		in := make([]bool, r.shards)
		for _, i := range lost {
			in[i] = true
		}
		for k, s := range r.gone {
			if in[s] && r.state[s].state != shardActive {
				gone = append(gone, k)
				delete(r.gone, k)
			}
		}
	}
	r.mu.Unlock()
	if inf != nil {
		each := func(shards []int, do func(key string)) {
			for _, s := range shards {
				for _, obj := range inf.ByShard(s) {
					if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
						do(key)
					}
				}
			}
		}
		each(lost, func(key string) { r.cfg.Queue.Remove(key) })
		each(gained, r.cfg.Queue.Add)
	}
	for _, k := range gone {
		r.cfg.Queue.Remove(k)
	}
	setGauge(r.cfg.Metrics.Shards, float64(len(now)))
	if r.cfg.OnChange != nil {
		r.cfg.OnChange(slices.Clone(now))
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
