package sharding

import (
	"cmp"
	"slices"
	"strconv"
	"time"
)

// This file is the ring's balance by load (Config.Balance): a plan of
// moves, from the load each holder publishes of the shards it holds
// (load.go, AnnotationReport), that every replica computes the same from
// the same view. Like the count plan (decide.go plan) it only says who
// will take which held shard; the taker prefetches it, the holder hands it
// over once the taker has synced it (handoffs), and the Lease protocol
// does the rest, so exclusion does not depend on it. docs/contract.md
// "Balance" states what it guarantees.

// The plan's thresholds, as fractions of the ring's bound T = max(mean
// member load, heaviest shard): no replica can be brought under T, since
// a shard is not split.
const (
	// loadBand: the ring is balanced while every counted member's load is
	// at most loadBand × T, and none under loadFloor × the mean (a member
	// far under the mean, a newcomer first of all, is given shards even
	// while the others are within the band).
	loadBand  = 1.15
	loadFloor = 0.85
	// loadGain is the hysteresis: a move is made only if it lowers the
	// larger of its two members' loads by at least loadGain × T, so that
	// measurement noise smaller than that never moves a shard, and every
	// move lowers the sum of the squares of the members' loads by a
	// bounded amount: a ring whose loads do not change stops moving.
	loadGain = 0.1
)

// loadBudget is the number of moves by load that may be in flight in a
// ring of n counted members: planned, or begun and not yet taken. A move
// lasts a handoff (the taker's list, the holder's drain), so this bounds
// the moves per period, the lists they cost, and the keys waiting for a
// drain at once. A leave's moves are not held back by it.
func loadBudget(n int) int { return max(1, n/4) }

// The causes of a planned move (Metrics.Moves): a member left; a member
// joined (the taker holds no shard); the count plan; the load plan.
const (
	causeLeave = "leave"
	causeJoin  = "join"
	causeCount = "count"
	causeLoad  = "load"
)

// Why the plan by load makes no further move.
const (
	heldBand       = "band"       // every member within the band
	heldHysteresis = "hysteresis" // no move gains loadGain × T
	heldBudget     = "budget"     // loadBudget moves in flight
	heldUnmeasured = "unmeasured" // a shard held or in flight has no report yet
	heldShare      = "share"      // the next move would carry over loadShareMax of the objects in the window
)

// loadMove is one planned move.
type loadMove struct {
	shard    int
	from, to string
	work     time.Duration // the shard's work
	cause    string
}

// loadPlan is the plan by load, and why it is what it is.
type loadPlan struct {
	// fallback says why the ring is balanced by count ("" if by load).
	fallback string
	// work is each shard's work as the view shows it (0 if unknown), known
	// whether it is reported.
	work  []time.Duration
	known []bool
	// mean, heaviest and bound (loadBand × max(mean, heaviest)); loads
	// are the counted members' loads once the moves in flight and those
	// planned are done.
	mean, heaviest, bound time.Duration
	loads                 map[string]time.Duration
	// inflight are the moves begun (the taker has synced the shard, or
	// it is released naming the taker), budget loadBudget.
	inflight, budget int
	// moved is what the window's moves weigh (shareBudget: objects, or
	// shards), those planned included, and shareLimit the most they may.
	moved, shareLimit int64
	// moves are the moves planned, in the order they were chosen; held
	// why no further one is (heldBand, heldHysteresis, heldBudget,
	// heldShare, heldUnmeasured).
	moves []loadMove
	held  string
}

// shardWork returns each shard's work as v's reports show it: the
// holder's report, or, for a shard its holder does not report (its
// report predates the shard) or a free one, the last report of any member
// that lists it.
func shardWork(v *view) (work []time.Duration, known []bool) {
	work, known = make([]time.Duration, len(v.shards)), make([]bool, len(v.shards))
	if !reportsShards(v) {
		return work, known
	}
	ids := make([]string, 0, len(v.members))
	for id := range v.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, holder := range []bool{true, false} {
		for _, id := range ids {
			for _, h := range v.members[id].load.held {
				if !h.known || h.shard >= len(v.shards) || known[h.shard] {
					continue
				}
				s := v.shards[h.shard]
				if holder != (holds(v, s) && s.holder == id) {
					continue
				}
				work[h.shard], known[h.shard] = h.load.work, true
			}
		}
	}
	return work, known
}

// reportsShards reports whether a member's report in v lists a shard.
func reportsShards(v *view) bool {
	for _, m := range v.members {
		if len(m.load.held) > 0 {
			return true
		}
	}
	return false
}

// measures reports whether m publishes its load: it holds no shard by
// its report, or reports the load of one. A member of a version that
// measures nothing writes entries without load.
func measures(m memberInfo) bool {
	for _, h := range m.load.held {
		if h.known {
			return true
		}
	}
	return len(m.load.held) == 0
}

