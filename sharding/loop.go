package sharding

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

// This file is the replica's loop: one goroutine per replica, whatever the
// number of shards. It wires the rooms together and decides nothing
// itself: it copies the view (ringview.go), asks decide.go what to do,
// makes the writes through leases.go, and records their outcome in the
// runs' ledger (runs.go). Timers are one per replica (the loop's, and the
// expire timer of the session, member.go).
//
// The loop reads the ring from a watch, not from a LIST per period: a
// reflector keeps r.ring up to date, and every change it delivers wakes
// the loop, which decides again at once. So a member that stops renewing
// is fenced LeaseDuration after the watch delivered its last change (the
// loop wakes at that instant, see fenceAt), and a shard released by
// another replica is taken at the event, not a period later.
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

// Run holds shards until ctx ends: it joins the ring, renews its
// membership Lease every RetryPeriod, takes and gives up shards to keep the
// ring balanced, fills the sharded informers with the shards it gains and
// empties them of those it releases, enqueues every object of a gained
// shard once the informers have synced it and removes the keys of a shard
// it gives up. It runs the primary informer when it was built from
// Config.ListerWatcher, and first waits for the first list of the ring's
// Leases, which it then watches.
//
// When ctx ends, Run leaves gracefully (unless Config.SkipRelease): it
// stops admitting keys, drains and releases its shards (at most
// GracePeriod, then their runs are cancelled) and deletes its membership
// Lease. Each shard is handed over once the member taking it has filled
// its cache for it (at most HandoffTimeout), so that its keys wait for the
// drain only. It returns nil then, or an error if the runs did not return
// within HandoffTimeout + GracePeriod + RenewDeadline, in which case the
// shards are left to expire.
//
// If the API server refuses one kind of request (a verb on a resource:
// 403 Forbidden, a missing RBAC rule) for LeaseDuration without one
// success in between, Run leaves the same way, as far as its permissions
// allow, and returns an error that names the verb and resource and wraps
// the server's (apierrors.IsForbidden is true of it); see Ready.
// Run may be called once. It returns an error at once, and may be called
// again, if Config.ListerWatcher is nil and NewInformer has not built the
// primary informer yet: without an informer no shard is ever admitted.
func (r *Replica) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return errors.New("sharding: Run called twice")
	}
	if err := r.informerMissing(); err != nil {
		r.mu.Unlock()
		return err
	}
	r.running = true
	r.mu.Unlock()

	if r.cfg.ListerWatcher != nil {
		// Run runs the primary informer, built from ListerWatcher. It
		// stops once the loop has returned: a leaving
		// replica's runs read it until its shards are released.
		stop := make(chan struct{})
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			r.primary.Run(stop)
		}()
		defer func() {
			close(stop)
			<-stopped
		}()
	}
	stopWatch, synced, err := r.watchRing(ctx)
	defer stopWatch()
	if !synced {
		return err
	}
	if err := r.claimRing(ctx); err != nil || ctx.Err() != nil { // another shard count or field: shardcount.go
		return err
	}

	api := context.WithoutCancel(ctx)
	defer func() {
		if r.expire != nil {
			r.expire.Stop()
		}
	}()
	done := ctx.Done()
	next := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		changed := false
		select {
		case <-done:
			done = nil
			if r.cfg.SkipRelease {
				r.runs.abandon()
				return nil
			}
			r.leave(api)
		case <-timer.C:
		case <-r.wake:
		case <-r.ring.changes():
			changed = true
		}
		var permsDue time.Time
		if done != nil {
			if permsDue = r.checkPermissions(time.Now()); r.stopErr != nil {
				done = nil
				if r.cfg.SkipRelease {
					r.runs.abandon()
					return r.stopErr
				}
				r.leave(api)
			}
		}
		now := time.Now()
		if !now.Before(next) {
			next = now.Add(r.period())
			r.tick(api)
		} else {
			r.react(api, now, changed)
		}
		r.sync() // before progress: keys are removed before a release
		wakeAt := r.progress(api)
		r.sync()
		if r.runs.leaving() {
			if finished, err := r.leaveDone(api); finished {
				switch {
				case r.stopErr == nil:
					return err
				case err == nil:
					return r.stopErr
				}
				return errors.Join(r.stopErr, err)
			}
			wakeAt = earliest(wakeAt, r.leaveBy)
		}
		for _, t := range []time.Time{next, r.fenceAt, permsDue, r.warmUntil, r.plans.handoffAt} {
			wakeAt = earliest(wakeAt, t)
		}
		timer.Reset(time.Until(wakeAt))
	}
}

