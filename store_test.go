package workqueue

// Tests of the ring-buffer FIFO (the default Store) from inside the package,
// so that they can look at its buffer: popped slots are cleared, capacity
// follows the live count, and order survives wraparound, growth and
// shrinking.

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkRing asserts the ring's invariants: the buffer length is 0 or a power
// of two, every slot outside the live window is zero (no popped key is kept
// alive), and capacity follows the live count: at most four times it, or
// the constant the ring may keep for the next burst (keepMax, or minRing).
func checkRing(t *testing.T, r *ring[int], what string) {
	t.Helper()
	size := len(r.buf)
	require.True(t, size == 0 || size&(size-1) == 0, "%s: buffer length %d must be 0 or a power of two", what, size)
	require.LessOrEqual(t, r.n, size, "%s: count %d cannot exceed the buffer length %d", what, r.n, size)
	require.LessOrEqual(t, size, max(minRing, keepMax, 4*r.n),
		"%s: buffer length %d must follow the live count %d (at most 4x, or keepMax=%d)", what, size, r.n, keepMax)
	for i := range size {
		// Slot i is live if it is within n steps after head, modulo size.
		live := (i-r.head+size)&(size-1) < r.n
		if !live && r.buf[i] != 0 {
			require.Failf(t, "popped slot not cleared", "%s: slot %d is not live (head %d, n %d) and must be cleared; it holds %d", what, i, r.head, r.n, r.buf[i])
		}
	}
}

// TestRingModel drives the ring and a plain slice with the same random
// pushes and pops, through growth, shrinking and wraparound, comparing every
// popped value and checking the invariants after each operation.
func TestRingModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var r ring[int]
	var model []int
	next := 1 // values start at 1 so that a cleared slot is recognisable
	for phase := range 40 {
		// Alternate bursts of mostly pushes and mostly pops, of varied
		// sizes, so that the ring grows, wraps and shrinks repeatedly.
		pushBias := 0.8
		if phase%2 == 1 {
			pushBias = 0.2
		}
		steps := rng.IntN(3000)
		if phase%8 == 7 {
			// Drain to empty now and then: a burst ends, the next one
			// starts from an empty ring.
			pushBias, steps = 0, len(model)
		}
		for range steps {
			if len(model) == 0 || rng.Float64() < pushBias {
				r.Push(next)
				model = append(model, next)
				next++
			} else {
				if got := r.Pop(); got != model[0] {
					require.Equal(t, model[0], got, "Pop must return the oldest item (phase %d)", phase)
				}
				model = model[1:]
			}
			if r.Len() != len(model) {
				require.Equal(t, len(model), r.Len(), "Len must count the items")
			}
			if rng.IntN(50) == 0 {
				checkRing(t, &r, "random check")
			}
		}
		checkRing(t, &r, "end of phase")
	}
	for len(model) > 0 {
		require.Equal(t, model[0], r.Pop(), "the final drain keeps FIFO order")
		model = model[1:]
	}
	checkRing(t, &r, "drained")
}

// TestRingWraparound checks FIFO order when the live window wraps past the
// end of the buffer, and when the ring grows and shrinks while wrapped.
func TestRingWraparound(t *testing.T) {
	var r ring[int]
	for i := 1; i <= 12; i++ {
		r.Push(i)
	}
	for i := 1; i <= 10; i++ {
		require.Equal(t, i, r.Pop(), "FIFO order before wrapping")
	}
	// head is now 10 of 16: these pushes wrap to slots 0..
	for i := 13; i <= 24; i++ {
		r.Push(i)
	}
	require.Equal(t, minRing, len(r.buf), "14 items fit in the first buffer")
	require.Greater(t, r.head+r.n, len(r.buf), "the live window must wrap for this test to mean anything")
	checkRing(t, &r, "wrapped")
	// Growing while wrapped must unwrap in order.
	for i := 25; i <= 40; i++ {
		r.Push(i)
	}
	checkRing(t, &r, "grown from wrapped")
	for i := 11; i <= 40; i++ {
		require.Equal(t, i, r.Pop(), "FIFO order across wraparound and growth")
		checkRing(t, &r, "popping")
	}
	require.Zero(t, r.Len(), "drained")

	// Shrinking while wrapped: fill 64, pop 56 (head 56), push 12 (wraps
	// to slots 0..3), then pop down so that the ring shrinks.
	r = ring[int]{}
	for i := 1; i <= 64; i++ {
		r.Push(i)
	}
	for i := 1; i <= 56; i++ {
		require.Equal(t, i, r.Pop(), "FIFO")
	}
	for i := 65; i <= 76; i++ {
		r.Push(i)
	}
	checkRing(t, &r, "before shrinking wrapped")
	for i := 57; i <= 76; i++ {
		require.Equal(t, i, r.Pop(), "FIFO order across a shrink of a wrapped ring")
		checkRing(t, &r, "shrinking")
	}
}

