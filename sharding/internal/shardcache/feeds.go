package shardcache

import (
	"context"
	"slices"
	"strconv"

	"k8s.io/client-go/tools/cache"
)

// This file is the feeds' lifecycle: which Reflectors run for the
// shards the informer fills (follow), how one starts (start), and which
// objects a feed may put in the store (current, keeps). SetShards
// (informer.go) changes the target and calls follow; the probe and a
// downgrade (mode.go) start the first feeds; a feed's first list calls
// follow again (store.go, replace).

// allShards keys the one feed of client mode.
const allShards = -1

// feed is one Reflector filling part of the held shards: one shard (server
// mode), or every held shard (shard allShards: client mode).
type feed struct {
	shard  int
	sel    string // the ShardSelector its requests carry; "" in client mode
	cancel context.CancelFunc
	// covers are the shards the one feed of client mode fills: those
	// held when it started, less those released since (it dropped their
	// objects from then on). nil for a shard's feed.
	covers []bool
	// listed is set once its first list is in the store. inf.mu.
	listed bool
	// downgrade is set on the feed that downgrade started. inf.mu.
	downgrade bool
}

// follow starts and stops feeds to match target. inf.mu must be held.
func (inf *Informer) follow() {
	if inf.ctx == nil || inf.ctx.Err() != nil {
		return
	}
	if inf.server {
		for s, f := range inf.feeds {
			if s == allShards || !inf.target[s] {
				f.cancel()
				delete(inf.feeds, s)
			}
		}
		for s, want := range inf.target {
			if _, ok := inf.feeds[s]; want && !ok {
				inf.start(s)
			}
		}
		return
	}
	// One feed for every held shard. It is restarted when a held shard is
	// not among those it covers: its objects were dropped (or never
	// kept), and only a new list brings them.
	//
	// But a feed whose first list is still in flight, and covers a held
	// shard, is left to finish: the shards gained meanwhile are listed
	// once it is in (replace calls follow). Restarting it at every gain
	// would throw its list away each time, and when gains come faster
	// than a list of the whole resource takes (a ring settling over a
	// large resource, sharding/docs/measured.md) no list would ever
	// finish. So a gained shard waits for at most two lists.
	f, ok := inf.feeds[allShards]
	var any, uncovered, useful bool
	for s, want := range inf.target {
		if !want {
			continue
		}
		any = true
		if ok && f.covers[s] {
			useful = true
		} else {
			uncovered = true
		}
	}
	switch {
	case !any && ok:
		f.cancel()
		delete(inf.feeds, allShards)
	case uncovered && ok && !f.listed && useful:
		// wait for f's list (see above)
	case uncovered:
		if ok {
			f.cancel()
		}
		inf.start(allShards)
	}
}

// start starts the feed of shard s (or allShards). inf.mu must be held.
func (inf *Informer) start(s int) {
	ctx, cancel := context.WithCancel(inf.ctx)
	f := &feed{shard: s, cancel: cancel}
	if s != allShards {
		f.sel = inf.cfg.Selector([]int{s})
	} else {
		f.covers = slices.Clone(inf.target)
	}
	inf.feeds[s] = f
	name := inf.name + "/all"
	if s != allShards {
		name = inf.name + "/shard-" + strconv.Itoa(s)
	}
	r := cache.NewReflectorWithOptions(&feedLW{inf: inf, f: f}, inf.cfg.Object, &feedStore{inf: inf, f: f},
		cache.ReflectorOptions{Name: "sharding/" + name, TypeDescription: inf.name})
	// Relists (after a watch failed) resume from a resourceVersion, which
	// the Reflector lists unpaged unless told a page size: every object
	// of the resource in one response, in client mode.
	r.WatchListPageSize = pageSize
	inf.wg.Go(func() { r.RunWithContext(ctx) })
}

// current reports whether f is still the informer's feed for its shards.
// inf.mu must be held.
func (inf *Informer) current(f *feed) bool { return inf.feeds[f.shard] == f }

// keeps reports whether feed f may put an object of shard s in the store.
// inf.mu must be held.
func (inf *Informer) keeps(f *feed, s int) bool {
	return inf.current(f) && inf.target[s] && (f.shard == s || f.shard == allShards && f.covers[s])
}
