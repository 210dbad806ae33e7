package sharding

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// This file holds the decisions on this replica's session and on the
// shards it holds, as pure functions (see decide.go):
//
//   - sessionOver, adoptShard: what the view says of our session and of
//     each shard we hold (ownership cases 1 and 2, and the stale view);
//   - keepWarm: which lost shards stay in the cache;
//   - mayRelease, drainStep: when a draining shard is released, or its runs
//     cancelled (ownership case 1);
//   - membershipWrite, acceptAnswer, afterMemberError, afterMemberGet:
//     what the tick writes of our membership Lease and what an answer may
//     do to the session (RenewDeadline);
//   - jitterMax: the period's jitter.

// sessionOver reports whether v shows that self's live session is over:
// its membership Lease is gone (fenced) or names another session.
func sessionOver(v *view, self string, alive bool, session string) bool {
	me, present := v.members[self]
	return alive && (!present || me.session != session)
}

// warmFor is how many LeaseDurations a lost shard stays warm at most
// (keepWarm): a lapsed replica usually joins again and takes its shards
// back within a few periods.
const warmFor = 2

// warmTTL is how long a lost shard stays warm at most.
func warmTTL(leaseDuration time.Duration) time.Duration { return warmFor * leaseDuration }

// What adoptShard tells runs.adopt to do with one shard.
type adoptAction uint8

const (
	adoptKeep     adoptAction = iota // nothing changes
	adoptFree                        // not ours (any more): free it, cancel its runs (ErrLeaseLost)
	adoptActive                      // an acquisition whose answer was lost landed: hold it
	adoptDraining                    // the same, while leaving: hold it only to release it
)

// adopter is this replica as adoptShard sees it: its identity, whether
// its session is alive and which it is, and whether it leaves.
type adopter struct {
	self, session  string
	alive, leaving bool
}

// adoptShard brings one shard's local state in line with its Lease s in
// the view: a shard Lease that names me's session, after an acquisition
// whose answer was lost (unknown is that session), is held; a held or
// draining shard whose Lease names someone else (or no one) is freed
// (which the protocol never lets happen to an active shard while the
// session is alive; a draining one is freed so when its release's answer
// was lost).
//
// Only a shard whose acquisition got no answer is taken from the view: a
// view behind the server may still show the version of a shard Lease from
// before this replica released it, naming its session, and taking that
// for held would run keys of a shard another replica may have acquired.
func adoptShard(s shardInfo, me adopter, state uint8, unknown string) adoptAction {
	mine := me.alive && s.holder == me.self && s.session == me.session
	lost := mine && unknown == me.session
	switch {
	case !mine && state != shardFree:
		return adoptFree
	case lost && state == shardFree && !me.leaving:
		return adoptActive
	case lost && state == shardFree && me.leaving:
		return adoptDraining
	}
	return adoptKeep
}

// keepWarm reports whether this replica keeps filling shard s (its Lease
// as the view shows it), which it does not hold, because its session
// ended while it held it, at lapsedAt (zero if it did not); and until when
// at most. A session lapses when the API server answers no renewal within
// RenewDeadline, mostly under load, and the replica, joined again, usually
// takes the same shards back a few ticks later: refilling them would cost
// a list of every object of the resource (client mode) or of each shard,
// and a burst of lists is what overloads the server in the first place
// (docs/measured.md). So a lost shard stays in the
// informers, fed and synced but not admitted, until another member holds
// it (someone else's session names it in the view) or ttl (warmTTL) has
// passed.
// Admission never depends on it: a key runs only in a shard held in a
// live session.
func keepWarm(s shardInfo, self string, lapsedAt, now time.Time, ttl time.Duration) (bool, time.Time) {
	until := lapsedAt.Add(ttl)
	if lapsedAt.IsZero() || !now.Before(until) {
		return false, time.Time{}
	}
	if s.exists && s.holder != "" && s.holder != self {
		return false, time.Time{}
	}
	return true, until
}

// mayRelease reports whether the draining shard whose Lease the view shows
// as s may be released in session: only the version that names this
// replica's session, and not one whose release failed since the last tick
// (failedAt, see tried). The view may have moved on since the shard began
// draining (our session ended and another replica took the shard, or a
// release whose answer was lost landed): emptying that version would take
// the shard from its new holder. adoptShard frees the shard then.
func mayRelease(s shardInfo, self, session, failedAt string) bool {
	return s.exists && s.holder == self && s.session == session && failedAt != versionOf(s)
}

// What drainStep tells the loop to do with one shard.
type drainAction uint8

const (
	drainNone    drainAction = iota // not draining
	drainRelease                    // no run left: release its Lease
	drainCancel                     // grace over: cancel its runs (ErrGraceOver), once
	drainWait                       // runs in flight: wait until graceEnd
)