// TestRingPopClearsSlot checks that each Pop clears the slot it read, with
// pointer keys, including the pops that shrink the buffer.
func TestRingPopClearsSlot(t *testing.T) {
	var r ring[*int]
	for i := range 100 {
		v := i
		r.Push(&v)
	}
	for r.Len() > 0 {
		require.NotNil(t, r.Pop(), "a pushed pointer")
		size := len(r.buf)
		for i, p := range r.buf {
			if (i-r.head+size)&(size-1) >= r.n {
				require.Nil(t, p, "slot %d is not live (head %d, n %d) and must be nil", i, r.head, r.n)
			}
		}
	}
}

// TestRingShrinksAfterBurst checks that the buffer grows with a burst and
// gives the memory back when it drains, down to minRing.
func TestRingShrinksAfterBurst(t *testing.T) {
	var r ring[int]
	const burst = 100_000
	for i := 1; i <= burst; i++ {
		r.Push(i)
	}
	require.GreaterOrEqual(t, len(r.buf), burst, "the buffer holds the burst")
	for range burst - 10 {
		r.Pop()
	}
	require.LessOrEqual(t, len(r.buf), 4*10+minRing, "with 10 items left the buffer must have shrunk")
	for range 10 {
		r.Pop()
	}
	require.LessOrEqual(t, len(r.buf), minRing, "an empty ring keeps at most minRing slots")
	// It still works after shrinking.
	r.Push(7)
	require.Equal(t, 7, r.Pop(), "the ring works after shrinking")
}

// TestRingShrinksAfterRepeatedBursts checks that memory follows the live
// count after every burst, not only the first: a drained ring keeps room
// for at most keepMax keys for the next burst, however large and however
// many the bursts before. Bursts that fit in keepMax reuse the buffer: a
// resync that adds the same keys again and again does not reallocate.
func TestRingShrinksAfterRepeatedBursts(t *testing.T) {
	burstOf := func(r *ring[int], n int) {
		for i := 1; i <= n; i++ {
			r.Push(i)
		}
		for i := 1; i <= n; i++ {
			if got := r.Pop(); got != i {
				require.Equal(t, i, got, "FIFO order")
			}
		}
	}
	var r ring[int]
	const burst = 100_000
	require.Greater(t, burst, 4*keepMax, "the bursts must be large for this test to mean anything")
	for b := range 3 {
		burstOf(&r, burst)
		require.LessOrEqual(t, len(r.buf), 2*keepMax,
			"after burst %d of %d items has drained, the empty ring keeps %d slots; at most room for keepMax (%d) allowed", b+1, burst, len(r.buf), keepMax)
	}
	for range 3 {
		burstOf(&r, 10) // small bursts after large ones
	}
	require.LessOrEqual(t, len(r.buf), minRing, "after small bursts, a ring that once held 100000 items is back to minRing")

	// The first burst teaches the ring the size; from the second on, the
	// buffer is kept through the drain and reused.
	r = ring[int]{}
	burstOf(&r, 1000)
	burstOf(&r, 1000)
	buf := &r.buf[0]
	for range 3 {
		burstOf(&r, 1000)
	}
	require.Same(t, buf, &r.buf[0], "bursts of the same size within keepMax reuse the buffer")
}

// TestRingKeepsRoomForWanderingBatches checks the case the windows are for:
// batches of one size that a consumer starts draining while they still
// arrive (keys fired by the delay timer while AddAfter calls go on), so the
// ring empties many times per batch and peaks at a different count each
// time. After the first batches, no batch may reallocate the buffer.
func TestRingKeepsRoomForWanderingBatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var r ring[int]
	batch := func() {
		lag := 5000 + rng.IntN(4000) // pushed before the consumer starts
		for i := 1; i <= 10000; i++ {
			r.Push(i)
			if i > lag {
				// The consumer is faster than the producer: the
				// ring empties, again and again.
				for range 2 {
					if r.Len() > 0 {
						r.Pop()
					}
				}
			}
		}
		for r.Len() > 0 {
			r.Pop()
		}
	}
	for range 3 {
		batch()
	}
	buf := &r.buf[0]
	for i := range 20 {
		batch()
		require.Same(t, buf, &r.buf[0], "batch %d reallocated the buffer (now %d slots)", i+4, len(r.buf))
	}
	checkRing(t, &r, "after the batches")
}

