package sharding

import (
	"slices"
	"time"

	"k8s.io/klog/v2"
)

// This file is the ledger's records beside its runs (runs.go): which
// shards every running sharded informer has synced (a shard's keys are
// admitted only then), the deleted keys that wait for a run, when each
// lost shard lapsed (kept warm, keepWarm), and the load it measures of
// each held shard (load.go's meters, read into the report).

// addInformer registers a sharded informer that starts running: until it
// has synced a shard, the shard's keys are not admitted.
func (b *ledger) addInformer(inf *informer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.informers = append(b.informers, inf)
	b.infGen++
	clear(b.filled)
}

// removeInformer unregisters a sharded informer that stopped.
func (b *ledger) removeInformer(inf *informer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.informers = slices.DeleteFunc(b.informers, func(i *informer) bool { return i == inf })
	b.infGen++
}

// running returns the running sharded informers and their generation.
func (b *ledger) running() ([]*informer, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.informers), b.infGen
}

// setFilled installs which shards every running sharded informer has
// synced, computed for generation gen: an informer that started since
// cleared filled, and is counted at the next call.
func (b *ledger) setFilled(filled []bool, gen int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.infGen == gen {
		copy(b.filled, filled)
	}
}

// dropGone forgets the pending keys (load.go) of the given shards, no
// longer admitted, and the deleted keys of those no longer active, and
// returns the deleted keys (for the queue's Remove).
func (b *ledger) dropGone(lost []int) []string {
	if len(lost) == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	in := make([]bool, len(b.state))
	for _, i := range lost {
		in[i] = true
		if b.pending.at != nil {
			// The queue's keys of it are removed (loop.admitted), whatever
			// its state: a shard still active but no longer admitted (a
			// session's gap, an informer's start) owes nothing queued.
			b.pending.drop(i)
		}
	}
	var out []string
	for k, s := range b.gone {
		if in[s] && b.state[s].state != shardActive {
			out = append(out, k)
			delete(b.gone, k)
		}
	}
	return out
}

// goneShard returns the shard a deleted key had at its delete event, if
// the ledger still remembers it (until its run succeeds, or the shard is
// given up).
func (b *ledger) goneShard(key string) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.gone[key]
	return s, ok
}

// lapsedAt returns when the session ended while each shard was held (see
// keepWarm), zero for the others.
func (b *ledger) lapsedAt() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.lapsed)
}

// measured returns the load of the given held shards at now, under the
// ledger's lock: work over loadWindow, ready keys and the oldest's age,
// and whether the load is known. A shard held for less than loadWindow
// (since heldFrom) reports its measured work plus its seed's share of the
// window not yet measured (the work its previous holder reported,
// seedWork), or, without a seed, its measured work scaled up to the
// window once held for loadMeasureMin, unknown before: a move must not
// make a shard look idle to the balance for a minute, nor a few seconds'
// measure stand for a minute's.
func (b *ledger) measured(held []int, now time.Time) ([]shardLoad, []bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out, known := make([]shardLoad, len(held)), make([]bool, len(held))
	if b.work == nil {
		return out, known
	}
	for k, s := range held {
		// The meter's buckets span less than the window (a window less
		// the part of the current bucket still to come), and a shard held
		// for less, its time held: its work is its rate over that span,
		// taken over the window. Read as the window's, the buckets' sum
		// would be 0-17 % short, 8 % on the mean: a ring's work, and the
		// replicas it asks for, read low.
		raw, span := b.work[s].total(now), covered(now)
		age := now.Sub(b.since[s])
		if !b.since[s].IsZero() {
			span = min(span, age)
		}
		rate := 0.0 // work per unit of time
		if span > 0 {
			rate = float64(raw) / float64(span)
		}
		w := time.Duration(rate * float64(loadWindow))
		known[k] = true
		if age < loadWindow && !b.since[s].IsZero() {
			switch {
			case b.seed[s] > 0:
				w = time.Duration(rate*float64(age)) + time.Duration(float64(b.seed[s])*float64(loadWindow-age)/float64(loadWindow))
			case age < loadMeasureMin:
				w, known[k] = 0, false
			}
		}
		out[k].work = w
		out[k].ready, out[k].oldest = b.pending.ready(s, now)
	}
	return out, known
}

// heldFrom starts shard s's measure at now: it was not held at the last
// observation. Work counted before (an earlier holding) is forgotten.
func (b *ledger) heldFrom(s int, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.work != nil {
		b.work[s], b.since[s] = workMeter{}, now
	}
}

// seedWork sets the work shard s's previous holder reported (0: unknown),
// read when the shard is acquired (acquireWrite.work).
func (b *ledger) seedWork(s int, work time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seed != nil {
		b.seed[s] = work
	}
}

// queuedLocked records keys of shard s that were added to the queue for
// an event at now. b.mu must be held.
func (b *ledger) queuedLocked(s int, now time.Time, keys ...string) {
	if b.pending.at == nil {
		return
	}
	for _, k := range keys {
		b.pending.add(k, s, now)
	}
}

// gained records the keys of shard s, gained at now, as owed a catch-up
// run (load.go), and returns the first of them for the caller to add to
// the queue.
func (b *ledger) gained(s int, now time.Time, keys []string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending.at == nil {
		return keys
	}
	b.pending.idleUntil(now)
	b.pending.gain(s, now, keys)
	return b.feedLocked(now)
}

// feedLocked returns the next catch-up keys to add to the queue, of
// shards admitted at now. b.mu must be held.
func (b *ledger) feedLocked(now time.Time) []string {
	return b.feedOf(now, false)
}

// feedOf is feedLocked; force feeds the keys of a shard held but not
// admitted for now too (their runs are refused and owed again, behind
// the others), rather than waiting at the first of them.
func (b *ledger) feedOf(now time.Time, force bool) []string {
	if (b.pending.outstanding >= catchUpWindow && b.pending.credit == 0) || len(b.pending.feed) == 0 {
		return nil
	}
	out := b.pending.take(func(s int) shardFeed {
		switch {
		case b.admitsLocked(s, now):
			return feedKey
		case b.alive && b.state[s].state == shardActive:
			if force {
				return feedKey
			}
			return feedWait
		}
		return feedDrop
	})
	if len(out) > 0 {
		b.pending.moved = now
	}
	return out
}

// feed returns the next catch-up keys to add to the queue (feedLocked):
// the loop's, for a feed that stopped at a shard not admitted then. A
// catch-up that has not moved on for catchUpStall is fed again, its fed
// keys and those of shards not admitted for now included, and logged
// with what stopped it: whatever stopped it, its objects' runs come.
func (b *ledger) feed(now time.Time) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := &b.pending
	if p.at == nil || !p.stalled(now) {
		return b.feedLocked(now)
	}
	kv := []any{"since", now.Sub(p.moved).Round(time.Second), "outstanding", p.outstanding, "credit", p.credit,
		"unfed", len(p.feed), "alive", b.alive, "pastDeadline", !now.Before(b.deadline)}
	if len(p.feed) > 0 {
		head := p.feed[0].shard
		kv = append(kv, "head", head, "headState", b.state[head].state, "headAdmitted", b.admitsLocked(head, now), "headFilled", b.filled[head])
	}
	klog.InfoS("sharding: a catch-up made no progress; feeding it again", kv...)
	p.refeed(now)
	return b.feedOf(now, true)
}
