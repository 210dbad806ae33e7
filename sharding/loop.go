package sharding

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

// This file is the replica's loop: one goroutine per replica, whatever the
// number of shards. It decides nothing itself: it turns events (watch
// changes, timers, runs returning, the context) into observations, asks
// the machine (step.go) what to do, and has the executor (exec.go) do it.
// Timers are one per replica (the loop's, and the expire timer of the
// session, exec.go).
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

// loop is the state of Run, touched only by its goroutine: the machine,
// and what the executor keeps between steps.
type loop struct {
	*Replica
	m      machine
	expire *time.Timer // calls lose at the session's deadline
	member leaseRef    // our membership Lease as last written or read; zero if unknown
	v      view        // the ring for the decision being taken (a copy of ring)
	// warmUntil is the next time a warm shard expires (sync); zero if none.
	warmUntil time.Time
	prev      []int      // the admitted shards at the last sync
	jitter    *rand.Rand // draws each period's jitter (see period)
	leaveBy   time.Time  // give up leaving here
	stopErr   error      // why Run leaves, if not its context
}

func newLoop(r *Replica) *loop {
	cfg := r.cfg
	return &loop{
		Replica: r,
		m: newMachine(machineConf{self: cfg.Identity, ring: cfg.Name, namespace: cfg.Namespace,
			own: ringConf{shards: r.shards, field: r.field}, leaseDuration: cfg.LeaseDuration,
			handoffWait: cfg.HandoffTimeout, grace: cfg.GracePeriod, balance: cfg.Balance}),
		// Seeded by the replica's identity: distinct replicas drift
		// apart, and a test in simulated time replays the same periods.
		jitter: rand.New(rand.NewPCG(Hash(cfg.Name), Hash(cfg.Identity))),
	}
}

// run is Run's body, once the replica is marked running.
func (l *loop) run(ctx context.Context) error {
	if l.cfg.ListerWatcher != nil {
		// Run runs the primary informer, built from ListerWatcher. It
		// stops once the loop has returned: a leaving
		// replica's runs read it until its shards are released.
		stop := make(chan struct{})
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			l.primary.Run(stop)
		}()
		defer func() {
			close(stop)
			<-stopped
		}()
	}
	stopWatch, synced, err := l.watchRing(ctx)
	defer stopWatch()
	if !synced {
		return err
	}
	if err := l.claimRing(ctx); err != nil || ctx.Err() != nil { // another field: shardcount.go
		return err
	}

	api := context.WithoutCancel(ctx)
	defer func() {
		if l.expire != nil {
			l.expire.Stop()
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
			if l.cfg.SkipRelease {
				l.runs.abandon()
				return nil
			}
			l.leave(api)
		case <-timer.C:
		case <-l.wake:
		case <-l.ring.changes():
			changed = true
		}
		var permsDue time.Time
		if done != nil {
			if permsDue = l.checkPermissions(time.Now()); l.stopErr != nil {
				done = nil
				if l.cfg.SkipRelease {
					l.runs.abandon()
					return l.stopErr
				}
				l.leave(api)
			}
		}
		now := time.Now()
		if !now.Before(next) {
			next = now.Add(l.period())
			l.tick(api)
		} else {
			l.react(api, now, changed)
		}
		l.sync() // before progress: keys are removed before a release
		wakeAt := l.progress(api)
		l.sync()
		if l.runs.leaving() {
			if finished, err := l.leaveDone(api); finished {
				switch {
				case l.stopErr == nil:
					return err
				case err == nil:
					return l.stopErr
				}
				return errors.Join(l.stopErr, err)
			}
			wakeAt = earliest(wakeAt, l.leaveBy)
		}
		for _, t := range []time.Time{next, l.m.wakeAt(), permsDue, l.warmUntil} {
			wakeAt = earliest(wakeAt, t)
		}
		timer.Reset(time.Until(wakeAt))
	}
}

