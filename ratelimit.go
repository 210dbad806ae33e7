package workqueue

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimiter decides how long a key waits before it is tried again. It has
// the same method set as client-go's workqueue.TypedRateLimiter[T], so a
// limiter written for either library works with the other.
//
// A RateLimitingQueue calls When from AddRateLimited, Forget from Forget and
// NumRequeues from NumRequeues, on whatever goroutine called the queue and
// without holding any queue lock: implementations must be safe for
// concurrent use, and may block or call back into the queue.
//
// No limiter in this package returns a negative delay, for any arguments or
// any number of failures: arguments that client-go would turn into a
// negative or wrapped delay are clamped, as each constructor documents.
type RateLimiter[T comparable] interface {
	// When records one more failure of item and returns how long item
	// should wait before its next try.
	When(item T) time.Duration
	// Forget stops tracking item, whether it finally succeeded or was
	// given up on: its failure count goes back to zero and its memory is
	// released.
	Forget(item T)
	// NumRequeues returns how many failures of item are tracked: the number
	// of When calls for it since it was last forgotten.
	NumRequeues(item T) int
}

// Compile-time proof that every limiter here implements RateLimiter.
var (
	_ RateLimiter[int] = (*ItemExponentialFailureRateLimiter[int])(nil)
	_ RateLimiter[int] = (*ItemFastSlowRateLimiter[int])(nil)
	_ RateLimiter[int] = (*BucketRateLimiter[int])(nil)
	_ RateLimiter[int] = (*MaxOfRateLimiter[int])(nil)
	_ RateLimiter[int] = (*WithMaxWaitRateLimiter[int])(nil)
)

// DefaultControllerRateLimiter returns the limiter that client-go's
// DefaultTypedControllerRateLimiter builds, with the same numbers: the
// larger of a per-key exponential backoff (5ms doubling up to 1000s) and one
// token bucket shared by all keys (10 tries per second, bursts of 100).
//
// The bucket only paces retries as a whole; the exponential part keeps one
// failing key from retrying hot. Each call returns a new, independent
// limiter with its own full bucket.
func DefaultControllerRateLimiter[T comparable]() RateLimiter[T] {
	return NewMaxOfRateLimiter(
		NewItemExponentialFailureRateLimiter[T](5*time.Millisecond, 1000*time.Second),
		NewBucketRateLimiter[T](rate.NewLimiter(rate.Limit(10), 100)),
	)
}

// RateLimitingQueue is a Queue that delays retries through a RateLimiter.
// A worker that fails on a key calls AddRateLimited, which adds the key
// after the limiter's delay; one that succeeds (or gives up) calls Forget,
// so that the key's next failure starts its backoff over.
//
// It embeds *Queue, so it has every Queue method, and its method set
// satisfies client-go's workqueue.TypedRateLimitingInterface[T]: code
// written for client-go's rate-limiting queue accepts it.
//
// The zero value is not usable (it has no Queue); use NewRateLimitingQueue
// or NewRateLimitingQueueWithConfig. All methods are safe for concurrent
// use, provided the limiter is.
type RateLimitingQueue[T comparable] struct {
	*Queue[T]
	limiter RateLimiter[T] // never nil; set once by the constructor
}

// NewRateLimitingQueue returns an empty FIFO queue without metrics whose
// AddRateLimited asks rl for delays. A nil rl means
// DefaultControllerRateLimiter.
func NewRateLimitingQueue[T comparable](rl RateLimiter[T]) *RateLimitingQueue[T] {
	return NewRateLimitingQueueWithConfig(rl, Config[T]{})
}

// NewRateLimitingQueueWithConfig returns an empty queue configured by cfg,
// as NewWithConfig does, whose AddRateLimited asks rl for delays. A nil rl
// means DefaultControllerRateLimiter.
func NewRateLimitingQueueWithConfig[T comparable](rl RateLimiter[T], cfg Config[T]) *RateLimitingQueue[T] {
	if rl == nil {
		rl = DefaultControllerRateLimiter[T]()
	}
	return &RateLimitingQueue[T]{Queue: NewWithConfig(cfg), limiter: rl}
}

// AddRateLimited adds item after the delay that the limiter's When gives
// it, which also records one more failure of item. The merge rules of
// AddAfter apply: a key already due earlier keeps its earlier run.
//
// After ShutDown it does nothing and does not call the limiter, so a queue
// that is going away neither counts a failure nor spends a bucket token.
// The check races benignly with a concurrent ShutDown: if ShutDown lands
// between the check and AddAfter, the limiter has been asked once more, and
// AddAfter then ignores the key, exactly as for any Add that loses that
// race.
func (q *RateLimitingQueue[T]) AddRateLimited(item T) {
	if q.ShuttingDown() {
		return
	}
	// The limiter runs outside the queue's lock: it may take its own lock
	// (or, being user code, call back into the queue) without ordering
	// problems, and a slow limiter does not stall Get and Done.
	q.AddAfter(item, q.limiter.When(item))
}