// TestRingPoppedKeyCollectable checks that the ring keeps no reference to a
// popped key: it can be garbage-collected while the ring lives on.
func TestRingPoppedKeyCollectable(t *testing.T) {
	var r ring[*[64]byte]
	collected := make(chan struct{})
	func() {
		p := new([64]byte)
		runtime.AddCleanup(p, func(c chan struct{}) { close(c) }, collected)
		for range 5 {
			r.Push(new([64]byte))
		}
		r.Push(p)
		r.Push(new([64]byte))
		for range 6 {
			r.Pop()
		}
	}()
	collectedInTime := false
	for range 50 {
		runtime.GC()
		runtime.Gosched()
		select {
		case <-collected:
			collectedInTime = true
		default:
		}
		if collectedInTime {
			break
		}
	}
	require.True(t, collectedInTime, "a popped key must be collectable while the ring is alive")
	require.Equal(t, 1, r.Len(), "the ring still holds the last item")
	runtime.KeepAlive(&r)
}

// TestFIFOStore checks the exported constructor: a FIFO that ignores Touch.
func TestFIFOStore(t *testing.T) {
	s := NewFIFOStore[string]()
	s.Push("a")
	s.Push("b")
	s.Push("c")
	s.Touch("a")
	s.Touch("b")
	require.Equal(t, 3, s.Len(), "three items")
	require.Equal(t, "a", s.Pop(), "Touch must not move an item in a FIFO")
	require.Equal(t, "b", s.Pop(), "FIFO")
	require.Equal(t, "c", s.Pop(), "FIFO")
	require.Zero(t, s.Len(), "empty")
}

// sliceStore is a user Store: a FIFO over a slice.
type sliceStore struct{ s []string }

func (s *sliceStore) Push(k string) { s.s = append(s.s, k) }
func (s *sliceStore) Pop() string   { k := s.s[0]; s.s = s.s[1:]; return k }
func (s *sliceStore) Len() int      { return len(s.s) }
func (s *sliceStore) Touch(string)  {}

// TestSharedStorePanics: a Store given to a second queue is caught in
// NewWithConfig with a clear panic, for the built-in stores and a user's,
// whatever the second constructor, instead of failing later inside the
// queue ("assignment to entry in nil map", or keys of one queue handed out
// by the other).
func TestSharedStorePanics(t *testing.T) {
	stores := map[string]func() Store[string]{
		"FIFOStore":     NewFIFOStore[string],
		"PriorityStore": func() Store[string] { return NewPriorityStore[string]() },
		"FairStore":     func() Store[string] { return NewFairStore(func(k string) string { return k[:1] }) },
		"user":          func() Store[string] { return &sliceStore{} },
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			s := mk()
			q := NewWithConfig(Config[string]{Store: s})
			q.Add("a")
			require.PanicsWithValue(t, "workqueue: Store already used by another queue", func() {
				NewWithConfig(Config[string]{Store: s})
			}, "a second queue on the same store must panic")
			require.PanicsWithValue(t, "workqueue: Store already used by another queue", func() {
				NewRateLimitingQueueWithConfig(nil, Config[string]{Name: "x", Store: s})
			}, "whatever the constructor")
			other := NewWithConfig(Config[string]{Store: mk()})
			other.Add("b")
			k, _ := q.Get()
			require.Equal(t, "a", k, "the first queue keeps working")
			k, _ = other.Get()
			require.Equal(t, "b", k, "and a queue on a store of its own works beside it")
		})
	}
}

// TestClaimedStoresAreForgotten: the set of claimed stores does not keep
// stores alive, and forgets them once they are gone.
func TestClaimedStoresAreForgotten(t *testing.T) {
	count := func() (n int) {
		claimed.Range(func(any, any) bool { n++; return true })
		return n
	}
	before := count()
	for range 100 {
		q := NewWithConfig(Config[string]{Store: &sliceStore{}})
		q.Add("a")
	}
	require.GreaterOrEqual(t, count(), before+100, "every live store is claimed")
	for i := 0; i < 1000 && count() > before; i++ {
		runtime.GC() // cleanups run on their own goroutine after a cycle
		runtime.Gosched()
	}
	require.LessOrEqual(t, count(), before, "the stores that died are forgotten")
}
