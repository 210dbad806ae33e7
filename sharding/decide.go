package sharding

import (
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// This file holds the ring's decisions, as functions of a view of the
// Leases (view, ringview.go) and of this replica's own state: no I/O, no
// clock (the time is an argument), no goroutine, no lock. The loop
// (loop.go) takes a copy of the view, asks these functions what to do,
// and does it: the Lease writes are leases.go's, the runs' bookkeeping
// runs.go's. decide_test.go tests each against a table.
//
// Who decides what:
//
//   - balanceOf, share, holds, counts: the confirmed members and their
//     shares (docs/contract.md "Balance", "Confirmed members");
//   - plan, moves, prefetch, handoffs: the planned moves (make before
//     break): who takes which shard, which shards the taker fills ahead,
//     when the holder hands one over, and which free shards to take;
//   - fences: which members to fence now, and when the next one is due
//     (ownership case 3);
//   - sessionOver, adoptShard: what the view says of our session and of
//     each shard we hold (ownership cases 1 and 2, and the stale view);
//   - mayRelease, drainStep: when a draining shard is released, or its runs
//     cancelled (ownership case 1);
//   - membershipWrite, acceptAnswer, afterMemberError: what the tick
//     writes of our membership Lease and what an answer may do to the
//     session (RenewDeadline, issue #24);
//   - jitterMax: the period's jitter.

// tried records the writes that failed since the last tick, so that a
// change of the view does not retry them at the version they failed on.
type tried struct {
	fence map[string]leaseRef // member → the version a fence of it failed at
	shard []string            // shard → the resourceVersion a write failed at ("-": missing); "" none
	// unknown[i] is the session in which an acquisition of shard i got
	// no answer: it may have landed. Only such a shard is taken as held
	// when the view shows it names this replica's session (adoptShard):
	// any other Lease that names the session is a version from before this
	// replica released it, not yet superseded in the view.
	unknown []string
	// ring is the resourceVersion of the ring's Lease a write of it failed
	// at; seal, by Lease, the version a seal failed at (shardcount.go).
	ring string
	seal map[shardKey]string
}

func newTried(shards int) tried {
	return tried{fence: make(map[string]leaseRef), shard: make([]string, shards), unknown: make([]string, shards),
		seal: make(map[shardKey]string)}
}

// reset forgets the failed writes: each tick may try them again.
func (t *tried) reset() {
	clear(t.fence)
	clear(t.shard)
	clear(t.seal)
	t.ring = ""
}

// versionOf names the version of shard Lease s a write is conditioned on.
func versionOf(s shardInfo) string {
	if !s.exists {
		return "-"
	}
	return s.ref.rv
}

// counts reports whether member m gets a share: only once its Lease is a
// renewal (renewTime ≠ acquireTime), which proves that its writer was
// answered at least once in that session (issue #14). A Lease that is a
// join may come from a replica whose requests land but whose answers are
// lost: it can never take a shard, and since it keeps writing nobody
// fences it; a share would wait for it while the fault lasts.
//
// A member that announced its leave (memberInfo.leaving) counts no more
// either: its shards are planned for the others (plan), which fill their
// caches for them while it still admits their keys.
func counts(m memberInfo) bool { return m.confirmed && !m.leaving }

// holds reports whether shard Lease s is held: it names a holder whose
// membership Lease is in v with the same session. A shard whose holder's
// membership Lease is gone, or names another session, is free.
func holds(v *view, s shardInfo) bool {
	m, ok := v.members[s.holder]
	return s.exists && s.holder != "" && ok && m.session == s.session
}

// balance is the ring's shares as a view shows them.
type balance struct {
	shards int
	ids    []string       // the members that count, sorted by identity
	held   map[string]int // shards held, by identity
	free   []int          // the free shards, in order
}

// balanceOf computes the shares of a ring of shards shards from v.
//
// Shares are ⌊S/N⌋ or ⌈S/N⌉: the S mod N members first in identity order
// get one more. That order does not depend on who holds what, so every
// replica computes the same shares from the same view, and a join never
// makes an old member's share grow (at most the newcomer's share moves),
// nor does a leave make one shrink (only the leaver's shards move).
func balanceOf(v *view, shards int) balance {
	b := balance{shards: shards, held: make(map[string]int)}
	for id, m := range v.members {
		if counts(m) && (m.conf.shards == 0 || m.conf.shards == shards) { // another count gets no share: shardcount.go
			b.ids = append(b.ids, id)
		}
	}
	slices.Sort(b.ids)
	for i, s := range v.shards {
		if holds(v, s) {
			b.held[s.holder]++
			continue
		}
		b.free = append(b.free, i)
	}
	return b
}

// share is the share of the member at position k of b.ids.
func (b balance) share(k int) int {
	n := len(b.ids)
	t := b.shards / n
	if k < b.shards%n {
		t++
	}
	return t
}

// deficit is how many shards the member at position k is short of.
func (b balance) deficit(k int) int { return max(0, b.share(k)-b.held[b.ids[k]]) }

// deal deals b's free shards out to the members short of their share,
// by position in b.ids, each sorted.
//
// A free shard whose Lease still names a member of v (an earlier session
// of it: its session lapsed, and it joined again; or, released by plan,
// the taker its holder handed it to: shardInfo.next) is kept for that
// member: up to its deficit once its new session counts, and all of them
// while its join, the first after a confirmed session (rejoined), does
// not count yet (its first renewal is a period away). A member whose
// joins go unanswered writes a new one each period, which is not
// rejoined: its shards are dealt, as those of a member not in v. The
// others are dealt in identity order: the member at position k takes
// those after the deficits of the members before it. Without the first
// rule, a lapse reshuffled the ring: in the tick before the rejoined
// member counted, the others' shares grew, they took its shards, then
// gave them up again; and each shard that lands elsewhere costs a list,
// where the member that lapsed still has it cached (keepWarm). Under an
// overloaded API server (16 replicas over 100,000 objects, each list
// tens of seconds) lapses, reshuffles and their lists fed each other and
// the ring never settled.
func (b balance) deal(v *view) [][]int {
	out, _ := b.dealNeed(v)
	return out
}

// dealNeed is deal, and what each member (by position in b.ids) is still
// short of once the free shards are dealt.
func (b balance) dealNeed(v *view) ([][]int, []int) {
	pos := make(map[string]int, len(b.ids))
	need := make([]int, len(b.ids))
	for k, id := range b.ids {
		pos[id] = k
		need[k] = b.deficit(k)
	}
	out := make([][]int, len(b.ids))
	var rest []int
	for _, i := range b.free {
		h := v.shards[i].holder
		if h == "" {
			h = v.shards[i].next // released for a planned taker (see plan)
		}
		m, member := v.members[h]
		if h == "" || !member {
			rest = append(rest, i)
			continue
		}
		k, counted := pos[h]
		switch {
		case !counted && m.rejoined: // kept until its session counts
		case !counted:
			rest = append(rest, i)
		case need[k] > 0:
			out[k] = append(out[k], i)
			need[k]--
		default:
			rest = append(rest, i)
		}
	}
	for k := range out {
		n := min(need[k], len(rest))
		out[k] = append(out[k], rest[:n]...)
		need[k] -= n
		rest = rest[n:]
		slices.Sort(out[k])
	}
	return out, need
}

// plan decides the planned moves of the ring as v shows it: for each
// shard, the member that will take it from its live holder ("" if none).
// Every replica computes the same plan from the same view, so the taker
// fills its cache for a shard (prefetch, never admitted) while the holder
// still admits its keys, and the holder gives the shard up only once the
// taker says it has synced it (handoffs): a planned move makes the
// shard's keys wait for the holder's drain, not for a list.
//
// The shards planned away are a holder's surplus, the last of the shards
// it holds beyond its share (all of them for a member that announced its
// leave), holders taken in identity order; they go to the members still
// short of their share once the free shards are dealt (dealNeed), in
// identity order, as many as those are waiting for. A join moves only the
// newcomer's share; a leave only the leaver's shards (Balance). Views
// that differ (watches at different points) give different plans: a
// taker may then prefetch in vain, or a holder wait for a taker that
// does not come (a bound, handoffWait, ends that wait), never two
// admitting holders: the plan decides only when a holder starts
// draining, and the Lease protocol does the rest as for any move.
func (b balance) plan(v *view) []string {
	to := make([]string, len(v.shards))
	if len(b.ids) == 0 {
		return to
	}
	_, need := b.dealNeed(v)
	pos := make(map[string]int, len(b.ids))
	for k, id := range b.ids {
		pos[id] = k
	}
	holders := make([]string, 0, len(b.held))
	for h := range b.held {
		holders = append(holders, h)
	}
	slices.Sort(holders)
	var surplus []int
	for _, h := range holders {
		over := 0
		if k, ok := pos[h]; ok {
			over = b.held[h] - b.share(k)
		} else if m := v.members[h]; m.leaving {
			over = b.held[h]
		}
		if over <= 0 {
			continue
		}
		var mine []int
		for i, s := range v.shards {
			if s.holder == h && holds(v, s) {
				mine = append(mine, i)
			}
		}
		surplus = append(surplus, mine[len(mine)-over:]...)
	}
	for k := range b.ids {
		for ; need[k] > 0 && len(surplus) > 0; need[k]-- {
			to[surplus[0]] = b.ids[k]
			surplus = surplus[1:]
		}
	}
	return to
}

// moves decides how self moves towards its share of b, given the plan to
// (plan): the active shards (those whose keys it admits) that the plan
// gives to another member, which it hands over (handoffs says when), and
// the free shards it acquires.
//
// A member under its share takes the free shards deal gives it, so
// replicas working from the same view never race for the same shard. It
// takes none before its third tick (aliveFor ≥ 3): the others count it
// from its first renewal, its second tick, so a newcomer waits one more
// tick to see the renewals of the members that started with it, and
// replicas started together deal each shard out once. A shard whose write
// failed at the version v shows (failed[i], see tried) is not taken again
// before the view moves on.
func moves(v *view, b balance, to []string, self string, aliveFor int, active []int, failed []string) (give, acquire []int) {
	for _, i := range active {
		if to[i] != "" && to[i] != self {
			give = append(give, i)
		}
	}
	me := slices.Index(b.ids, self)
	if me < 0 || len(give) > 0 || aliveFor < 3 {
		return give, nil
	}
	for _, i := range b.deal(v)[me] {
		if failed[i] == versionOf(v.shards[i]) {
			continue // failed at this version: wait for a newer one, or the next tick
		}
		if v.ringLease.exists && sealedIn(v.shards[i], v.ringLease.gen) {
			continue // sealed for a switch of the count (shardcount.go)
		}
		acquire = append(acquire, i)
	}
	return nil, acquire
}

// prefetch returns the shards self fills without holding them, because v
// shows they are coming to it: planned for it (to, see plan), or released
// for it (their Lease names it as the next holder) and not yet taken.
func prefetch(v *view, to []string, self string) []int {
	var out []int
	for i, s := range v.shards {
		if to[i] == self || !holds(v, s) && s.holder == "" && s.next == self {
			out = append(out, i)
		}
	}
	return out
}

// handoffs decides which of the shards self gives (moves) it starts
// draining at now: those whose taker (to) says, in its membership Lease,
// that it has synced them (memberInfo.synced), and every one once
// handoffWait has passed since since[i], when self first saw shard i
// planned for that taker (a taker whose cache does not sync, or that runs
// a version that does not prefetch, is not waited for longer: its move
// then costs a list, as a crash move does). It also returns the next
// instant a bound falls due (zero if none).
func handoffs(v *view, to []string, give []int, since []time.Time, now time.Time, handoffWait time.Duration) (drain []int, next time.Time) {
	for _, i := range give {
		due := since[i].Add(handoffWait)
		if slices.Contains(v.members[to[i]].synced, i) || !now.Before(due) {
			drain = append(drain, i)
			continue
		}
		if next.IsZero() || due.Before(next) {
			next = due
		}
	}
	return drain, next
}

// fences decides which members of v self fences at now: every other
// member whose Lease the view has shown unchanged for leaseDuration,
// unless a fence of that very version failed since the last tick
// (failed). It returns them sorted, and the next instant a fence falls due
// (zero if none).
//
// LeaseDuration is counted from when this replica first saw the version
// (memberInfo.at), never from the Lease's renewTime: that is the holder's
// clock, and the timing argument needs only that the version was written
// before it was seen, which a watch (or a list) guarantees.
func fences(v *view, self string, leaseDuration time.Duration, now time.Time, failed map[string]leaseRef) (due []string, next time.Time) {
	for id, m := range v.members {
		if id == self {
			continue
		}
		if at := m.at.Add(leaseDuration); now.Before(at) {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			continue
		}
		if ref, ok := failed[id]; ok && ref == m.ref {
			continue
		}
		due = append(due, id)
	}
	slices.Sort(due)
	return due, next
}

// sessionOver reports whether v shows that self's live session is over:
// its membership Lease is gone (fenced) or names another session.
func sessionOver(v *view, self string, alive bool, session string) bool {
	me, present := v.members[self]
	return alive && (!present || me.session != session)
}

// What adoptShard tells runs.adopt to do with one shard.
type adoptAction uint8

const (
	adoptKeep     adoptAction = iota // nothing changes
	adoptFree                        // not ours (any more): free it, cancel its runs (ErrLeaseLost)
	adoptActive                      // an acquisition whose answer was lost landed: hold it
	adoptDraining                    // the same, while leaving: hold it only to release it
)

// adoptShard brings one shard's local state in line with its Lease s in
// the view: a shard Lease that names this replica's session, after an
// acquisition whose answer was lost (unknown is that session), is held;
// a held or draining shard whose Lease names someone else (or no one) is
// freed (which the protocol never lets happen to an active shard while
// the session is alive; a draining one is freed so when its release's
// answer was lost).
//
// Only a shard whose acquisition got no answer is taken from the view: a
// view behind the server may still show the version of a shard Lease from
// before this replica released it, naming its session, and taking that
// for held would run keys of a shard another replica may have acquired.
func adoptShard(s shardInfo, self string, alive bool, session string, state uint8, unknown string, leaving bool) adoptAction {
	mine := alive && s.holder == self && s.session == session
	lost := mine && unknown == session
	switch {
	case !mine && state != shardFree:
		return adoptFree
	case lost && state == shardFree && !leaving:
		return adoptActive
	case lost && state == shardFree && leaving:
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
// (16 replicas over 100,000 objects did not settle in 15 minutes,
// sessions lapsing at each round of lists). So a lost shard stays in the
// informers, fed and synced but not admitted, until another member holds
// it (someone else's session names it in the view) or ttl has passed.
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

// acceptAnswer decides what the success of a membership write sent at sent
// (a join if the session was not alive then: wasAlive false; else a
// renewal of session) proves when its answer arrives at now, given the
// session as it is now (alive, cur, deadline).
//
// A session never comes back once it has ended (issue #24): a renewal's
// success is accepted only if the session is still alive when the answer
// arrives, less than renewDeadline after the renewal was sent and before
// the session's own deadline (the expire timer may not have fired yet).
// An answer that comes later proves nothing about now: the session's runs
// may have been cancelled, and another replica may have fenced it and
// taken its shards in between. The next write is then a join.
func acceptAnswer(sent, now time.Time, renewDeadline time.Duration, wasAlive bool, session string, alive bool, cur string, deadline time.Time) answer {
	switch {
	case !now.Before(sent.Add(renewDeadline)):
		return answerIgnored // too late for the deadline it would set
	case !wasAlive:
		return answerJoined
	case alive && cur == session && now.Before(deadline):
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