// earliest returns the earlier of a and b, ignoring a zero one.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// checkPermissions sets r.stopErr once a kind of request has been refused
// for LeaseDuration (forbidden.go), and returns when the next one falls
// due (zero if none).
func (r *Replica) checkPermissions(now time.Time) time.Time {
	if r.stopErr != nil {
		return time.Time{}
	}
	due, err := r.perms.overdue(now, r.cfg.LeaseDuration)
	if err != nil {
		r.stopErr = err
		klog.ErrorS(err, "sharding: leaving the ring: a request it needs has been refused for LeaseDuration",
			"ring", r.cfg.Name, "identity", r.cfg.Identity, "namespace", r.cfg.Namespace)
	}
	return due
}

// watchRing starts the watch of the ring's Leases and waits until its
// first list is in. It returns a function that stops the watch and waits
// for it, and false if ctx ended first (with a nil error) or the list was
// refused for LeaseDuration (with that error).
func (r *Replica) watchRing(ctx context.Context) (stop func(), synced bool, err error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { r.ring.watch(wctx, r.io.listWatch(), r.cfg.Client) })
	stop = func() {
		cancel()
		wg.Wait()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if due := r.checkPermissions(time.Now()); !due.IsZero() {
			timer.Reset(time.Until(due))
		}
		if r.stopErr != nil {
			return stop, false, r.stopErr
		}
		select {
		case <-r.ring.hasSynced():
			return stop, true, nil
		case <-ctx.Done():
			return stop, false, nil
		case <-r.wake:
		case <-timer.C:
		}
	}
}

