package sharding

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// This file is the replica's view of the ring: the Leases as its watch
// delivers them, with the answers to its own writes applied at once. It
// reads nothing itself: a client-go reflector on leaseIO's ListerWatcher
// (leases.go) feeds it, and the loop (loop.go) copies it for each decision
// (step.go).

// ringView is the ring's Leases as the replica's watch has delivered them,
// with the answers to the replica's own writes applied at once: a
// reflector (list once, then watch, with the ring's label selector) feeds
// it through the cache.ReflectorStore methods below, and the loop copies
// it for each decision (snapshot).
//
// A Lease's entry only moves forward: a version older than the one held
// (by its resourceVersion, which the API server makes comparable within a
// resource: KEP-5504, k8s.io/apimachinery/pkg/util/resourceversion) is
// ignored. That matters because the replica's own answers run ahead of the
// watch: after this replica released a shard, the watch may still deliver
// the version that named it, and applying it would make the shard look
// held again. A resourceVersion that cannot be compared is taken as newer,
// as an informer would.
//
// The view may be behind the server, by the watch's latency, while the
// watch is cut off, or until a relist; safety never rests on it being
// fresh (see docs/contract.md, "Why two replicas never run one key at once"):
// every write carries the UID and resourceVersion of the version it was
// decided on, and the server refuses it if that is no longer current.
type ringView struct {
	ring       string
	shardCount int
	changed    chan struct{}    // capacity 1: poked on every change
	synced     chan struct{}    // closed at the first Replace
	listed     func(first bool) // if set, told of each Replace (metrics.go)
	now        func() time.Time // time.Now (the simulation's clock in sim_test.go)

	mu        sync.Mutex // protects the fields below
	members   map[string]memberInfo
	shards    []shardInfo
	ringLease ringInfo
	others    map[shardKey]shardInfo
	isSync    bool
}

func newRingView(ring string, shards int) *ringView {
	return &ringView{
		ring: ring, shardCount: shards,
		changed: make(chan struct{}, 1), now: time.Now,
		synced:  make(chan struct{}),
		members: make(map[string]memberInfo),
		shards:  make([]shardInfo, shards),
		others:  make(map[shardKey]shardInfo),
	}
}

// watch runs a reflector that keeps the view up to date, until ctx ends:
// one LIST (or, where the server and client-go support it, a streaming
// watch list) of the ring's Leases, then a WATCH, resumed from the last
// resourceVersion seen when it ends, and a relist only when the server no
// longer has that resourceVersion (410 Gone).
func (g *ringView) watch(ctx context.Context, lw *cache.ListWatch, client kubernetes.Interface) {
	r := cache.NewReflectorWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client),
		&coordinationv1.Lease{}, g, cache.ReflectorOptions{Name: "sharding ring " + g.ring})
	r.RunWithContext(ctx)
}

// changes is poked (capacity 1) at every change of the view that can alter
// a decision.
func (g *ringView) changes() <-chan struct{} { return g.changed }

// hasSynced is closed once the first list is in.
func (g *ringView) hasSynced() <-chan struct{} { return g.synced }

// consume drops a pending poke: the changes it announced are in the copy
// the caller takes next.
func (g *ringView) consume() {
	select {
	case <-g.changed:
	default:
	}
}

