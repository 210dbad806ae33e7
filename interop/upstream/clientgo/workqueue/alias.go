//go:build !clientgo

package workqueue

// client-go's names, backed by the core. Each declaration says how it maps;
// where client-go has a knob the core lacks, the constructor panics rather
// than ignore it, so a test can never pass on a setting it did not get. A
// Clock goes to core.Config.Clock through interop/kubeclock.

import (
	"fmt"
	"time"

	core "github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/kubeclock"
	"k8s.io/utils/clock"
)

// TypedInterface is client-go's queue interface. *core.Queue[T] has its
// method set (interop/compat.go checks this against client-go itself).
type TypedInterface[T comparable] interface {
	Add(item T)
	Len() int
	Get() (item T, shutdown bool)
	Done(item T)
	ShutDown()
	ShutDownWithDrain()
	ShuttingDown() bool
}

// Interface is TypedInterface of any, as in client-go.
type Interface TypedInterface[any]

// TypedDelayingInterface adds AddAfter.
type TypedDelayingInterface[T comparable] interface {
	TypedInterface[T]
	AddAfter(item T, duration time.Duration)
}

// DelayingInterface is TypedDelayingInterface of any.
type DelayingInterface TypedDelayingInterface[any]

// TypedRateLimitingInterface adds the rate-limited requeue.
type TypedRateLimitingInterface[T comparable] interface {
	TypedDelayingInterface[T]
	AddRateLimited(item T)
	Forget(item T)
	NumRequeues(item T) int
}

// RateLimitingInterface is TypedRateLimitingInterface of any.
type RateLimitingInterface TypedRateLimitingInterface[any]

// Typed is the queue type client-go's NewTyped returns: ours.
type Typed[T comparable] = core.Queue[T]

// Type is Typed of any.
type Type = Typed[any]

// Queue is client-go's name for the store behind a queue: our Store, which
// has the same method set.
type Queue[T comparable] = core.Store[T]

// DefaultQueue is the store a queue gets when its config names none: our
// FIFO.
func DefaultQueue[T comparable]() Queue[T] { return core.NewFIFOStore[T]() }

// TypedQueueConfig has client-go's fields but MetricsProvider: the core
// reports through core.MetricsProvider, a different shape, so code that
// sets client-go's provider does not compile against this package rather
// than lose its metrics in silence. Name goes to core.Config.Name; Queue
// to core.Config.Store; Clock to core.Config.Clock (see doc.go).
type TypedQueueConfig[T comparable] struct {
	Name  string
	Clock clock.WithTicker
	Queue Queue[T]
}

// QueueConfig is TypedQueueConfig of any.
type QueueConfig = TypedQueueConfig[any]

// New makes a queue of any.
func New() *Type { return NewTyped[any]() }

// NewTyped makes a queue.
func NewTyped[T comparable]() *Typed[T] { return core.New[T]() }

// NewWithConfig makes a queue of any from config.
func NewWithConfig(config QueueConfig) *Type { return NewTypedWithConfig(config) }

// NewTypedWithConfig makes a queue from config.
func NewTypedWithConfig[T comparable](config TypedQueueConfig[T]) *Typed[T] {
	q := core.NewWithConfig(core.Config[T]{Name: config.Name, Store: config.Queue, Clock: coreClock(config.Clock)})
	track(config.Clock, q.ShutDown)
	return q
}

// TypedDelayingQueueConfig has client-go's fields but Logger and
// MetricsProvider (see TypedQueueConfig). Queue may be nil or a queue made
// here: ours is a delaying queue already, so it is returned as it is;
// client-go would wrap any TypedInterface, which the core cannot.
type TypedDelayingQueueConfig[T comparable] struct {
	Name  string
	Clock clock.WithTicker
	Queue TypedInterface[T]
}

// DelayingQueueConfig is TypedDelayingQueueConfig of any.
type DelayingQueueConfig = TypedDelayingQueueConfig[any]

// NewDelayingQueue makes a delaying queue of any.
func NewDelayingQueue() DelayingInterface { return NewTypedDelayingQueue[any]() }

