// Package crpriority makes a workqueue.RateLimitingQueue with a priority
// store usable as controller-runtime's priorityqueue.PriorityQueue, so that
// a controller that hands it out from its NewQueue option keeps the
// priorities its handlers assign (controller-runtime wraps any other queue
// and drops them).
//
// It lives in the interop module because it names controller-runtime's
// AddOpts type; the core module has everything else it needs.
package crpriority

import (
	"context"

	"github.com/go-coalesce/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
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
// priority store, and cfg.GetStopsAtShutDown is set.
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
func New[T comparable](rl workqueue.RateLimiter[T], cfg workqueue.Config[T]) *Queue[T] {
	cfg.Store = workqueue.NewPriorityStore[T]()
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
