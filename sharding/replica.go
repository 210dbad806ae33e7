// Package sharding runs one controller on many replicas: the keys of a
// workqueue are split into shards, ranges of a 64-bit FNV-1a hash of each
// object's UID or namespace (KEP-5866's shardRange), and each replica
// processes only the keys of the shards it holds. Replicas coordinate
// through coordination.k8s.io/v1 Leases in one namespace and nothing else:
// no replica is special and there is no separate sharder.
//
// A replica owns the cache of the sharded resource: it lists and watches
// only the objects of the shards it holds (server-side, with KEP-5866's
// ListOptions.ShardSelector, where the API server honours it; otherwise
// one full watch filtered on the client), and admits a shard's keys only
// once that cache has synced the shard.
//
//	import (
//		"k8s.io/apimachinery/pkg/runtime"
//		"k8s.io/apimachinery/pkg/watch"
//		appslisters "k8s.io/client-go/listers/apps/v1"
//		"k8s.io/client-go/tools/cache"
//	)
//
//	deployments := client.AppsV1().Deployments(metav1.NamespaceAll)
//	r, err := sharding.New(sharding.Config{
//		Client: client, Namespace: "kube-system", Name: "my-controller",
//		Identity: podName, Queue: q,
//		Object: &appsv1.Deployment{},
//		// Over the typed client, which client-go's fake clientset serves too.
//		ListerWatcher: &cache.ListWatch{
//			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
//				return deployments.List(ctx, o)
//			},
//			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
//				return deployments.Watch(ctx, o)
//			},
//		},
//	})
//	if err != nil {
//		return err
//	}
//	lister := appslisters.NewDeploymentLister(r.Informer().GetIndexer()) // only the held shards' objects
//	go r.Run(ctx)                                                         // holds shards, fills the cache, feeds q
//	return workqueue.Run(ctx, q, 4, r.Handler(syncDeployment))           // runs only owned keys
//
// docs/contract.md gives the contract and the timing assumption,
// docs/measured.md a scaling sheet.
package sharding

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Replica is one replica of a sharded controller. Create it with New, run
// its loop with Run and wrap the controller's handler with Handler. Its
// methods are safe for concurrent use; the zero Replica is not usable.
//
// # Ownership, and why two replicas never run one key at once
//
// Each replica keeps one membership Lease, renewed every RetryPeriod with
// an update conditioned on its resourceVersion; each shard has a shard
// Lease that names its holder and the holder's session (a random token
// that changes whenever the holder loses continuity). A shard Lease is
// written only when the shard moves, so a quiet ring writes one Lease per
// replica per RetryPeriod, whatever S is. A shard is held by the replica it
// names as long as that replica's membership Lease exists with the same
// session. Nobody ever overwrites the shard Lease of a live holder: a
// replica acquires a shard (a conditional update) only if its Lease is
// empty, or its holder's membership Lease is gone, or carries another
// session.
//
// A replica runs a key only while it is alive — less than RenewDeadline
// has passed since it sent its last successful renewal — and holds the
// key's shard; Handler checks both under the replica's lock at every run's
// start, and a timer cancels every run when RenewDeadline passes. The
// shard then becomes free for another replica in exactly one of three
// ways, each after the holder has stopped:
//
//  1. The holder releases it: it stops admitting the shard's keys, removes
//     them from the queue, lets its runs finish (cancelling them after
//     GracePeriod), and only when none is left empties the shard Lease.
//  2. The holder starts a new session after losing continuity: it does so
//     only once every run of the old session has returned.
//  3. Another replica fences the holder, deleting its membership Lease on
//     the condition that its UID and resourceVersion are still the ones it
//     first saw LeaseDuration ago (when its watch delivered them). The
//     holder's renewal, if any, is conditioned
//     on the same UID and resourceVersion (without the UID, a renewal that
//     reached the API server after the fence would re-create the Lease:
//     Leases allow create-on-update), so exactly one of the two succeeds:
//     if the renewal did, the fence fails; if the fence did, the holder's
//     last successful renewal is the one the fencer saw, which was sent
//     before the fencer first saw it, so the holder stopped at most
//     RenewDeadline after that, while the fencer waited LeaseDuration.
//
// A replica renews its session only while it is alive; once RenewDeadline
// has passed without an answered write it writes only joins, each with a
// new session (renewTime = acquireTime on the Lease), until one is
// answered. The others give a share only to members whose Lease is a
// renewal, which proves its writer was answered in that session. So a
// replica whose requests land but whose answers are lost, and which can
// therefore never take a shard, holds no share for long: either its Lease
// stops changing and case 3 fences it, or its joins land, free its old
// shards (case 2) and get no share (issue #14).
//
// The replica sees the ring through a watch, which may lag behind the
// server or restart with a relist; none of this rests on the view being
// fresh. Every write carries the UID and resourceVersion of the version it
// was decided on, so the server refuses it once that version is gone; the
// facts that free a shard (its holder's membership Lease deleted, or
// naming another session) never become false again, so a decision on an
// old view that they hold is still right, or its write is refused; and a
// watch delivers a version only after its write was sent, which is all
// case 3 needs of "first saw".
//
// Case 3 rests on the timing assumption of client-go's leader election:
// clocks advance at nearly the same rate, and LeaseDuration − RenewDeadline
// covers the drift over LeaseDuration plus the time a cancelled handler
// takes to return. A handler that ignores its context's cancellation for
// longer can overlap with the next holder; nothing outside the process can
// stop it.
type Replica struct {
	cfg    Config
	field  string
	shards int
	wake   chan struct{} // capacity 1: pokes the loop

	mu sync.Mutex // protects primary and running
	// primary is the sharded informer of Config.Object: built by New
	// from Config.ListerWatcher, or by the first NewInformer of its type.
	// It is set once and never changes.
	primary *informer
	running bool // Run has been called

	runs  ledger      // what runs, and may run (runs.go)
	ring  *ringView   // the ring's Leases as the watch delivers them (ringview.go)
	io    *leaseIO    // every Lease request (leases.go)
	perms permissions // refused requests (forbidden.go)
	// refusal is set once the ring shows another shard count or field
	// (shardcount.go).
	refusal mismatch
	obs     observer // what the replica reports of itself (metrics.go)

	// Touched only by the loop goroutine (Run, loop.go and member.go).
	expire    *time.Timer // calls lose at the session's deadline
	member    leaseRef    // our membership Lease as last written or read; zero if unknown
	v         view        // the ring for the decision being taken (a copy of ring)
	fenceAt   time.Time   // the next time a member may be fenced; zero if none
	warmUntil time.Time   // the next time a warm shard expires (sync.go); zero if none
	tried     tried       // writes that failed since the last tick (decide.go)
	prev      []int       // the admitted shards at the last sync
	aliveFor  int         // ticks since the session began
	jitter    *rand.Rand  // draws each period's jitter (see period)
	// sessionStart is when the join that started the session was sent:
	// the acquireTime of every renewal of the session.
	sessionStart time.Time
	plans        planned   // the ring's planned moves (loop.go)
	leaveAt      time.Time // when the leave began
	leaveBy      time.Time // give up leaving here
	stopErr      error     // why Run leaves, if not its context (forbidden.go)

	withoutUID atomic.Int64 // objects added without a UID (checkUID)
	// share is whether the replica's share has been filled (Ready): set
	// by the loop, read by Ready.
	share shareFill
}

