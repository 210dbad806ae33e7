// Package priorityqueue runs controller-runtime's own priority queue tests
// against crpriority. The tests are not in the repository: ../../suites_test.go
// adds controller-runtime's pkg/controller/priorityqueue test files, from
// the module cache and with its edits, to this package at test time (go
// test -overlay), with harness_test.go. Being in package priorityqueue,
// they name controller-runtime's identifiers unqualified: this file and the
// backend files give them those names, backed by crpriority (the default)
// or, built with -tags crupstream, by controller-runtime's own queue in the
// same wrapper, so that both are measured by the same harness.
package priorityqueue

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/third_party/forked/golang/btree"
	crpq "sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// The exported names are controller-runtime's own types.
type (
	AddOpts                     = crpq.AddOpts
	PriorityQueue[T comparable] = crpq.PriorityQueue[T]
	Opts[T comparable]          = crpq.Opts[T]
	Opt[T comparable]           = crpq.Opt[T]
)

// priorityqueue is what New returns: the queue under test, plus the fields
// of controller-runtime's own priorityqueue type that the upstream tests
// read or set.
//
// rateLimiter is live: the queue asks it through fieldLimiter, so a test
// that replaces it after New is obeyed, as upstream. The others are not:
// now and tick (the upstream queue's clock, which its tests replace; here
// time is the testing/synctest bubble's, see the edit to
// newQueueWithTimeForwarder), waiting and ready (its two B-trees, which
// its tests wrap in a validator of their own calls), locked (its set of
// keys handed out) are never read by either backend, so what the tests
// check through them holds vacuously; ../README.md lists those checks.
type priorityqueue[T comparable] struct {
	PriorityQueue[T]
	rateLimiter workqueue.TypedRateLimiter[T]

	// after, when set, brings the metrics up to date after each call
	// (ours: see metricsBridge).
	after    func()
	afterGet func(priority int) // after a Get, with the priority taken

	now            func() time.Time
	tick           func(time.Duration) <-chan time.Time
	waiting, ready bTree[*item[T]]
	locked         sets.Set[T]
	lockedLock     sync.Mutex
}

// newWrapper returns the wrapper with the limiter of opts, or
// controller-runtime's default one.
func newWrapper[T comparable](opts *Opts[T]) *priorityqueue[T] {
	rl := opts.RateLimiter
	if rl == nil {
		rl = workqueue.NewTypedItemExponentialFailureRateLimiter[T](5*time.Millisecond, 1000*time.Second)
	}
	return &priorityqueue[T]{rateLimiter: rl, locked: sets.Set[T]{}}
}

func (q *priorityqueue[T]) sync() {
	if q.after != nil {
		q.after()
	}
}

func (q *priorityqueue[T]) AddWithOpts(o AddOpts, items ...T) {
	q.PriorityQueue.AddWithOpts(o, items...)
	q.sync()
}

func (q *priorityqueue[T]) Add(item T) { q.AddWithOpts(AddOpts{}, item) }

func (q *priorityqueue[T]) AddAfter(item T, d time.Duration) {
	q.AddWithOpts(AddOpts{After: d}, item)
}

func (q *priorityqueue[T]) AddRateLimited(item T) { q.AddWithOpts(AddOpts{RateLimited: true}, item) }

func (q *priorityqueue[T]) GetWithPriority() (T, int, bool) {
	item, prio, shutdown := q.PriorityQueue.GetWithPriority()
	if q.afterGet != nil && !shutdown {
		q.afterGet(prio)
	}
	return item, prio, shutdown
}

func (q *priorityqueue[T]) Get() (T, bool) {
	item, _, shutdown := q.GetWithPriority()
	return item, shutdown
}

func (q *priorityqueue[T]) Done(item T) {
	q.PriorityQueue.Done(item)
	q.sync()
}

// fieldLimiter asks whichever limiter q.rateLimiter holds at the time.
type fieldLimiter[T comparable] struct{ q *priorityqueue[T] }

func (l fieldLimiter[T]) When(item T) time.Duration { return l.q.rateLimiter.When(item) }
func (l fieldLimiter[T]) Forget(item T)             { l.q.rateLimiter.Forget(item) }
func (l fieldLimiter[T]) NumRequeues(item T) int    { return l.q.rateLimiter.NumRequeues(item) }

// item is controller-runtime's queue entry, which its tests build and
// validate. Neither backend keeps its keys in this type.
type item[T comparable] struct {
	Key          T          `json:"key"`
	AddedCounter uint64     `json:"addedCounter"`
	Priority     int        `json:"priority"`
	ReadyAt      *time.Time `json:"readyAt,omitempty"`
}

// clone is here only so that the upstream tests of controller-runtime's
// own item.clone compile; harness_test.go skips them.
func (i *item[T]) clone() item[T] {
	c := *i
	if i.ReadyAt != nil {
		c.ReadyAt = new(*i.ReadyAt)
	}
	return c
}

// bTree is the interface of controller-runtime's B-trees, which its tests
// wrap.
type bTree[T any] interface {
	ReplaceOrInsert(item T) (T, bool)
	Delete(item T) (T, bool)
	Ascend(iterator btree.ItemIterator[T])
	Len() int
}
