package sharding

import (
	"context"
	"errors"
	"net/http"
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
// A replica runs a key only while its session is alive (less than
// RenewDeadline since it sent its last answered membership write) and it
// holds the key's shard; no two replicas run keys of overlapping hash
// ranges at once, under client-go leader election's timing assumption
// (clocks advance at nearly the same rate, and a cancelled handler
// returns). docs/contract.md says why ("Why two replicas never run one
// key at once").
type Replica struct {
	cfg    Config
	field  string
	shards int
	wake   chan struct{}    // capacity 1: pokes the loop
	now    func() time.Time // time.Now (the simulation's clock in sim_test.go)

	mu sync.Mutex // protects primary and running
	// primary is the sharded informer of Config.Object: built by New
	// from Config.ListerWatcher, or by the first NewInformer of its type.
	// It is set once and never changes.
	primary *informer
	running bool // Run has been called

	runs    ledger      // what runs, and may run (runs.go)
	ring    *ringView   // the ring's Leases as the watch delivers them (ringview.go)
	io      *leaseIO    // every Lease request (leases.go)
	perms   permissions // refused requests (forbidden.go)
	refusal mismatch    // set once the ring shows another field, or was mixed outside its protocol (shardcount.go)
	obs     observer    // what the replica reports of itself (metrics.go)
	// Run's state (step.go, loop.go) is its own: touched only by Run's goroutine.

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
		now:    time.Now,
		ring:   newRingView(cfg.Name, cfg.Shards),
	}
	r.obs.cfg = &r.cfg
	r.runs.init(cfg.Shards)
	r.ring.listed = r.obs.ringListed
	r.perms.init(cfg, r.poke)
	setGauge(cfg.Metrics.Mismatch, 0)
	r.io = newLeaseIO(cfg, func(verb string, err error) { r.perms.outcome(verb, "leases", err) })
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

// Run holds shards until ctx ends: it joins the ring, renews its
// membership Lease every RetryPeriod, takes and gives up shards to keep the
// ring balanced, fills the sharded informers with the shards it gains and
// empties them of those it releases, enqueues every object of a gained
// shard once the informers have synced it and removes the keys of a shard
// it gives up. It runs the primary informer when it was built from
// Config.ListerWatcher, and first waits for the first list of the ring's
// Leases, which it then watches.
//
// When ctx ends, Run leaves gracefully (unless Config.SkipRelease): it
// stops admitting keys, drains and releases its shards (at most
// GracePeriod, then their runs are cancelled) and deletes its membership
// Lease. Each shard is handed over once the member taking it has filled
// its cache for it (at most HandoffTimeout), so that its keys wait for the
// drain only. It returns nil then, or an error if the runs did not return
// within HandoffTimeout + GracePeriod + RenewDeadline, in which case the
// shards are left to expire.
//
// If the API server refuses one kind of request (a verb on a resource:
// 403 Forbidden, a missing RBAC rule) for LeaseDuration without one
// success in between, Run leaves the same way, as far as its permissions
// allow, and returns an error that names the verb and resource and wraps
// the server's (apierrors.IsForbidden is true of it); see Ready.
// Run may be called once. It returns an error at once, and may be called
// again, if Config.ListerWatcher is nil and NewInformer has not built the
// primary informer yet: without an informer no shard is ever admitted.
func (r *Replica) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return errors.New("sharding: Run called twice")
	}
	if err := informerMissing(r.cfg, r.primary); err != nil {
		r.mu.Unlock()
		return err
	}
	r.running = true
	r.mu.Unlock()
	return newLoop(r).run(ctx)
}

// Status returns the ring as this replica sees it now (status.go). It
// copies the view under its lock, and costs O(S + N) plus, for the shards
// this replica holds, what the last observation counted.
func (r *Replica) Status() Status { return r.status(time.Now()) }

