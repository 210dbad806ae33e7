package sharding

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
)

// This file is every request the replica makes of the ring's Leases, and
// the Lease objects it writes: the reads (the ListerWatcher that feeds the
// view, ringview.go; the Get of our membership Lease) and the conditional
// writes. Every write that changes or deletes an existing Lease carries
// the UID and resourceVersion it builds on (leaseRef); only a Create makes
// a Lease. Each request's outcome is reported to the permission tracker
// (forbidden.go). What to write, and when, is decided elsewhere
// (step.go).

// Labels and annotations of the ring's Leases.
const (
	// LabelRing is set on every Lease of a ring to the ring's Name; a
	// replica watches the ring with this label selector.
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
	// AnnotationShards is the shard count S of the replica that wrote the
	// Lease (Config.Shards), on every Lease of the ring; AnnotationField
	// is its Config.Field. The ring's Lease ("<Name>-ring", LabelRole
	// "ring") carries those of the replica that created it, and every
	// replica of the ring must share them (shardcount.go).
	AnnotationShards = "sharding.go-coalesce.io/shards"
	AnnotationField  = "sharding.go-coalesce.io/field"
	// AnnotationGeneration, on the ring's Lease, counts the switches of
	// the ring's shard count (absent: 0); AnnotationTarget, on the ring's
	// Lease, is the count the ring is switching to (absent: none); and
	// AnnotationSealed, on a released shard Lease, is the generation in
	// which it was sealed for a switch: it is not acquired again in that
	// generation (shardcount.go).
	AnnotationGeneration = "sharding.go-coalesce.io/generation"
	AnnotationTarget     = "sharding.go-coalesce.io/target"
	AnnotationSealed     = "sharding.go-coalesce.io/sealed"

	roleMember = "member"
	roleShard  = "shard"
	roleRing   = "ring"
)

func memberLeaseName(ring, identity string) string { return ring + "-member-" + identity }
func ringLeaseName(ring string) string             { return ring + "-ring" }

// shardLeaseName names shard i of a ring of shards shards. The count is
// part of the name: shard 3 of 16 and shard 3 of 32 cover different
// ranges, and during a switch of the count both Leases exist.
func shardLeaseName(ring string, shards, i int) string {
	return ring + "-shard-" + strconv.Itoa(i) + "-of-" + strconv.Itoa(shards)
}

func newSession() string { return fmt.Sprintf("%016x", rand.Uint64()) }

// leaseAPI is what the writes and the Get of this file need of the API
// server: client-go's Lease client of the namespace, or the simulation's
// Lease store (sim_test.go), which so runs every request this file makes,
// preconditions included.
type leaseAPI interface {
	Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
}

// leaseIO makes the replica's Lease requests, in one namespace, for one
// ring and one identity.
type leaseIO struct {
	client    kubernetes.Interface
	api       leaseAPI // the client's Leases of the namespace
	namespace string
	ring      string
	identity  string
	shards    int
	field     string
	seconds   int32 // leaseDurationSeconds, for people and tools only

	// outcome is told the verb and error (nil: success) of every request
	// (the permission tracker's report).
	outcome func(verb string, err error)
	// annotate, if set, gives AnnotationReport's value for each
	// membership write (metrics.go).
	annotate func() string
}

func newLeaseIO(cfg Config, outcome func(verb string, err error)) *leaseIO {
	return &leaseIO{
		client: cfg.Client, api: cfg.Client.CoordinationV1().Leases(cfg.Namespace), namespace: cfg.Namespace, ring: cfg.Name, identity: cfg.Identity,
		shards: cfg.Shards, field: cfg.Field,
		// LeaseDuration in whole seconds, rounded up: the API server wants
		// leaseDurationSeconds > 0. No replica reads it back.
		seconds: int32((cfg.LeaseDuration + time.Second - 1) / time.Second),
		outcome: outcome,
	}
}

// leases is the client's Leases of the namespace, for the watch.
func (l *leaseIO) leases() coordinationv1client.LeaseInterface {
	return l.client.CoordinationV1().Leases(l.namespace)
}

// report tells the tracker the outcome of one request.
func (l *leaseIO) report(verb string, err error) {
	if l.outcome != nil {
		l.outcome(verb, err)
	}
}

