package sharding

import (
	"slices"
	"time"
)

// This file is what a replica knows of the load of the shards it holds,
// and of the others' (their AnnotationReport): the measure that balance
// by load and the ring's scaling signal are computed from.

// shardLoad is the load of one held shard, as its holder measured it.
type shardLoad struct {
	// work is the handler time of the shard's runs over the last
	// loadWindow (reconcile time per minute, summed over the workers).
	work time.Duration
	// ready is the number of the shard's keys waiting in the queue, and
	// oldest the age of the oldest of them (zero if none).
	ready  int
	oldest time.Duration
}

// loadWindow is the span over which a shard's work is measured.
const loadWindow = time.Minute

// memberLoad is one member's load, as its last membership write
// reported it (AnnotationReport): its held shards with their load (known
// false on a shard whose load it does not measure), and its workers (0:
// not reported).
type memberLoad struct {
	held    []heldShard
	workers int
}

// The work of a shard is measured as the handler time of its runs, summed
// in a ring of loadBuckets buckets of loadBucket each (the bucket of a
// run's end): the window's sum is exact to within one bucket, costs one
// addition per run under the ledger's lock, and forgets a burst entirely
// loadWindow later. An EWMA would cost the same per run but never forget
// a burst, and its value depends on when it is read; a per-second ring
// would cost sixty words per shard for no gain at this precision.
const (
	loadBuckets = 6
	loadBucket  = loadWindow / loadBuckets
)

// workMeter is one shard's work, by bucket. epoch[k] is the bucket
// number (time since the Unix epoch / loadBucket) that sum[k] counts.
type workMeter struct {
	sum   [loadBuckets]time.Duration
	epoch [loadBuckets]int64
}

func bucketOf(t time.Time) int64 { return t.UnixNano() / int64(loadBucket) }

// add counts d of work ending at now.
func (w *workMeter) add(d time.Duration, now time.Time) {
	e := bucketOf(now)
	k := int(e % loadBuckets)
	if w.epoch[k] != e {
		w.epoch[k], w.sum[k] = e, 0
	}
	w.sum[k] += d
}

// covered is the span the buckets of a meter read at now cover: the
// window's, less the part of the current bucket still to come.
func covered(now time.Time) time.Duration {
	return loadWindow - loadBucket + time.Duration(now.UnixNano()-bucketOf(now)*int64(loadBucket))
}

// total is the work of the buckets within loadWindow of now.
func (w *workMeter) total(now time.Time) time.Duration {
	e := bucketOf(now)
	var t time.Duration
	for k := range w.sum {
		if e-w.epoch[k] < loadBuckets {
			t += w.sum[k]
		}
	}
	return t
}

// pendingKeys are the keys the replica owes a run: those added to the
// queue for an event (see the callers of ledger.queuedLocked) whose run
// has not begun since, and the keys of the shards it gained (catch-up
// keys, see below).
// They give a shard's ready keys and the age of the oldest, counted by the
// replica rather than asked of the queue, because no queue says when a
// key became ready, and asking it by shard would cost a walk of its keys.
// Each add and each run's begin cost one map operation under the ledger's
// lock; the oldest is found by popping stale entries off a per-shard
// FIFO, amortised O(1). Keys the controller adds itself (AddRateLimited
// after an error) are not counted: a retry waits for its deadline, and
// is not part of the backlog of new work.
//
// A gained shard's objects are all owed a run (their events went to
// another replica), but that catch-up is the cost of the move, not new
// work: more replicas would not shorten it (they would move more shards,
// and owe more catch-ups), and its runs are no measure of the shard's
// load. So the catch-up keys are counted in ready, never in the oldest
// age, and their runs not in the shard's work (ledger.end). And they are
// fed to the queue a few at a time (catchUpWindow), one more as each run
// begins, rather than all at once: a FIFO queue would otherwise put every
// event that comes after a gain behind the whole shard, for as long as
// its catch-up lasts, and the ring's oldest age would ask for replicas
// (a storm of scale-ups after every scale-down). Fed this way, an event
// waits behind at most catchUpWindow catch-up keys, whatever the queue's
// order, and the workers still all run catch-up keys when no event waits.
// A catch-up key that gets an event meanwhile becomes an event key (its
// wait is counted from the event).
type pendingKeys struct {
	at   map[string]pendingKey
	fifo [][]pendingEntry // event keys, by shard, in order of addition
	n    []int            // by shard, the keys pending (events and catch-up)
	// feed is the catch-up keys not yet fed to the queue, in the order
	// their shards were gained; an entry is stale once its key is no
	// longer unfed (fed, begun, made an event key or dropped).
	feed []pendingEntry
	// catchUp[s] counts shard s's catch-up keys (unfed or fed), and
	// outstanding the fed ones, all shards, whose run has not begun.
	catchUp     []int
	outstanding int
	// others counts the runs of other keys begun since the last key fed
	// for its share (catchUpShare); credit is the keys that share allows
	// beyond the window.
	others, credit int
	// moved is when the catch-up last moved on: a key fed, or a catch-up
	// key begun (set by the ledger, which knows the time; see stalled).
	moved time.Time
}

