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
//	r, err := sharding.New(sharding.Config{
//		Client: client, Namespace: "kube-system", Name: "my-controller",
//		Identity: podName, Queue: q,
//		Object:        &appsv1.Deployment{},
//		ListerWatcher: cache.NewListWatchFromClient(client.AppsV1().RESTClient(), "deployments", "", fields.Everything()),
//	})
//	lister := appslisters.NewDeploymentLister(r.Informer().GetIndexer())
//	go r.Run(ctx)                                      // holds shards, fills the cache, feeds q
//	workqueue.Run(ctx, q, 4, r.Handler(reconcile))     // runs only owned keys
//
// The README gives the contract, the timing assumption and a scaling sheet.
package sharding

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Defaults of the timing fields of Config: client-go's leader election
// defaults, with the same meaning.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	DefaultGracePeriod   = 5 * time.Second
	DefaultShards        = 16
)

// Queue is what the replica needs of the controller's queue: it adds the
// keys of the shards it gains and removes those of the shards it gives up.
// A *workqueue.RateLimitingQueue[string] satisfies it.
type Queue interface {
	Add(key string)
	Remove(key string) bool
}

// Config configures a Replica. Client, Namespace, Name, Identity, Object
// and Queue are required, and ListerWatcher unless the primary informer is
// built through Replica.NewInformer; every other field has a zero value
// that works.
type Config struct {
	// Client is used for Leases only, in Namespace.
	Client kubernetes.Interface
	// Namespace holds the ring's Leases.
	Namespace string
	// Name names the ring: every replica of one controller uses the same
	// Name, and its Leases are "<Name>-member-<Identity>" and
	// "<Name>-shard-<i>", labelled sharding.go-coalesce.io/ring=<Name>.
	// It must be a valid label value and a DNS subdomain.
	Name string
	// Identity names this replica; it must be unique among the live
	// replicas of the ring (a pod name is), as in leader election.
	Identity string

	// Shards is the number of shards S of the ring, a power of two from 1
	// to 65536, the same on every replica; zero means DefaultShards (16).
	// Choose it above the largest replica count you expect: a ring of S
	// shards spreads over at most S replicas.
	Shards int
	// Field is the object field that is hashed: FieldUID (the default,
	// when empty) or FieldNamespace.
	Field string

	// Object is the sharded resource's type, e.g. &corev1.ConfigMap{}.
	Object runtime.Object
	// ListerWatcher lists and watches the sharded resource, e.g.
	// cache.NewListWatchFromClient(client.CoreV1().RESTClient(),
	// "configmaps", namespace, fields.Everything()). The replica builds
	// its sharded informer on it (Informer) and runs it in Run; the
	// replica adds KEP-5866's ShardSelector to each LIST and watch.
	// It may be nil only if the primary informer is built through
	// NewInformer (controller-runtime's cache.Options.NewInformer), which
	// then gives the ListerWatcher.
	ListerWatcher cache.ListerWatcher
	// ShardedWith are other namespaced types (e.g. the ReplicaSets and
	// Pods of a Deployment controller) whose informers, built through
	// NewInformer, hold only the objects of the held shards, by the same
	// ranges. Only with Field = FieldNamespace: with FieldUID, a
	// secondary object's shard would be that of its own UID, not its
	// owner's, so its owner's holder would not have it.
	ShardedWith []runtime.Object
	// Queue is the controller's queue. The replica adds keys of the shards
	// it holds and removes a shard's keys when it gives the shard up.
	Queue Queue
	// Metrics, if set, are kept up to date: who filters, shards held,
	// objects cached.
	Metrics Metrics

	// LeaseDuration is how long another replica waits, after it last saw
	// this replica's membership Lease change, before it takes the shards
	// away. Zero means DefaultLeaseDuration.
	LeaseDuration time.Duration
	// RenewDeadline is how long after the start of its last successful
	// (answered) renewal a replica keeps processing its shards' keys when
	// renewals fail; then it stops admitting them, cancels their runs and
	// stops renewing its session: it only tries to join again, with a new
	// session that the others count only once renewed. It must
	// be below LeaseDuration, by enough to cover clock drift and the time
	// a cancelled handler takes to return. Zero means DefaultRenewDeadline.
	RenewDeadline time.Duration
	// RetryPeriod is the period of the replica's loop: it renews its
	// membership Lease once per period (it watches the ring, and acts on
	// a change when the watch delivers it, not at the period). Each period
	// is RetryPeriod plus a jitter of up to a tenth of it (and of half
	// of RenewDeadline − RetryPeriod), so that replicas started together
	// do not write in lockstep; the loop never runs more often than once
	// per RetryPeriod. It must be below RenewDeadline. Zero means
	// DefaultRetryPeriod.
	RetryPeriod time.Duration
	// GracePeriod is how long the in-flight runs of a shard that the
	// replica gives up voluntarily (to balance, or when leaving) may go on
	// before their context is cancelled. The shard is released once they
	// have returned. Zero means DefaultGracePeriod.
	GracePeriod time.Duration

	// SkipRelease makes Run, when its context ends, stop at once without
	// releasing anything, as a crashed process would: the runs in flight
	// are cancelled and the other replicas take the shards after
	// LeaseDuration. The zero value leaves gracefully: the shards are
	// drained and released, then the membership Lease is deleted.
	SkipRelease bool

	// SkipEventKeys stops the replica from adding the keys of its
	// informer's events to Queue: it adds only the keys of a shard it
	// gains (once synced), and still records deleted objects' shards. Set
	// it when the controller's own event handlers enqueue the events, with
	// their own filters (controller-runtime's predicates: interop/crsharding
	// sets it), so that a change those filters drop is not reconciled.
	SkipEventKeys bool

	// OnChange, if not nil, is called with the sorted shards the replica
	// holds every time that set changes. It runs on the replica's loop
	// goroutine, which it must not block.
	OnChange func(shards []int)
}

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
	wake   chan struct{}
	// primary is the sharded informer of Config.Object: built by New
	// from Config.ListerWatcher, or by the first NewInformer of its type.
	// It is set once (under mu) and never changes.
	primary *informer

	mu sync.Mutex // protects the fields below
	// alive is true while the session is continuous: a renewal sent less
	// than RenewDeadline ago succeeded. Runs start only while it is true.
	alive    bool
	deadline time.Time // alive ends here unless a renewal succeeds
	session  string    // the session the shard Leases name
	state    []shard   // one per shard
	runs     map[uint64]run
	nextRun  uint64
	inflight int            // runs in flight, all shards
	gone     map[string]int // deleted objects' keys waiting for a run → shard
	running  bool           // Run has been called
	// informers are the running sharded informers; filled[s] is true
	// once every one of them has synced shard s (set by sync). A shard's
	// keys are admitted only while it is active and filled.
	informers []*informer
	infGen    int // counts the changes of informers
	filled    []bool

	// leaving is set by the loop when Run's context ends (read by
	// Handler under mu, written by the loop under mu).
	leaving bool

	// ring is the ring's Leases as the watch delivers them (leases.go).
	ring *ringView

	// Touched only by the loop goroutine (Run).
	expire   *time.Timer // calls lose at deadline
	member   leaseRef    // our membership Lease as last written or read; zero if unknown
	v        view        // the ring for the decision being taken (a copy of ring)
	fenceAt  time.Time   // the next time a member may be fenced; zero if none
	tried    tried       // writes that failed since the last tick (see decide)
	prev     []int       // the active shards at the last sync
	aliveFor int         // ticks since the session began
	jitter   *rand.Rand  // draws each period's jitter (see period)
	// sessionStart is when the join that started the session was sent:
	// the acquireTime of every renewal of the session.
	sessionStart time.Time
	leaveBy      time.Time // give up leaving here
}

