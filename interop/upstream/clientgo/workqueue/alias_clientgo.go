//go:build clientgo

package workqueue

// client-go's names, forwarded to client-go itself: with the tag clientgo
// the same test files run on client-go's workqueue, which gives the
// reference results (see ../README.md). Types are aliases; functions
// forward, and the constructors that take a clock also hand the queue to
// that clock's tracker, exactly as alias.go does for ours.

import (
	"time"

	clientgo "k8s.io/client-go/util/workqueue"
)

type (
	TypedInterface[T comparable]             = clientgo.TypedInterface[T]
	Interface                                = clientgo.Interface
	TypedDelayingInterface[T comparable]     = clientgo.TypedDelayingInterface[T]
	DelayingInterface                        = clientgo.DelayingInterface
	TypedRateLimitingInterface[T comparable] = clientgo.TypedRateLimitingInterface[T]
	RateLimitingInterface                    = clientgo.RateLimitingInterface

	Typed[T comparable] = clientgo.Typed[T]
	Type                = clientgo.Type
	Queue[T comparable] = clientgo.Queue[T]

	TypedQueueConfig[T comparable]             = clientgo.TypedQueueConfig[T]
	QueueConfig                                = clientgo.QueueConfig
	TypedDelayingQueueConfig[T comparable]     = clientgo.TypedDelayingQueueConfig[T]
	DelayingQueueConfig                        = clientgo.DelayingQueueConfig
	TypedRateLimitingQueueConfig[T comparable] = clientgo.TypedRateLimitingQueueConfig[T]
	RateLimitingQueueConfig                    = clientgo.RateLimitingQueueConfig

	TypedRateLimiter[T comparable] = clientgo.TypedRateLimiter[T]
	RateLimiter                    = clientgo.RateLimiter

	TypedItemExponentialFailureRateLimiter[T comparable] = clientgo.TypedItemExponentialFailureRateLimiter[T]
	TypedItemFastSlowRateLimiter[T comparable]           = clientgo.TypedItemFastSlowRateLimiter[T]
	TypedMaxOfRateLimiter[T comparable]                  = clientgo.TypedMaxOfRateLimiter[T]
	TypedWithMaxWaitRateLimiter[T comparable]            = clientgo.TypedWithMaxWaitRateLimiter[T]
	TypedBucketRateLimiter[T comparable]                 = clientgo.TypedBucketRateLimiter[T]

	ItemExponentialFailureRateLimiter = clientgo.ItemExponentialFailureRateLimiter
	ItemFastSlowRateLimiter           = clientgo.ItemFastSlowRateLimiter
	MaxOfRateLimiter                  = clientgo.MaxOfRateLimiter
	WithMaxWaitRateLimiter            = clientgo.WithMaxWaitRateLimiter
	BucketRateLimiter                 = clientgo.BucketRateLimiter
)

func DefaultQueue[T comparable]() Queue[T] { return clientgo.DefaultQueue[T]() }

func New() *Type                             { return clientgo.New() }
func NewTyped[T comparable]() *Typed[T]      { return clientgo.NewTyped[T]() }
func NewWithConfig(config QueueConfig) *Type { return NewTypedWithConfig(config) }

func NewTypedWithConfig[T comparable](config TypedQueueConfig[T]) *Typed[T] {
	q := clientgo.NewTypedWithConfig(config)
	track(config.Clock, q.ShutDown)
	return q
}

func NewDelayingQueue() DelayingInterface { return NewTypedDelayingQueue[any]() }

func NewTypedDelayingQueue[T comparable]() TypedDelayingInterface[T] {
	return NewTypedDelayingQueueWithConfig(TypedDelayingQueueConfig[T]{})
}

func NewDelayingQueueWithConfig(config DelayingQueueConfig) DelayingInterface {
	return NewTypedDelayingQueueWithConfig(config)
}

func NewTypedDelayingQueueWithConfig[T comparable](config TypedDelayingQueueConfig[T]) TypedDelayingInterface[T] {
	q := clientgo.NewTypedDelayingQueueWithConfig(config)
	track(config.Clock, q.ShutDown)
	return q
}

func NewRateLimitingQueue(rateLimiter RateLimiter) RateLimitingInterface {
	return NewTypedRateLimitingQueue[any](rateLimiter)
}

func NewTypedRateLimitingQueue[T comparable](rateLimiter TypedRateLimiter[T]) TypedRateLimitingInterface[T] {
	return NewTypedRateLimitingQueueWithConfig(rateLimiter, TypedRateLimitingQueueConfig[T]{})
}

func NewRateLimitingQueueWithConfig(rateLimiter RateLimiter, config RateLimitingQueueConfig) RateLimitingInterface {
	return NewTypedRateLimitingQueueWithConfig[any](rateLimiter, config)
}

func NewTypedRateLimitingQueueWithConfig[T comparable](rateLimiter TypedRateLimiter[T], config TypedRateLimitingQueueConfig[T]) TypedRateLimitingInterface[T] {
	q := clientgo.NewTypedRateLimitingQueueWithConfig(rateLimiter, config)
	track(config.Clock, q.ShutDown)
	return q
}

func DefaultControllerRateLimiter() RateLimiter { return clientgo.DefaultControllerRateLimiter() }

func DefaultTypedControllerRateLimiter[T comparable]() TypedRateLimiter[T] {
	return clientgo.DefaultTypedControllerRateLimiter[T]()
}

func DefaultItemBasedRateLimiter() RateLimiter { return clientgo.DefaultItemBasedRateLimiter() }

func DefaultTypedItemBasedRateLimiter[T comparable]() TypedRateLimiter[T] {
	return clientgo.DefaultTypedItemBasedRateLimiter[T]()
}

func NewItemExponentialFailureRateLimiter(baseDelay time.Duration, maxDelay time.Duration) RateLimiter {
	return clientgo.NewItemExponentialFailureRateLimiter(baseDelay, maxDelay)
}

func NewTypedItemExponentialFailureRateLimiter[T comparable](baseDelay time.Duration, maxDelay time.Duration) TypedRateLimiter[T] {
	return clientgo.NewTypedItemExponentialFailureRateLimiter[T](baseDelay, maxDelay)
}

func NewItemFastSlowRateLimiter(fastDelay, slowDelay time.Duration, maxFastAttempts int) RateLimiter {
	return clientgo.NewItemFastSlowRateLimiter(fastDelay, slowDelay, maxFastAttempts)
}

func NewTypedItemFastSlowRateLimiter[T comparable](fastDelay, slowDelay time.Duration, maxFastAttempts int) TypedRateLimiter[T] {
	return clientgo.NewTypedItemFastSlowRateLimiter[T](fastDelay, slowDelay, maxFastAttempts)
}

func NewMaxOfRateLimiter(limiters ...TypedRateLimiter[any]) RateLimiter {
	return clientgo.NewMaxOfRateLimiter(limiters...)
}

func NewTypedMaxOfRateLimiter[T comparable](limiters ...TypedRateLimiter[T]) TypedRateLimiter[T] {
	return clientgo.NewTypedMaxOfRateLimiter(limiters...)
}

func NewWithMaxWaitRateLimiter(limiter RateLimiter, maxDelay time.Duration) RateLimiter {
	return clientgo.NewWithMaxWaitRateLimiter(limiter, maxDelay)
}

func NewTypedWithMaxWaitRateLimiter[T comparable](limiter TypedRateLimiter[T], maxDelay time.Duration) TypedRateLimiter[T] {
	return clientgo.NewTypedWithMaxWaitRateLimiter(limiter, maxDelay)
}