// Errors given as the cause of a cancelled run's context.
var (
	// ErrLeaseLost is the cause when the replica's membership lapsed
	// (RenewDeadline passed without a successful renewal) or Run stopped
	// without releasing.
	ErrLeaseLost = errors.New("sharding: lease lost")
	// ErrGraceOver is the cause when a shard being given up still had
	// runs in flight when its GracePeriod ended.
	ErrGraceOver = errors.New("sharding: shard given up, grace period over")
)

// New checks cfg, fills in its defaults and returns a replica that holds no
// shard until Run is called. Its errors name the field of cfg at fault.
func New(cfg Config) (*Replica, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	r := &Replica{
		cfg:    cfg,
		field:  cfg.Field,
		shards: cfg.Shards,
		wake:   make(chan struct{}, 1),
		ring:   newRingView(cfg.Name, cfg.Shards),
		tried:  newTried(cfg.Shards),
		// Seeded by the replica's identity: distinct replicas drift
		// apart, and a test in simulated time replays the same periods.
		jitter: rand.New(rand.NewPCG(Hash(cfg.Name), Hash(cfg.Identity))),
	}
	r.runs.init(cfg.Shards)
	r.ring.listed = r.ringListed
	r.perms.init(cfg, r.poke)
	setGauge(cfg.Metrics.Mismatch, 0)
	r.io = newLeaseIO(cfg, r.leaseOutcome)
	r.io.annotate = r.obs.reportNow
	if cfg.ListerWatcher != nil {
		r.primary = newInformer(r, cfg.ListerWatcher, cfg.Object, nil, true)
		if _, err := r.primary.AddEventHandler(r.eventHandler()); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Informer returns the sharded informer of Config.Object: it holds only
// the objects of the shards the replica holds, each from when its first
// LIST is in (a shard's keys are admitted only then) until it is released
// (its objects then leave the store without Delete events), and, after
// its session lapsed, the shards it held then, until another replica
// holds them (docs/contract.md: "A lapse keeps the cache"); and the shards
// a planned move brings it, from before it holds them (their keys are
// admitted only once it does). Read its
// store, indexer or a lister built on it; Run runs it when it was built
// from Config.ListerWatcher. It is nil while Config.ListerWatcher is nil
// and NewInformer has not built it yet.
func (r *Replica) Informer() cache.SharedIndexInformer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.primary == nil {
		return nil
	}
	return r.primary
}

// NewInformer has the signature of controller-runtime's
// cache.Options.NewInformer. For Config.Object's type it returns the
// primary sharded informer (Informer), built on lw if Config.ListerWatcher
// is nil; for a type of Config.ShardedWith, a sharded informer of that
// type on lw; for any other type, cache.NewSharedIndexInformer. Whoever
// gets an informer from it runs it, except the primary informer built
// from Config.ListerWatcher, which Run runs (its Run method then returns
// at once).
//
// While a sharded informer runs, the replica admits a shard's keys only
// once it has synced the shard, as for the primary one.
func (r *Replica) NewInformer(lw cache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers cache.Indexers) cache.SharedIndexInformer {
	if sameType(obj, r.cfg.Object) {
		r.mu.Lock()
		inf := r.primary
		created := false
		if inf == nil {
			inf = newInformer(r, lw, obj, indexers, true)
			r.primary = inf
			created = true
		}
		r.mu.Unlock()
		if created {
			_, _ = inf.AddEventHandler(r.eventHandler()) // never fails: not stopped
		} else if len(indexers) > 0 {
			_ = inf.AddIndexers(indexers)
		}
		if r.cfg.ListerWatcher != nil { // Run runs the primary informer
			return notRun{inf}
		}
		return inf
	}
	for _, o := range r.cfg.ShardedWith {
		if sameType(obj, o) {
			return newInformer(r, lw, obj, indexers, false)
		}
	}
	return cache.NewSharedIndexInformer(lw, obj, resync, indexers)
}

// notRun is the primary informer as NewInformer gives it when Run runs
// it: the caller's Run waits for the end of its stop channel without
// running it again.
type notRun struct{ *informer }

func (n notRun) Run(stopCh <-chan struct{})         { <-stopCh }
func (n notRun) RunWithContext(ctx context.Context) { <-ctx.Done() }

// sameType reports whether a and b are objects of one resource type: the
// same Go type and, for unstructured objects, the same kind.
func sameType(a, b runtime.Object) bool {
	if a == nil || b == nil || reflect.TypeOf(a) != reflect.TypeOf(b) {
		return false
	}
	return a.GetObjectKind().GroupVersionKind() == b.GetObjectKind().GroupVersionKind() ||
		a.GetObjectKind().GroupVersionKind().Empty() || b.GetObjectKind().GroupVersionKind().Empty()
}

// Filtering returns who filters the primary informer's list and watch by
// shard: FilterServer once a LIST has shown that the API server honours
// ListOptions.ShardSelector, FilterClient otherwise (and until the first
// LIST has answered).
func (r *Replica) Filtering() Filtering {
	r.mu.Lock()
	inf := r.primary
	r.mu.Unlock()
	if inf == nil {
		return FilterClient
	}
	return filtering(inf)
}

// primaryInformer returns the primary informer, or nil.
func (r *Replica) primaryInformer() *informer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.primary
}

