// Package metrics gives the upstream priority queue tests the two names
// they take from controller-runtime's internal metrics package
// (sigs.k8s.io/controller-runtime/pkg/internal/metrics), which no other
// module may import: the interface of a depth gauge by priority, and of a
// metrics provider that makes one. The shapes are controller-runtime's;
// the harness in ../../priorityqueue connects them to both queues.
package metrics

import "k8s.io/client-go/util/workqueue"

// MetricsProviderWithPriority is a client-go MetricsProvider that can also
// make a depth gauge by priority.
type MetricsProviderWithPriority interface {
	workqueue.MetricsProvider

	NewDepthMetricWithPriority(name string) DepthMetricWithPriority
}

// DepthMetricWithPriority is a depth gauge with one series per priority.
type DepthMetricWithPriority interface {
	Inc(priority int)
	Dec(priority int)
}