// A pending key's kind: an event's, or a catch-up key not yet fed to the
// queue, or fed.
const (
	keyEvent uint8 = iota
	keyUnfed
	keyFed
)

// catchUpShare is the least share of the runs a catch-up gets while other
// keys keep the queue busy: one more key is fed, beyond the window, for
// every catchUpShare runs of other keys begun. With the window alone a
// queue that always holds other keys (a ring behind its events, keys that
// requeue themselves) would give the catch-up two of its places per
// round, and a catch-up of thousands of keys would take that many rounds:
// starved, its objects' missed changes would wait for it. An event then
// waits at most a quarter longer, and the ring's signal sees a ring that
// is short, as it is.
const catchUpShare = 4

// catchUpWindow is the most catch-up keys fed to the queue whose run has
// not begun (beyond those of the share, catchUpShare). Each begin feeds
// the next, so the workers fill up with catch-up runs when nothing else
// waits; an event waits behind at most this many. Two rather than one, so that a fed key that the queue holds
// back (coalesced with a run of the same key in flight) does not stop the
// feed for that run's length.
const catchUpWindow = 2

type pendingKey struct {
	shard int
	at    time.Time
	kind  uint8
}

type pendingEntry struct {
	key   string
	at    time.Time
	shard int // for feed's entries
}

func (p *pendingKeys) init(shards int) {
	p.at = make(map[string]pendingKey)
	p.fifo = make([][]pendingEntry, shards)
	p.n = make([]int, shards)
	p.catchUp = make([]int, shards)
}

// add records key, of shard s, added to the queue for an event at now; a
// key already waiting for an event keeps its first time (the queue
// coalesces it), and a catch-up key becomes an event key.
func (p *pendingKeys) add(key string, s int, now time.Time) {
	if k, ok := p.at[key]; ok {
		if k.kind == keyEvent {
			return
		}
		p.forget(key, k)
	}
	p.at[key] = pendingKey{shard: s, at: now}
	p.fifo[s] = append(p.fifo[s], pendingEntry{key: key, at: now})
	p.n[s]++
	if len(p.fifo[s]) > 2*p.n[s]+64 { // stale entries: keep the FIFO within twice the keys
		p.compact(s)
	}
}

// gain records keys, of shard s, gained at now, as catch-up keys to feed
// (take). A key still recorded as pending is not in the queue (a shard
// not admitted has none there: its keys were removed), so it is recorded
// afresh: left as it was, it would never be fed again.
func (p *pendingKeys) gain(s int, now time.Time, keys []string) {
	for _, key := range keys {
		if k, ok := p.at[key]; ok {
			p.forget(key, k)
		}
		p.at[key] = pendingKey{shard: s, at: now, kind: keyUnfed}
		p.feed = append(p.feed, pendingEntry{key: key, at: now, shard: s})
		p.n[s]++
		p.catchUp[s]++
	}
}

// owe records key, of shard s, as a catch-up key to feed again (a run or
// an event refused while its shard was held but not admitted, see
// ledger.refusedLocked).
func (p *pendingKeys) owe(key string, s int, now time.Time) { p.gain(s, now, []string{key}) }

// shardFeed is what take does with a catch-up key of a shard: feed it
// (admitted), wait (held in a live session, not admitted for now: fed, it
// would only be refused), or drop it (not held: its next holder catches
// it up; kept, it would stop the feed for good).
type shardFeed uint8

const (
	feedKey shardFeed = iota
	feedWait
	feedDrop
)