// snapshot copies the view into v, reusing v's storage.
func (g *ringView) snapshot(v *view) {
	if v.members == nil || v.others == nil {
		v.members, v.others = make(map[string]memberInfo), make(map[shardKey]shardInfo)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	syncMap(v.members, g.members)
	v.shards = append(v.shards[:0], g.shards...)
	v.ringLease = g.ringLease
	syncMap(v.others, g.others)
}

// syncMap makes dst equal to src. It overwrites the entries dst shares
// with src rather than clearing dst: a map stores a value as large as a
// memberInfo apart from its slot, and overwriting reuses that storage
// where a new entry allocates it.
func syncMap[K comparable, V any](dst, src map[K]V) {
	for k := range dst {
		if _, ok := src[k]; !ok {
			delete(dst, k)
		}
	}
	maps.Copy(dst, src)
}

func (g *ringView) poke() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// setLocked stores p, unless the view holds a newer version of that Lease.
// now is when it was seen. It reports whether the change can alter a
// decision: a shard Lease changed, or a member came, or changed session,
// confirmation, leave or the shards it says it has synced for a planned move. A renewal changes only the member's version and when it
// was seen, which the next decision reads (the loop wakes for fences at
// fenceAt anyway): at 100 replicas the watch delivers 50 renewals a second,
// and none of them needs a decision. g.mu must be held.
func (g *ringView) setLocked(p parsed, now time.Time) bool {
	if handled, changed := g.setOtherLocked(p); handled {
		return changed
	}
	if p.shard >= 0 {
		cur := g.shards[p.shard]
		if cur.exists && (cur.ref == p.s.ref || olderRV(p.s.ref.rv, cur.ref.rv)) {
			return false
		}
		g.shards[p.shard] = p.s
		return true
	}
	cur, ok := g.members[p.member]
	if ok && (cur.ref == p.m.ref || olderRV(p.m.ref.rv, cur.ref.rv)) {
		return false
	}
	p.m.at = now
	p.m.rejoined = ok && !p.m.confirmed && (cur.confirmed || cur.rejoined && cur.session == p.m.session)
	g.members[p.member] = p.m
	return !ok || cur.session != p.m.session || cur.confirmed != p.m.confirmed ||
		cur.leaving != p.m.leaving || !slices.Equal(cur.synced, p.m.synced)
}

// removeLocked drops the Lease p names if the view's version of it is not
// newer than ref (the deleted version, or the delete's resourceVersion).
// g.mu must be held.
func (g *ringView) removeLocked(p parsed, ref leaseRef) bool {
	if handled, changed := g.removeOtherLocked(p, ref); handled {
		return changed
	}
	if p.shard >= 0 {
		cur := g.shards[p.shard]
		if !cur.exists || olderRV(ref.rv, cur.ref.rv) {
			return false
		}
		g.shards[p.shard] = shardInfo{}
		return true
	}
	cur, ok := g.members[p.member]
	if !ok || olderRV(ref.rv, cur.ref.rv) {
		return false
	}
	delete(g.members, p.member)
	return true
}

// shard returns shard i's Lease as the view has it.
func (g *ringView) shard(i int) shardInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.shards[i]
}

// forget drops the membership Lease of identity at ref, which the replica
// deleted (a fence, or its own leave).
func (g *ringView) forget(identity string, ref leaseRef) {
	g.mu.Lock()
	changed := g.removeLocked(parsed{member: identity, shard: -1}, ref)
	g.mu.Unlock()
	if changed {
		g.poke()
	}
}

// upsert applies a Lease: a watch event, one of the initial list, or the
// server's answer to a write of ours (applied at once, before the watch
// brings it).
func (g *ringView) upsert(obj any) {
	le, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	p, ok := g.parse(le)
	if !ok {
		return
	}
	now := g.now()
	g.mu.Lock()
	changed := g.setLocked(p, now)
	g.mu.Unlock()
	if changed {
		g.poke()
	}
}

// The cache.ReflectorStore methods, called by the reflector's goroutine.

// Add applies a watch event or a Lease of the initial list.
func (g *ringView) Add(obj any) error { g.upsert(obj); return nil }

// Update applies a watch event.
func (g *ringView) Update(obj any) error { g.upsert(obj); return nil }

// Delete applies a DELETED watch event, which carries the resourceVersion
// of the delete.
func (g *ringView) Delete(obj any) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	le, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return nil
	}
	p, ok := g.parse(le)
	if !ok {
		return nil
	}
	g.mu.Lock()
	changed := g.removeLocked(p, refOf(le))
	g.mu.Unlock()
	if changed {
		g.poke()
	}
	return nil
}

