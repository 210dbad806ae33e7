package sharding

import (
	"cmp"
	"math"
	"time"
)

// This file is the ring's scaling signal: the gauges an autoscaler scales
// the controller's Deployment on (Metrics.RingReady, RingOldestReady,
// RingBusy, DesiredReplicas; docs/autoscale.md). It is a function of the
// view alone (each member's AnnotationReport, load.go), so every replica
// that sees the same ring exports the same values: a scrape of any one
// of them is the ring's, and the max across them is the freshest.
//
// The replica count that load asks for (desired) is, for a ring of n
// members (those not leaving) on S shards, the fewest replicas whose
// busiest one is at its target once the shards are dealt out:
//
//	k       = ⌊S × c / work⌋, the shards a replica can run at its target
//	desired = ⌈S / k⌉ + u    (S if k is 0: one shard is more than c)
//
// where work is the handler time of every shard whose load a member
// reports (leaving members' too: that work moves to the others), c =
// w × loadWindow × TargetBusy is a replica's work at its target, with w
// the mean of the workers the members report, and u the members that
// report no load at all (an older version, or one that publishes
// nothing): each counts as one replica at its target, asking for neither
// more nor fewer. Shards are whole: with work for 7 replicas on 8
// shards, 7 replicas would leave one holding 2 shards, 2/8 of the work,
// above its target, so desired is 8, where ⌈work / c⌉ would say 7 and the
// busiest replica's backlog would ask for 8 again, a flapping between the
// two. The shards are taken as equal (work/S each): under count balance
// with shards of unequal work the busiest replica is above that, and
// TargetBusy below 1 is the headroom for it (and for the minute
// loadWindow lags). If no member reports workers, the work says nothing,
// and desired is n. Then the backlog: while the oldest ready key of a
// shard a member admits, and does not give up, has waited longer than
// TargetOldest, the ring is behind whatever its work says (a ring at
// 100 % busy measures its capacity, not its demand), and desired is at
// least ⌈n × min(2, oldest/TargetOldest)⌉: more than n, at most twice n
// per reading, so that a ring far behind is not told to multiply at once
// before the first added replicas have taken their shards. The keys of
// a shard being handed over (filling, draining, or held by a member
// that leaves) wait for the move, not for capacity: more replicas would
// not shorten that wait, and counting it would answer each scale-down's
// hand-overs with a scale-up (the oldest gauge still shows them). For
// the same reason a gained shard's catch-up (a run owed to each of its
// objects) is in no oldest age and no work (load.go): its keys count as
// ready only, and are fed to the queue so that events never wait behind
// it. Last, desired is kept within [1, S]: a replica beyond the S-th
// would hold no shard.
//
// A replica of another shard count (a rollout that changes Shards) holds
// keys of the same controller, so its work, keys and workers count as
// anyone's, and it is one of the n; S is the ring's count (the ring's
// Lease), else the replica's.

// Defaults of Config.TargetBusy and Config.TargetOldest.
const (
	// DefaultTargetBusy leaves a quarter of the workers free: room for a
	// burst, and for shards of unequal work under count balance.
	DefaultTargetBusy = 0.75
	// DefaultTargetOldest is the oldest ready age beyond which the ring
	// asks for more replicas than its work does: well above a healthy
	// queue's wait (a fraction of a run), and within what an operator of
	// a controller notices.
	DefaultTargetOldest = 30 * time.Second
)

// signal is the ring's scaling signal, as one view gives it.
type signal struct {
	ready  int           // keys waiting in the members' queues, summed
	oldest time.Duration // the oldest ready key's age, across the ring
	// busy is the handler time over workers × loadWindow, over the
	// members that report workers (0 if none does).
	busy     float64
	replicas int // n: the members not leaving
	desired  int // the replica count load asks for
}

// scaleTarget is what signalOf aims at: Config.TargetBusy and
// TargetOldest, and the replica's shard count (used when the view has no
// ring's Lease).
type scaleTarget struct {
	busy   float64
	oldest time.Duration
	shards int
}

// signalOf computes the ring's signal from v (see the file's comment).
func signalOf(v *view, t scaleTarget) signal {
	var s signal
	var work, busyWork time.Duration // all measured work; that of members reporting workers
	workers, reporting, unmeasured := 0, 0, 0
	var served time.Duration // the oldest ready age of the shards admitted by members not leaving
	for _, m := range v.members {
		if !m.leaving {
			s.replicas++
		}
		measured := m.load.workers > 0
		var mw time.Duration
		for _, h := range m.load.held {
			if !h.known {
				continue
			}
			// A key waits in one queue only, its admitter's (a replica
			// that gives a shard up removes its keys): no key counts
			// twice.
			measured = true
			mw += h.load.work
			s.ready += h.load.ready
			s.oldest = max(s.oldest, h.load.oldest)
			if h.state == stateAdmitted && !m.leaving {
				served = max(served, h.load.oldest)
			}
		}
		work += mw
		if m.load.workers > 0 {
			workers += m.load.workers
			reporting++
			busyWork += mw
		}
		if !measured && !m.leaving {
			unmeasured++
		}
	}
	shards := max(cmp.Or(v.ringLease.conf.shards, t.shards), 1)
	s.desired = s.replicas
	if workers > 0 {
		s.busy = busyWork.Seconds() / (float64(workers) * loadWindow.Seconds())
		c := float64(workers) / float64(reporting) * loadWindow.Seconds() * t.busy
		s.desired = unmeasured
		if work > 0 {
			k := int(math.Floor(float64(shards)*c/work.Seconds() + 1e-9))
			if k < 1 {
				s.desired += shards
			} else {
				s.desired += (shards + k - 1) / k
			}
		}
	}
	if t.oldest > 0 && served > t.oldest {
		behind := int(math.Ceil(float64(s.replicas)*min(2, served.Seconds()/t.oldest.Seconds()) - 1e-9))
		s.desired = max(s.desired, behind)
	}
	s.desired = max(min(s.desired, shards), 1)
	return s
}

// signal sets the ring's gauges from v, the view of a decision. It
// computes nothing if none of them is set.
func (o *observer) signal(v *view, shards int) {
	m := o.cfg.Metrics
	if m.RingReady == nil && m.RingOldestReady == nil && m.RingBusy == nil && m.DesiredReplicas == nil {
		return
	}
	s := signalOf(v, scaleTarget{busy: o.cfg.TargetBusy, oldest: o.cfg.TargetOldest, shards: shards})
	setGauge(m.RingReady, float64(s.ready))
	setGauge(m.RingOldestReady, s.oldest.Seconds())
	setGauge(m.RingBusy, s.busy)
	setGauge(m.DesiredReplicas, float64(s.desired))
}
