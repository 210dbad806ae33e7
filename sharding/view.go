package sharding

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// This file is the ring as a decision reads it (view), and how the Leases
// the watch delivers are read into it (parse). ringview.go keeps the
// watched state that the loop copies for each decision.

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
	// For the ring page (status.go), and renewed for shareOf's reference
	// time only: the Lease's acquireTime and renewTime (the writer's
	// clock).
	started, renewed time.Time
	// load is the member's AnnotationReport, read (load.go). Never
	// shared with another memberInfo's.
	load memberLoad
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
	acquired    time.Time // the Lease's acquireTime: the ring page, and shareOf
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
		var load memberLoad
		load.held, load.workers = parseReport(le.Annotations[AnnotationReport], cmp.Or(conf.shards, g.shardCount))
		return parsed{member: id, shard: -1, m: memberInfo{ref: refOf(le),
			session: le.Annotations[AnnotationSession], confirmed: confirmed, conf: conf,
			synced:  parseShards(le.Annotations[annotationSynced], cmp.Or(conf.shards, g.shardCount)),
			leaving: le.Annotations[annotationLeaving] == "true",
			started: microTime(le.Spec.AcquireTime), renewed: microTime(le.Spec.RenewTime),
			load: load}}, true
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

// confOf reads the configuration recorded on a Lease of the ring.
func confOf(le *coordinationv1.Lease) ringConf {
	n, err := strconv.Atoi(le.Annotations[AnnotationShards])
	if err != nil || n < 0 {
		n = 0
	}
	return ringConf{shards: n, field: le.Annotations[AnnotationField]}
}

// ringInfo is the ring's Lease as the view has it.
type ringInfo struct {
	exists bool
	ref    leaseRef
	conf   ringConf // the ring's count now, and its field
	gen    int      // AnnotationGeneration
	target int      // AnnotationTarget: the count being switched to; 0 none
}

func ringInfoOf(le *coordinationv1.Lease) ringInfo {
	gen, _ := strconv.Atoi(le.Annotations[AnnotationGeneration])
	target, err := strconv.Atoi(le.Annotations[AnnotationTarget])
	if err != nil || !validShards(target) {
		target = 0
	}
	return ringInfo{exists: true, ref: refOf(le), conf: confOf(le), gen: max(gen, 0), target: target}
}

// microTime returns t's time, or zero for nil.
func microTime(t *metav1.MicroTime) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}