// listWatch lists and watches the ring's Leases (by its label), for the
// view's reflector.
func (l *leaseIO) listWatch() *cache.ListWatch {
	sel := LabelRing + "=" + l.ring
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			out, err := l.leases().List(ctx, o)
			l.report("list", err)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			w, err := l.leases().Watch(ctx, o)
			l.report("watch", err)
			return w, err
		},
	}
}

// memberPut is a write of our membership Lease: over the version known
// (zero: a Create), in session, started at start and written at now,
// saying mark.
type memberPut struct {
	known      leaseRef
	session    string
	start, now time.Time
	mark       memberMark
}

// writeMember writes our membership Lease as w says: a Create if w.known
// names no Lease, else an update of the version it names.
func (l *leaseIO) writeMember(ctx context.Context, w memberPut) (*coordinationv1.Lease, error) {
	lease := l.memberLease(w.session, w.start, w.now)
	w.mark.annotate(lease)
	l.addReport(lease)
	known := w.known
	if !known.known() {
		out, err := l.api.Create(ctx, lease, metav1.CreateOptions{})
		l.report("create", err)
		return out, err
	}
	out, err := l.api.Update(ctx, known.on(lease), metav1.UpdateOptions{})
	l.report("update", err)
	return out, err
}

// getMember reads our membership Lease as it is now.
func (l *leaseIO) getMember(ctx context.Context) (*coordinationv1.Lease, error) {
	out, err := l.api.Get(ctx, memberLeaseName(l.ring, l.identity), metav1.GetOptions{})
	l.report("get", err)
	return out, err
}

// deleteMember deletes the membership Lease of identity if it is still
// the object and version ref names (a fence, or our own leave).
func (l *leaseIO) deleteMember(ctx context.Context, identity string, ref leaseRef) error {
	err := l.api.Delete(ctx, memberLeaseName(l.ring, identity),
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &ref.uid, ResourceVersion: &ref.rv}})
	l.report("delete", err)
	return err
}

// acquireShard writes shard w.i's Lease to name our identity and
// w.session, on the condition that it is still the version w.s (or still
// missing: a Create, which fails if another replica was faster).
func (l *leaseIO) acquireShard(ctx context.Context, w acquireWrite, now time.Time) (*coordinationv1.Lease, error) {
	return l.putShard(ctx, l.shardLease(shardKey{l.shards, w.i}, l.identity, w.session, w.s.transitions+1, now), w.s)
}

// putShard writes lease over the shard Lease s: an update conditioned on
// s's version, or a Create if s is missing (which fails if another
// replica created it first).
func (l *leaseIO) putShard(ctx context.Context, lease *coordinationv1.Lease, s shardInfo) (*coordinationv1.Lease, error) {
	if !s.exists {
		out, err := l.api.Create(ctx, lease, metav1.CreateOptions{})
		l.report("create", err)
		return out, err
	}
	out, err := l.api.Update(ctx, s.ref.on(lease), metav1.UpdateOptions{})
	l.report("update", err)
	return out, err
}

// releaseShard empties shard w.i's Lease, on the condition that it is
// still the version w.ref names; w.next names the planned taker ("" none),
// and w.seal, if not negative, seals it in that generation of the ring (a
// switch of the count is in progress: shardcount.go). It keeps the Lease's
// LeaseTransitions, so that its taker's acquisition counts one more than
// the first acquisition's 1: that is how shareOf tells a move from a
// ring's first deal.
func (l *leaseIO) releaseShard(ctx context.Context, w releaseWrite, now time.Time) (*coordinationv1.Lease, error) {
	lease := l.shardLease(shardKey{l.shards, w.i}, "", "", w.transitions, now)
	lease.Spec.AcquireTime = nil
	if w.next != "" {
		lease.Annotations[annotationNext] = w.next
	}
	if w.seal >= 0 {
		lease.Annotations[AnnotationSealed] = strconv.Itoa(w.seal)
	}
	out, err := l.api.Update(ctx, w.ref.on(lease), metav1.UpdateOptions{})
	l.report("update", err)
	return out, err
}

// sealShard seals shard w.k, which no live member holds, in generation
// w.gen: an update conditioned on the version w.s, or a Create if it is
// missing (which fails if another replica created it first). A sealed
// Lease names no holder.
func (l *leaseIO) sealShard(ctx context.Context, w sealWrite, now time.Time) (*coordinationv1.Lease, error) {
	lease := l.shardLease(w.k, "", "", w.s.transitions, now)
	lease.Spec.AcquireTime = nil
	lease.Annotations[AnnotationSealed] = strconv.Itoa(w.gen)
	return l.putShard(ctx, lease, w.s)
}