// Ready reports whether the replica is ready: nil once it has filled its
// share of the ring (admitted as many shards as its share: held, and in
// its cache), while its session is alive and no
// request it needs is refused; else an error that says why. Its shape is
// controller-runtime's healthz.Checker:
//
//	mgr.AddReadyzCheck("sharding", r.Ready)
//
// Filled once is enough: a replica that has been ready stays so while its
// session is alive, though it fills the shards it gains later (a
// member's leave or death) after that. So a new pod of a rolling update
// counts as available only once it does its share, and the Deployment
// deletes an old pod only then: the old pods' shards are not left to
// replicas that have not listed anything yet (docs/operate.md). A
// replica that comes after the ring has as many members as shards has
// no share and is ready once it counts (its first renewal).
//
// A replica refused a request (403 Forbidden: a missing RBAC rule) is not
// ready from the first refusal; Run returns once the same kind of request
// has been refused for LeaseDuration. A replica whose ring has another
// Field is not ready from the moment it sees it (the error wraps
// ErrRingMismatch), and Run returns that error. A replica whose ring has
// another Shards holds nothing until the ring switches to its count
// (shardcount.go); meanwhile it is ready once it has filled, in its
// cache, the share it will take then, so that a rolling update that
// changes Config.Shards goes on.
func (r *Replica) Ready(*http.Request) error {
	if err := r.refusal.get(); err != nil {
		return err
	}
	if err := r.perms.err(); err != nil {
		return err
	}
	joined, alive := r.runs.readiness()
	switch {
	case !joined:
		return errors.New("sharding: not in the ring yet: no membership write answered")
	case !alive:
		return errors.New("sharding: session lapsed: no membership write answered within RenewDeadline, or the replica left")
	}
	return r.share.err()
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

// Admit is Owns for a key the caller is about to add to the queue as new
// work, ready now: the key of an informer event that the controller's own
// handlers enqueue (Config.SkipEventKeys; interop/crsharding's queue calls
// it for controller-runtime's event adds). It reports whether the replica
// owns key now, as Owns, and if it does, counts key from now among its
// shard's ready keys until a run of it begins in Handler: the ready keys
// and the oldest one's age that the replica reports of the shard
// (AnnotationReport, Status), which the ring's RingReady, RingOldestReady
// and the backlog term of DesiredReplicas read. A key already counted
// keeps its first time, as the queue coalesces it.
//
// Call it just before adding key, and add key only if it returns true: a
// worker may begin the key as soon as it is in the queue, and a key
// counted after its run began would stay counted until its next run. The
// check and the count are made under the lock that Handler's begin takes,
// so neither can miss the other. Do not call it for a retry (a key added
// back after a delay or a failure): a retry waits for its deadline and is
// not a backlog of new work; check it with Owns. The replica's own adds
// (its events without SkipEventKeys, a gained shard's keys) are counted
// already.
func (r *Replica) Admit(key string) bool {
	s, ok := r.shardOfKey(key)
	return r.runs.admit(key, s, ok, time.Now())
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

// ShardOfKey returns the shard of key as this replica can tell it: from
// its object in the primary informer's store, or from the delete event
// the replica saw for it, or, sharding by namespace, from the key itself.
// Sharding by UID, a key whose object is not in this replica's cache has
// no shard it can tell (its holder's cache has it): it returns false.
func (r *Replica) ShardOfKey(key string) (int, bool) {
	if s, ok := r.shardOfKey(key); ok {
		return s, true
	}
	return r.runs.goneShard(key)
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
		for _, k := range tk.feed {
			r.cfg.Queue.Add(k)
		}
		if !ok {
			return nil
		}
		defer func() {
			poke := r.runs.end(tk, err, time.Now())
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
	if r.runs.lose(force, r.now()) {
		if !r.runs.leaving() {
			r.obs.lapse(force)
		}
		r.poke()
	}
}

// refused, granted and listed are the sharded informers' reports
// (informer.go): a request refused or granted (forbidden.go), a list made
// (metrics.go).
func (r *Replica) refused(verb, resource string, err error) { r.perms.refuse(verb, resource, err) }
func (r *Replica) granted(verb, resource string)            { r.perms.grant(verb, resource) }
func (r *Replica) listed(resource, cause string)            { r.obs.listed(resource, cause) }

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
		if queue := !r.cfg.SkipEventKeys; r.runs.event(key, s, deleted, queue, time.Now()) && queue {
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
