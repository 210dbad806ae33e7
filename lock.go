package workqueue

import "runtime"

// lock takes q.mu. Uncontended it is sync.Mutex.Lock's own fast path, one
// compare-and-swap. When the lock is held it backs off before it retries,
// instead of parking on the mutex at once; see lockContended. It is over
// the inlining budget, so Add, Get and Done, where a call level shows in
// the uncontended figures, spell it out.
func (q *Queue[T]) lock() {
	if !q.mu.TryLock() {
		lockContended(&q.mu)
	}
}

// Backoff bounds, in iterations of backoff's loop: the waits double from the
// first to the last, a few µs in all, and then the goroutine parks on the
// mutex.
const (
	firstBackoff = 512
	lastBackoff  = 4096
)

// multicore reports whether the program can run more than one goroutine at
// a time. With one P the holder of the lock cannot run while a contender
// waits, so waiting for it is wasted: the contender parks at once.
//
// It asks GOMAXPROCS, not NumCPU: in a pod limited to one CPU on a large
// node NumCPU counts the node's CPUs, while Go sets GOMAXPROCS from the
// container's CPU limit (and updates it when the limit changes), and a
// spinner there would keep the holder off the only P. GOMAXPROCS(0) takes
// the scheduler's lock for a moment; it is read once per contended
// acquisition, which then waits far longer than that, and never on the
// uncontended path.
func multicore() bool { return runtime.GOMAXPROCS(0) > 1 }

// lockContended takes mu after a failed TryLock: it waits a while, tries
// again, doubling the wait each time, and parks on the mutex (Lock) only
// after a few µs.
//
// Why not park at once, as Lock would: sync.Mutex spins only while the P's
// run queue is empty, and when goroutines outnumber cores it never is, so a
// goroutine that finds the lock held parks at once; the Unlock that follows
// wakes it onto the unlocker's P, and the cores then take turns at the lock
// on almost every operation, each turn moving the lock word and the queue's
// hot cache lines from one core to the other (a lock convoy). A goroutine
// that backs off instead leaves the lock and the lines to the core that has
// them, which runs several operations in a row before another core gets its
// turn. The price is the CPU time spent in the backoff loop.
//
// The wait is bounded, so a holder that is itself descheduled costs a few
// µs of spinning before the contender parks. Fairness is sync.Mutex's: a
// goroutine parked in Lock that has waited over 1 ms puts the mutex in
// starvation mode, where TryLock fails and everyone queues in order.
//
// It takes an interface rather than *sync.Mutex so that a test can count
// its tries; the indirect calls cost nothing next to the waits.
//
//go:noinline
func lockContended(mu tryLocker) {
	if multicore() {
		for n := firstBackoff; n <= lastBackoff; n *= 2 {
			spinWait(n)
			if mu.TryLock() {
				return
			}
		}
	}
	mu.Lock()
}

// spinWait is backoff, or a recorder in the tests.
var spinWait = backoff

// tryLocker is the part of *sync.Mutex that lockContended uses.
type tryLocker interface {
	TryLock() bool
	Lock()
}

// backoff busy-waits for n iterations of a loop the compiler keeps (it
// cannot drop a call it may not inline, nor the loop whose result the call
// returns). It does not yield: a goroutine that yielded would let another
// contender run on this core, and the point is that nobody here touches the
// lock for a while.
//
//go:noinline
func backoff(n int) (sum int) {
	for i := range n {
		sum += i
	}
	return sum
}
