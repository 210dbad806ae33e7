package sharding

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Labels and annotations of the ring's Leases.
const (
	// LabelRing is set on every Lease of a ring to the ring's Name; a
	// replica lists the ring with this label selector.
	LabelRing = "sharding.go-coalesce.io/ring"
	// LabelRole is "member" on membership Leases and "shard" on shard
	// Leases.
	LabelRole = "sharding.go-coalesce.io/role"
	// AnnotationSession is the holder's session: on a membership Lease,
	// the replica's current one; on a shard Lease, the holder's session
	// when it acquired the shard. A shard Lease whose session is not its
	// holder's current one is free.
	AnnotationSession = "sharding.go-coalesce.io/session"
	// AnnotationRange is the shard's KEP-5866 selector, for people and
	// tools reading the Lease (never read back).
	AnnotationRange = "sharding.go-coalesce.io/range"
	// AnnotationShards is the ring's shard count S on each shard Lease; a
	// replica configured with another S ignores the Lease.
	AnnotationShards = "sharding.go-coalesce.io/shards"

	roleMember = "member"
	roleShard  = "shard"
)

func memberLeaseName(ring, identity string) string { return ring + "-member-" + identity }
func shardLeaseName(ring string, i int) string     { return ring + "-shard-" + strconv.Itoa(i) }

func newSession() string { return fmt.Sprintf("%016x", rand.Uint64()) }

// view is one consistent list of the ring's Leases (a LIST is served at
// one resourceVersion, so a shard Lease and its holder's membership Lease
// are seen at the same moment).
type view struct {
	members map[string]memberInfo // by identity
	shards  []shardInfo           // by shard index
}

type memberInfo struct {
	ref     leaseRef
	session string
	// confirmed is false for a join: a membership Lease written to start
	// its session (renewTime = acquireTime), whose writer has not yet been
	// answered. See (*Replica).plan.
	confirmed bool
}

type shardInfo struct {
	exists          bool
	ref             leaseRef
	holder, session string
	transitions     int32
}

// list reads the ring.
func (r *Replica) list(ctx context.Context) (*view, error) {
	l, err := r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: LabelRing + "=" + r.cfg.Name,
	})
	if err != nil {
		return nil, err
	}
	v := &view{members: make(map[string]memberInfo), shards: make([]shardInfo, r.shards)}
	shardPrefix := r.cfg.Name + "-shard-"
	memberPrefix := r.cfg.Name + "-member-"
	for i := range l.Items {
		le := &l.Items[i]
		holder := ""
		if le.Spec.HolderIdentity != nil {
			holder = *le.Spec.HolderIdentity
		}
		switch le.Labels[LabelRole] {
		case roleMember:
			id, ok := strings.CutPrefix(le.Name, memberPrefix)
			if !ok || holder != id {
				continue
			}
			// A Lease without acquireTime (written by an older version)
			// counts as confirmed, as every member did then.
			confirmed := le.Spec.AcquireTime == nil || le.Spec.RenewTime == nil ||
				!le.Spec.AcquireTime.Equal(le.Spec.RenewTime)
			v.members[id] = memberInfo{ref: refOf(le), session: le.Annotations[AnnotationSession], confirmed: confirmed}
		case roleShard:
			s, ok := strings.CutPrefix(le.Name, shardPrefix)
			if !ok || le.Annotations[AnnotationShards] != strconv.Itoa(r.shards) {
				continue
			}
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 || n >= r.shards {
				continue
			}
			var tr int32
			if le.Spec.LeaseTransitions != nil {
				tr = *le.Spec.LeaseTransitions
			}
			v.shards[n] = shardInfo{exists: true, ref: refOf(le), holder: holder,
				session: le.Annotations[AnnotationSession], transitions: tr}
		}
	}
	return v, nil
}

// memberLease is our membership Lease with the given session, started at
// start and renewed now. A join (the write that starts a session) has
// start == now; a renewal, written only while the session is alive, has
// start < now: that is how the others tell a session whose writer has
// been answered from one that may never have been.
func (r *Replica) memberLease(session string, start, now time.Time) *coordinationv1.Lease {
	secs := r.leaseSeconds()
	t := metav1.NewMicroTime(now)
	st := metav1.NewMicroTime(start)
	id := r.cfg.Identity
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        memberLeaseName(r.cfg.Name, r.cfg.Identity),
			Namespace:   r.cfg.Namespace,
			Labels:      map[string]string{LabelRing: r.cfg.Name, LabelRole: roleMember},
			Annotations: map[string]string{AnnotationSession: session},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &id,
			LeaseDurationSeconds: &secs,
			AcquireTime:          &st,
			RenewTime:            &t,
		},
	}
}

// shardLease is shard i's Lease held by holder in session ("" and "" for
// a released shard).
func (r *Replica) shardLease(i int, holder, session string, transitions int32, now time.Time) *coordinationv1.Lease {
	t := metav1.NewMicroTime(now)
	secs := r.leaseSeconds()
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      shardLeaseName(r.cfg.Name, i),
			Namespace: r.cfg.Namespace,
			Labels:    map[string]string{LabelRing: r.cfg.Name, LabelRole: roleShard},
			Annotations: map[string]string{
				AnnotationSession: session,
				AnnotationShards:  strconv.Itoa(r.shards),
				AnnotationRange:   Selector(r.field, r.shards, []int{i}).String(),
			},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &holder,
			LeaseDurationSeconds: &secs,
			AcquireTime:          &t,
			RenewTime:            &t,
			LeaseTransitions:     &transitions,
		},
	}
}

// leaseSeconds is LeaseDuration in whole seconds, rounded up: the API
// server wants leaseDurationSeconds > 0. No replica reads it back; it is
// for people and tools looking at the Leases.
func (r *Replica) leaseSeconds() int32 {
	return int32((r.cfg.LeaseDuration + time.Second - 1) / time.Second)
}

// deleteMemberOf deletes the membership Lease with the given identity if
// it is still the object and version ref names (a fence, or our own leave).
func (r *Replica) deleteMemberOf(ctx context.Context, identity string, ref leaseRef) error {
	return r.cfg.Client.CoordinationV1().Leases(r.cfg.Namespace).Delete(ctx, memberLeaseName(r.cfg.Name, identity),
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &ref.uid, ResourceVersion: &ref.rv}})
}

// leaseRef names one version of one Lease object: its UID and
// resourceVersion, as last read or written. Every write of the ring that
// changes an existing Lease carries both, and so does every delete; the
// API server then refuses it (409 Conflict) unless the Lease is still that
// object at that version.
//
// The resourceVersion alone is not enough: the API server creates a Lease
// on an update of one that does not exist (Leases allow create-on-update)
// and compares the resourceVersion with nothing then, so an update that
// arrives after another replica deleted the Lease would bring it back,
// answered 201, as if it had never been deleted (issue #24: a fenced
// replica's delayed renewal revived its old session). A UID in the object
// is a precondition that a missing Lease fails, so no write of the ring can
// re-create a Lease; the only writes that create one are Creates, which
// fail if it exists.
type leaseRef struct {
	uid types.UID
	rv  string
}

func refOf(l *coordinationv1.Lease) leaseRef { return leaseRef{uid: l.UID, rv: l.ResourceVersion} }

// known reports whether ref names a Lease (else the next write creates it).
func (ref leaseRef) known() bool { return ref.rv != "" }

// on makes l a conditional update of the Lease version ref names.
func (ref leaseRef) on(l *coordinationv1.Lease) *coordinationv1.Lease {
	l.UID = ref.uid
	l.ResourceVersion = ref.rv
	return l
}
