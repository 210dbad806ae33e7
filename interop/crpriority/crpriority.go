// Package crpriority makes a workqueue.RateLimitingQueue with a priority
// store usable as controller-runtime's priorityqueue.PriorityQueue, so that
// a controller that hands it out from its NewQueue option keeps the
// priorities its handlers assign (controller-runtime wraps any other queue
// and drops them).
//
// Served strictly by priority, as controller-runtime serves its queue, the
// keys of an informer's initial list and resyncs (controller-runtime's
// handler.LowPriority, -100) wait for as long as higher-priority keys keep
// coming. Three options of New change that, each off by default:
// WithMaxWait bounds the wait, WithFairness takes turns between tenants
// (namespaces) within a priority, and WithMaxInFlight caps the keys of one
// tenant being reconciled at once. They configure
// workqueue.NewFairPriorityStore; without them the queue is exactly
// controller-runtime's order (workqueue.NewPriorityStore).
//
// It lives in the interop module because it names controller-runtime's
// AddOpts type; the core module has everything else it needs.
package crpriority

import (
	"context"
	"fmt"
	"time"

	"github.com/go-coalesce/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Queue is a RateLimitingQueue over workqueue.NewPriorityStore that also has
// controller-runtime's AddWithOpts, and whose Get, GetWithPriority (see New)
// and Len answer as controller-runtime's priority queue does. Remove
// comes from the embedded queue: controller-runtime's PriorityQueue interface
// (v0.25) has no equivalent, so controller-runtime never calls it, but code
// that holds this Queue (an event handler that sees a delete, a sharded
// controller that loses a key) can cancel a pending run with it. The zero
// value is not usable; use New.
type Queue[T comparable] struct {
	*workqueue.RateLimitingQueue[T]
}

var _ priorityqueue.PriorityQueue[string] = (*Queue[string])(nil)

// New returns an empty priority queue whose AddRateLimited (and
// AddWithOpts with RateLimited) asks rl for delays; nil rl means
// workqueue.DefaultControllerRateLimiter. cfg.Store is replaced by a
// priority store, and cfg.GetStopsAtShutDown is set. Without opts the store
// is workqueue.NewPriorityStore, strict priority and FIFO within one, as
// controller-runtime's queue; any of WithMaxWait, WithFairness and
// WithMaxInFlight makes it workqueue.NewFairPriorityStore with what they
// set. New panics if WithMaxInFlight is given without WithFairness, or if
// WithFairness's tenant function takes another type than T.
//
// So Get and GetWithPriority hand out the next ready key (the highest
// priority first, with the priority of its run), blocking until there is
// one, and after ShutDown report shutdown at once, even while keys are
// still ready, as controller-runtime's priority queue does: its controller
// stops taking work when its context ends, and a worker that went on would
// reconcile every queued request with a cancelled context. (The core queue,
// like client-go's, keeps handing out ready keys after ShutDown so that a
// drain can finish them; controller-runtime never drains.) The queue
// decides this under its lock, so no Get that starts after ShutDown hands
// out a key. A Get that is blocked when ShutDown comes returns shutdown too.
func New[T comparable](rl workqueue.RateLimiter[T], cfg workqueue.Config[T], opts ...Option) *Queue[T] {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	cfg.Store = newStore[T](o)
	cfg.GetStopsAtShutDown = true
	return &Queue[T]{workqueue.NewRateLimitingQueueWithConfig(rl, cfg)}
}

// AddWithOpts adds items as controller-runtime's priority queue does: each
// gets o.Priority (0 when nil); with o.RateLimited the delay is the smaller
// of o.After (when set) and the limiter's delay; a delay above zero makes
// it wait. Merging with a pending run keeps the earliest time and the
// highest priority, as the queue always does. After ShutDown it does
// nothing, and does not ask the limiter.
func (q *Queue[T]) AddWithOpts(o priorityqueue.AddOpts, items ...T) {
	if q.ShuttingDown() {
		return
	}
	prio := 0
	if o.Priority != nil {
		prio = *o.Priority
	}
	for _, item := range items {
		after := o.After
		if o.RateLimited {
			if d := q.RateLimiter().When(item); after == 0 || d < after {
				after = d
			}
		}
		if after > 0 {
			q.AddAfterWithPriority(item, after, prio)
		} else {
			q.AddWithPriority(item, prio)
		}
	}
}

// ShutDownWithDrainAll is ShutDownWithDrainContext here: it shuts the queue
// down and waits until no key is processing. The core's ShutDownWithDrainAll
// also waits for the ready keys to run, but after ShutDown this queue hands
// none out (see New), so that wait could only end with ctx. The
// keys left stay in the queue, as controller-runtime's queue leaves them.
func (q *Queue[T]) ShutDownWithDrainAll(ctx context.Context) error {
	return q.ShutDownWithDrainContext(ctx)
}

// Len reports the keys due for a run that Get has not handed out: the ready
// keys and the keys added again while they are processing, which run after
// their Done. controller-runtime counts both (a re-added key waits in its
// ready tree, locked until Done); keys waiting for an After are in neither.
// The core queue's Len counts only the first, as client-go's does.
func (q *Queue[T]) Len() int { return q.Stats().Dirty }

// Option changes the order in which New's queue hands out its keys. Each
// is off when not given; with none, the order is controller-runtime's.
type Option func(*options)

// options is what the Options set: the FairPriority of New's store, but
// for the tenant function, whose type New checks against its keys.
type options struct {
	maxWait     time.Duration
	tenant      any // func(T) string, from WithFairness
	weight      func(tenant string) int
	maxInFlight int
}

// newStore returns New's store for o: NewPriorityStore when no option
// asks for more, so that no option means exactly today's store.
func newStore[T comparable](o options) workqueue.Store[T] {
	if o.maxWait == 0 && o.tenant == nil && o.maxInFlight == 0 {
		return workqueue.NewPriorityStore[T]()
	}
	fp := workqueue.FairPriority[T]{MaxWait: o.maxWait, Weight: o.weight, MaxInFlight: o.maxInFlight}
	if o.tenant != nil {
		tenant, ok := o.tenant.(func(T) string)
		if !ok {
			var zero T
			panic(fmt.Sprintf("crpriority: WithFairness's tenant function is a %T, not a func(%T) string for this queue's keys", o.tenant, zero))
		}
		fp.Tenant = tenant
	}
	if fp.MaxInFlight > 0 && fp.Tenant == nil {
		panic("crpriority: WithMaxInFlight needs WithFairness, which says whose keys are whose")
	}
	return workqueue.NewFairPriorityStore(fp)
}

// WithMaxWait bounds how long a ready key waits behind higher priorities:
// a key ready for longer than d (counted from when it entered its current
// priority) is handed out before every key that entered a priority after
// it, whatever their priorities, so the keys of an informer's initial list
// at -100 are reconciled within about d even while priority-0 keys keep
// coming faster than the workers finish them. Below d the order is strict
// priority, as without the option. d <= 0 is no bound.
func WithMaxWait(d time.Duration) Option {
	return func(o *options) { o.maxWait = max(d, 0) }
}

// WithFairness makes each priority take turns between tenants: tenant
// names a key's tenant (for reconcile.Request, Namespace names its
// namespace), and within one priority the queue hands out up to
// weight(tenant) keys of one tenant per turn (nil weight, or a value below
// 1, means 1), then the next tenant's, FIFO within a tenant. Priorities
// still go first: the highest priority with a ready key is served. T of
// tenant must be the queue's key type, or New panics.
func WithFairness[T comparable](tenant func(T) string, weight func(tenant string) int) Option {
	return func(o *options) {
		if tenant != nil {
			o.tenant = tenant
		}
		o.weight = weight
	}
}

// WithMaxInFlight caps the keys of one tenant (see WithFairness, which it
// needs) that are being reconciled at once to k: Get passes over a tenant
// with k keys handed out and not yet Done, without waiting for it, so one
// namespace whose reconciles are slow cannot take every worker. Its keys
// stay queued, keep merging, and count in Len; the Done of one of them lets
// the next one through. k <= 0 is no cap.
func WithMaxInFlight(k int) Option {
	return func(o *options) { o.maxInFlight = max(k, 0) }
}

// Namespace is the tenant of a reconcile.Request for WithFairness: its
// namespace ("" for cluster-scoped objects, which then share one turn).
func Namespace(r reconcile.Request) string { return r.Namespace }
