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

// pendingKeys are the keys the replica added to the queue (its event
// handler, and the keys of a shard it gains) whose run has not begun
// since: a shard's ready keys and the age of the oldest, counted by the
// replica rather than asked of the queue, because no queue says when a
// key became ready, and asking it by shard would cost a walk of its keys.
// Each add and each run's begin cost one map operation under the ledger's
// lock; the oldest is found by popping stale entries off a per-shard
// FIFO, amortised O(1). Keys the controller adds itself (AddRateLimited
// after an error) are not counted: a retry waits for its deadline, and
// is not part of the backlog of new work.
type pendingKeys struct {
	at   map[string]pendingKey
	fifo [][]pendingEntry // by shard, in order of addition
	n    []int            // by shard, the keys pending
}

type pendingKey struct {
	shard int
	at    time.Time
}

type pendingEntry struct {
	key string
	at  time.Time
}

func (p *pendingKeys) init(shards int) {
	p.at = make(map[string]pendingKey)
	p.fifo = make([][]pendingEntry, shards)
	p.n = make([]int, shards)
}

// add records key, of shard s, added at now; a key already pending keeps
// its first time (the queue coalesces it).
func (p *pendingKeys) add(key string, s int, now time.Time) {
	if _, ok := p.at[key]; ok {
		return
	}
	p.at[key] = pendingKey{shard: s, at: now}
	p.fifo[s] = append(p.fifo[s], pendingEntry{key: key, at: now})
	p.n[s]++
	if len(p.fifo[s]) > 2*p.n[s]+64 { // stale entries: keep the FIFO within twice the keys
		p.compact(s)
	}
}

// begun forgets key: its run began.
func (p *pendingKeys) begun(key string) {
	if k, ok := p.at[key]; ok {
		delete(p.at, key)
		p.n[k.shard]--
	}
}

// drop forgets the keys of shard s (no longer admitted: the queue's keys
// of it were removed).
func (p *pendingKeys) drop(s int) {
	for _, e := range p.fifo[s] {
		if k, ok := p.at[e.key]; ok && k.shard == s {
			delete(p.at, e.key)
		}
	}
	p.fifo[s], p.n[s] = nil, 0
}

func (p *pendingKeys) live(s int, e pendingEntry) bool {
	k, ok := p.at[e.key]
	return ok && k.shard == s && k.at.Equal(e.at)
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

// ready returns shard s's pending keys and the age of the oldest at now.
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
