package bench

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/internal/benchwork"
	clientworkqueue "k8s.io/client-go/util/workqueue"
)

// The contention workloads use keys that are never re-added while queued, as
// a controller's keys mostly are: every Add is a new key. They run on int
// keys and on string keys, because the cost of hashing and of the table entry
// differs between the two.

// typedQueue is what the contention workloads drive: both libraries' queues
// and the plain floor, for any key type.
type typedQueue[T comparable] interface {
	Add(T)
	Get() (T, bool)
	Done(T)
	ShutDown()
}

// keySource turns a sequence number into a key, and exit(i) into one of a
// second family that never meets the first. Strings come from tables made
// before the timer starts, so that the workload allocates nothing of its
// own; a sequence number is reused only after keyRing others, far more than
// are ever in flight at once.
type keySource[T comparable] struct {
	key, exit func(i uint64) T
}

const keyRing = 1 << 18

func intKeys() keySource[int] {
	return keySource[int]{
		key:  func(i uint64) int { return int(i) },
		exit: func(i uint64) int { return -1 - int(i) },
	}
}

var (
	ringKeys = sync.OnceValue(func() []string { return benchwork.Keys(keyRing) })
	exitKeys = sync.OnceValue(func() []string {
		keys := make([]string, 4096)
		for i := range keys {
			keys[i] = "exit/" + strconv.Itoa(i)
		}
		return keys
	})
)

func stringKeys() keySource[string] {
	keys, exits := ringKeys(), exitKeys()
	return keySource[string]{
		key:  func(i uint64) string { return keys[i&(keyRing-1)] },
		exit: func(i uint64) string { return exits[i%uint64(len(exits))] },
	}
}

// distinct is contention with distinct keys: mult*GOMAXPROCS goroutines each
// add a key nobody else adds, take whatever key Get hands out, and finish it.
// Every goroutine adds before it gets, so a Get always finds a key: only the
// lock is contended, never the wait for a key.
func distinct[T comparable](b *testing.B, q typedQueue[T], key keySource[T], mult int) {
	defer q.ShutDown()
	var next atomic.Uint64
	b.SetParallelism(mult)
	b.ReportAllocs()
	b.ResetTimer()
	var exits atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			q.Add(key.key(next.Add(1)))
			k, _ := q.Get()
			q.Done(k)
		}
		// A key can come round again (strings, after keyRing adds)
		// while a stalled goroutine still holds it, and then its Add
		// coalesces and some Get is owed a key. Each goroutine that
		// leaves adds a key of its own, so no Get waits forever.
		q.Add(key.exit(exits.Add(1)))
	})
}

// poolBatch is how many keys the worker pool drains per batch.
const poolBatch = 10000

// workerPool is a controller's worker pool: producers goroutines add
// distinct keys, workers goroutines take them with Get and Done them at
// once, with no work in between. Keys go through in batches of poolBatch,
// each added by the producers in parallel and drained before the next; ns/op
// is per key.
func workerPool[T comparable](b *testing.B, q typedQueue[T], key keySource[T], producers, workers int) {
	var done sync.WaitGroup // keys of the batch not yet Done
	var exited sync.WaitGroup
	for range workers {
		exited.Go(func() {
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				q.Done(k)
				done.Done()
			}
		})
	}
	var seq uint64
	perKeyN(b, poolBatch, func(n int) {
		done.Add(n)
		var added sync.WaitGroup
		for p := range producers {
			lo, hi := seq+uint64(p*n/producers), seq+uint64((p+1)*n/producers)
			added.Go(func() {
				for i := lo; i < hi; i++ {
					q.Add(key.key(i))
				}
			})
		}
		seq += uint64(n)
		added.Wait()
		done.Wait()
	})
	q.ShutDown()
	exited.Wait()
}

// perKeyN runs batch(n) over batches of at most size keys until b.N keys have
// been through, so that ns/op and allocs/op are per key.
func perKeyN(b *testing.B, size int, batch func(n int)) {
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(size, b.N-done)
		batch(n)
		done += n
	}
}

// floorCond is the plain floor of the contention workloads: one
// sync.Mutex, a map entry per key, a FIFO of ready keys and a sync.Cond for
// getters to wait on, as the simplest correct queue of distinct keys would
// be written. Add signals whether or not anyone waits, Get waits in a loop.
//
// With backoff set it takes its lock as our queue does (lockBackoff, the
// same policy as lock.go in the core module), so that a floor is still a
// floor for a queue whose lock backs off: the plain floor parks on the
// mutex, and in the contended rows that costs it more than all the work it
// leaves out saves.
type floorCond[T comparable] struct {
	mu       sync.Mutex
	cond     sync.Cond
	keys     map[T]bool // true while processing
	fifo     ringFIFO[T]
	shutDown bool
	backoff  bool
}