// stop records why Run leaves the ring, if not its context.
func (l *loop) stop(err error) {
	l.stopErr = err
	l.m.stopped = true
}

// checkPermissions sets l.stopErr once a kind of request has been refused
// for LeaseDuration (forbidden.go), and returns when the next one falls
// due (zero if none).
func (l *loop) checkPermissions(now time.Time) time.Time {
	if l.stopErr != nil {
		return time.Time{}
	}
	due, err := l.perms.overdue(now, l.cfg.LeaseDuration)
	if err != nil {
		l.stop(err)
		klog.ErrorS(err, "sharding: leaving the ring: a request it needs has been refused for LeaseDuration",
			"ring", l.cfg.Name, "identity", l.cfg.Identity, "namespace", l.cfg.Namespace)
	}
	return due
}

// watchRing starts the watch of the ring's Leases and waits until its
// first list is in. It returns a function that stops the watch and waits
// for it, and false if ctx ended first (with a nil error) or the list was
// refused for LeaseDuration (with that error).
func (l *loop) watchRing(ctx context.Context) (stop func(), synced bool, err error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { l.ring.watch(wctx, l.io.listWatch(), l.cfg.Client) })
	stop = func() {
		cancel()
		wg.Wait()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if due := l.checkPermissions(time.Now()); !due.IsZero() {
			timer.Reset(time.Until(due))
		}
		if l.stopErr != nil {
			return stop, false, l.stopErr
		}
		select {
		case <-l.ring.hasSynced():
			return stop, true, nil
		case <-ctx.Done():
			return stop, false, nil
		case <-l.wake:
		case <-timer.C:
		}
	}
}

// period returns the time to the next tick: RetryPeriod plus a jitter
// drawn from [0, jitterMax] (session.go).
func (l *loop) period() time.Duration {
	return l.cfg.RetryPeriod + time.Duration(l.jitter.Int64N(int64(jitterMax(l.cfg.RetryPeriod, l.cfg.RenewDeadline))+1))
}

// tick is one period of the loop: renew, then decide on the ring as the
// watch has it.
func (l *loop) tick(api context.Context) {
	ctx, cancel := context.WithTimeout(api, l.cfg.RenewDeadline)
	defer cancel()
	l.m.newTick()
	l.renew(ctx)
	l.decide(ctx, true)
}

// react decides between ticks, when the ring changed or a fence or a
// planned move's bound is due; a wake-up for anything else (a run
// returned) decides nothing.
func (l *loop) react(api context.Context, now time.Time, changed bool) {
	due := func(t time.Time) bool { return !t.IsZero() && !now.Before(t) }
	if !changed && !due(l.m.fenceAt) && !due(l.m.plans.handoffAt) {
		return
	}
	ctx, cancel := context.WithTimeout(api, l.cfg.RenewDeadline)
	defer cancel()
	l.decide(ctx, false)
}

// decide takes one decision: it copies the view, has the machine check it
// (a refusal, fences), the ledger adopt it, and the machine step on it,
// and carries out each half's actions (exec.go).
func (l *loop) decide(ctx context.Context, tick bool) {
	// The changes that led here are all in the copy taken now; drop the
	// pending poke so that they do not wake the loop again.
	l.ring.consume()
	v := &l.v
	l.ring.snapshot(v)
	now := time.Now()
	fence, refuse := l.m.check(v, now)
	if refuse != nil { // another field, or a ring mixed outside its protocol: shardcount.go
		l.refuseRing(refuse)
		l.stop(refuse)
		l.poke()
		return
	}
	l.fence(ctx, fence)
	if !l.runs.adopt(v, l.cfg.Identity, l.m.tried.unknown, now) {
		klog.V(2).InfoS("sharding: the ring no longer shows this replica's session: its shards are lost", "ring", l.cfg.Name, "identity", l.cfg.Identity)
		l.lose(true)
		return
	}
	active, _ := l.runs.states()
	a := l.m.Step(observation{now: now, tick: tick, v: v, session: l.runs.status(), active: active})
	l.carryOut(ctx, a)
}