// Forget tells the limiter to stop tracking item: call it when item was
// processed successfully or has been given up on, so that its next failure
// starts at the shortest delay again. It does not remove item from the
// queue.
func (q *RateLimitingQueue[T]) Forget(item T) { q.limiter.Forget(item) }

// NumRequeues returns how many failures of item the limiter has recorded
// since it was last forgotten.
func (q *RateLimitingQueue[T]) NumRequeues(item T) int { return q.limiter.NumRequeues(item) }

// RateLimiter returns the queue's limiter, for callers that combine its
// delay with their own (controller-runtime's AddWithOpts takes the smaller
// of a requested delay and the limiter's).
func (q *RateLimitingQueue[T]) RateLimiter() RateLimiter[T] { return q.limiter }

// ItemExponentialFailureRateLimiter delays a key by base*2^n after its n-th
// failure (counting from zero), capped at a maximum: with base 5ms and max
// 1000s the delays are 5ms, 10ms, 20ms, … 1000s, 1000s. Keys are counted
// separately. It returns exactly what client-go's
// TypedItemExponentialFailureRateLimiter returns for the same arguments
// wherever client-go's result is a valid delay (see When).
//
// The zero value is usable and never delays (base and max are zero), but
// still counts failures; use NewItemExponentialFailureRateLimiter.
// It is safe for concurrent use.
type ItemExponentialFailureRateLimiter[T comparable] struct {
	failures failureCounts[T]

	// Set by the constructor, read-only afterwards.
	base     time.Duration // >= 0
	maxDelay time.Duration // >= 0
}

// NewItemExponentialFailureRateLimiter returns a limiter whose delay after a
// key's n-th failure (n = 0, 1, …) is min(baseDelay*2^n, maxDelay).
//
// A negative baseDelay or maxDelay means zero, so that limiter never
// delays. (client-go returns those negative values as delays, which a
// delaying queue treats as zero: the behaviour through a queue is the
// same.) A baseDelay above maxDelay means every delay is maxDelay.
func NewItemExponentialFailureRateLimiter[T comparable](baseDelay, maxDelay time.Duration) *ItemExponentialFailureRateLimiter[T] {
	return &ItemExponentialFailureRateLimiter[T]{
		base:     max(baseDelay, 0),
		maxDelay: max(maxDelay, 0),
	}
}

// When records a failure of item and returns min(base*2^n, max), where n
// is the number of failures of item recorded before this one.
//
// The product is computed in float64, as client-go does, so that both
// libraries agree to the nanosecond, including the rounding of bases above
// 2^53ns (about 104 days) to float64 precision. Where the product does not
// fit in a time.Duration the result is max; client-go instead converts an
// out-of-range float (a product of exactly 2^63ns, such as base
// math.MaxInt64, or base 0 after 1024 failures, which gives NaN) and can
// return a negative delay there.
func (r *ItemExponentialFailureRateLimiter[T]) When(item T) time.Duration {
	return exponentialDelay(r.base, r.maxDelay, r.failures.fail(item)-1)
}

// exponentialDelay returns min(base*2^exp, maxDelay) for base, maxDelay >= 0
// and exp >= 0, never overflowing.
func exponentialDelay(base, maxDelay time.Duration, exp int) time.Duration {
	if base == 0 || maxDelay == 0 {
		// Also keeps 0*2^1024 (NaN in float64) out of the math below.
		return 0
	}
	// base >= 1ns, so from exp 63 on the product is at least 2^63ns, past
	// the largest Duration. Deciding here also keeps huge exp values away
	// from math.Ldexp, whose exponent sum would wrap near math.MaxInt.
	if exp >= 63 {
		return maxDelay
	}
	// Scaling by a power of two is exact in float64 (short of overflow), so
	// this is bit for bit client-go's float64(base) * math.Pow(2, exp).
	backoff := math.Ldexp(float64(base), exp)
	// float64(math.MaxInt64) rounds up to 2^63, which is one past the
	// largest Duration, so the test must be >=, not >: converting exactly
	// 2^63 to int64 is implementation-defined (math.MinInt64 on amd64).
	if backoff >= 1<<63 {
		return maxDelay
	}
	return min(time.Duration(backoff), maxDelay)
}

// NumRequeues returns how many failures of item are recorded: the number
// of When calls for item since it was last forgotten, saturating at
// math.MaxInt.
func (r *ItemExponentialFailureRateLimiter[T]) NumRequeues(item T) int {
	return r.failures.count(item)
}

// Forget drops item's failure count, so its next delay is base again, and
// releases the memory that tracked it.
func (r *ItemExponentialFailureRateLimiter[T]) Forget(item T) { r.failures.forget(item) }

