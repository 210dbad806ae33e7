// Package interop proves, with the compiler and with tests, that
// github.com/go-coalesce/workqueue is interchangeable with client-go's
// k8s.io/client-go/util/workqueue and usable under controller-runtime.
//
// It is a separate module so that the core module never depends on
// client-go. The package itself exports nothing: its value is in the
// assertions below (which fail the build if an API drifts) and in its tests.
// See README.md in this folder.
package interop

import (
	"github.com/go-coalesce/workqueue"
	clientworkqueue "k8s.io/client-go/util/workqueue"
)

// Our queues stand in for client-go's interfaces. Nothing in the core
// imports client-go: these hold because the method sets match exactly.
var (
	_ clientworkqueue.TypedInterface[string]         = (*workqueue.Queue[string])(nil)
	_ clientworkqueue.TypedDelayingInterface[string] = (*workqueue.Queue[string])(nil)

	_ clientworkqueue.TypedInterface[string]             = (*workqueue.RateLimitingQueue[string])(nil)
	_ clientworkqueue.TypedDelayingInterface[string]     = (*workqueue.RateLimitingQueue[string])(nil)
	_ clientworkqueue.TypedRateLimitingInterface[string] = (*workqueue.RateLimitingQueue[string])(nil)
)

// Rate limiters move both ways: every limiter of ours is a client-go
// TypedRateLimiter, and every client-go limiter is one of ours.
var (
	_ clientworkqueue.TypedRateLimiter[string] = (*workqueue.ItemExponentialFailureRateLimiter[string])(nil)
	_ clientworkqueue.TypedRateLimiter[string] = (*workqueue.ItemFastSlowRateLimiter[string])(nil)
	_ clientworkqueue.TypedRateLimiter[string] = (*workqueue.BucketRateLimiter[string])(nil)
	_ clientworkqueue.TypedRateLimiter[string] = (*workqueue.MaxOfRateLimiter[string])(nil)
	_ clientworkqueue.TypedRateLimiter[string] = (*workqueue.WithMaxWaitRateLimiter[string])(nil)
	_ clientworkqueue.TypedRateLimiter[string] = workqueue.RateLimiter[string](nil)

	_ workqueue.RateLimiter[string] = (*clientworkqueue.TypedItemExponentialFailureRateLimiter[string])(nil)
	_ workqueue.RateLimiter[string] = (*clientworkqueue.TypedItemFastSlowRateLimiter[string])(nil)
	_ workqueue.RateLimiter[string] = (*clientworkqueue.TypedBucketRateLimiter[string])(nil)
	_ workqueue.RateLimiter[string] = (*clientworkqueue.TypedMaxOfRateLimiter[string])(nil)
	_ workqueue.RateLimiter[string] = clientworkqueue.TypedWithMaxWaitRateLimiter[string]{}
	_ workqueue.RateLimiter[string] = clientworkqueue.TypedRateLimiter[string](nil)
)

// Stores move both ways: our Store is client-go's Queue (the storage behind
// its work queue) and the other way round, with the priority and fair
// stores included.
var (
	_ clientworkqueue.Queue[string] = workqueue.Store[string](nil)
	_ clientworkqueue.Queue[string] = workqueue.PriorityStore[string](nil)
	_ workqueue.Store[string]       = clientworkqueue.Queue[string](nil)
)

// The constructors' results, not only the types, fit the other library's
// configuration structs. These are functions so that nothing runs at init.
var (
	_ = func() clientworkqueue.TypedQueueConfig[string] {
		return clientworkqueue.TypedQueueConfig[string]{Queue: workqueue.NewFIFOStore[string]()}
	}
	_ = func() clientworkqueue.TypedQueueConfig[string] {
		return clientworkqueue.TypedQueueConfig[string]{Queue: workqueue.NewPriorityStore[string]()}
	}
	_ = func() workqueue.Config[string] {
		return workqueue.Config[string]{Store: clientworkqueue.DefaultQueue[string]()}
	}
	_ = func() clientworkqueue.TypedDelayingQueueConfig[string] {
		return clientworkqueue.TypedDelayingQueueConfig[string]{Queue: workqueue.New[string]()}
	}
	_ = func() clientworkqueue.TypedRateLimitingQueueConfig[string] {
		return clientworkqueue.TypedRateLimitingQueueConfig[string]{DelayingQueue: workqueue.New[string]()}
	}
	_ = func() clientworkqueue.TypedRateLimitingInterface[string] {
		return workqueue.NewRateLimitingQueue(clientworkqueue.DefaultTypedControllerRateLimiter[string]())
	}
	_ = func() clientworkqueue.TypedRateLimitingInterface[string] {
		return clientworkqueue.NewTypedRateLimitingQueue[string](workqueue.DefaultControllerRateLimiter[string]())
	}
)
