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
//	})
//	if err != nil {
//		return err
//	}
//	if err := mgr.Add(sh); err != nil { // the ring, on every replica
//		return err
//	}
//	return ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).
//		WithOptions(sh.ControllerOptions(controller.Options{})). // only owned keys
//		Complete(sh.Reconciler(reconciler))                     // drained before a shard moves
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
//     informer), so the reconciler never gets a key whose shard is missing
//     from the cache.
//   - manager.Runnable: the replica's loop runs on every replica
//     (NeedLeaderElection is false) and the manager stops it first on
//     shutdown, so it drains and releases its shards while the controller's
//     workers still run.
//
// Reconciler wraps the reconciler so that the replica counts its runs: a
// shard is released only once its runs have returned (or, after
// GracePeriod, been cancelled), which is what keeps two replicas from
// reconciling one key at once.
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

// Sharding joins one controller-runtime controller to a sharding ring. Make
// it with New, add it to the manager (it is a manager.Runnable), and hand
// its hooks to the cache (CacheOptions or NewInformer), to the controller
// (ControllerOptions or NewQueue) and to the reconciler (Reconciler). One
// Sharding serves one controller: its ring is that controller's. It is safe
// for concurrent use.
type Sharding struct {
	replica *sharding.Replica
	qcfg    workqueue.Config[reconcile.Request]

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
	s := &Sharding{qcfg: cfg.Queue}
	cfg.Ring.Queue = keyQueue{s}
	// The controller's own source enqueues the events, through its
	// predicates; the replica adds only a gained shard's keys.
	cfg.Ring.SkipEventKeys = true
	r, err := sharding.New(cfg.Ring)
	if err != nil {
		return nil, err
	}
	s.replica = r
	return s, nil
}

// Replica returns the replica: its Shards, Filtering, Informer and Owns.
func (s *Sharding) Replica() *sharding.Replica { return s.replica }

// Start runs the replica's loop (sharding.Replica.Run) until ctx ends, then
// leaves the ring gracefully (unless Config.Ring.SkipRelease). The manager
// calls it on every replica, leader or not.
func (s *Sharding) Start(ctx context.Context) error { return s.replica.Run(ctx) }

// NeedLeaderElection is false: every replica of the manager holds shards.
// (The manager stops runnables that do not need leader election before the
// controllers, so the replica leaves while the workers can still finish
// the runs it drains.)
func (s *Sharding) NeedLeaderElection() bool { return false }

// NewInformer is the replica's NewInformer, with the signature of
// cache.Options.NewInformer: the sharded informer for Config.Ring.Object's
// type and the types of Config.Ring.ShardedWith, a plain one for others.
func (s *Sharding) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	return s.replica.NewInformer(lw, obj, resync, indexers)
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
	q := newQueue(s.replica.Owns, rl, cfg)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queue != nil {
		panic("crsharding: NewQueue called twice: one Sharding serves one controller")
	}
	s.queue = q
	return q
}

// ControllerOptions returns o with NewQueue set to s.NewQueue and
// NeedLeaderElection false (the controller runs on every replica; each
// reconciles the keys of its shards).
func (s *Sharding) ControllerOptions(o controller.Options) controller.Options {
	o.NewQueue = s.NewQueue
	o.NeedLeaderElection = ptr.To(false)
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
func (k keyQueue) Add(key string) {
	q := k.s.current()
	if q == nil {
		return
	}
	if req, ok := request(key); ok {
		q.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(handler.LowPriority)}, req)
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
