package sharding

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

// This file keeps every replica of a ring on one shard count and one
// hashed field. Shard Leases are named by index, so shard 3 of 16 and
// shard 3 of 32 would be one Lease covering two ranges, and shard 6 of 32
// (a part of shard 3 of 16) another Lease: two replicas of different
// counts could each hold, by a conditional write that never meets the
// other's, a range that overlaps the other's, or leave a range to nobody.
// Exclusion must hold by range, and the Leases hold it by name only
// within one count. So a ring has one count, fixed when it is created:
//
//   - The ring's Lease ("<Name>-ring") records the count and field of the
//     replica that created it. Only a Create makes it, and no replica
//     changes or deletes it, so it names one configuration for the ring's
//     life. Before its first membership write, a replica reads it from
//     the view (its first list), or creates it; a Create that finds it
//     (AlreadyExists: another replica was first) waits for the watch to
//     deliver it. Of two replicas that start at once with different
//     counts, exactly one creates it, and the other refuses.
//   - A replica configured otherwise refuses (refuseRing): it never
//     writes a membership Lease nor a shard Lease; Run returns an error
//     that names both configurations and wraps ErrRingMismatch; Ready
//     fails with it, Metrics.Mismatch is 1 and it is logged at default
//     verbosity. The replicas already in the ring go on, untouched.
//   - The view also shows what only a ring mixed outside this protocol
//     can show (the ring's Lease deleted by hand while replicas of it run,
//     or replicas of a version that did not record the count): a shard
//     Lease of another configuration held by a live member, or a ring's
//     Lease of another configuration. A replica that sees either before
//     joining refuses; one that sees either while it runs stops admitting
//     keys and leaves the ring (its shards are drained and released), and
//     Run returns the same error: exclusion by range cannot be shown
//     then, so no replica of either configuration keeps running keys.
//   - Members of another configuration (AnnotationShards on their Lease)
//     get no share (balanceOf, decide.go), so a member that refuses can
//     never leave shards unheld by holding a share it will not take.
//
// A shard Lease of another count whose holder is gone (a ring stopped,
// its ring's Lease deleted, and started again with another count, as the
// procedure in docs/operate.md does) is free: it is acquired by an update
// conditioned on its version, as any free shard, and rewritten with this
// replica's count. Shard Leases of indices at or beyond the count are
// kept in the view (extra) for the check only.

// ErrRingMismatch is wrapped by the error Run returns when the ring's
// Leases were written by replicas configured with another Config.Shards
// or Config.Field (errors.Is tells it).
var ErrRingMismatch = errors.New("sharding: the ring has another shard count or field")

// maxShards bounds the shard index the view reads from a Lease name (see
// validShards).
const maxShards = 1 << 16

// ringConf is what every replica of a ring must share: the shard count
// and the hashed field. Zero parts are unknown (a Lease written before
// they were recorded) and agree with anything.
type ringConf struct {
	shards int
	field  string
}

func (c ringConf) String() string {
	shards, field := "?", c.field
	if c.shards > 0 {
		shards = strconv.Itoa(c.shards)
	}
	if field == "" {
		field = "?"
	}
	return fmt.Sprintf("Shards %s, Field %s", shards, field)
}

// agrees reports whether c, read from a Lease, may be the configuration
// ours: each part is unknown or equal.
func (c ringConf) agrees(ours ringConf) bool {
	return (c.shards == 0 || c.shards == ours.shards) && (c.field == "" || c.field == ours.field)
}

// confOf reads the configuration recorded on a Lease of the ring.
func confOf(le *coordinationv1.Lease) ringConf {
	n, err := strconv.Atoi(le.Annotations[AnnotationShards])
	if err != nil || n < 0 {
		n = 0
	}
	return ringConf{shards: n, field: le.Annotations[AnnotationField]}
}

// ringInfo is the ring's Lease as the view has it.
type ringInfo struct {
	exists bool
	ref    leaseRef
	conf   ringConf
}