// planLoad decides the planned moves of the ring by load, as v shows it:
// for each shard, the member that will take it from its live holder (""
// if none), as plan does by count. It falls back to the count plan (it
// returns p.fallback set, and to nil) while a counted member holding
// shards publishes no load, or no shard's work is measured.
//
// Moves in flight (a held shard that another counted member says it has
// synced; a released shard naming its taker) are counted as done, kept
// planned, and counted in the budget. A leaver's shards go first,
// heaviest first, each to the least loaded member, whatever the budgets.
// No further move is made while a shard held by a counted member, or in
// flight to one, has no load reported (heldUnmeasured). Then, while the
// budget lasts, and while the moves of the window weigh at most
// loadShareMax of the objects (shareBudget; the window's first move
// always): if the most loaded member is over the
// bound, or the least loaded under loadFloor × the mean, the plan moves
// the shard that best evens the most loaded member (only it, when over
// the bound; else the most loaded one that can give) with the least
// loaded, if that lowers the larger of their loads by loadGain × T. Ties
// go to the first identity and the lowest shard, so that the plan is a
// function of the view alone.
func (b balance) planLoad(v *view) (to []string, p loadPlan) {
	p.work, p.known = shardWork(v)
	if len(b.ids) == 0 {
		p.fallback = "no member counts"
		return nil, p
	}
	for _, id := range b.ids {
		if b.held[id] > 0 && !measures(v.members[id]) {
			p.fallback = "member " + id + " publishes no load"
			return nil, p
		}
	}
	var total time.Duration
	for i, w := range p.work {
		if p.known[i] {
			total += w
			p.heaviest = max(p.heaviest, w)
		}
	}
	if total <= 0 {
		p.fallback = "no load measured"
		return nil, p
	}
	to = make([]string, len(v.shards))
	p.mean = total / time.Duration(len(b.ids))
	t := max(p.mean, p.heaviest)
	p.bound = time.Duration(loadBand * float64(t))
	floor := time.Duration(loadFloor * float64(p.mean))
	gainMin := time.Duration(loadGain * float64(t))
	p.budget = loadBudget(len(b.ids))
	share := shareOf(v)

	counted := make(map[string]bool, len(b.ids))
	p.loads = make(map[string]time.Duration, len(b.ids))
	for _, id := range b.ids {
		counted[id] = true
		p.loads[id] = 0
	}
	// owned: the shards each counted member or leaver holds that may be
	// planned (not in flight), by index.
	owned := make(map[string][]int)
	var leavers []string
	for i, s := range v.shards {
		if !holds(v, s) {
			if s.holder == "" && counted[s.next] { // released for its taker
				p.loads[s.next] += p.work[i]
				p.inflight++
				share.take(i)
			}
			continue
		}
		if taker := syncedBy(v, i, s.holder, counted); taker != "" && (counted[s.holder] || v.members[s.holder].leaving) {
			to[i] = taker
			p.loads[taker] += p.work[i]
			p.inflight++
			share.take(i)
			continue
		}
		switch {
		case counted[s.holder]:
			p.loads[s.holder] += p.work[i]
			owned[s.holder] = append(owned[s.holder], i)
		case v.members[s.holder].leaving:
			if len(owned[s.holder]) == 0 {
				leavers = append(leavers, s.holder)
			}
			owned[s.holder] = append(owned[s.holder], i)
		}
	}
	least := func(skip string) string {
		l := ""
		for _, id := range b.ids {
			if id != skip && (l == "" || p.loads[id] < p.loads[l]) {
				l = id
			}
		}
		return l
	}
	// A leaver's shards move whatever the budgets (its process is going
	// away: holding them back would leave them unserved), but they weigh
	// in the share like any move, so that the plan by load adds none on
	// top of them in a window they have spent.
	slices.Sort(leavers)
	for _, h := range leavers {
		mine := slices.Clone(owned[h])
		slices.SortStableFunc(mine, func(x, y int) int { return cmp.Compare(p.work[y], p.work[x]) })
		for _, i := range mine {
			l := least("")
			to[i] = l
			p.loads[l] += p.work[i]
			share.take(i)
			p.moves = append(p.moves, loadMove{shard: i, from: h, to: l, work: p.work[i], cause: causeLeave})
		}
	}
	budget := p.budget - p.inflight
	for i, s := range v.shards {
		if !p.known[i] && (holds(v, s) && counted[s.holder] || !holds(v, s) && s.holder == "" && counted[s.next]) {
			// A shard whose work no report shows yet (its taker's
			// report predates it, or its holder has not measured it for
			// loadMeasureMin: a ring's start): the loads are not known
			// well enough to add a move until a report shows it.
			p.held = heldUnmeasured
			p.moved, p.shareLimit = share.used, share.limit
			return to, p
		}
	}
	for {
		order := slices.Clone(b.ids)
		slices.SortStableFunc(order, func(x, y string) int { return cmp.Compare(p.loads[y], p.loads[x]) })
		l := least("")
		over := p.loads[order[0]] > p.bound
		if !over && p.loads[l] >= floor {
			p.held = heldBand
			break
		}
		if budget <= 0 {
			p.held = heldBudget
			break
		}
		givers := order[:1]
		if !over {
			givers = order
		}
		best := loadMove{shard: -1}
		for _, h := range givers {
			if h == l {
				continue
			}
			if best = bestMove(p, owned[h], to, pair{h, l}, gainMin); best.shard >= 0 {
				break
			}
		}
		if best.shard < 0 {
			p.held = heldHysteresis
			break
		}
		if !share.admits(best.shard) {
			p.held = heldShare
			break
		}
		share.take(best.shard)
		best.cause = causeLoad
		if b.held[l] == 0 && !slices.ContainsFunc(p.moves, func(m loadMove) bool { return m.to == l }) {
			best.cause = causeJoin
		}
		to[best.shard] = l
		p.loads[best.from] -= best.work
		p.loads[l] += best.work
		p.moves = append(p.moves, best)
		budget--
	}
	p.moved, p.shareLimit = share.used, share.limit
	return to, p
}

