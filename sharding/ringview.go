package sharding

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// This file is the replica's view of the ring: the Leases as its watch
// delivers them, with the answers to its own writes applied at once. It
// reads nothing itself: a client-go reflector on leaseIO's ListerWatcher
// (leases.go) feeds it, and the loop (loop.go) copies it for each decision
// (decide.go).

// view is the ring as this replica last saw it: a copy of the watched
// state (see ringView) taken by the loop for one decision.
type view struct {
	members map[string]memberInfo // by identity
	shards  []shardInfo           // by shard index
	// ringLease is the ring's Lease; others are the shard Leases of the
	// other shard counts, which only a switch of the ring's count, or a
	// replica of another count, writes (shardcount.go).
	ringLease ringInfo
	others    map[shardKey]shardInfo
}

// shardKey names shard i of a ring of shards shards.
type shardKey struct{ shards, i int }

// dropMember removes member id from the view, as its fence deleted its
// Lease: its shards are free in this decision.
func (v *view) dropMember(id string) { delete(v.members, id) }

type memberInfo struct {
	ref     leaseRef
	session string
	// confirmed is false for a join: a membership Lease written to start
	// its session (renewTime = acquireTime), whose writer has not yet been
	// answered. See counts (decide.go).
	confirmed bool
	// rejoined is true for a join whose previous version, as this view
	// saw it, was a confirmed session of the same member: the member's
	// session lapsed and it joined again (see deal, decide.go).
	rejoined bool
	// at is when this replica first saw the Lease at ref: when the watch
	// delivered that version (or a list returned it). A member is fenced
	// LeaseDuration after that, if ref has not changed since.
	at time.Time
	// conf is the shard count and field the member was configured with
	// (zero for a Lease written before they were recorded).
	conf ringConf
	// synced are the shards, sorted, that the member fills without
	// holding them (prefetch, decide.go) and has synced in every sharded
	// informer, as its last write said (annotationSynced); leaving is true
	// once it announced a graceful leave (annotationLeaving). Never shared
	// with another memberInfo's: a copy may be kept.
	synced  []int
	leaving bool
	// For the ring page only (status.go), never for a decision: the
	// Lease's acquireTime and renewTime (the writer's clock) and its
	// AnnotationReport.
	started, renewed time.Time
	report           string
}

type shardInfo struct {
	exists          bool
	ref             leaseRef
	holder, session string
	// next is, on a released shard Lease, the member its holder planned
	// to hand it to (annotationNext); deal gives it to that member.
	next        string
	transitions int32
	conf        ringConf  // of the replica that wrote it (shardcount.go)
	acquired    time.Time // the Lease's acquireTime, for the ring page only
	// sealed is true on a Lease sealed for a switch of the ring's count,
	// in the ring's generation sealedGen (AnnotationSealed,
	// shardcount.go).
	sealed    bool
	sealedGen int
}

// Annotations of the planned moves (make before break, decide.go plan):
// a taker says which planned shards it has synced, a leaver that it
// leaves, and a holder's release names the taker. A replica that does not
// write them is a taker that is never waited for beyond handoffWait, and a
// leaver whose shards move as before, by their release.
const (
	// annotationSynced, on a membership Lease: the shards (decimal,
	// comma-separated) the member fills for a planned move and has synced.
	annotationSynced = "sharding.go-coalesce.io/synced"
	// annotationLeaving, on a membership Lease: "true" once the member
	// leaves gracefully; the others count it no more and plan its shards.
	annotationLeaving = "sharding.go-coalesce.io/leaving"
	// annotationNext, on a released shard Lease: the planned taker.
	annotationNext = "sharding.go-coalesce.io/next"
)

// memberMark is what a membership write says of planned moves, besides
// the session: the shards the member has synced for them, and its leave.
type memberMark struct {
	synced  []int
	leaving bool
}

// annotate adds m's annotations to l, a membership Lease being written.
func (m memberMark) annotate(l *coordinationv1.Lease) {
	if len(m.synced) > 0 {
		l.Annotations[annotationSynced] = formatShards(m.synced)
	}
	if m.leaving {
		l.Annotations[annotationLeaving] = "true"
	}
}