// addInformer registers a sharded informer that starts running: until it
// has synced a shard, the shard's keys are not admitted.
func (r *Replica) addInformer(inf *informer) {
	r.runs.addInformer(inf)
	r.poke()
}

// removeInformer unregisters a sharded informer that stopped.
func (r *Replica) removeInformer(inf *informer) {
	r.runs.removeInformer(inf)
	r.poke()
}

// Shards returns the sorted shards whose keys the replica admits and runs
// now: held, and synced in every running sharded informer.
func (r *Replica) Shards() []int { return r.runs.active() }

// Owns reports whether the replica would run key now: it holds the key's
// shard, every running sharded informer has synced that shard, and its
// membership is alive. A key's shard is found from its object in the
// primary informer's store (or its delete event), or, sharding by
// namespace, from the key.
func (r *Replica) Owns(key string) bool {
	s, ok := r.shardOfKey(key)
	return r.runs.owns(key, s, ok, time.Now())
}

// ShardOfObject returns the shard of obj (an object with metadata, or a
// cache.DeletedFinalStateUnknown), or false if it has no metadata.
func (r *Replica) ShardOfObject(obj any) (int, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	v, ok := fieldValue(obj, r.field)
	if !ok {
		return 0, false
	}
	return ShardOf(Hash(v), r.shards), true
}

