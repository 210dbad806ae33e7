package sharding

import (
	"slices"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// This file keeps the queue and the sharded informers in line with the
// shards the runs' ledger (runs.go) holds and admits. It is called by the
// loop (loop.go) only.

// sync brings the queue and the sharded informers in line with the
// shards held, in three steps:
//
//  1. The keys of the shards no longer admitted (given up, lost) leave
//     the queue, while their objects are still in the informers (a
//     draining shard keeps its objects until it is released).
//  2. Every running sharded informer follows the held shards (active or
//     draining), the warm ones (lost with a lapsed session, see keepWarm)
//     and the prefetched ones (planned for this replica, see plan): it
//     drops the objects of the others, without events, and starts filling
//     the gained ones.
//  3. A held shard is filled once every running sharded informer has
//     synced it; a shard that becomes admitted (active and filled) has
//     all its objects enqueued, since their events went to another
//     replica, or came before the shard was admitted.
//
// It then tells OnChange.
func (r *Replica) sync() {
	r.admitted()
	held := r.runs.held()
	fill := r.warm(held)
	var pre []int // prefetched: filled for a planned move, not held
	for _, s := range r.plans.prefetch {
		if !slices.Contains(fill, s) {
			pre = append(pre, s)
		}
	}
	fill = append(fill, pre...)
	slices.Sort(fill)
	infs, gen := r.runs.running()
	// Nothing is filled until the primary informer runs: before that
	// (controller-runtime has not started it yet), the cache lacks every
	// shard.
	filled := make([]bool, r.shards)
	if slices.Contains(infs, r.primaryInformer()) {
		for _, s := range fill {
			filled[s] = true
		}
	}
	for _, inf := range infs {
		inf.SetShards(fill)
		for _, s := range fill {
			filled[s] = filled[s] && inf.Synced(s)
		}
	}
	// A prefetched shard is never admitted (the ledger admits held shards
	// only); that it is synced is said to its holder with the next
	// membership write (memberMark), which lets it hand the shard over.
	r.plans.synced = r.plans.synced[:0]
	for _, s := range pre {
		if filled[s] {
			r.plans.synced = append(r.plans.synced, s)
		}
	}
	for _, s := range fill {
		filled[s] = filled[s] && slices.Contains(held, s)
	}
	r.runs.setFilled(filled, gen)
	r.admitted()
	r.checkShare()
	r.observe()
}

// checkShare marks the replica's share filled (Ready) the first time it
// admits as many shards as its share while its session counts in the
// ring.
func (r *Replica) checkShare() {
	if !r.plans.counted || r.runs.leaving() {
		return
	}
	if r.plans.mode == modeWaiting { // another count is the ring's: the share it will take, in its cache
		r.share.set(len(r.plans.synced), r.plans.share)
		return
	}
	r.share.set(len(r.prev), r.plans.share)
}

// warm returns the shards the informers fill: held, and those kept warm
// (keepWarm, decide.go); it sets r.warmUntil to when the first warm one
// expires (zero if none), for the loop to wake then and drop it.
func (r *Replica) warm(held []int) []int {
	fill := slices.Clone(held)
	r.warmUntil = time.Time{}
	now := time.Now()
	for s, at := range r.runs.lapsedAt() {
		if at.IsZero() || slices.Contains(held, s) {
			continue
		}
		if ok, until := keepWarm(r.ring.shard(s), r.cfg.Identity, at, now, 2*r.cfg.LeaseDuration); ok {
			fill = append(fill, s)
			r.warmUntil = earliest(r.warmUntil, until)
		}
	}
	slices.Sort(fill)
	return fill
}

// admitted compares the admitted shards with those of the last call: it
// removes the queued keys of the shards no longer admitted and enqueues
// every object of the newly admitted ones from the primary informer, then
// tells OnChange and the Shards gauge.
func (r *Replica) admitted() {
	now := r.Shards()
	gained, lost := diff(r.prev, now), diff(now, r.prev)
	r.prev = now
	if len(gained)+len(lost) == 0 {
		return
	}
	klog.V(2).InfoS("sharding: admitted shards changed", "ring", r.cfg.Name, "identity", r.cfg.Identity, "admitted", now, "gained", gained, "lost", lost)
	gone := r.runs.dropGone(lost)
	if inf := r.primaryInformer(); inf != nil {
		each := func(shards []int, do func(key string)) {
			for _, s := range shards {
				for _, obj := range inf.ByShard(s) {
					if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
						do(key)
					}
				}
			}
		}
		each(lost, func(key string) { r.cfg.Queue.Remove(key) })
		each(gained, r.cfg.Queue.Add)
	}
	for _, k := range gone {
		r.cfg.Queue.Remove(k)
	}
	setGauge(r.cfg.Metrics.Shards, float64(len(now)))
	if r.cfg.OnChange != nil {
		r.cfg.OnChange(slices.Clone(now))
	}
}

// diff returns the elements of b not in a; both are sorted.
func diff(a, b []int) []int {
	var out []int
	for _, x := range b {
		if _, found := slices.BinarySearch(a, x); !found {
			out = append(out, x)
		}
	}
	return out
}
