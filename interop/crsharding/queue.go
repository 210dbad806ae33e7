package crsharding

import (
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/crpriority"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Queue is the controller's queue of a sharded controller: a crpriority
// queue (controller-runtime's PriorityQueue, so the priorities its handlers
// assign are kept) that admits a request only while the replica owns its
// key. Every way controller-runtime adds a request goes through the check:
// Add, AddAfter, AddRateLimited and AddWithOpts (the one its event
// handlers and its requeues use). A request that is refused is dropped, not
// delayed: the replica that owns the key enqueues it itself, and when a
// shard is gained its objects are all enqueued once the sharded cache holds
// them. The check is made when a request is added: a request admitted
// before its shard is given up (and not removed from the queue in time, or
// taken by a worker in between) can still be handed out. The guarantee
// that the reconciler never gets a key whose shard is missing from the
// cache is sharding.Replica.Handler's, inside Sharding.Reconciler, which
// checks again as the run starts; the queue only keeps foreign keys from
// taking workers.
//
// An add of new work, ready now, is checked with sharding.Replica.Admit,
// which also counts the key among its shard's ready keys until its run
// begins: the load the replica reports, from which the ring's backlog
// (RingReady, RingOldestReady) and DesiredReplicas are computed. Those are
// the adds of controller-runtime's event handlers (AddWithOpts with no
// After and not RateLimited, or Add), and AddAfter with no delay. Its
// requeues (after an error, a Result's RequeueAfter or Requeue:
// AddWithOpts with After or RateLimited; AddRateLimited, AddAfter with a
// delay) are checked with Owns and not counted: a retry waits for its
// deadline, and is not a backlog of new work.
//
// Get, Done, Forget, NumRequeues, Len and the shutdowns are crpriority's.
// Create it through Sharding.NewQueue (controller.Options.NewQueue). It is
// safe for concurrent use.
type Queue struct {
	q *crpriority.Queue[reconcile.Request]
	r owner
}

var _ priorityqueue.PriorityQueue[reconcile.Request] = (*Queue)(nil)

// owner is what the queue asks of the replica (sharding.Replica).
type owner interface {
	// Owns reports whether the replica would run key now.
	Owns(key string) bool
	// Admit is Owns, and counts an owned key as ready from now until its
	// run begins.
	Admit(key string) bool
}

func newQueue(r owner, rl workqueue.RateLimiter[reconcile.Request], cfg workqueue.Config[reconcile.Request]) *Queue {
	return &Queue{q: crpriority.New(rl, cfg), r: r}
}

// Key returns the key the sharding replica knows req by: "namespace/name",
// or "name" for a cluster-scoped object (client-go's MetaNamespaceKeyFunc
// form; types.NamespacedName's String would give "/name").
func Key(req reconcile.Request) string {
	return cache.NewObjectName(req.Namespace, req.Name).String()
}

// request is the inverse of Key.
func request(key string) (reconcile.Request, bool) {
	n, err := cache.ParseObjectName(key)
	if err != nil {
		return reconcile.Request{}, false
	}
	var req reconcile.Request
	req.Namespace, req.Name = n.Namespace, n.Name
	return req, true
}

// admits reports whether the replica owns key; if ready (the key is new
// work, ready now), it also counts key as ready (sharding.Replica.Admit).
func (q *Queue) admits(key string, ready bool) bool {
	if ready {
		return q.r.Admit(key)
	}
	return q.r.Owns(key)
}

// admitted returns the items whose keys the replica owns (admits). In the
// common case (one item, owned) it returns items itself and allocates
// nothing.
func (q *Queue) admitted(items []reconcile.Request, ready bool) []reconcile.Request {
	for i, it := range items {
		if q.admits(Key(it), ready) {
			continue
		}
		// Copy the owned ones out: the caller's slice is not ours to edit.
		out := append([]reconcile.Request(nil), items[:i]...)
		for _, it := range items[i+1:] {
			if q.admits(Key(it), ready) {
				out = append(out, it)
			}
		}
		return out
	}
	return items
}

// Add adds req if the replica owns its key, and counts it as ready.
func (q *Queue) Add(req reconcile.Request) {
	if q.r.Admit(Key(req)) {
		q.q.Add(req)
	}
}

// AddAfter adds req after d if the replica owns its key now. (If the shard
// moves in the meantime, the replica removes the key, and its new holder
// runs it.) With no delay (d <= 0) it is Add.
func (q *Queue) AddAfter(req reconcile.Request, d time.Duration) {
	if d <= 0 {
		q.Add(req)
		return
	}
	if q.r.Owns(Key(req)) {
		q.q.AddAfter(req, d)
	}
}

// AddRateLimited adds req after its limiter's delay if the replica owns its
// key. A refused request does not count as a failure of the limiter.
func (q *Queue) AddRateLimited(req reconcile.Request) {
	if q.r.Owns(Key(req)) {
		q.q.AddRateLimited(req)
	}
}

// AddWithOpts adds the items whose keys the replica owns, with o. Unless o
// has an After or RateLimited (a requeue), they are counted as ready.
func (q *Queue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	q.addWithOpts(o, o.After <= 0 && !o.RateLimited, items)
}

// addWithOpts is AddWithOpts, counting the items as ready if ready.
func (q *Queue) addWithOpts(o priorityqueue.AddOpts, ready bool, items []reconcile.Request) {
	if items = q.admitted(items, ready); len(items) > 0 {
		q.q.AddWithOpts(o, items...)
	}
}

// Remove drops req if it is waiting (ready or for a deadline); it does not
// touch a run in flight. The replica calls it, through its sharding.Queue,
// for every key of a shard it gives up.
func (q *Queue) Remove(req reconcile.Request) bool { return q.q.Remove(req) }

// Get hands out the next ready request (crpriority's Get).
func (q *Queue) Get() (reconcile.Request, bool) { return q.q.Get() }

// GetWithPriority hands out the next ready request and its priority.
func (q *Queue) GetWithPriority() (reconcile.Request, int, bool) { return q.q.GetWithPriority() }

// Done marks req as processed.
func (q *Queue) Done(req reconcile.Request) { q.q.Done(req) }

// Forget clears req's failure count in the limiter.
func (q *Queue) Forget(req reconcile.Request) { q.q.Forget(req) }

// NumRequeues is req's failure count in the limiter.
func (q *Queue) NumRequeues(req reconcile.Request) int { return q.q.NumRequeues(req) }

// Len counts the requests due for a run that Get has not handed out.
func (q *Queue) Len() int { return q.q.Len() }

// ShutDown stops the queue: Get returns shutdown from now on.
func (q *Queue) ShutDown() { q.q.ShutDown() }

// ShutDownWithDrain shuts the queue down and waits for the runs in flight.
func (q *Queue) ShutDownWithDrain() { q.q.ShutDownWithDrain() }

// ShuttingDown reports whether ShutDown was called.
func (q *Queue) ShuttingDown() bool { return q.q.ShuttingDown() }