// shardOfKey finds key's shard from the primary informer's store, or, sharding by
// namespace, from the key itself.
func (r *Replica) shardOfKey(key string) (int, bool) {
	inf := r.primaryInformer()
	if inf == nil {
		return 0, false
	}
	if obj, ok, err := inf.GetIndexer().GetByKey(key); err == nil && ok {
		return r.ShardOfObject(obj)
	}
	if r.field == FieldNamespace {
		ns, _, err := cache.SplitMetaNamespaceKey(key)
		if err == nil {
			return ShardOf(Hash(ns), r.shards), true
		}
	}
	return 0, false
}

// Handler wraps a controller's handler for workqueue.Run: it runs handle
// for the keys of the shards the replica admits (holds, and has synced in
// every running sharded informer) and returns nil at once for any other
// key (its holder enqueues it). The context handle gets is
// also cancelled when the key's shard is lost (ErrLeaseLost) or was given
// up and its GracePeriod ended (ErrGraceOver); context.Cause tells which.
//
// A key's shard is that of its object in the primary informer's store; for an
// object deleted since, the one it had at its delete event. A key whose
// shard cannot be found (not in the store, no delete event seen) is not run.
//
// Whether a run may start is decided by the runs' ledger (runs.go) under
// its lock, against the session's deadline and the shard's state.
func (r *Replica) Handler(handle func(ctx context.Context, key string) error) func(context.Context, string) error {
	return func(ctx context.Context, key string) (err error) {
		s, inStore := r.shardOfKey(key)
		tk, ok := r.runs.begin(ctx, key, s, inStore, time.Now())
		if !ok {
			return nil
		}
		defer func() {
			poke := r.runs.end(tk, err)
			tk.cancel(nil)
			if poke {
				r.poke()
			}
		}()
		return handle(tk.ctx, key)
	}
}

// poke wakes the loop without blocking.
func (r *Replica) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// lose ends the session when its deadline has passed (or at once, if
// force): no key of any shard is admitted any more and every run in
// flight is cancelled. It is called by the expire timer, and by the loop
// when the ring shows that the session is over.
func (r *Replica) lose(force bool) {
	if r.runs.lose(force, time.Now()) {
		r.sessionEnded(force)
		r.poke()
	}
}

// checkUID counts an object added to the primary informer without a UID
// while sharding by UID (Metrics.WithoutUID), and logs the first at
// default verbosity: every such object hashes to the shard of "", so one
// replica holds them all, and a name deleted and created again stays
// there.
func (r *Replica) checkUID(obj any) {
	if r.field != FieldUID {
		return
	}
	if uid, ok := fieldValue(obj, FieldUID); !ok || uid != "" {
		return
	}
	n := r.withoutUID.Add(1)
	setGauge(r.cfg.Metrics.WithoutUID, float64(n))
	if n == 1 {
		key, _ := cache.MetaNamespaceKeyFunc(obj)
		klog.ErrorS(nil, "sharding: an object has no metadata.uid: sharded by UID, every such object falls in one shard (the API server sets a UID; client-go's fake clientset does not: set one in tests, or shard by namespace)",
			"ring", r.cfg.Name, "identity", r.cfg.Identity, "object", key, "shard", ShardOf(Hash(""), r.shards))
	}
}

// ObjectsWithoutUID returns how many objects the primary informer added
// without a metadata.uid while sharding by UID (see Metrics.WithoutUID).
func (r *Replica) ObjectsWithoutUID() int64 { return r.withoutUID.Load() }

// eventHandler admits the keys of the held shards into the queue, and
// remembers deleted keys for the queue's check (gone). With SkipEventKeys
// an add or update has nothing to do.
func (r *Replica) eventHandler() cache.ResourceEventHandler {
	admit := func(obj any, deleted bool) {
		if !deleted && r.cfg.SkipEventKeys {
			return
		}
		s, ok := r.ShardOfObject(obj)
		if !ok {
			return
		}
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return
		}
		if r.runs.event(key, s, deleted, time.Now()) && !r.cfg.SkipEventKeys {
			r.cfg.Queue.Add(key)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			r.checkUID(obj)
			admit(obj, false)
		},
		UpdateFunc: func(_, obj any) { admit(obj, false) },
		DeleteFunc: func(obj any) { admit(obj, true) },
	}
}
