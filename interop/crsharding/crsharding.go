// Package crsharding runs a controller-runtime controller on many replicas
// with github.com/go-coalesce/workqueue/sharding: each replica of the
// manager holds some of the ring's shards, caches only their objects and
// reconciles only their keys.
//
//	import "sigs.k8s.io/controller-runtime/pkg/cache"
//
//	sh, err := crsharding.New(crsharding.Config{Ring: sharding.Config{
//		Client: client, Namespace: "kube-system", Name: "configmaps",
//		Identity: podName, Object: &corev1.ConfigMap{},
//	}})
//	if err != nil {
//		return err
//	}
//	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
//		Cache: sh.CacheOptions(cache.Options{}), // the sharded cache
//		// LeaderElection stays false: every replica runs the controller
//	})
//	if err != nil {
//		return err
//	}
//	if err := mgr.Add(sh); err != nil { // the ring, on every replica
//		return err
//	}
//	return ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).
//		WithOptions(sh.ControllerOptions(controller.Options{})). // only owned keys
//		Complete(sh.Reconciler(reconciler))                 // held shards only; drained before one moves
//
// Three hooks of controller-runtime carry it, and nothing else is changed:
//
//   - cache.Options.NewInformer: the manager's cache builds its informer of
//     the sharded type through the replica (sharding.Replica.NewInformer),
//     so it lists and watches only the held shards (or, where the API server
//     does not filter, keeps only their objects). Other types get plain
//     informers, or sharded ones for the types of Config.Ring.ShardedWith.
//   - controller.Options.NewQueue: the controller's queue admits a request
//     only while the replica owns its key (held and synced in every sharded
//     informer), so that a foreign key does not take a worker and a place
//     in the queue. It is a filter, not the guarantee: a request admitted
//     just before its shard is given up can still be handed out. The
//     adds of controller-runtime's event handlers go through
//     sharding.Replica.Admit, which counts them as ready keys in the load
//     the replica reports, so the ring's backlog (RingReady,
//     RingOldestReady, DesiredReplicas) sees them; its requeues do not
//     count (see Queue).
//   - manager.Runnable and manager.LeaderElectionRunnable: the ring's
//     runnable (the Sharding) and the controller land in different groups
//     of the manager, which stops the first before the second (below).
//
// Reconciler wraps the reconciler in the replica's Handler
// (sharding.Replica.Handler), and that is what guarantees that the
// reconciler never gets a key whose shard is missing from the cache: it
// runs the reconciler only for a key of a shard the replica holds and has
// synced in every sharded informer, at the moment the run starts, and
// counts the run; a shard is released only once its runs have returned
// (or, after GracePeriod, been cancelled), which is what keeps two replicas
// from reconciling one key at once.
//
// # Shutdown
//
// controller-runtime's manager (v0.25) stops its runnables by group, one
// group after the other: first the runnables whose NeedLeaderElection is
// false (the Sharding), then those whose NeedLeaderElection is true
// (ControllerOptions sets the controller's), then the caches. Runnables of
// one group are cancelled together. So on a graceful stop the Sharding's
// context ends first, while the controller still runs: the replica stops
// admitting keys, lets the runs in flight finish within GracePeriod (their
// contexts are the controller's, not cancelled yet; past GracePeriod the
// replica cancels them with sharding.ErrGraceOver), releases its shards
// and deletes its membership Lease; then the manager stops the controller,
// whose workers were idle, then the cache. Had the controller
// NeedLeaderElection false too, it would be cancelled with the Sharding,
// and every run in flight would end at once with "context canceled"
// instead of finishing.
//
// The manager must not use leader election (manager.Options.LeaderElection
// false, its default): without it, controller-runtime starts the
// leader-election runnables on every replica at once, as if each were
// elected, which is what a sharded controller needs. With it, only the
// elected replica would start the controller. controller-runtime has no
// group that runs on every replica and stops after the non-leader-election
// runnables, so for a manager that needs leader election for other
// controllers there is no ordering to build on: set the sharded
// controller's NeedLeaderElection to false after ControllerOptions, and a
// graceful stop then cancels its runs at once (the shards are released
// after they return, as always). Start waits for the controller to make its
// queue before the replica joins the ring, so a replica whose controller
// does not run (not elected) holds no shard instead of holding shards that
// nothing reconciles. The manager's GracefulShutdownTimeout (30 s by
// default) bounds the whole stop: keep it above GracePeriod plus
// RenewDeadline.
package crsharding

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	clientworkqueue "k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Config configures a Sharding.
type Config struct {
	// Ring configures the replica, as for sharding.New. Ring.Queue must be
	// nil: the controller's queue is made by NewQueue. Ring.ListerWatcher
	// may be nil: the manager's cache then builds the sharded informer
	// through NewInformer (see CacheOptions).
	Ring sharding.Config
	// Queue configures the controller's queue (Name, Metrics, Clock); its
	// Store is replaced by a priority store. A zero Name becomes the
	// controller's name.
	Queue workqueue.Config[reconcile.Request]
}