// formatShards and parseShards write and read annotationSynced. A value
// that does not parse, or names shards outside [0, n), reads as nothing.
func formatShards(shards []int) string {
	parts := make([]string, len(shards))
	for k, s := range shards {
		parts[k] = strconv.Itoa(s)
	}
	return strings.Join(parts, ",")
}

func parseShards(v string, n int) []int {
	if v == "" {
		return nil
	}
	var out []int
	for p := range strings.SplitSeq(v, ",") {
		s, err := strconv.Atoi(p)
		if err != nil || s < 0 || s >= n {
			return nil
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

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
		changed: make(chan struct{}, 1),
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
	if v.members == nil {
		v.members = make(map[string]memberInfo)
	}
	clear(v.members)
	g.mu.Lock()
	defer g.mu.Unlock()
	maps.Copy(v.members, g.members)
	v.shards = append(v.shards[:0], g.shards...)
	v.ringLease = g.ringLease
	v.others = maps.Clone(g.others)
}

func (g *ringView) poke() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// parsed is one Lease of the ring, as the view keeps it.
type parsed struct {
	member string // the identity, for a membership Lease
	shard  int    // the index, for a shard Lease; -1 otherwise
	count  int    // the shard count in a shard Lease's name
	ring   bool   // the ring's Lease
	m      memberInfo
	s      shardInfo
	r      ringInfo
}

// parse reads le as a Lease of the ring, or returns false if it is not one
// (another ring's, a membership Lease whose holder is not the identity in
// its name). A shard Lease written by a replica of another shard count or
// field is one: it is free if its holder is gone, and a conflict if not
// (shardcount.go).
func (g *ringView) parse(le *coordinationv1.Lease) (parsed, bool) {
	holder := ""
	if le.Spec.HolderIdentity != nil {
		holder = *le.Spec.HolderIdentity
	}
	switch le.Labels[LabelRole] {
	case roleMember:
		id, ok := strings.CutPrefix(le.Name, g.ring+"-member-")
		if !ok || holder != id {
			return parsed{}, false
		}
		// A Lease without acquireTime (written by an older version)
		// counts as confirmed, as every member did then.
		confirmed := le.Spec.AcquireTime == nil || le.Spec.RenewTime == nil ||
			!le.Spec.AcquireTime.Equal(le.Spec.RenewTime)
		conf := confOf(le)
		return parsed{member: id, shard: -1, m: memberInfo{ref: refOf(le),
			session: le.Annotations[AnnotationSession], confirmed: confirmed, conf: conf,
			synced:  parseShards(le.Annotations[annotationSynced], cmp.Or(conf.shards, g.shardCount)),
			leaving: le.Annotations[annotationLeaving] == "true",
			started: microTime(le.Spec.AcquireTime), renewed: microTime(le.Spec.RenewTime),
			report: le.Annotations[AnnotationReport]}}, true
	case roleRing:
		if le.Name != ringLeaseName(g.ring) {
			return parsed{}, false
		}
		return parsed{shard: -1, ring: true, r: ringInfoOf(le)}, true
	case roleShard:
		s, ok := strings.CutPrefix(le.Name, g.ring+"-shard-")
		if !ok {
			return parsed{}, false
		}
		idx, of, ok := strings.Cut(s, "-of-")
		if !ok {
			return parsed{}, false
		}
		n, err := strconv.Atoi(idx)
		count, cerr := strconv.Atoi(of)
		if err != nil || cerr != nil || !validShards(count) || n < 0 || n >= count {
			return parsed{}, false
		}
		sealed, serr := strconv.Atoi(le.Annotations[AnnotationSealed])
		var tr int32
		if le.Spec.LeaseTransitions != nil {
			tr = *le.Spec.LeaseTransitions
		}
		return parsed{shard: n, count: count, s: shardInfo{exists: true, ref: refOf(le), holder: holder,
			session: le.Annotations[AnnotationSession], next: le.Annotations[annotationNext], transitions: tr, conf: confOf(le),
			acquired: microTime(le.Spec.AcquireTime), sealed: serr == nil && holder == "", sealedGen: sealed}}, true
	}
	return parsed{}, false
}

// olderRV reports whether resourceVersion a is older than b. Versions that
// cannot be compared are not older (the newcomer wins, as in an informer).
func olderRV(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && c < 0
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
	now := time.Now()
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
	now := time.Now()
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