// loadShare is the share, by load, of the member at position k of b.ids:
// the shards it holds and keeps, those planned for it, and the free ones
// dealt to it (what Ready waits for).
func (b balance) loadShare(v *view, to []string, k int) int {
	self := b.ids[k]
	n := len(b.deal(v)[k])
	for i, s := range v.shards {
		if to[i] == self || to[i] == "" && holds(v, s) && s.holder == self {
			n++
		}
	}
	return n
}

// pair is a move's giver h and taker l.
type pair struct{ h, l string }

// bestMove returns the move of one of mine (h's shards, those not
// planned yet) from h to l (of m) that lowers the larger of their loads the
// most, if by gainMin at least; shard -1 if none does. Moves within
// gainMin of the best (that lower it at all) are taken as equal, and the
// lowest shard of them is chosen: a noise smaller than that does not change which shard the plan
// moves, so a taker does not prefetch in vain, nor a holder's handoff
// bound start again.
func bestMove(p loadPlan, mine []int, to []string, m pair, gainMin time.Duration) loadMove {
	h, l := m.h, m.l
	after := func(i int) time.Duration { return max(p.loads[h]-p.work[i], p.loads[l]+p.work[i]) }
	best := time.Duration(-1)
	for _, i := range mine {
		if to[i] == "" && (best < 0 || after(i) < best) {
			best = after(i)
		}
	}
	if best < 0 || max(p.loads[h], p.loads[l])-best < gainMin {
		return loadMove{shard: -1}
	}
	for _, i := range mine { // mine is sorted
		if to[i] == "" && after(i) <= best+gainMin && after(i) < max(p.loads[h], p.loads[l]) {
			return loadMove{shard: i, from: h, to: l, work: p.work[i]}
		}
	}
	return loadMove{shard: -1} // not reached: the best is one
}

// syncedBy returns the counted member other than holder that says it has
// synced shard i for a planned move (memberInfo.synced), or "": the move
// has begun (the holder hands the shard over to it). Several: the first
// identity.
func syncedBy(v *view, i int, holder string, counted map[string]bool) string {
	best := ""
	for id, m := range v.members {
		if id != holder && counted[id] && slices.Contains(m.synced, i) && (best == "" || id < best) {
			best = id
		}
	}
	return best
}

// causes returns the cause of each planned move of to, the count plan
// (plan): a leaver's shard, a taker that holds none, or the count.
func (b balance) causes(v *view, to []string) []string {
	out := make([]string, len(to))
	for i, t := range to {
		switch {
		case t == "":
		case v.members[v.shards[i].holder].leaving:
			out[i] = causeLeave
		case b.held[t] == 0:
			out[i] = causeJoin
		default:
			out[i] = causeCount
		}
	}
	return out
}

// String is the plan in one line, for logs and tests.
func (p loadPlan) String() string {
	if p.fallback != "" {
		return "count (" + p.fallback + ")"
	}
	s := "load: mean " + p.mean.String() + " bound " + p.bound.String() + " in flight " + strconv.Itoa(p.inflight) + "/" + strconv.Itoa(p.budget) +
		" moved " + strconv.FormatInt(p.moved, 10) + "/" + strconv.FormatInt(p.shareLimit, 10)
	for _, m := range p.moves {
		s += " " + strconv.Itoa(m.shard) + ":" + m.from + "→" + m.to + "(" + m.cause + ")"
	}
	return s + " held: " + p.held
}