// informerWait is how long Start waits for the sharded informer, once the
// controller has made its queue, before it logs that the manager's cache
// was not built with CacheOptions (see Start). controller-runtime builds
// the informer when the controller's source starts, just after the queue,
// so an informer this late most likely never comes.
const informerWait = 30 * time.Second

// Sharding joins one controller-runtime controller to a sharding ring. Make
// it with New, add it to the manager (it is a manager.Runnable), and hand
// its hooks to the cache (CacheOptions or NewInformer), to the controller
// (ControllerOptions or NewQueue) and to the reconciler (Reconciler). One
// Sharding serves one controller: its ring is that controller's. It is safe
// for concurrent use.
type Sharding struct {
	replica  *sharding.Replica
	name     string // Config.Ring.Name, for the log
	qcfg     workqueue.Config[reconcile.Request]
	queued   chan struct{} // closed by NewQueue: the controller has started
	informed chan struct{} // closed once the replica has its primary informer
	inform   sync.Once     // closes informed

	mu    sync.Mutex // protects queue
	queue *Queue     // made by NewQueue; nil before
}

var (
	_ manager.Runnable               = (*Sharding)(nil)
	_ manager.LeaderElectionRunnable = (*Sharding)(nil)
)

// New checks cfg and makes the replica (sharding.New); it holds no shard
// until the manager starts it.
func New(cfg Config) (*Sharding, error) {
	if cfg.Ring.Queue != nil {
		return nil, errors.New("crsharding: Config.Ring.Queue must be nil: the controller's queue comes from NewQueue")
	}
	s := &Sharding{name: cfg.Ring.Name, qcfg: cfg.Queue, queued: make(chan struct{}), informed: make(chan struct{})}
	cfg.Ring.Queue = keyQueue{s}
	// The controller's own source enqueues the events, through its
	// predicates; the replica adds only a gained shard's keys.
	cfg.Ring.SkipEventKeys = true
	r, err := sharding.New(cfg.Ring)
	if err != nil {
		return nil, err
	}
	s.replica = r
	if cfg.Ring.ListerWatcher != nil { // the replica built its informer
		s.inform.Do(func() { close(s.informed) })
	}
	return s, nil
}

// Replica returns the replica: its Shards, Filtering, Informer and Owns.
func (s *Sharding) Replica() *sharding.Replica { return s.replica }

// Start waits until the controller has made its queue (NewQueue: the
// controller has started) and the replica has its sharded informer (built
// from Config.Ring.ListerWatcher, or by the manager's cache through
// NewInformer, which the controller's source asks for just after its
// queue), then runs the replica's loop (sharding.Replica.Run) until ctx
// ends, and leaves the ring gracefully (unless Config.Ring.SkipRelease):
// the runs in flight finish (within GracePeriod) before the shards are
// released. The manager calls it on every replica, leader or not. Waiting
// for the controller keeps a replica whose controller never starts (a
// manager with leader election, not elected) out of the ring: the shards
// it would hold would not be reconciled. Waiting for the informer keeps
// Run from refusing to start without one; a cache not made with
// CacheOptions never builds it, and the replica then never joins: if the
// informer is still missing 30 s after the queue was made, Start
// logs so once (klog, at default verbosity) and goes on waiting. If ctx
// ends first, Start returns nil having held nothing.
func (s *Sharding) Start(ctx context.Context) error {
	select {
	case <-s.queued:
	case <-ctx.Done():
		return nil
	}
	// controller-runtime builds the informer after the queue, when the
	// controller's source first asks the cache for it: wait for it without
	// a bound, but say once what is missing if it is late.
	late := time.NewTimer(informerWait)
	defer late.Stop()
	for {
		select {
		case <-s.informed:
			return s.replica.Run(ctx)
		case <-ctx.Done():
			return nil
		case <-late.C:
			klog.InfoS("crsharding: the controller has started but no sharded informer was built: the replica waits and joins no ring; "+
				"build the manager's cache with Sharding.CacheOptions (manager.Options.Cache), or set Config.Ring.ListerWatcher",
				"ring", s.name, "waited", informerWait)
		}
	}
}