// NewTypedDelayingQueue makes a delaying queue: ours, which is one.
func NewTypedDelayingQueue[T comparable]() TypedDelayingInterface[T] {
	return NewTypedDelayingQueueWithConfig(TypedDelayingQueueConfig[T]{})
}

// NewDelayingQueueWithConfig makes a delaying queue of any from config.
func NewDelayingQueueWithConfig(config DelayingQueueConfig) DelayingInterface {
	return NewTypedDelayingQueueWithConfig(config)
}

// NewTypedDelayingQueueWithConfig makes a delaying queue from config.
func NewTypedDelayingQueueWithConfig[T comparable](config TypedDelayingQueueConfig[T]) TypedDelayingInterface[T] {
	switch q := config.Queue.(type) {
	case nil:
	case *core.Queue[T]:
		return q
	default:
		panic(fmt.Sprintf("workqueue: the core cannot add delays to a %T: give a queue made by this package, or none", q))
	}
	q := core.NewWithConfig(core.Config[T]{Name: config.Name, Clock: coreClock(config.Clock)})
	track(config.Clock, q.ShutDown)
	return q
}

// TypedRateLimitingQueueConfig has client-go's fields but MetricsProvider
// (see TypedQueueConfig). DelayingQueue must be nil: our rate-limiting
// queue owns its queue.
type TypedRateLimitingQueueConfig[T comparable] struct {
	Name          string
	Clock         clock.WithTicker
	DelayingQueue TypedDelayingInterface[T]
}

// RateLimitingQueueConfig is TypedRateLimitingQueueConfig of any.
type RateLimitingQueueConfig = TypedRateLimitingQueueConfig[any]

// NewRateLimitingQueue makes a rate-limiting queue of any.
func NewRateLimitingQueue(rateLimiter RateLimiter) RateLimitingInterface {
	return NewTypedRateLimitingQueue[any](rateLimiter)
}

// NewTypedRateLimitingQueue makes a rate-limiting queue: our
// RateLimitingQueue with rateLimiter.
func NewTypedRateLimitingQueue[T comparable](rateLimiter TypedRateLimiter[T]) TypedRateLimitingInterface[T] {
	return NewTypedRateLimitingQueueWithConfig(rateLimiter, TypedRateLimitingQueueConfig[T]{})
}

// NewRateLimitingQueueWithConfig makes a rate-limiting queue of any from
// config.
func NewRateLimitingQueueWithConfig(rateLimiter RateLimiter, config RateLimitingQueueConfig) RateLimitingInterface {
	return NewTypedRateLimitingQueueWithConfig[any](rateLimiter, config)
}

// NewTypedRateLimitingQueueWithConfig makes a rate-limiting queue from
// config.
func NewTypedRateLimitingQueueWithConfig[T comparable](rateLimiter TypedRateLimiter[T], config TypedRateLimitingQueueConfig[T]) TypedRateLimitingInterface[T] {
	if config.DelayingQueue != nil {
		panic("workqueue: the core's rate-limiting queue owns its queue: DelayingQueue must be nil")
	}
	q := core.NewRateLimitingQueueWithConfig(rateLimiter, core.Config[T]{Name: config.Name, Clock: coreClock(config.Clock)})
	track(config.Clock, q.ShutDown)
	return q
}

// TypedRateLimiter is our RateLimiter, which has client-go's method set.
type TypedRateLimiter[T comparable] = core.RateLimiter[T]

// RateLimiter is TypedRateLimiter of any.
type RateLimiter TypedRateLimiter[any]

// The limiter types are ours. Their fields are not client-go's: make them
// with the constructors.
type (
	TypedItemExponentialFailureRateLimiter[T comparable] = core.ItemExponentialFailureRateLimiter[T]
	TypedItemFastSlowRateLimiter[T comparable]           = core.ItemFastSlowRateLimiter[T]
	TypedMaxOfRateLimiter[T comparable]                  = core.MaxOfRateLimiter[T]
	TypedWithMaxWaitRateLimiter[T comparable]            = core.WithMaxWaitRateLimiter[T]
	TypedBucketRateLimiter[T comparable]                 = core.BucketRateLimiter[T]

	ItemExponentialFailureRateLimiter = TypedItemExponentialFailureRateLimiter[any]
	ItemFastSlowRateLimiter           = TypedItemFastSlowRateLimiter[any]
	MaxOfRateLimiter                  = TypedMaxOfRateLimiter[any]
	WithMaxWaitRateLimiter            = TypedWithMaxWaitRateLimiter[any]
	BucketRateLimiter                 = TypedBucketRateLimiter[any]
)