// drainStep decides what a shard being given up needs at now: released
// once its runs have all returned, its runs cancelled once its grace
// period is over, else a wake-up at the grace period's end.
func drainStep(s shard, now time.Time) drainAction {
	switch {
	case s.state != shardDraining:
		return drainNone
	case s.inflight == 0:
		return drainRelease
	case !now.Before(s.graceEnd):
		if s.cancelled {
			return drainNone
		}
		return drainCancel
	}
	return drainWait
}

// membershipWrite decides what the tick writes of our membership Lease:
// while the session is alive, a renewal (write, not join); once it has
// lapsed, a join (a new session) but only when every run of the old one
// has returned (ownership case 2) and the replica is not leaving;
// otherwise nothing.
//
// Only an alive session is renewed (acquireTime is the session's start,
// before renewTime). A replica that has gone RenewDeadline without an
// answered write does not renew: it writes a join (acquireTime =
// renewTime, a new session each time), which the others do not count
// (counts). Its writes may still land when only their answers are lost,
// and it may learn its Lease's resourceVersion back from a Conflict and a
// Get, so it cannot rely on its Lease going still to be fenced; writing
// joins is how it stops holding a share it cannot use.
func membershipWrite(alive, leaving bool, inflight int) (write, join bool) {
	if alive {
		return true, false
	}
	if leaving || inflight > 0 {
		return false, false
	}
	return true, true
}

// What acceptAnswer makes of a successful membership write.
type answer uint8

const (
	answerIgnored answer = iota // too late, or of a session that ended: proves nothing
	answerJoined                // a join answered in time: a new session begins
	answerRenewed               // a renewal of the live session: its deadline moves
)

// sentWrite is a successful membership write as it was sent: at, in
// session, a join unless the session was alive then (wasAlive).
type sentWrite struct {
	at       time.Time
	wasAlive bool
	session  string
}

// liveSession is the session as it is when an answer arrives.
type liveSession struct {
	alive    bool
	session  string
	deadline time.Time
}

// acceptAnswer decides what the success of membership write w proves
// when its answer arrives at now, given the session cur as it is then.
//
// A session never comes back once it has ended: a renewal's success is
// accepted only if the session is still alive when the answer arrives,
// less than renewDeadline after the renewal was sent and before the
// session's own deadline (the expire timer may not have fired yet). An
// answer that comes later proves nothing about now: the session's runs
// may have been cancelled, and another replica may have fenced it and
// taken its shards in between. The next write is then a join.
func acceptAnswer(w sentWrite, now time.Time, renewDeadline time.Duration, cur liveSession) answer {
	switch {
	case !now.Before(w.at.Add(renewDeadline)):
		return answerIgnored // too late for the deadline it would set
	case !w.wasAlive:
		return answerJoined
	case cur.alive && cur.session == w.session && now.Before(cur.deadline):
		return answerRenewed
	}
	// A renewal of a session that ended while it was in flight (or whose
	// deadline has passed, the timer about to end it).
	return answerIgnored
}

// What afterMemberError learns of our membership Lease from a failed write.
type memberFate uint8

const (
	memberUnknown memberFate = iota // nothing: the next write tells
	memberGone                      // it is gone: create it next time; the session it carried is over
	memberRead                      // read it back (Get) and ask afterMemberGet
)

// afterMemberError decides what a failed write of our membership Lease
// says of it. NotFound: it is gone (fenced). A Conflict is a stale
// resourceVersion (our own earlier write whose answer was lost: only this
// replica writes its Lease, others only delete it) or a UID that is not
// the Lease's any more (it was deleted); AlreadyExists is a Lease left by
// an earlier run of this identity, or our own create whose answer was
// lost. The Lease as it is now tells which.
func afterMemberError(err error) memberFate {
	switch {
	case apierrors.IsNotFound(err):
		return memberGone
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		return memberRead
	}
	return memberUnknown
}

// afterMemberGet decides, from the Get of our membership Lease after a
// Conflict or AlreadyExists (cur, or gerr), the version the next write
// builds on (zero: create it), and whether the Lease our session was
// written on is gone.
func afterMemberGet(known leaseRef, cur *coordinationv1.Lease, gerr error) (next leaseRef, gone bool) {
	switch {
	case apierrors.IsNotFound(gerr):
		return leaseRef{}, true
	case gerr != nil:
		return known, false // the next write tells
	case known.known() && cur.UID != known.uid:
		// Deleted, and created again by a join of ours whose answer was
		// lost: the next write builds on it.
		return refOf(cur), true
	}
	return refOf(cur), false
}

// jitterMax is the largest jitter of a period: a tenth of retry, capped at
// half of renew − retry so that a period stays well inside RenewDeadline.
// Replicas started together would otherwise renew at the same instants
// for as long as they run; the jitter spreads their requests over the
// period. It only lengthens the period, so the loop still writes at most
// one membership Lease per RetryPeriod, and every bound stated with "a
// RetryPeriod" holds with 1.1×RetryPeriod.
func jitterMax(retry, renew time.Duration) time.Duration {
	return min(retry/10, (renew-retry)/2)
}