// NeedLeaderElection is false: every replica of the manager holds shards,
// and the manager stops the runnables that do not need leader election
// before those that do (the controller, see ControllerOptions), so the
// replica drains and leaves while the controller can still finish the runs
// in flight. See the package doc, Shutdown.
func (s *Sharding) NeedLeaderElection() bool { return false }

// NewInformer is the replica's NewInformer, with the signature of
// cache.Options.NewInformer: the sharded informer for Config.Ring.Object's
// type and the types of Config.Ring.ShardedWith, a plain one for others.
func (s *Sharding) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	inf := s.replica.NewInformer(lw, obj, resync, indexers)
	if s.replica.Informer() != nil {
		s.inform.Do(func() { close(s.informed) })
	}
	return inf
}

// CacheOptions returns o with NewInformer set to the replica's, for
// manager.Options.Cache (or cache.New).
func (s *Sharding) CacheOptions(o cache.Options) cache.Options {
	o.NewInformer = s.NewInformer
	return o
}

// NewQueue makes the controller's queue, for controller.Options.NewQueue:
// a crpriority queue that admits only the requests whose keys the replica
// owns (see Queue). controller-runtime calls it once, when the controller
// starts; a second call panics, as one Sharding serves one controller.
func (s *Sharding) NewQueue(name string, rl clientworkqueue.TypedRateLimiter[reconcile.Request]) clientworkqueue.TypedRateLimitingInterface[reconcile.Request] {
	cfg := s.qcfg
	if cfg.Name == "" {
		cfg.Name = name
	}
	q := newQueue(s.replica, rl, cfg)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queue != nil {
		panic("crsharding: NewQueue called twice: one Sharding serves one controller")
	}
	s.queue = q
	close(s.queued)
	return q
}

// ControllerOptions returns o with NewQueue set to s.NewQueue,
// NeedLeaderElection true and EnableWarmup false. NeedLeaderElection true
// puts the controller in the manager's group of leader-election runnables,
// which the manager stops after the Sharding (whose NeedLeaderElection is
// false), so a graceful stop lets the runs in flight finish before the
// shards are released; with the manager's leader election off (required,
// see the package doc) that group starts on every replica. Warmup is off
// because it would make the queue (and so start the Sharding, see Start)
// on a replica whose workers may never run.
func (s *Sharding) ControllerOptions(o controller.Options) controller.Options {
	o.NewQueue = s.NewQueue
	o.NeedLeaderElection = ptr.To(true)
	o.EnableWarmup = ptr.To(false)
	return o
}

// Reconciler wraps r so that it runs only for the keys of the shards the
// replica holds, and so that the replica knows which runs are in flight
// (sharding.Replica.Handler): a shard is released only after its runs have
// returned. The context r gets is cancelled when the shard is lost
// (sharding.ErrLeaseLost) or given up past GracePeriod
// (sharding.ErrGraceOver); r must return soon after. A request whose key
// the replica does not own returns an empty Result at once (its holder
// reconciles it).
func (s *Sharding) Reconciler(r reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		var res reconcile.Result
		err := s.replica.Handler(func(ctx context.Context, _ string) error {
			var err error
			res, err = r.Reconcile(ctx, req)
			return err
		})(ctx, Key(req))
		return res, err
	})
}

// current returns the controller's queue, or nil before NewQueue.
func (s *Sharding) current() *Queue {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queue
}

// keyQueue is the controller's queue as the replica sees it
// (sharding.Queue): keys in, keys removed. Before the controller has made
// its queue there is nothing to add to or remove from: when it starts, its
// source replays every cached object through Queue's admission.
type keyQueue struct{ s *Sharding }

var _ sharding.Queue = keyQueue{}

// Add enqueues key at controller-runtime's low priority: the replica adds
// the keys of a gained shard all at once, a replay like the initial list to
// which controller-runtime gives that priority, so fresh events go first.
// The key is checked with Owns, not counted again: the replica counted it
// as ready before calling Add.
func (k keyQueue) Add(key string) {
	q := k.s.current()
	if q == nil {
		return
	}
	if req, ok := request(key); ok {
		q.addWithOpts(priorityqueue.AddOpts{Priority: ptr.To(handler.LowPriority)}, false, []reconcile.Request{req})
	}
}

// Remove drops key from the controller's queue.
func (k keyQueue) Remove(key string) bool {
	q := k.s.current()
	if q == nil {
		return false
	}
	req, ok := request(key)
	return ok && q.Remove(req)
}
