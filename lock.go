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

// Backoff bounds, in iterations of backoff's loop (about half a ns each on
// the machines we measure on): the waits double from the first to the last,
// about 4 µs in all, and then the goroutine parks on the mutex.
const (
	firstBackoff = 512
	lastBackoff  = 4096
)

// multicore reports whether the program can run more than one goroutine at
// a time. With one P the holder of the lock cannot run while we wait, so
// waiting for it is wasted: we park at once.
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
// after about 4 µs.
//
// Why not park at once, as Lock would: sync.Mutex spins only while the P's
// run queue is empty, and when goroutines outnumber cores it never is, so a
// goroutine that finds the lock held parks at once; the Unlock that follows
// wakes it (a semaphore release, which takes a runtime lock of its own) onto
// the unlocker's P, and the two cores then take turns at the lock on almost
// every operation. Each turn moves the lock word and the queue's hot cache
// lines from one core to the other, and on a host where that transfer is
// slow (on our 2-vCPU machines, for minutes at a time: in a profile of a
// floor that spun instead of parking, Unlock, one atomic add, took about 60
// ns a call) an Add/Get/Done cycle costs 1-2 µs under contention, for
// client-go's queue, for ours and for a forty-line floor alike. A goroutine
// that backs off instead leaves the lock and the lines to the core that has
// them, which runs several operations in a row before the other core gets
// its turn: distinct-x8 in cmd/compare runs at 220-310 ns/op with it and ran
// at 1.1-1.4 us/op without it in the same minutes (README, Performance).
// About a third of the CPU time then goes to the backoff loop, which is the
// price of leaving the lock alone.
//
// The wait is bounded, so a holder that is itself descheduled costs a few
// µs of spinning before we park. Fairness is sync.Mutex's: a goroutine
// parked in Lock that has waited over 1 ms puts the mutex in starvation
// mode, where TryLock fails and everyone queues in order.
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