// DefaultControllerRateLimiter is ours: the same limits as client-go's.
func DefaultControllerRateLimiter() RateLimiter { return DefaultTypedControllerRateLimiter[any]() }

// DefaultTypedControllerRateLimiter is ours.
func DefaultTypedControllerRateLimiter[T comparable]() TypedRateLimiter[T] {
	return core.DefaultControllerRateLimiter[T]()
}

// DefaultItemBasedRateLimiter has no name in the core: it is our
// exponential limiter with client-go's limits for it, 1 ms to 1000 s.
func DefaultItemBasedRateLimiter() RateLimiter { return DefaultTypedItemBasedRateLimiter[any]() }

// DefaultTypedItemBasedRateLimiter is DefaultItemBasedRateLimiter, typed.
func DefaultTypedItemBasedRateLimiter[T comparable]() TypedRateLimiter[T] {
	return NewTypedItemExponentialFailureRateLimiter[T](time.Millisecond, 1000*time.Second)
}

// NewItemExponentialFailureRateLimiter is ours, of any.
func NewItemExponentialFailureRateLimiter(baseDelay time.Duration, maxDelay time.Duration) RateLimiter {
	return NewTypedItemExponentialFailureRateLimiter[any](baseDelay, maxDelay)
}

// NewTypedItemExponentialFailureRateLimiter is ours.
func NewTypedItemExponentialFailureRateLimiter[T comparable](baseDelay time.Duration, maxDelay time.Duration) TypedRateLimiter[T] {
	return core.NewItemExponentialFailureRateLimiter[T](baseDelay, maxDelay)
}

// NewItemFastSlowRateLimiter is ours, of any.
func NewItemFastSlowRateLimiter(fastDelay, slowDelay time.Duration, maxFastAttempts int) RateLimiter {
	return NewTypedItemFastSlowRateLimiter[any](fastDelay, slowDelay, maxFastAttempts)
}

// NewTypedItemFastSlowRateLimiter is ours.
func NewTypedItemFastSlowRateLimiter[T comparable](fastDelay, slowDelay time.Duration, maxFastAttempts int) TypedRateLimiter[T] {
	return core.NewItemFastSlowRateLimiter[T](fastDelay, slowDelay, maxFastAttempts)
}

// NewMaxOfRateLimiter is ours, of any.
func NewMaxOfRateLimiter(limiters ...TypedRateLimiter[any]) RateLimiter {
	return NewTypedMaxOfRateLimiter(limiters...)
}

// NewTypedMaxOfRateLimiter is ours.
func NewTypedMaxOfRateLimiter[T comparable](limiters ...TypedRateLimiter[T]) TypedRateLimiter[T] {
	return core.NewMaxOfRateLimiter(limiters...)
}

// NewWithMaxWaitRateLimiter is ours, of any.
func NewWithMaxWaitRateLimiter(limiter RateLimiter, maxDelay time.Duration) RateLimiter {
	return NewTypedWithMaxWaitRateLimiter[any](limiter, maxDelay)
}

// NewTypedWithMaxWaitRateLimiter is ours.
func NewTypedWithMaxWaitRateLimiter[T comparable](limiter TypedRateLimiter[T], maxDelay time.Duration) TypedRateLimiter[T] {
	return core.NewWithMaxWaitRateLimiter(limiter, maxDelay)
}

// coreClock is c as the core's Clock: nil (package time) for a clock that
// reads the real time functions (see doc.go), else kubeclock's adapter.
func coreClock(c clock.WithTicker) core.Clock {
	if _, ok := c.(realTimeClock); ok {
		return nil
	}
	return kubeclock.New(c)
}