// leave starts a graceful leave: it announces it in a membership write
// (annotationLeaving), one more than the period's, so that the others
// plan its shards and fill their caches for them; the machine then hands
// each over once its taker has synced it, or once HandoffTimeout has
// passed.
func (l *loop) leave(api context.Context) {
	now := time.Now()
	l.m.leaveAt = now
	if l.stopErr != nil {
		// Refused by the API server: hand nothing over, leave now.
		l.m.leaveAt = now.Add(-l.cfg.HandoffTimeout)
	}
	l.leaveBy = now.Add(l.m.leaveAt.Sub(now) + l.cfg.HandoffTimeout + l.cfg.GracePeriod + l.cfg.RenewDeadline)
	l.runs.leave()
	ctx, cancel := context.WithTimeout(api, l.cfg.RenewDeadline)
	defer cancel()
	l.renew(ctx)
}

// leaveDone finishes a leave once no shard is held and no run is in flight
// (deleting the membership Lease), or gives up at leaveBy.
func (l *loop) leaveDone(api context.Context) (bool, error) {
	if l.runs.busy() {
		if !time.Now().Before(l.leaveBy) {
			l.runs.abandon()
			return true, errors.New("sharding: runs still in flight after HandoffTimeout + GracePeriod + RenewDeadline; shards left to expire")
		}
		return false, nil
	}
	l.lose(true)
	if l.member.known() {
		ctx, cancel := context.WithTimeout(api, l.cfg.RenewDeadline)
		defer cancel()
		_ = l.io.deleteMember(ctx, l.cfg.Identity, l.member) // others fence it if this fails
	}
	return true, nil
}

// claimRing makes sure, before the replica's first membership write, that
// the ring has a Lease and this replica's field: from the view (its first
// list is in), or by creating the ring's Lease with this replica's count.
// It returns nil once the ring agrees (its count may differ: the replica
// then waits, modeWaiting); the refusal (a mismatchError, recorded by refuseRing) if it
// does not; nil too if ctx ends first; and l.stopErr if a request it
// needs is refused for LeaseDuration (forbidden.go). A Create that fails
// otherwise is tried again a RetryPeriod later.
func (l *loop) claimRing(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	created := false // a Create answered AlreadyExists: wait for the watch
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
			created = false
		case <-l.ring.changes():
		case <-l.wake:
		}
		l.ring.snapshot(&l.v)
		if err := ringConflict(&l.v, l.cfg.Name, l.cfg.Namespace, l.cfg.Identity, l.m.conf.own); err != nil {
			l.refuseRing(err)
			return err
		}
		if l.v.ringLease.exists {
			return nil
		}
		wait := l.cfg.RetryPeriod
		if due := l.checkPermissions(time.Now()); l.stopErr != nil {
			return l.stopErr
		} else if !due.IsZero() {
			wait = min(wait, time.Until(due))
		}
		if created {
			timer.Reset(wait)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, l.cfg.RenewDeadline)
		out, err := l.io.createRing(cctx, time.Now())
		cancel()
		switch {
		case err == nil:
			l.ring.upsert(out) // our write, from the server's answer
			klog.V(2).InfoS("sharding: created the ring's Lease", "ring", l.cfg.Name, "identity", l.cfg.Identity, "shards", l.shards, "field", l.field)
			return nil
		case apierrors.IsAlreadyExists(err):
			// Another replica created it first: the watch delivers
			// it, within a RetryPeriod, or the Create is tried again.
			created = true
		default:
			klog.V(2).InfoS("sharding: creating the ring's Lease failed", "ring", l.cfg.Name, "identity", l.cfg.Identity, "err", err)
		}
		timer.Reset(wait)
	}
}
