package sharding

import (
	"context"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// This file is the replica's loop: one goroutine per replica, whatever the
// number of shards. Per-shard state is a slice indexed by shard; timers
// are one per replica (the loop's, and the expire timer of the session).

// tick is one period of the loop: renew, read the ring, fence the members
// that stopped renewing, then give up or take shards towards this
// replica's fair share.
func (r *Replica) tick(api context.Context) {
	ctx, cancel := context.WithTimeout(api, r.cfg.RenewDeadline)
	defer cancel()
	r.renew(ctx)
	v, err := r.list(ctx)
	if err != nil {
		return
	}
	now := time.Now()
	r.fence(ctx, v, now)
	if !r.adopt(v) {
		return
	}
	r.mu.Lock()
	alive, session := r.alive, r.session
	r.mu.Unlock()
	if !alive || r.leaving {
		return
	}
	r.aliveFor++
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

// fence deletes the membership Lease of every other member whose
// resourceVersion has not changed for LeaseDuration (ownership case 3),
// and drops it from v: its shards are free. The delete is conditioned on
// the UID and resourceVersion seen, as the member's renewals are, so
// exactly one of the two wins: a member whose renewal wins keeps its
// Lease, and this replica sees the new version next time; a renewal that
// comes after the fence is refused, and cannot re-create the Lease.
func (r *Replica) fence(ctx context.Context, v *view, now time.Time) {
	for id := range r.seen {
		if _, ok := v.members[id]; !ok {
			delete(r.seen, id)
		}
	}
	for id, m := range v.members {
		if id == r.cfg.Identity {
			continue
		}
		o, ok := r.seen[id]
		if !ok || o.ref != m.ref {
			r.seen[id] = observed{ref: m.ref, at: now}
			continue
		}
		if now.Sub(o.at) < r.cfg.LeaseDuration {
			continue
		}
		err := r.deleteMemberOf(ctx, id, m.ref)
		if err == nil || apierrors.IsNotFound(err) {
			delete(v.members, id)
			delete(r.seen, id)
		}
	}
}

// adopt brings the local shard states in line with v: a shard Lease that
// names this replica's session is held (after a write whose answer was
// lost), and a held shard whose Lease names someone else is dropped (which
// the protocol never lets happen while the session is alive). It returns
// false, after ending the session, if v shows the session is over.
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
		r.shardRef[i] = v.shards[i].ref
		mine := r.alive && v.shards[i].holder == r.cfg.Identity && v.shards[i].session == r.session
		st := &r.state[i]
		switch {
		case !mine && st.state != shardFree:
			st.state = shardFree
			r.cancelShardLocked(i, ErrLeaseLost)
		case mine && st.state == shardFree && !r.leaving:
			st.state = shardActive
		case mine && st.state == shardFree && r.leaving:
			*st = shard{state: shardDraining, inflight: st.inflight, graceEnd: now}
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
		return // someone else was faster, or the API failed: next tick
	}
	r.shardRef[i] = refOf(out)
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
		if !r.shardRef[i].known() {
			continue
		}
		lease := r.shardLease(i, "", "", 0, now)
		lease.Spec.AcquireTime = nil
		out, err := leases.Update(ctx, r.shardRef[i].on(lease), metav1.UpdateOptions{})
		switch {
		case err == nil:
			r.shardRef[i] = refOf(out)
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			// Changed or deleted under us (a deleted Lease answers
			// 409 too, for the UID): the session must be over.
		default:
			continue // retried after the next tick
		}
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
	filled := make([]bool, r.shards)
	for _, s := range held {
		filled[s] = true
	}
	for _, inf := range infs {
		inf.setShards(held)
		for _, s := range held {
			filled[s] = filled[s] && inf.hasSynced(s)
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
				for _, obj := range inf.byShard(s) {
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