// take marks the next catch-up keys fed, up to catchUpWindow outstanding,
// and returns them for the queue; state tells, for each key's shard,
// whether to feed it, stop there, or drop it.
func (p *pendingKeys) take(state func(s int) shardFeed) []string {
	var out []string
	for (p.outstanding < catchUpWindow || p.credit > 0) && len(p.feed) > 0 {
		e := p.feed[0]
		k, ok := p.at[e.key]
		if ok && k.kind == keyUnfed && k.shard == e.shard && k.at.Equal(e.at) {
			switch state(e.shard) {
			case feedWait:
				return out
			case feedDrop:
				p.forget(e.key, k)
				p.feed[0] = pendingEntry{}
				p.feed = p.feed[1:]
				continue
			}
			k.kind = keyFed
			p.at[e.key] = k
			if p.outstanding >= catchUpWindow {
				p.credit--
			}
			p.outstanding++
			out = append(out, e.key)
		}
		p.feed[0] = pendingEntry{}
		p.feed = p.feed[1:]
	}
	if len(p.feed) == 0 {
		p.feed, p.credit = nil, 0
	}
	return out
}

// begun forgets key: its run began, or it was refused. It reports whether
// the key was a catch-up key.
func (p *pendingKeys) begun(key string) (catchUp bool) {
	k, ok := p.at[key]
	if ok {
		p.forget(key, k)
	}
	if catchUp = ok && k.kind != keyEvent; !catchUp && len(p.feed) > 0 {
		if p.others++; p.others >= catchUpShare {
			p.others, p.credit = 0, min(p.credit+1, catchUpShare) // a burst bounded after a gap
		}
	}
	return catchUp
}

// catchUpStall is how long a catch-up may owe keys without moving on (no
// key fed, no fed key begun) before the loop feeds it again (refeed):
// longer than a run, which a fed key waits for at most once the window
// is full, but short enough that a catch-up that stopped (a fed key the
// queue let go without a run) costs a controller half a minute, not its
// objects' runs.
const catchUpStall = 30 * time.Second

// idleUntil starts the stall's clock at now if the catch-up owed nothing
// until now (it is about to owe).
func (p *pendingKeys) idleUntil(now time.Time) {
	if !p.owes() {
		p.moved = now
	}
}

// owes reports whether any shard has catch-up keys (unfed or fed).
func (p *pendingKeys) owes() bool {
	return slices.ContainsFunc(p.catchUp, func(c int) bool { return c > 0 })
}

// stalled reports whether the catch-up owes keys and has not moved on
// since catchUpStall before now.
func (p *pendingKeys) stalled(now time.Time) bool {
	return now.Sub(p.moved) > catchUpStall && p.owes()
}

// refeed makes every fed key unfed again, to be fed anew: a key fed to
// the queue whose run never began (the queue let it go) holds a place of
// the window for good. A fed key still in the queue is added again, which
// the queue coalesces.
func (p *pendingKeys) refeed(now time.Time) {
	var fed []pendingEntry // collected first: gain rewrites at
	for key, k := range p.at {
		if k.kind == keyFed {
			fed = append(fed, pendingEntry{key: key, shard: k.shard})
		}
	}
	for _, e := range fed {
		p.gain(e.shard, now, []string{e.key})
	}
	p.moved = now
}

// forget deletes key, pending as k.
func (p *pendingKeys) forget(key string, k pendingKey) {
	delete(p.at, key)
	p.n[k.shard]--
	if k.kind != keyEvent {
		p.catchUp[k.shard]--
	}
	if k.kind == keyFed {
		p.outstanding--
	}
}

// drop forgets the keys of shard s (no longer admitted: the queue's keys
// of it were removed).
func (p *pendingKeys) drop(s int) {
	for _, e := range p.fifo[s] {
		if k, ok := p.at[e.key]; ok && k.shard == s && k.kind == keyEvent {
			p.forget(e.key, k)
		}
	}
	p.fifo[s] = nil
	if p.catchUp[s] > 0 {
		// The catch-up keys are in feed (unfed) or only in at (fed): a
		// walk of at, once per shard given up during its catch-up.
		for key, k := range p.at {
			if k.shard == s {
				p.forget(key, k)
			}
		}
	}
	p.n[s], p.catchUp[s] = 0, 0
	if !p.owes() {
		p.feed = nil // all stale
	}
}

func (p *pendingKeys) live(s int, e pendingEntry) bool {
	k, ok := p.at[e.key]
	return ok && k.kind == keyEvent && k.shard == s && k.at.Equal(e.at)
}

func (p *pendingKeys) compact(s int) {
	out := p.fifo[s][:0]
	for _, e := range p.fifo[s] {
		if p.live(s, e) {
			out = append(out, e)
		}
	}
	clear(p.fifo[s][len(out):])
	p.fifo[s] = out
}