// Replace installs a (re)list taken at resourceVersion listRV, by the
// rules a watch event follows (setLocked, removeLocked): a Lease the view
// holds at a newer version than the list (the answer to a write of this
// replica that the list predates) is kept; one missing from the list and
// not newer than it is gone.
func (g *ringView) Replace(items []any, listRV string) error {
	now := g.now()
	ps := make([]parsed, 0, len(items))
	for _, it := range items {
		if le, ok := it.(*coordinationv1.Lease); ok {
			if p, ok := g.parse(le); ok {
				ps = append(ps, p)
			}
		}
	}
	g.mu.Lock()
	members := make(map[string]bool, len(ps))
	shards := make([]bool, len(g.shards))
	for _, p := range ps {
		g.setLocked(p, now)
		if g.otherLocked(p) {
			continue
		}
		if p.shard >= 0 {
			shards[p.shard] = true
		} else {
			members[p.member] = true
		}
	}
	unlisted := leaseRef{rv: listRV} // as if deleted at the list's version
	for id := range g.members {
		if !members[id] {
			g.removeLocked(parsed{member: id, shard: -1}, unlisted)
		}
	}
	for i, listed := range shards {
		if !listed {
			g.removeLocked(parsed{shard: i, count: g.shardCount}, unlisted)
		}
	}
	g.replaceOthersLocked(ps, unlisted)
	first := !g.isSync
	g.isSync = true
	g.mu.Unlock()
	if first {
		close(g.synced)
	}
	if g.listed != nil {
		g.listed(first)
	}
	g.poke()
	return nil
}

// Resync does nothing: the view has no handlers to replay to.
func (g *ringView) Resync() error { return nil }

// The view's side: the ring's Lease and the shard Leases of the other
// counts, kept by the rules of the others (a version moves only forward).

// otherLocked reports whether p is the ring's Lease or a shard Lease of
// another count. g.mu must be held.
func (g *ringView) otherLocked(p parsed) bool {
	return p.ring || p.shard >= 0 && p.count != g.shardCount
}

// setOtherLocked stores p if it is the ring's Lease or a shard Lease of
// another count (handled), and reports whether that changed the view.
// g.mu must be held.
func (g *ringView) setOtherLocked(p parsed) (handled, changed bool) {
	switch {
	case p.ring:
		cur := g.ringLease
		if cur.exists && (cur.ref == p.r.ref || olderRV(p.r.ref.rv, cur.ref.rv)) {
			return true, false
		}
		g.ringLease = p.r
		return true, true
	case g.otherLocked(p):
		k := shardKey{p.count, p.shard}
		cur, ok := g.others[k]
		if ok && (cur.ref == p.s.ref || olderRV(p.s.ref.rv, cur.ref.rv)) {
			return true, false
		}
		g.others[k] = p.s
		return true, true
	}
	return false, false
}

// removeOtherLocked drops the ring's Lease or a shard Lease of another
// count (handled) unless the view's version is newer than ref, and
// reports whether it did. g.mu must be held.
func (g *ringView) removeOtherLocked(p parsed, ref leaseRef) (handled, changed bool) {
	switch {
	case p.ring:
		if !g.ringLease.exists || olderRV(ref.rv, g.ringLease.ref.rv) {
			return true, false
		}
		g.ringLease = ringInfo{}
		return true, true
	case g.otherLocked(p):
		k := shardKey{p.count, p.shard}
		cur, ok := g.others[k]
		if !ok || olderRV(ref.rv, cur.ref.rv) {
			return true, false
		}
		delete(g.others, k)
		return true, true
	}
	return false, false
}

// replaceOthersLocked drops the ring's Lease and the shard Leases of
// other counts that a relist (ps, at unlisted) no longer shows. g.mu must
// be held.
func (g *ringView) replaceOthersLocked(ps []parsed, unlisted leaseRef) {
	ring := false
	others := make(map[shardKey]bool)
	for _, p := range ps {
		switch {
		case p.ring:
			ring = true
		case g.otherLocked(p):
			others[shardKey{p.count, p.shard}] = true
		}
	}
	if !ring {
		g.removeOtherLocked(parsed{shard: -1, ring: true}, unlisted)
	}
	for k := range g.others {
		if !others[k] {
			g.removeOtherLocked(parsed{shard: k.i, count: k.shards}, unlisted)
		}
	}
}

// ringInfo returns the ring's Lease as the view has it.
func (g *ringView) ringInfo() ringInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ringLease
}