// period returns the time to the next tick: RetryPeriod plus a jitter
// drawn from [0, jitterMax] (decide.go).
func (r *Replica) period() time.Duration {
	return r.cfg.RetryPeriod + time.Duration(r.jitter.Int64N(int64(jitterMax(r.cfg.RetryPeriod, r.cfg.RenewDeadline))+1))
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

// react decides between ticks, when the ring changed or a fence or a
// planned move's bound is due; a wake-up for anything else (a run
// returned) decides nothing.
func (r *Replica) react(api context.Context, now time.Time, changed bool) {
	due := func(t time.Time) bool { return !t.IsZero() && !now.Before(t) }
	if !changed && !due(r.fenceAt) && !due(r.plans.handoffAt) {
		return
	}
	ctx, cancel := context.WithTimeout(api, r.cfg.RenewDeadline)
	defer cancel()
	r.decide(ctx, false)
}

// decide fences the members that stopped renewing, brings the local shard
// states in line with the ring, then moves towards this replica's fair
// share: it fills the shards planned for it (prefetch), hands over those
// planned for others once their taker has synced them (handoffs), and
// takes free shards. At a tick it also counts the tick for a newcomer's
// wait (see moves). A leaving replica only hands over.
func (r *Replica) decide(ctx context.Context, tick bool) {
	// The changes that led here are all in the copy taken now; drop the
	// pending poke so that they do not wake the loop again.
	r.ring.consume()
	v := &r.v
	r.ring.snapshot(v)
	if r.checkRing(v) { // another shard count or field: shardcount.go
		return
	}
	now := time.Now()
	r.fence(ctx, v, now)
	if !r.runs.adopt(v, r.cfg.Identity, r.tried.unknown, now) {
		klog.V(2).InfoS("sharding: the ring no longer shows this replica's session: its shards are lost", "ring", r.cfg.Name, "identity", r.cfg.Identity)
		r.lose(true)
		return
	}
	st := r.runs.status()
	if !st.alive {
		r.plans.reset(r.shards)
		return
	}
	if tick && !st.leaving {
		r.aliveFor++
	}
	mode := r.reshape(ctx, v) // a switch of the ring's count: shardcount.go
	b := balanceOf(v, r.shards)
	to := b.plan(v)
	r.plans.update(to, now)
	k, counted := slices.BinarySearch(b.ids, r.cfg.Identity)
	r.plans.counted = counted && v.members[r.cfg.Identity].session == st.session
	if r.plans.counted {
		r.plans.share = b.share(k)
	}
	active, _ := r.runs.states()
	give, acquire := moves(v, b, to, r.cfg.Identity, r.aliveFor, active, r.tried.shard)
	drain, next := handoffs(v, to, give, r.plans.since, now, r.handoffWait())
	r.plans.handoffAt = next
	if st.leaving {
		// Leaving, the shards no one is planned to take (no other member
		// counts, or the view does not show the leave yet) are given up
		// at once, as are all of them once the leave's bound is over.
		r.plans.prefetch, acquire = nil, nil
		bound := r.leaveAt.Add(r.handoffWait())
		for _, i := range active {
			if to[i] == "" || !now.Before(bound) {
				drain = append(drain, i)
			}
		}
		if now.Before(bound) { // a bound past would wake the loop at once, for ever
			r.plans.handoffAt = earliest(r.plans.handoffAt, bound)
		}
	} else {
		r.plans.prefetch = prefetch(v, to, r.cfg.Identity)
	}
	if mode != modeLive {
		// The ring's count is switching away from this replica's
		// (closing) or is another (waiting): no shard of this count is
		// taken, and an active one is given up at once, with no taker
		// (its release seals it, shardcount.go). Waiting, the replica
		// fills the share it will be dealt once the ring has its count.
		acquire, drain, to = nil, active, make([]string, len(to))
		r.plans.handoffAt, r.plans.prefetch = time.Time{}, nil
		if mode == modeWaiting && !st.leaving && counted {
			r.plans.prefetch = b.deal(v)[k]
		}
	}
	if len(drain) > 0 {
		for _, i := range drain {
			r.plans.giveTo[i] = to[i]
		}
		klog.V(2).InfoS("sharding: handing shards over", "ring", r.cfg.Name, "identity", r.cfg.Identity, "shards", drain)
		r.runs.drain(drain, now.Add(r.cfg.GracePeriod))
	}
	for _, i := range acquire {
		r.acquire(ctx, i, v.shards[i], st.session)
	}
}

// handoffWait is how long a holder keeps admitting a shard planned for
// another member that has not said it synced it (handoffs, decide.go):
// Config.HandoffTimeout, by default LeaseDuration, the time a crash move
// waits anyway.
func (r *Replica) handoffWait() time.Duration { return r.cfg.HandoffTimeout }

// planned is the loop's record of the ring's planned moves (decide.go,
// plan). Touched only by the loop goroutine.
type planned struct {
	to    []string    // the plan at the last decision
	since []time.Time // when shard i was first seen planned for to[i]
	// giveTo[i] is the taker a draining shard was handed over to, named
	// in its release (annotationNext); "" none.
	giveTo []string
	// prefetch are the shards filled for a planned move, not held;
	// synced those of them every sharded informer has synced (sync.go),
	// written with the next membership write (memberMark).
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
}

// reset forgets the plan (the session is over: nothing is prefetched).
func (p *planned) reset(shards int) {
	p.to, p.since, p.giveTo = make([]string, shards), make([]time.Time, shards), make([]string, shards)
	p.prefetch, p.synced, p.handoffAt, p.counted = nil, nil, time.Time{}, false
}

// update records the plan to, decided at now.
func (p *planned) update(to []string, now time.Time) {
	if len(p.to) != len(to) {
		p.reset(len(to))
	}
	for i := range to {
		if to[i] != p.to[i] {
			p.to[i], p.since[i] = to[i], now
		}
	}
}

// fence deletes the membership Lease of every member fences (decide.go)
// finds due (ownership case 3), and drops it from v: its shards are free.
// The delete is conditioned on the UID and resourceVersion seen, as the
// member's renewals are, so exactly one of the two wins: a member whose
// renewal wins keeps its Lease, and the watch delivers the new version; a
// renewal that comes after the fence is refused, and cannot re-create the
// Lease. It sets r.fenceAt to the next instant a fence may be due.
func (r *Replica) fence(ctx context.Context, v *view, now time.Time) {
	due, next := fences(v, r.cfg.Identity, r.cfg.LeaseDuration, now, r.tried.fence)
	r.fenceAt = next
	for _, id := range due {
		ref := v.members[id].ref
		err := r.io.deleteMember(ctx, id, ref)
		if err == nil || apierrors.IsNotFound(err) {
			klog.V(2).InfoS("sharding: fenced a member that stopped renewing", "ring", r.cfg.Name, "identity", r.cfg.Identity, "member", id)
			v.dropMember(id)
			r.ring.forget(id, ref)
			r.fenced()
			continue
		}
		r.tried.fence[id] = ref
	}
}

// acquire writes shard i's Lease to name this replica and its session, on
// the condition that it is still the object and version v showed (or
// still missing: a create, which fails if another replica was faster).
func (r *Replica) acquire(ctx context.Context, i int, s shardInfo, session string) {
	out, err := r.io.acquireShard(ctx, i, s, session, time.Now())
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
	r.runs.acquired(i, session)
	r.gained()
	klog.V(2).InfoS("sharding: acquired a shard", "ring", r.cfg.Name, "identity", r.cfg.Identity, "shard", i)
}

// progress releases the draining shards whose runs have all returned and
// cancels the runs of those whose grace period is over (drainStep). It
// returns when it next needs to run (the earliest grace end still ahead),
// or zero.
func (r *Replica) progress(api context.Context) time.Time {
	now := time.Now()
	release, session, wakeAt := r.runs.drainScan(now)
	if len(release) == 0 {
		return wakeAt
	}
	ctx, cancel := context.WithTimeout(api, r.cfg.RenewDeadline)
	defer cancel()
	seal := -1 // the ring switches away from this count: seal each release
	if ri := r.ring.ringInfo(); modeOf(ri, r.shards) != modeLive {
		seal = ri.gen
	}
	for _, i := range release {
		s := r.ring.shard(i)
		if !mayRelease(s, r.cfg.Identity, session, r.tried.shard[i]) {
			continue
		}
		out, err := r.io.releaseShard(ctx, i, s.ref, r.plans.giveTo[i], seal, now)
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
		r.runs.released(i)
		r.plans.giveTo[i] = ""
		r.released()
		klog.V(2).InfoS("sharding: released a shard", "ring", r.cfg.Name, "identity", r.cfg.Identity, "shard", i)
	}
	return wakeAt
}

// leave starts a graceful leave: it announces it in a membership write
// (annotationLeaving), one more than the period's, so that the others
// plan its shards and fill their caches for them; decide then hands each
// over once its taker has synced it, or once handoffWait has passed.
func (r *Replica) leave(api context.Context) {
	now := time.Now()
	r.leaveAt = now
	if r.stopErr != nil {
		// Refused by the API server: hand nothing over, leave now.
		r.leaveAt = now.Add(-r.handoffWait())
	}
	r.leaveBy = now.Add(r.leaveAt.Sub(now) + r.handoffWait() + r.cfg.GracePeriod + r.cfg.RenewDeadline)
	r.runs.leave()
	ctx, cancel := context.WithTimeout(api, r.cfg.RenewDeadline)
	defer cancel()
	r.renew(ctx)
}

// leaveDone finishes a leave once no shard is held and no run is in flight
// (deleting the membership Lease), or gives up at leaveBy.
func (r *Replica) leaveDone(api context.Context) (bool, error) {
	if r.runs.busy() {
		if !time.Now().Before(r.leaveBy) {
			r.runs.abandon()
			return true, errors.New("sharding: runs still in flight after HandoffTimeout + GracePeriod + RenewDeadline; shards left to expire")
		}
		return false, nil
	}
	r.lose(true)
	if r.member.known() {
		ctx, cancel := context.WithTimeout(api, r.cfg.RenewDeadline)
		defer cancel()
		_ = r.io.deleteMember(ctx, r.cfg.Identity, r.member) // others fence it if this fails
	}
	return true, nil
}