// ready returns shard s's pending keys (events and catch-up) and the age
// at now of the oldest event key.
func (p *pendingKeys) ready(s int, now time.Time) (int, time.Duration) {
	f := p.fifo[s]
	for len(f) > 0 && !p.live(s, f[0]) {
		f[0] = pendingEntry{}
		f = f[1:]
	}
	p.fifo[s] = f
	if len(f) == 0 {
		return p.n[s], 0
	}
	return p.n[s], max(0, now.Sub(f[0].at))
}

// loadMeasureMin is how long a holder measures a shard it holds, with no
// seed from its previous holder, before it reports its load: a shard
// measured over a few seconds, scaled up to the window, is a guess that
// would move shards by its noise (a ring at its start above all). Until
// then its entry has no load, and the plan by load makes no move while a
// counted member holds such a shard (planLoad, heldUnmeasured).
const loadMeasureMin = loadWindow / 2

// loadShareMax is the most of the ring's objects that the moves by load
// may carry per loadWindow: those begun within the window (a shard Lease
// taken over within it) and those in flight or planned. Each moved
// object costs its taker a list and its keys a drain, so this bounds what
// a rebalance costs the API server and the keys' latency, whatever the
// count of members (loadBudget bounds the moves at once, not their size).
// The first move of a window is always admitted, so that a ring whose
// heaviest shard holds more than this share still converges, a move per
// window.
//
// Every move weighs in the window, whatever its cause, since what it costs
// does not depend on it; but only the moves of the plan by load (a
// newcomer's included) are held back by it. The others are owed: a
// leaver's shards (planned whatever the budgets), free shards (a crashed
// member's, dealt by count), and every move while the ring balances by
// count (a member publishes no load). Holding them back would leave
// shards unserved, or a member without its share; a move by load waits
// instead until the window they spent has passed.
const loadShareMax = 0.10

// shareBudget is loadShareMax applied to a view: each shard's weight (its
// objects as reports show them, or 1 each if no report counts an object:
// a ring without sharded informer is budgeted by shards), the most the
// window's moves may weigh, and what the window's moves weigh so far.
//
// It is read from the view alone, so every replica with the same view
// computes the same: the objects from the reports, as shardWork reads the
// work, and the moves begun within the window from the shard Leases'
// acquireTime against the latest time any writer put in the view (a
// membership renewTime or a shard acquireTime), never against the
// reader's clock. A skew between writers' clocks only shifts which
// acquisitions count as within the window, and so how soon the next move
// is admitted; replicas whose views differ may plan differently for a
// round, as for the rest of the plan. Neither touches exclusion, which
// the Lease protocol holds whatever the plan.
type shareBudget struct {
	weight      []int64
	limit, used int64
	moves       int
}

func shareOf(v *view) shareBudget {
	sb := shareBudget{weight: make([]int64, len(v.shards))}
	known := make([]bool, len(v.shards))
	ids := make([]string, 0, len(v.members))
	var ref time.Time
	for id, m := range v.members {
		ids = append(ids, id)
		if m.renewed.After(ref) {
			ref = m.renewed
		}
	}
	slices.Sort(ids)
	for _, holder := range []bool{true, false} {
		for _, id := range ids {
			for _, h := range v.members[id].load.held {
				if h.shard >= len(v.shards) || known[h.shard] {
					continue
				}
				s := v.shards[h.shard]
				if holder != (holds(v, s) && s.holder == id) {
					continue
				}
				sb.weight[h.shard], known[h.shard] = int64(h.objects), true
			}
		}
	}
	var total int64
	for i, w := range sb.weight {
		total += w
		if s := v.shards[i]; s.acquired.After(ref) {
			ref = s.acquired
		}
	}
	if total <= 0 {
		for i := range sb.weight {
			sb.weight[i] = 1
		}
		total = int64(len(sb.weight))
	}
	sb.limit = int64(loadShareMax * float64(total))
	for i, s := range v.shards {
		// Taken over within the window: acquired again (a first
		// acquisition, at the ring's creation, is no move). A release
		// keeps the count (releaseShard), so the taker of a planned
		// move, as of a free shard, writes 2 or more; a Lease released
		// by a version that reset it to 0 is missed (a rollout's window).
		if holds(v, s) && s.transitions > 1 && !s.acquired.IsZero() && ref.Sub(s.acquired) < loadWindow {
			sb.take(i)
		}
	}
	return sb
}

// take counts shard i's move in the window.
func (sb *shareBudget) take(i int) {
	sb.used += sb.weight[i]
	sb.moves++
}

// admits reports whether shard i may move by load within the window.
func (sb *shareBudget) admits(i int) bool {
	return sb.moves == 0 || sb.used+sb.weight[i] <= sb.limit
}
