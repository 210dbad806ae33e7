package workqueue

import (
	"sync"
	"time"
)

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
}

// Stats is a snapshot of a queue's counts, taken under its lock.
type Stats struct {
	// Ready counts keys waiting in the store for Get: Len().
	Ready int
	// Waiting counts keys whose run is delayed by AddAfter.
	Waiting int
	// Processing counts keys handed out by Get and not yet Done.
	Processing int
	// Dirty counts keys due for a run that Get has not handed out yet: the
	// ready keys and the processing keys added again since their Get.
	// This is client-go's depth metric.
	Dirty int
	// UnfinishedWork is the sum of the ages of the runs in progress, and
	// LongestRunning the age of the oldest. They are measured only when
	// the queue has metrics; otherwise they are zero.
	UnfinishedWork, LongestRunning time.Duration
}

// Queue is a coalescing work queue of keys of type T.
//
// The zero Queue is an empty FIFO queue without metrics, ready to use; New
// returns the same thing. A Queue must not be copied after first use. All
// methods are safe for concurrent use.
//
// A plain Queue starts no goroutine. While keys wait for an AddAfter
// deadline, one timer is armed for the earliest deadline.
type Queue[T comparable] struct {
	// mu guards every field below. cond.L is &mu; it is set on first wait
	// so that the zero Queue works. Get waits on cond for a ready key;
	// the ShutDownWithDrain* family waits on it for the queue to settle.
	//
	// The fields are in the order of how often Add, Get and Done touch
	// them: the lock and the counts, then what says how the queue is
	// configured, then the ordered table's hot part, so that the hot path
	// reads four cache lines of the queue, not eight spread over its
	// kilobyte (the cold parts follow: other tables, delays, debouncing,
	// metrics). When goroutines on two cores take turns at the lock, each
	// line an operation touches may have to come over from the other
	// core. The contended rows of cmd/compare did not move beyond their
	// noise when this was done; it is kept because it costs nothing.
	mu sync.Mutex

	dirty      int // keys with fDirty: ready, or processing and due again
	waiting    int // keys with fWaiting
	processing int // keys with fProcessing
	getters    int // goroutines waiting in Get or GetContext
	owed       int // Signals to send at unlock: keys made ready for getters
	drainers   int // goroutines waiting in ShutDownWithDrain*

	shuttingDown bool
	stopGets     bool // Config.GetStopsAtShutDown

	// metrics is nil without metrics; then procs and the table's timed
	// columns are unused and no clock is read on Add, Get or Done.
	metrics QueueMetrics
	// The ready keys are in tab (its FIFO, or its levels for the built-in
	// priority store) unless Config.Store gave another store; prio is that
	// store again when it is a PriorityStore, else nil.
	store Store[T]
	// quiet and maxWait are Config.Debounce in nanoseconds (quiet == 0:
	// off); the table's bounce column holds the debounced keys' bursts
	// (debounce.go).
	quiet, maxWait int64

	// tab is the key table of every configuration: every key that is
	// ready, waiting or processing, with its flags, the dirty and
	// processing sets (dirty_set.go), and the side columns its
	// configuration needs (ordered_table.go). Without a Store it is also
	// the FIFO, and with the built-in priority store the priority levels.
	tab orderedTable[T]

	cond sync.Cond

	prio PriorityStore[T]
	// ghosts counts the entries that Remove left in the store; the key
	// table's ghost column says how many each key has (remove.go).
	ghosts int

	// delay holds the waiting keys, their heap and the timer (delay.go).
	delay delayState[T]

	// interrupts counts the ShutDown calls that found drainers waiting. A
	// drainer remembers it when it starts to wait and stops waiting when it
	// changes: ShutDown after ShutDownWithDrain ends the drain, as
	// client-go documents ("drain on the first signal, force on the
	// second").
	interrupts uint64

	// clock is the queue's time origin; times are kept as nanoseconds since
	// it (monotonic). Set when first needed.
	clock time.Time

	procs processingSet[T]
}

// New returns an empty FIFO queue without metrics.
func New[T comparable]() *Queue[T] { return &Queue[T]{} }

// NewWithConfig returns an empty queue configured by cfg. Metrics are on
// when cfg.Name is not empty and cfg.Metrics, or else the default set by
// SetDefaultMetricsProvider, is not nil.
func NewWithConfig[T comparable](cfg Config[T]) *Queue[T] {
	cfg.Debounce.validate()
	if cfg.Store != nil {
		claimStore(cfg.Store)
	}
	q := &Queue[T]{
		quiet:    int64(cfg.Debounce.Quiet),
		maxWait:  int64(cfg.Debounce.MaxWait),
		stopGets: cfg.GetStopsAtShutDown,
	}
	q.tab.bounced = q.quiet > 0
	if _, ok := cfg.Store.(*priorityStore[T]); ok {
		// The built-in priority store: the queue keeps the levels in
		// its own key table, which then needs no second index of the
		// keys (ordered_table.go). The store itself is not called.
		q.tab.leveled, q.tab.prioritized = true, true
	} else if cfg.Store != nil {
		q.store = cfg.Store
		q.prio, _ = cfg.Store.(PriorityStore[T])
		q.tab.storeOrder = true
	}
	if mp := metricsFor(cfg.Name, cfg.Metrics); mp != nil {
		if pm, ok := mp.(PriorityMetricsProvider); ok && (q.prio != nil || q.tab.leveled) {
			q.metrics = pm.NewPriorityQueueMetrics(cfg.Name, q.Stats, q.dirtyByPriority)
		} else {
			q.metrics = mp.NewQueueMetrics(cfg.Name, q.Stats)
		}
		// Metrics keep every key's dirty time or run start, in the
		// key table's timed columns.
		q.tab.timed = q.metrics != nil
	}
	return q
}