// ItemFastSlowRateLimiter retries a key quickly a fixed number of times,
// then slowly: its first maxFast failures are delayed by fast, later ones by
// slow. Keys are counted separately. It returns exactly what client-go's
// TypedItemFastSlowRateLimiter returns for the same arguments, except that
// negative delays become zero (see NewItemFastSlowRateLimiter).
//
// The zero value is usable and never delays, but still counts failures;
// use NewItemFastSlowRateLimiter. It is safe for concurrent use.
type ItemFastSlowRateLimiter[T comparable] struct {
	failures failureCounts[T]

	// Set by the constructor, read-only afterwards.
	fast, slow time.Duration // >= 0
	maxFast    int
}

// NewItemFastSlowRateLimiter returns a limiter that delays a key's first
// maxFast failures by fast and every later one by slow.
//
// A negative fast or slow means zero. (client-go returns them unchanged,
// and a delaying queue treats a negative delay as zero: the behaviour
// through a queue is the same.) maxFast <= 0 means every failure is slow.
func NewItemFastSlowRateLimiter[T comparable](fast, slow time.Duration, maxFast int) *ItemFastSlowRateLimiter[T] {
	return &ItemFastSlowRateLimiter[T]{
		fast:    max(fast, 0),
		slow:    max(slow, 0),
		maxFast: maxFast,
	}
}

// When records a failure of item and returns fast if it is one of item's
// first maxFast failures since it was last forgotten, slow otherwise.
func (r *ItemFastSlowRateLimiter[T]) When(item T) time.Duration {
	if r.failures.fail(item) <= r.maxFast {
		return r.fast
	}
	return r.slow
}

// NumRequeues returns how many failures of item are recorded: the number
// of When calls for item since it was last forgotten, saturating at
// math.MaxInt.
func (r *ItemFastSlowRateLimiter[T]) NumRequeues(item T) int {
	return r.failures.count(item)
}

// Forget drops item's failure count, so its next failures are fast again,
// and releases the memory that tracked it.
func (r *ItemFastSlowRateLimiter[T]) Forget(item T) { r.failures.forget(item) }

// BucketRateLimiter paces all keys together through one token bucket, a
// *rate.Limiter from golang.org/x/time/rate: each When takes one token, and
// once the burst is spent the tries are spaced 1/limit apart. It tracks no
// key: NumRequeues is always 0 and Forget does nothing. It returns what
// client-go's TypedBucketRateLimiter returns for the same *rate.Limiter.
//
// The zero value is usable and never delays; use NewBucketRateLimiter.
// It is safe for concurrent use (the rate.Limiter has its own lock).
type BucketRateLimiter[T comparable] struct {
	limiter *rate.Limiter // nil only in the zero value; set once
}

// NewBucketRateLimiter returns a limiter that takes one token from l per
// When. The caller may keep l and change its limit or burst later; l must
// not be nil (NewBucketRateLimiter panics: a nil l is a bug, better caught
// here than at the first retry).
//
// As in client-go, a limiter that can never grant a token (burst 0 with a
// finite limit) yields rate.InfDuration: the key effectively never runs
// again. Delays are never negative.
func NewBucketRateLimiter[T comparable](l *rate.Limiter) *BucketRateLimiter[T] {
	if l == nil {
		panic("workqueue: NewBucketRateLimiter: nil *rate.Limiter")
	}
	return &BucketRateLimiter[T]{limiter: l}
}

// When reserves one token and returns how long until it is available. The
// token is spent even if the caller never waits for it, as in client-go.
func (r *BucketRateLimiter[T]) When(item T) time.Duration {
	if r.limiter == nil {
		return 0
	}
	// One clock read for both the reservation and its delay, so the delay
	// is exactly the reservation's wait (client-go reads the clock twice
	// and returns a delay some nanoseconds shorter).
	now := time.Now()
	return r.limiter.ReserveN(now, 1).DelayFrom(now)
}

// NumRequeues returns 0: the bucket does not track keys.
func (r *BucketRateLimiter[T]) NumRequeues(item T) int { return 0 }

// Forget does nothing: the bucket does not track keys.
func (r *BucketRateLimiter[T]) Forget(item T) {}

// MaxOfRateLimiter combines limiters: When asks every one of them and
// returns the longest delay, NumRequeues the largest count, and Forget
// forgets item in all of them. Every limiter's When runs on every call, so
// a bucket spends a token even when another limiter's delay wins; as in
// client-go, that lets a bucket's burst appear exceeded when single keys
// were delayed longer by another limiter.
//
// The zero value is usable and never delays; use NewMaxOfRateLimiter. It
// is safe for concurrent use if the limiters it combines are; it adds no
// lock of its own, because its list never changes after construction.
type MaxOfRateLimiter[T comparable] struct {
	limiters []RateLimiter[T] // read-only after construction
}