// mismatchError is a refusal to join, or to stay in, a ring configured
// otherwise. It wraps ErrRingMismatch.
type mismatchError struct{ msg string }

func (e *mismatchError) Error() string        { return e.msg }
func (e *mismatchError) Is(target error) bool { return target == ErrRingMismatch }

func mismatchf(format string, args ...any) error {
	return &mismatchError{msg: fmt.Sprintf(format, args...)}
}

// ringConflict decides whether a replica configured with ours, named
// self, must refuse ring as v shows it: the ring's Lease names another
// configuration, or a shard Lease of another configuration is held (its
// holder's membership Lease is in v with the Lease's session). It returns
// the refusal, naming both configurations, or nil.
func ringConflict(v *view, ring, namespace, self string, ours ringConf) error {
	if rl := v.ringLease; rl.exists && !rl.conf.agrees(ours) {
		return mismatchf("sharding: this replica has Config.Shards %d and Config.Field %s, but ring %q was created with %v "+
			"(Lease %s/%s); run every replica of a ring with the same Shards and Field, or change them as sharding/docs/operate.md says (stop the ring, delete its Leases)",
			ours.shards, ours.field, ring, rl.conf, namespace, ringLeaseName(ring))
	}
	check := func(i int, s shardInfo) error {
		if s.conf.agrees(ours) || !holds(v, s) || s.holder == self {
			return nil
		}
		return mismatchf("sharding: this replica has Config.Shards %d and Config.Field %s, but shard Lease %s/%s of ring %q, held by %q, was written with %v; "+
			"run every replica of a ring with the same Shards and Field",
			ours.shards, ours.field, namespace, shardLeaseName(ring, i), ring, s.holder, s.conf)
	}
	for i, s := range v.shards {
		if err := check(i, s); err != nil {
			return err
		}
	}
	for i, s := range v.extra {
		if err := check(i, s); err != nil {
			return err
		}
	}
	return nil
}

// The view's side: the ring's Lease and the extra shard Leases, kept by
// the rules of the others (a version moves only forward).

// otherLocked reports whether p is the ring's Lease or an extra shard
// Lease. g.mu must be held.
func (g *ringView) otherLocked(p parsed) bool { return p.ring || p.shard >= len(g.shards) }

// setOtherLocked stores p if it is the ring's Lease or an extra shard
// Lease (handled), and reports whether that changed the view. g.mu must
// be held.
func (g *ringView) setOtherLocked(p parsed) (handled, changed bool) {
	switch {
	case p.ring:
		cur := g.ringLease
		if cur.exists && (cur.ref == p.r.ref || olderRV(p.r.ref.rv, cur.ref.rv)) {
			return true, false
		}
		g.ringLease = p.r
		return true, true
	case p.shard >= len(g.shards):
		cur, ok := g.extra[p.shard]
		if ok && (cur.ref == p.s.ref || olderRV(p.s.ref.rv, cur.ref.rv)) {
			return true, false
		}
		g.extra[p.shard] = p.s
		return true, true
	}
	return false, false
}

// removeOtherLocked drops the ring's Lease or an extra shard Lease
// (handled) unless the view's version is newer than ref, and reports
// whether it did. g.mu must be held.
func (g *ringView) removeOtherLocked(p parsed, ref leaseRef) (handled, changed bool) {
	switch {
	case p.ring:
		if !g.ringLease.exists || olderRV(ref.rv, g.ringLease.ref.rv) {
			return true, false
		}
		g.ringLease = ringInfo{}
		return true, true
	case p.shard >= len(g.shards):
		cur, ok := g.extra[p.shard]
		if !ok || olderRV(ref.rv, cur.ref.rv) {
			return true, false
		}
		delete(g.extra, p.shard)
		return true, true
	}
	return false, false
}