// memberLease is our membership Lease with the given session, started at
// start and renewed now. A join (the write that starts a session) has
// start == now; a renewal, written only while the session is alive, has
// start < now: that is how the others tell a session whose writer has
// been answered from one that may never have been (counts, decide.go).
func (l *leaseIO) memberLease(session string, start, now time.Time) *coordinationv1.Lease {
	secs := l.seconds
	t := metav1.NewMicroTime(now)
	st := metav1.NewMicroTime(start)
	id := l.identity
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        memberLeaseName(l.ring, l.identity),
			Namespace:   l.namespace,
			Labels:      map[string]string{LabelRing: l.ring, LabelRole: roleMember},
			Annotations: map[string]string{AnnotationSession: session, AnnotationShards: strconv.Itoa(l.shards), AnnotationField: l.field},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &id,
			LeaseDurationSeconds: &secs,
			AcquireTime:          &st,
			RenewTime:            &t,
		},
	}
}

// shardLease is shard k's Lease, held by holder in session ("" and ""
// for a released shard).
func (l *leaseIO) shardLease(k shardKey, holder, session string, transitions int32, now time.Time) *coordinationv1.Lease {
	shards, i := k.shards, k.i
	t := metav1.NewMicroTime(now)
	secs := l.seconds
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      shardLeaseName(l.ring, shards, i),
			Namespace: l.namespace,
			Labels:    map[string]string{LabelRing: l.ring, LabelRole: roleShard},
			Annotations: map[string]string{
				AnnotationSession: session,
				AnnotationShards:  strconv.Itoa(shards),
				AnnotationField:   l.field,
				AnnotationRange:   Selector(l.field, shards, []int{i}).String(),
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

// createRing creates the ring's Lease, which records this replica's
// shard count (generation 0) and field for every replica of the ring: it
// fails (AlreadyExists) if the ring has one.
func (l *leaseIO) createRing(ctx context.Context, now time.Time) (*coordinationv1.Lease, error) {
	out, err := l.api.Create(ctx, l.ringLease(l.shards, 0, 0, now), metav1.CreateOptions{})
	l.report("create", err)
	return out, err
}

// writeRing updates the ring's Lease, on the condition that it is still
// the version w.ref names, to say that the ring's count is w.shards in
// generation w.gen, switching to w.target (0: none). See shardcount.go.
func (l *leaseIO) writeRing(ctx context.Context, w ringWrite, now time.Time) (*coordinationv1.Lease, error) {
	out, err := l.api.Update(ctx, w.ref.on(l.ringLease(w.shards, w.gen, w.target, now)), metav1.UpdateOptions{})
	l.report("update", err)
	return out, err
}

// ringLease is the ring's Lease. It names no holder and is never renewed;
// only its annotations are read back, and its renewTime says when it was
// last written, for people reading it.
func (l *leaseIO) ringLease(shards, gen, target int, now time.Time) *coordinationv1.Lease {
	t := metav1.NewMicroTime(now)
	a := map[string]string{AnnotationShards: strconv.Itoa(shards), AnnotationField: l.field}
	if gen > 0 {
		a[AnnotationGeneration] = strconv.Itoa(gen)
	}
	if target > 0 {
		a[AnnotationTarget] = strconv.Itoa(target)
	}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        ringLeaseName(l.ring),
			Namespace:   l.namespace,
			Labels:      map[string]string{LabelRing: l.ring, LabelRole: roleRing},
			Annotations: a,
		},
		Spec: coordinationv1.LeaseSpec{RenewTime: &t},
	}
}

// authorized reports whether err, the failure of a request, is an answer
// the API server gives only after authorizing the request (a Conflict, a
// NotFound, an AlreadyExists, an Invalid): the verb is granted even though
// the write failed.
func authorized(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) ||
		apierrors.IsInvalid(err) || apierrors.IsGone(err) || apierrors.IsResourceExpired(err)
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
// answered 201, as if it had never been deleted (a fenced replica's
// delayed renewal would revive its old session). A UID in the object
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

// addReport sets AnnotationReport on lease, a membership Lease about to
// be written, when there is something to report (metrics.go).
func (l *leaseIO) addReport(lease *coordinationv1.Lease) {
	if l.annotate == nil {
		return
	}
	if v := l.annotate(); v != "" {
		lease.Annotations[AnnotationReport] = v
	}
}
