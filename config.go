package workqueue

// Config configures a Queue. Its zero value is a plain FIFO queue without
// metrics.
type Config[T comparable] struct {
	// Name names the queue in metrics. An empty Name means no metrics.
	Name string
	// Metrics receives the queue's metrics when Name is not empty. Nil
	// means the process-wide default set by SetDefaultMetricsProvider, if
	// any, and else no metrics.
	Metrics MetricsProvider
	// Store holds the ready keys and decides their order. Nil means a FIFO
	// ring buffer. A Store must not be shared between queues:
	// NewWithConfig panics with "workqueue: Store already used by another
	// queue" when given one that another queue took.
	Store Store[T]
	// Debounce, with Quiet > 0, makes Add wait for a key's events to
	// settle: Add (and AddWithPriority) makes the key's run due at
	// min(last Add + Quiet, first Add + MaxWait), where the first Add is
	// the first since the key's last run started, so a burst of events
	// gives one run once the burst pauses for Quiet, and a burst that
	// never pauses still runs every MaxWait. AddAfter and AddRateLimited
	// keep their fixed times (d <= 0 is now), and a key has one pending
	// run, at the earliest time anyone asked for: a debounced Add never
	// puts a run off past a fixed time already asked for. While it waits,
	// a debounced key counts in Stats.Waiting. ShutDown makes debounced
	// keys ready at once rather than dropping them: their Add came before
	// it. NewWithConfig panics unless Quiet and MaxWait are both zero or
	// 0 < Quiet <= MaxWait. The zero value is off.
	Debounce Debounce
	// GetStopsAtShutDown makes Get, GetWithPriority and GetContext report
	// shutdown as soon as ShutDown (or a drain) has been called, even while
	// keys are still ready, as controller-runtime's priority queue does;
	// the ready keys stay in the queue. It is decided under the queue's
	// lock, so no Get that starts after ShutDown returned hands out a key.
	// Since no Get hands them out, ShutDownWithDrainAll then waits for the
	// ready keys until ctx ends: use ShutDownWithDrainContext. The zero
	// value keeps client-go's rule: Get hands out the ready keys after
	// ShutDown and reports shutdown once none is left.
	GetStopsAtShutDown bool
	// Clock is the queue's source of time: AddAfter, AddRateLimited,
	// Debounce, a FairPriorityStore's MaxWait, and the ages and latencies
	// of metrics, Inspect and MostRequeued follow it, so that a test that
	// steps a fake clock past a delay gets the key as soon as the clock's
	// timer has fired (see Clock). Nil means the wall clock, read through
	// package time directly: a queue without a Clock pays nothing for
	// the option.
	Clock Clock
}