// replaceOthersLocked drops the ring's Lease and the extra shard Leases
// that a relist (ps, at unlisted) no longer shows. g.mu must be held.
func (g *ringView) replaceOthersLocked(ps []parsed, unlisted leaseRef) {
	ring := false
	extra := make(map[int]bool)
	for _, p := range ps {
		switch {
		case p.ring:
			ring = true
		case p.shard >= len(g.shards):
			extra[p.shard] = true
		}
	}
	if !ring {
		g.removeOtherLocked(parsed{shard: -1, ring: true}, unlisted)
	}
	for i := range g.extra {
		if !extra[i] {
			g.removeOtherLocked(parsed{shard: i}, unlisted)
		}
	}
}

// The replica's side.

// mismatch is the replica's refusal of its ring, for Ready.
type mismatch struct {
	mu  sync.Mutex // protects err
	err error
}

func (m *mismatch) get() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// conf is the replica's own configuration.
func (r *Replica) conf() ringConf { return ringConf{shards: r.shards, field: r.field} }

// refuseRing records the refusal err: Ready fails with it from now on,
// Metrics.Mismatch is 1, and it is logged at default verbosity.
func (r *Replica) refuseRing(err error) {
	r.refusal.mu.Lock()
	first := r.refusal.err == nil
	if first {
		r.refusal.err = err
	}
	r.refusal.mu.Unlock()
	if !first {
		return
	}
	setGauge(r.cfg.Metrics.Mismatch, 1)
	klog.ErrorS(err, "sharding: refusing the ring: its replicas are configured with another shard count or field",
		"ring", r.cfg.Name, "identity", r.cfg.Identity, "namespace", r.cfg.Namespace, "shards", r.shards, "field", r.field)
}

// checkRing is the loop's check of the view v it decides on (see the file
// comment): on a conflict it records the refusal, sets r.stopErr (the
// loop then leaves the ring, and Run returns it) and reports true.
func (r *Replica) checkRing(v *view) bool {
	if r.stopErr != nil {
		return false
	}
	err := ringConflict(v, r.cfg.Name, r.cfg.Namespace, r.cfg.Identity, r.conf())
	if err == nil {
		return false
	}
	r.refuseRing(err)
	r.stopErr = err
	r.poke()
	return true
}

// claimRing makes sure, before the replica's first membership write, that
// the ring is configured as this replica: from the view (its first list
// is in), or by creating the ring's Lease. It returns nil once the ring
// agrees; the refusal (a mismatchError, recorded by refuseRing) if it
// does not; nil too if ctx ends first; and r.stopErr if a request it
// needs is refused for LeaseDuration (forbidden.go). A Create that fails
// otherwise is tried again a RetryPeriod later.
func (r *Replica) claimRing(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	created := false // a Create answered AlreadyExists: wait for the watch
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
			created = false
		case <-r.ring.changes():
		case <-r.wake:
		}
		r.ring.snapshot(&r.v)
		if err := ringConflict(&r.v, r.cfg.Name, r.cfg.Namespace, r.cfg.Identity, r.conf()); err != nil {
			r.refuseRing(err)
			return err
		}
		if r.v.ringLease.exists {
			return nil
		}
		wait := r.cfg.RetryPeriod
		if due := r.checkPermissions(time.Now()); r.stopErr != nil {
			return r.stopErr
		} else if !due.IsZero() {
			wait = min(wait, time.Until(due))
		}
		if created {
			timer.Reset(wait)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.RenewDeadline)
		out, err := r.io.createRing(cctx, time.Now())
		cancel()
		switch {
		case err == nil:
			r.ring.upsert(out) // our write, from the server's answer
			klog.V(2).InfoS("sharding: created the ring's Lease", "ring", r.cfg.Name, "identity", r.cfg.Identity, "shards", r.shards, "field", r.field)
			return nil
		case apierrors.IsAlreadyExists(err):
			// Another replica created it first: the watch delivers
			// it, within a RetryPeriod, or the Create is tried again.
			created = true
		default:
			klog.V(2).InfoS("sharding: creating the ring's Lease failed", "ring", r.cfg.Name, "identity", r.cfg.Identity, "err", err)
		}
		timer.Reset(wait)
	}
}
