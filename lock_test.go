package workqueue

import (
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeLock is a tryLocker whose TryLock fails a set number of times.
type fakeLock struct {
	fails       int // TryLocks left to fail
	tries, lock int // calls of TryLock and of Lock
}

func (f *fakeLock) TryLock() bool {
	f.tries++
	if f.fails > 0 {
		f.fails--
		return false
	}
	return true
}

func (f *fakeLock) Lock() { f.lock++ }

// A contender retries after each wait, four waits in all (512 to 4096
// iterations, doubling), and parks with Lock only when every retry failed;
// on one CPU it parks at once. lockContended is only called after the
// caller's own TryLock failed, so its first try is already a retry.
func TestLockContendedBacksOffThenParks(t *testing.T) {
	retries := 0
	for n := firstBackoff; n <= lastBackoff; n *= 2 {
		retries++
	}
	if retries != 4 {
		t.Fatalf("the backoff schedule has %d retries, the tests below assume 4", retries)
	}
	var waits []int
	defer func(old func(int) int) { spinWait = old }(spinWait)
	spinWait = func(n int) int { waits = append(waits, n); return 0 }
	for fails := range retries + 2 {
		f := &fakeLock{fails: fails}
		waits = waits[:0]
		lockContended(f)
		if want := []int{512, 1024, 2048, 4096}[:f.tries]; !slices.Equal(waits, want) {
			t.Errorf("TryLock failing %d times: waits %v, want %v", fails, waits, want)
		}
		wantTries, wantLock := min(fails+1, retries), 0
		if fails >= retries {
			wantLock = 1
		}
		if f.tries != wantTries || f.lock != wantLock {
			t.Errorf("TryLock failing %d times: %d tries and %d Locks, want %d and %d",
				fails, f.tries, f.lock, wantTries, wantLock)
		}
	}

}

// With one P (a pod limited to one CPU, however many the node has) a
// contender parks at once: the holder cannot run while it spins. With two
// it backs off first. The decision follows GOMAXPROCS, which the test sets,
// not the machine's CPU count, which it cannot.
func TestLockContendedFollowsGOMAXPROCS(t *testing.T) {
	defer func(old func(int) int) { spinWait = old }(spinWait)
	spinWait = func(int) int { return 0 }
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2} {
		runtime.GOMAXPROCS(procs)
		f := &fakeLock{fails: 100}
		lockContended(f)
		wantTries := 4
		if procs == 1 {
			wantTries = 0
		}
		if f.tries != wantTries || f.lock != 1 {
			t.Errorf("GOMAXPROCS=%d: %d tries and %d Locks, want %d and 1", procs, f.tries, f.lock, wantTries)
		}
	}
}

// backoff takes time that grows with n: the compiler has not reduced it to
// nothing, which would turn the waits into a tight TryLock loop.
func TestBackoffWaits(t *testing.T) {
	const n = 1 << 20 // 256x lastBackoff, so the clock sees it
	start := time.Now()
	backoff(n)
	if d := time.Since(start); d < 50*time.Microsecond {
		t.Errorf("backoff(%d) took %v; it should take about 0.2-1 ms", n, d)
	}
}

// Under a real mutex held for long, a contender ends up parked in
// sync.Mutex.Lock rather than spinning on, and takes the lock once it is
// released.
func TestLockParksWhileHeld(t *testing.T) {
	q := New[int]()
	q.mu.Lock()
	locked := make(chan struct{})
	go func() {
		q.lock()
		q.mu.Unlock()
		close(locked)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !parkedInMutexLock() {
		if time.Now().After(deadline) {
			q.mu.Unlock()
			t.Fatal("the contender did not park on the mutex within 10s")
		}
		runtime.Gosched()
	}
	q.mu.Unlock()
	<-locked
}

// parkedInMutexLock reports whether some goroutine is blocked in
// sync.Mutex.Lock.
func parkedInMutexLock() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "[sync.Mutex.Lock") && strings.Contains(g, "lockContended") {
			return true
		}
	}
	return false
}

var _ tryLocker = (*sync.Mutex)(nil)