// The states of one shard, as this replica sees it.
const (
	shardFree     uint8 = iota // not ours
	shardActive                // ours: keys admitted and run
	shardDraining              // being given up: no key admitted, runs finishing
)

type shard struct {
	state     uint8
	cancelled bool      // draining: the runs were cancelled at graceEnd
	inflight  int       // runs of this shard in flight
	graceEnd  time.Time // draining: runs are cancelled from here on
}

type run struct {
	shard  int
	cancel context.CancelCauseFunc
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
// shard until Run is called.
func New(cfg Config) (*Replica, error) {
	if cfg.Client == nil || cfg.Object == nil || cfg.Queue == nil {
		return nil, errors.New("sharding: Config needs Client, Object and Queue")
	}
	if cfg.Namespace == "" || cfg.Name == "" || cfg.Identity == "" {
		return nil, errors.New("sharding: Config needs Namespace, Name and Identity")
	}
	if errs := validation.IsValidLabelValue(cfg.Name); len(errs) > 0 {
		return nil, fmt.Errorf("sharding: Name %q: %v", cfg.Name, errs)
	}
	if errs := validation.IsDNS1123Subdomain(memberLeaseName(cfg.Name, cfg.Identity)); len(errs) > 0 {
		return nil, fmt.Errorf("sharding: Name and Identity %q make no Lease name: %v", cfg.Identity, errs)
	}
	if cfg.Shards == 0 {
		cfg.Shards = DefaultShards
	}
	if !validShards(cfg.Shards) {
		return nil, fmt.Errorf("sharding: Shards is %d, need a power of two from 1 to 65536", cfg.Shards)
	}
	switch cfg.Field {
	case "":
		cfg.Field = FieldUID
	case FieldUID, FieldNamespace:
	default:
		return nil, fmt.Errorf("sharding: Field %q, need %q or %q", cfg.Field, FieldUID, FieldNamespace)
	}
	if len(cfg.ShardedWith) > 0 && cfg.Field != FieldNamespace {
		return nil, errors.New("sharding: ShardedWith needs Field = FieldNamespace: sharded by UID, " +
			"another resource's object has its own UID, not its owner's, so it would not land in its owner's shard")
	}
	for _, o := range cfg.ShardedWith {
		if o == nil || sameType(o, cfg.Object) {
			return nil, errors.New("sharding: ShardedWith holds nil or Config.Object's type")
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.LeaseDuration, DefaultLeaseDuration)
	def(&cfg.RenewDeadline, DefaultRenewDeadline)
	def(&cfg.RetryPeriod, DefaultRetryPeriod)
	def(&cfg.GracePeriod, DefaultGracePeriod)
	if !(0 < cfg.RetryPeriod && cfg.RetryPeriod < cfg.RenewDeadline && cfg.RenewDeadline < cfg.LeaseDuration) {
		return nil, fmt.Errorf("sharding: need 0 < RetryPeriod (%v) < RenewDeadline (%v) < LeaseDuration (%v)",
			cfg.RetryPeriod, cfg.RenewDeadline, cfg.LeaseDuration)
	}
	if cfg.GracePeriod < 0 {
		return nil, errors.New("sharding: negative GracePeriod")
	}
	r := &Replica{
		cfg:    cfg,
		field:  cfg.Field,
		shards: cfg.Shards,
		wake:   make(chan struct{}, 1),
		state:  make([]shard, cfg.Shards),
		runs:   make(map[uint64]run),
		gone:   make(map[string]int),
		ring:   newRingView(cfg.Name, cfg.Shards),
		tried:  newTried(cfg.Shards),
		filled: make([]bool, cfg.Shards),
		// Seeded by the replica's identity: distinct replicas drift
		// apart, and a test in simulated time replays the same periods.
		jitter: rand.New(rand.NewPCG(Hash(cfg.Name), Hash(cfg.Identity))),
	}
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
// (its objects then leave the store without Delete events). Read its
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
	r.mu.Lock()
	r.informers = append(r.informers, inf)
	r.infGen++
	clear(r.filled)
	r.mu.Unlock()
	r.poke()
}

// removeInformer unregisters a sharded informer that stopped.
func (r *Replica) removeInformer(inf *informer) {
	r.mu.Lock()
	r.informers = slices.DeleteFunc(r.informers, func(i *informer) bool { return i == inf })
	r.infGen++
	r.mu.Unlock()
	r.poke()
}

// Shards returns the sorted shards whose keys the replica admits and runs
// now: held, and synced in every running sharded informer.
func (r *Replica) Shards() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.activeLocked()
}

// activeLocked returns the shards whose keys are admitted: active and
// filled. r.mu must be held.
func (r *Replica) activeLocked() []int {
	var out []int
	if !r.alive {
		return out
	}
	for i := range r.state {
		if r.state[i].state == shardActive && r.filled[i] {
			out = append(out, i)
		}
	}
	return out
}

// Owns reports whether the replica would run key now: it holds the key's
// shard, every running sharded informer has synced that shard, and its
// membership is alive. A key's shard is found from its object in the
// primary informer's store (or its delete event), or, sharding by
// namespace, from the key.
func (r *Replica) Owns(key string) bool {
	s, ok := r.shardOfKey(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !ok {
		s, ok = r.gone[key]
	}
	return ok && r.admitsLocked(s, time.Now())
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
	r.mu.Lock()
	inf := r.primary
	r.mu.Unlock()
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

// admitsLocked reports whether keys of shard s may start running at now:
// held, synced in every running sharded informer, and alive. r.mu must be
// held.
func (r *Replica) admitsLocked(s int, now time.Time) bool {
	return r.alive && now.Before(r.deadline) && r.state[s].state == shardActive && r.filled[s]
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
func (r *Replica) Handler(handle func(ctx context.Context, key string) error) func(context.Context, string) error {
	return func(ctx context.Context, key string) (err error) {
		s, inStore := r.shardOfKey(key)
		r.mu.Lock()
		if !inStore {
			var ok bool
			if s, ok = r.gone[key]; !ok {
				r.mu.Unlock()
				return nil
			}
		}
		if !r.admitsLocked(s, time.Now()) {
			r.mu.Unlock()
			return nil
		}
		id := r.nextRun
		r.nextRun++
		rctx, cancel := context.WithCancelCause(ctx)
		r.runs[id] = run{shard: s, cancel: cancel}
		r.state[s].inflight++
		r.inflight++
		r.mu.Unlock()

		defer func() {
			r.mu.Lock()
			delete(r.runs, id)
			r.state[s].inflight--
			r.inflight--
			poke := (r.state[s].state == shardDraining && r.state[s].inflight == 0) ||
				(r.inflight == 0 && (!r.alive || r.leaving))
			if !inStore && err == nil {
				delete(r.gone, key)
			}
			r.mu.Unlock()
			cancel(nil)
			if poke {
				r.poke()
			}
		}()
		return handle(rctx, key)
	}
}

// poke wakes the loop without blocking.
func (r *Replica) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// lose ends the session when its deadline has passed: no key of any shard
// is admitted any more and every run in flight is cancelled. It is called
// by the expire timer, and by the loop when the ring shows that the
// session is over.
func (r *Replica) lose(force bool) {
	r.mu.Lock()
	if !r.alive || (!force && time.Now().Before(r.deadline)) {
		r.mu.Unlock()
		return
	}
	r.alive = false
	for i := range r.state {
		r.state[i].state = shardFree
	}
	for _, run := range r.runs {
		run.cancel(ErrLeaseLost)
	}
	clear(r.gone)
	r.mu.Unlock()
	r.poke()
}

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
		r.mu.Lock()
		ok = r.admitsLocked(s, time.Now())
		if ok && deleted {
			r.gone[key] = s
		}
		r.mu.Unlock()
		if ok && !r.cfg.SkipEventKeys {
			r.cfg.Queue.Add(key)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { admit(obj, false) },
		UpdateFunc: func(_, obj any) { admit(obj, false) },
		DeleteFunc: func(obj any) { admit(obj, true) },
	}
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
// Lease. It returns nil then, or an error if the runs did not return within
// GracePeriod + RenewDeadline, in which case the shards are left to expire.
// Run may be called once.
func (r *Replica) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return errors.New("sharding: Run called twice")
	}
	r.running = true
	r.mu.Unlock()

	if r.cfg.ListerWatcher != nil {
		// Run runs the primary informer, built from ListerWatcher. It
		// stops once the loop has returned: a leaving
		// replica's runs read it until its shards are released.
		stop := make(chan struct{})
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			r.primary.Run(stop)
		}()
		defer func() {
			close(stop)
			<-stopped
		}()
	}
	stopWatch, synced := r.watchRing(ctx)
	defer stopWatch()
	if !synced {
		return nil
	}

	api := context.WithoutCancel(ctx)
	defer func() {
		if r.expire != nil {
			r.expire.Stop()
		}
	}()
	done := ctx.Done()
	next := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		changed := false
		select {
		case <-done:
			done = nil
			if r.cfg.SkipRelease {
				r.abandon()
				return nil
			}
			r.leave()
		case <-timer.C:
		case <-r.wake:
		case <-r.ring.changed:
			changed = true
		}
		now := time.Now()
		if !now.Before(next) {
			next = now.Add(r.period())
			r.tick(api)
		} else {
			r.react(api, now, changed)
		}
		r.sync() // before progress: keys are removed before a release
		wakeAt := r.progress(api)
		r.sync()
		if r.leaving {
			if finished, err := r.leaveDone(api); finished {
				return err
			}
			if wakeAt.IsZero() || r.leaveBy.Before(wakeAt) {
				wakeAt = r.leaveBy
			}
		}
		if wakeAt.IsZero() || next.Before(wakeAt) {
			wakeAt = next
		}
		if !r.fenceAt.IsZero() && r.fenceAt.Before(wakeAt) {
			wakeAt = r.fenceAt
		}
		timer.Reset(time.Until(wakeAt))
	}
}

