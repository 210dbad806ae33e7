package sharding

import (
	"cmp"
	"slices"
	"time"
)

// This file holds the ring's decisions on shares and moves, as functions
// of a view of the Leases (view, view.go) and of this replica's own state:
// no I/O, no clock (the time is an argument), no goroutine, no lock. The
// machine (step.go) is built of them, and of those of session.go and
// shardcount.go; decide_test.go tests each against a table.
//
// Who decides what:
//
//   - balanceOf, share, holds, counts: the confirmed members and their
//     shares (docs/contract.md "Balance", "Confirmed members");
//   - plan, moves, prefetch, handoffs: the planned moves (make before
//     break): who takes which shard, which shards the taker fills ahead,
//     when the holder hands one over, and which free shards to take;
//   - fences: which members to fence now, and when the next one is due
//     (ownership case 3).
//
// session.go holds those of the session and of the shards held.

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
// answered at least once in that session. A Lease that is a
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
	// byLoad is set while the ring balances by load (planLoad): a shard
	// released for its planned taker goes to it whatever its count.
	byLoad bool
}

// balanceOf computes the shares of a ring of shards shards from v.
//
// Shares are ⌊S/N⌋ or ⌈S/N⌉: the S mod N members first in identity order
// get one more. That order does not depend on who holds what, so every
// replica computes the same shares from the same view, and a join never
// makes an old member's share grow (at most the newcomer's share moves),
// nor does a leave make one shrink (only the leaver's shards move).
func balanceOf(v *view, shards int) balance {
	var b balance
	b.fill(v, shards)
	return b
}

// fill sets b to the shares of a ring of shards shards from v, as
// balanceOf, reusing b's storage: a balance filled again must no longer
// be read (the machine's scratch balance, one per step).
func (b *balance) fill(v *view, shards int) {
	if b.held == nil {
		b.held = make(map[string]int)
	}
	clear(b.held)
	*b = balance{shards: shards, ids: b.ids[:0], held: b.held, free: b.free[:0]}
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
}

// pos is the position of member id in b.ids (ok false if it does not count).
func (b balance) pos(id string) (k int, ok bool) { return slices.BinarySearch(b.ids, id) }

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
// where the member that lapsed still has it cached (keepWarm): under an
// overloaded API server, lapses, reshuffles and their lists feed each
// other (docs/measured.md).
func (b balance) deal(v *view) [][]int {
	out, _ := b.dealNeed(v)
	return out
}

// dealNeed is deal, and what each member (by position in b.ids) is still
// short of once the free shards are dealt.
func (b balance) dealNeed(v *view) ([][]int, []int) {
	need := make([]int, len(b.ids))
	for k := range b.ids {
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
		k, counted := b.pos(h)
		switch {
		case !counted && m.rejoined: // kept until its session counts
		case !counted:
			rest = append(rest, i)
		case need[k] > 0 || b.byLoad:
			out[k] = append(out[k], i)
			need[k]--
		default:
			rest = append(rest, i)
		}
	}
	for k := range out {
		n := min(max(need[k], 0), len(rest))
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
// does not come (a bound, HandoffTimeout, ends that wait), never two
// admitting holders: the plan decides only when a holder starts
// draining, and the Lease protocol does the rest as for any move.
func (b balance) plan(v *view) []string {
	to := make([]string, len(v.shards))
	if len(b.ids) == 0 {
		return to
	}
	holders := make([]string, 0, len(b.held))
	for h := range b.held {
		holders = append(holders, h)
	}
	slices.Sort(holders)
	over := make([]int, len(holders)) // by position in holders
	n := 0
	for j, h := range holders {
		if k, ok := b.pos(h); ok {
			over[j] = max(0, b.held[h]-b.share(k))
		} else if m := v.members[h]; m.leaving {
			over[j] = b.held[h]
		}
		n += over[j]
	}
	if n == 0 {
		return to // no surplus: nothing to plan
	}
	_, need := b.dealNeed(v)
	// Each holder's surplus is the last of its shards: taken in one pass
	// from the end, then put in order of holder, then of shard.
	type pick struct{ j, i int }
	picks := make([]pick, 0, n)
	for i := len(v.shards) - 1; i >= 0 && len(picks) < n; i-- {
		s := v.shards[i]
		if j, ok := slices.BinarySearch(holders, s.holder); ok && over[j] > 0 && holds(v, s) {
			picks = append(picks, pick{j, i})
			over[j]--
		}
	}
	slices.SortFunc(picks, func(x, y pick) int { return cmp.Or(cmp.Compare(x.j, y.j), cmp.Compare(x.i, y.i)) })
	surplus := make([]int, len(picks))
	for k, p := range picks {
		surplus[k] = p.i
	}
	for k := range b.ids {
		for ; need[k] > 0 && len(surplus) > 0; need[k]-- {
			to[surplus[0]] = b.ids[k]
			surplus = surplus[1:]
		}
	}
	return to
}

// mover is the replica moving towards its share: who it is, the ticks
// its session has lasted, its active shards (those whose keys it
// admits), and, by shard, the version a write of it failed at since the
// last tick (tried.shard).
type mover struct {
	self     string
	aliveFor int
	active   []int
	failed   []string
}

// moves decides how me moves towards its share of b, given the plan to
// (plan): the active shards that the plan gives to another member, which
// it hands over (handoffs says when), and the free shards it acquires.
//
// A member under its share takes the free shards deal gives it, so
// replicas working from the same view never race for the same shard. It
// takes none before its session is settled (settledTicks, step.go). A
// shard whose write failed at the version v shows (see tried) is not
// taken again before the view moves on.
func moves(v *view, b balance, to []string, me mover) (give, acquire []int) {
	for _, i := range me.active {
		if to[i] != "" && to[i] != me.self {
			give = append(give, i)
		}
	}
	k := slices.Index(b.ids, me.self)
	if k < 0 || len(give) > 0 || me.aliveFor < settledTicks {
		return give, nil
	}
	for _, i := range b.deal(v)[k] {
		if me.failed[i] == versionOf(v.shards[i]) {
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
		if to[i] == self || s.holder == "" && s.next == self { // a Lease that names no holder is not held
			out = append(out, i)
		}
	}
	return out
}

// handoffClock is what handoffs needs of time: since[i], when this
// replica first saw shard i planned for its taker; now; and wait,
// Config.HandoffTimeout.
type handoffClock struct {
	since []time.Time
	now   time.Time
	wait  time.Duration
}

// handoffs decides which of the shards self gives (moves) it starts
// draining at c.now: those whose taker (to) says, in its membership
// Lease, that it has synced them (memberInfo.synced), and every one once
// c.wait has passed since c.since[i] (a taker whose cache does not sync,
// or that runs a version that does not prefetch, is not waited for
// longer: its move then costs a list, as a crash move does). It also
// returns the next instant a bound falls due (zero if none).
func handoffs(v *view, to []string, give []int, c handoffClock) (drain []int, next time.Time) {
	for _, i := range give {
		due := c.since[i].Add(c.wait)
		if slices.Contains(v.members[to[i]].synced, i) || !c.now.Before(due) {
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