// NewMaxOfRateLimiter returns a limiter that combines ls, asked in order.
// With no limiters it never delays. It copies ls, so the caller may reuse
// the slice; a nil element panics here rather than at the first retry.
func NewMaxOfRateLimiter[T comparable](ls ...RateLimiter[T]) *MaxOfRateLimiter[T] {
	for _, l := range ls {
		if l == nil {
			panic("workqueue: NewMaxOfRateLimiter: nil RateLimiter")
		}
	}
	return &MaxOfRateLimiter[T]{limiters: append([]RateLimiter[T](nil), ls...)}
}

// When calls When on every limiter, in order, and returns the longest
// delay, or 0 if there is none or all are negative.
func (r *MaxOfRateLimiter[T]) When(item T) time.Duration {
	var d time.Duration
	for _, l := range r.limiters {
		d = max(d, l.When(item))
	}
	return d
}

// NumRequeues returns the largest NumRequeues of the limiters, or 0.
func (r *MaxOfRateLimiter[T]) NumRequeues(item T) int {
	n := 0
	for _, l := range r.limiters {
		n = max(n, l.NumRequeues(item))
	}
	return n
}

// Forget forgets item in every limiter.
func (r *MaxOfRateLimiter[T]) Forget(item T) {
	for _, l := range r.limiters {
		l.Forget(item)
	}
}

// WithMaxWaitRateLimiter caps the delays of another limiter: When returns
// the wrapped limiter's delay, but never more than a maximum. NumRequeues
// and Forget pass through. It returns what client-go's
// TypedWithMaxWaitRateLimiter returns, except that negative delays become
// zero (see NewWithMaxWaitRateLimiter).
//
// The zero value is usable and never delays; use NewWithMaxWaitRateLimiter.
// It is safe for concurrent use if the wrapped limiter is.
type WithMaxWaitRateLimiter[T comparable] struct {
	// Set by the constructor, read-only afterwards.
	limiter  RateLimiter[T] // nil only in the zero value
	maxDelay time.Duration  // >= 0
}

// NewWithMaxWaitRateLimiter returns a limiter that returns l's delays
// capped at maxDelay. A negative maxDelay means zero, and a negative delay
// from l (not possible with this package's limiters) is returned as zero;
// client-go returns both negative, which a delaying queue treats as zero.
// l must not be nil (NewWithMaxWaitRateLimiter panics).
func NewWithMaxWaitRateLimiter[T comparable](l RateLimiter[T], maxDelay time.Duration) *WithMaxWaitRateLimiter[T] {
	if l == nil {
		panic("workqueue: NewWithMaxWaitRateLimiter: nil RateLimiter")
	}
	return &WithMaxWaitRateLimiter[T]{limiter: l, maxDelay: max(maxDelay, 0)}
}

// When returns the wrapped limiter's delay for item, at most the maximum.
// The wrapped limiter's When always runs, so it still counts the failure
// or spends its token even when the cap wins.
func (r *WithMaxWaitRateLimiter[T]) When(item T) time.Duration {
	if r.limiter == nil {
		return 0
	}
	return min(max(r.limiter.When(item), 0), r.maxDelay)
}

// NumRequeues returns the wrapped limiter's NumRequeues.
func (r *WithMaxWaitRateLimiter[T]) NumRequeues(item T) int {
	if r.limiter == nil {
		return 0
	}
	return r.limiter.NumRequeues(item)
}

// Forget forgets item in the wrapped limiter.
func (r *WithMaxWaitRateLimiter[T]) Forget(item T) {
	if r.limiter != nil {
		r.limiter.Forget(item)
	}
}

// saturatingInc returns n+1, or n if that would wrap. A failure counter
// that wrapped to a negative number would give a key its shortest delay
// back; saturating keeps it at the maximum.
func saturatingInc(n int) int {
	if n == math.MaxInt {
		return n
	}
	return n + 1
}

// failureCounts counts failures per key for the per-key limiters. Forget
// deletes a key's count, and the map gives its memory back after a burst
// (shrinkingMap), so a limiter's memory follows the keys that are failing.
//
// The zero value is ready to use. It is safe for concurrent use.
type failureCounts[T comparable] struct {
	mu sync.Mutex           // protects the fields below
	m  shrinkingMap[T, int] // per key; absent means 0
}

// fail records one more failure of item and returns its new count,
// saturating at math.MaxInt.
func (f *failureCounts[T]) fail(item T) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := saturatingInc(f.m.m[item])
	f.m.put(item, n)
	return n
}

// count returns item's failures since it was last forgotten.
func (f *failureCounts[T]) count(item T) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m.m[item]
}

// forget drops item's count.
func (f *failureCounts[T]) forget(item T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m.del(item)
}