// period returns the time to the next tick: RetryPeriod plus a jitter
// drawn from [0, RetryPeriod/10], capped at half of RenewDeadline −
// RetryPeriod so that a period stays well inside RenewDeadline. Replicas
// started together would otherwise renew at the same instants
// for as long as they run; the jitter spreads their requests over the
// period. It only lengthens
// the period, so the loop still writes at most one membership Lease per
// RetryPeriod, and every bound stated with "a RetryPeriod" holds with
// 1.1×RetryPeriod.
func (r *Replica) period() time.Duration {
	maxJitter := min(r.cfg.RetryPeriod/10, (r.cfg.RenewDeadline-r.cfg.RetryPeriod)/2)
	return r.cfg.RetryPeriod + time.Duration(r.jitter.Int64N(int64(maxJitter)+1))
}

// abandon stops everything without writing, as a crash would.
func (r *Replica) abandon() {
	r.mu.Lock()
	r.alive = false
	for i := range r.state {
		r.state[i].state = shardFree
	}
	for _, run := range r.runs {
		run.cancel(ErrLeaseLost)
	}
	r.mu.Unlock()
}

// leave starts a graceful leave: every held shard starts draining.
func (r *Replica) leave() {
	r.leaveBy = time.Now().Add(r.cfg.GracePeriod + r.cfg.RenewDeadline)
	var drain []int
	r.mu.Lock()
	r.leaving = true
	for i := range r.state {
		if r.state[i].state == shardActive {
			drain = append(drain, i)
		}
	}
	r.mu.Unlock()
	r.drain(drain)
}

// leaveDone finishes a leave once no shard is held and no run is in flight
// (deleting the membership Lease), or gives up at leaveBy.
func (r *Replica) leaveDone(api context.Context) (bool, error) {
	r.mu.Lock()
	busy := r.inflight > 0
	for i := range r.state {
		if r.state[i].state != shardFree {
			busy = true
		}
	}
	r.mu.Unlock()
	if busy {
		if !time.Now().Before(r.leaveBy) {
			r.abandon()
			return true, errors.New("sharding: runs still in flight after GracePeriod + RenewDeadline; shards left to expire")
		}
		return false, nil
	}
	r.lose(true)
	if r.member.known() {
		ctx, cancel := context.WithTimeout(api, r.cfg.RenewDeadline)
		defer cancel()
		_ = r.deleteMemberOf(ctx, r.cfg.Identity, r.member) // others fence it if this fails
	}
	return true, nil
}