func newFloorCond[T comparable](backoff bool) *floorCond[T] {
	f := &floorCond[T]{keys: map[T]bool{}, backoff: backoff}
	f.cond.L = &f.mu
	return f
}

func (f *floorCond[T]) lock() {
	if f.backoff {
		lockBackoff(&f.mu)
	} else {
		f.mu.Lock()
	}
}

func (f *floorCond[T]) Add(k T) {
	f.lock()
	f.keys[k] = false
	f.fifo.push(k)
	f.cond.Signal()
	f.mu.Unlock()
}

func (f *floorCond[T]) Get() (T, bool) {
	f.lock()
	defer f.mu.Unlock()
	for f.fifo.len() == 0 {
		if f.shutDown {
			var zero T
			return zero, true
		}
		f.cond.Wait()
	}
	k := f.fifo.pop()
	f.keys[k] = true
	return k, false
}

func (f *floorCond[T]) Done(k T) {
	f.lock()
	delete(f.keys, k)
	f.mu.Unlock()
}

func (f *floorCond[T]) ShutDown() {
	f.mu.Lock()
	f.shutDown = true
	f.cond.Broadcast()
	f.mu.Unlock()
}

// lockBackoff takes mu as the core module's Queue.lock does: TryLock, then
// up to four more tries after busy waits that double from 512 to 4096
// iterations of a loop (about 4 us in all), then Lock. lock.go there says
// why.
func lockBackoff(mu *sync.Mutex) {
	if mu.TryLock() {
		return
	}
	for n := 512; n <= 4096; n *= 2 {
		spin(n)
		if mu.TryLock() {
			return
		}
	}
	mu.Lock()
}

//go:noinline
func spin(n int) (sum int) {
	for i := range n {
		sum += i
	}
	return sum
}

// contentionWorkloads returns the distinct-key and worker-pool rows for key
// type T, named with suffix.
func contentionWorkloads[T comparable](suffix string, key func() keySource[T]) []Workload {
	ours := func() typedQueue[T] { return workqueue.New[T]() }
	theirs := func() typedQueue[T] { return clientworkqueue.NewTyped[T]() }
	floorQ := func(backoff bool) typedQueue[T] { return newFloorCond[T](backoff) }
	dist := func(mult int, goal float64) Workload {
		// The floor goal is the contended row's (PERF.md, The goals);
		// at GOMAXPROCS goroutines only client-go's ratio has a goal.
		floorGoal := 0.0
		if mult > 1 {
			floorGoal = 1.1
		}
		return Workload{
			Name: "distinct-x" + strconv.Itoa(mult) + "-" + suffix,
			Doc: "Add of a new " + suffix + " key, Get, Done, from " + strconv.Itoa(mult) +
				"xGOMAXPROCS goroutines",
			Theirs: clientGo, Goal: goal, Bimodal: mult > 1,
			RunOurs:   func(b *testing.B) { distinct(b, ours(), key(), mult) },
			RunTheirs: func(b *testing.B) { distinct(b, theirs(), key(), mult) },
			Floors: []Floor{
				{Name: "plain", Goal: floorGoal, Run: func(b *testing.B) { distinct(b, floorQ(false), key(), mult) }},
				{Name: "backoff", Goal: floorGoal, Run: func(b *testing.B) { distinct(b, floorQ(true), key(), mult) }},
			},
		}
	}
	pool := Workload{
		Name:   "pool-2x32-" + suffix,
		Doc:    "2 producers add distinct " + suffix + " keys, 32 workers Get and Done them, in batches of 10,000; per key",
		Theirs: clientGo, Goal: 1.0,
		RunOurs:   func(b *testing.B) { workerPool(b, ours(), key(), 2, 32) },
		RunTheirs: func(b *testing.B) { workerPool(b, theirs(), key(), 2, 32) },
		Floors: []Floor{
			{Name: "plain", Goal: 1.1, Run: func(b *testing.B) { workerPool(b, floorQ(false), key(), 2, 32) }},
			{Name: "backoff", Goal: 1.1, Run: func(b *testing.B) { workerPool(b, floorQ(true), key(), 2, 32) }},
		},
	}
	return []Workload{dist(1, 0.6), dist(8, 1.0), pool}
}

// ringFIFO is a FIFO over a circular buffer that doubles when full and
// never shrinks: unlike fifo, it reuses its slots while it never empties,
// which the contended workloads never let it do.
type ringFIFO[E any] struct {
	buf     []E
	head, n int
}

func (r *ringFIFO[E]) len() int { return r.n }

func (r *ringFIFO[E]) push(e E) {
	if r.n == len(r.buf) {
		buf := make([]E, max(16, 2*len(r.buf)))
		for i := range r.n {
			buf[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = e
	r.n++
}

func (r *ringFIFO[E]) pop() E {
	var zero E
	e := r.buf[r.head]
	r.buf[r.head] = zero
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return e
}
