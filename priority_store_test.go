package workqueue

import (
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runStoreScript drives a priority store with a tiny script of
// space-separated steps and checks every Pop:
//
//	a      Push(a)
//	a@3    PushPriority(a, 3)
//	^a@3   Raise(a, 3)
//	-a     Pop() must return a
//
// It checks the store's internal invariants after each step and that the
// store is empty at the end.
func runStoreScript(t *testing.T, s *priorityStore[string], script string) {
	t.Helper()
	for i, step := range strings.Fields(script) {
		switch {
		case step[0] == '-':
			require.NotZero(t, s.Len(), "step %d (%s): store must not be empty", i, step)
			require.Equal(t, step[1:], s.Pop(), "step %d: wrong key popped", i)
		case step[0] == '^':
			item, p := splitPrio(t, step[1:])
			s.Raise(item, p)
		case strings.Contains(step, "@"):
			item, p := splitPrio(t, step)
			s.PushPriority(item, p)
		default:
			s.Push(step)
		}
		checkPriorityStore(t, s)
	}
	require.Zero(t, s.Len(), "script must pop every key it pushed")
}

func splitPrio(t *testing.T, step string) (string, int) {
	t.Helper()
	item, ps, ok := strings.Cut(step, "@")
	require.True(t, ok, "step %q needs a priority", step)
	p, err := strconv.Atoi(ps)
	require.NoError(t, err, "step %q", step)
	return item, p
}

func TestPriorityStoreOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, script string }{
		{"plain push is FIFO", "a b c -a -b -c"},
		{"higher priority first", "a@1 b@3 c@2 d -b -c -a -d"},
		{"FIFO within a priority", "a@2 b@1 c@2 d@1 e@2 -a -c -e -b -d"},
		{"Push is priority 0, above negatives", "a@-1 b c@-5 d@0 -b -d -a -c"},
		{"later push waits behind earlier ones of its level", "a@1 b@1 -a c@1 d@2 -d -b -c"},
		{"raise moves to the back of the new level", "a b@1 c@1 ^a@1 -b -c -a"},
		{"raise above everything goes first", "a b c ^c@5 -c -a -b"},
		{"raise to a new level between others", "a@3 b c@1 ^b@2 -a -b -c"},
		{"lower raise does not demote", "a@2 b@2 ^a@1 -a -b"},
		{"equal raise keeps the place", "a@2 b@2 ^a@2 -a -b"},
		{"raise of an absent key does nothing", "a ^z@9 -a"},
		{"raise of a popped key does nothing", "a b -a ^a@9 -b"},
		{"repeated raises", "a b c ^a@1 ^b@1 ^a@2 ^c@1 -a -b -c"},
		{"raise empties a level", "a@1 b ^a@2 c@1 -a -c -b"},
		{"re-pushed after raise and pop sits at the back", "a b c ^a@1 -a a -b -c -a"},
		{"extreme priorities", "a@" + strconv.Itoa(math.MinInt) + " b@" + strconv.Itoa(math.MaxInt) + " c -b -c -a"},
		{"levels come and go", "a@1 -a b@2 -b c -c d@1 e@2 -e -d"},
		// Pops at the front leave b3 behind three holes: the level must
		// compact (checked by checkPriorityStore) and keep its order.
		{"pops that leave holes behind compact", "a0 a1 a2 a3 b0 b1 b2 b3 ^b0@1 ^b1@1 ^b2@1 " +
			"-b0 -b1 -b2 -a0 -a1 -a2 b4 -a3 -b3 -b4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runStoreScript(t, NewPriorityStore[string]().(*priorityStore[string]), tc.script)
		})
	}
}

// TestPriorityStoreTouch checks that a duplicate Add neither moves nor
// raises a key.
func TestPriorityStoreTouch(t *testing.T) {
	t.Parallel()
	s := NewPriorityStore[string]()
	s.PushPriority("a", 1)
	s.PushPriority("b", 1)
	s.Touch("a")
	require.Equal(t, 2, s.Len(), "Touch must not add a key")
	require.Equal(t, "a", s.Pop(), "Touch must not move a key to the back")
	require.Equal(t, "b", s.Pop())
}

// TestPriorityStoreMemoryFollowsLiveKeys pushes 100k keys, pops them all and
// checks that the index, the levels and the heap gave their memory back.
func TestPriorityStoreMemoryFollowsLiveKeys(t *testing.T) {
	t.Parallel()
	const n = 100_000
	for _, tc := range []struct {
		name string
		prio func(i int) int
	}{
		{"one level", func(int) int { return 0 }},
		{"8 levels", func(i int) int { return i % 8 }},
		{"every key its own level", func(i int) int { return i }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := NewPriorityStore[int]().(*priorityStore[int])
			for i := range n {
				s.PushPriority(i, tc.prio(i))
			}
			require.Equal(t, n, s.Len())
			for s.Len() > 100 {
				s.Pop()
			}
			checkPriorityStore(t, s)
			require.LessOrEqual(t, priorityStoreSlots(s), 8*s.Len()+minRing*len(s.levels.heap),
				"ring slots must follow the 100 live keys, not the 100k peak")
			require.LessOrEqual(t, cap(s.levels.heap), max(64, 8*len(s.levels.heap)),
				"the heap must shrink with the levels")
			for s.Len() > 0 {
				s.Pop()
			}
			checkPriorityStore(t, s)
			require.Empty(t, s.index.m)
			require.Less(t, s.index.peak, shrinkMin,
				"the index must be rebuilt small after the burst (a Go map never shrinks)")
			require.Empty(t, s.levels.byPrio.m, "no level may outlive its keys")
			require.Less(t, s.levels.byPrio.peak, shrinkMin, "the levels map must be rebuilt small")
			require.Empty(t, s.levels.heap, "the heap holds only non-empty levels")
			require.LessOrEqual(t, cap(s.levels.heap), 64, "the heap must give back its array")
			require.LessOrEqual(t, priorityStoreSlots(s), maxSpareLevels*minRing,
				"only the few spare levels may keep a small ring")
		})
	}
}

// TestPriorityStoreRaiseCompacts raises most keys of a level away and checks
// that the holes they leave do not keep the level's ring large.
func TestPriorityStoreRaiseCompacts(t *testing.T) {
	t.Parallel()
	const n = 10_000
	s := NewPriorityStore[int]().(*priorityStore[int])
	for i := range n {
		s.Push(i)
	}
	// Raise all but every 1000th key, in an order that leaves holes
	// everywhere, not only at the front.
	for i := n - 1; i >= 0; i-- {
		if i%1000 != 0 {
			s.Raise(i, 1)
		}
	}
	checkPriorityStore(t, s)
	l0 := s.levels.byPrio.m[0]
	require.Equal(t, 10, l0.live, "level 0 keeps the keys not raised")
	require.LessOrEqual(t, l0.fifo.Len(), 2*l0.live, "holes may not outnumber live keys")
	for range n - 10 {
		s.Pop()
	}
	require.LessOrEqual(t, priorityStoreSlots(s), 8*10+minRing,
		"after the raised keys are popped, only level 0's small ring is left")
	for i := range 10 {
		require.Equal(t, i*1000, s.Pop(), "level 0 keeps its FIFO order through compaction")
	}
}

// TestPriorityStoreReleasesKeys checks that the store keeps no reference to
// a key it handed out, also when the key left a hole in a lower level by
// being raised before it was popped.
func TestPriorityStoreReleasesKeys(t *testing.T) {
	t.Parallel()
	t.Run("popped", func(t *testing.T) {
		s := NewPriorityStore[*[64]byte]()
		requireCollected(t, pushPopOne(s, func(x *[64]byte) {
			s.Push(x)
		}), "a popped key")
		require.Zero(t, s.Len())
	})
	t.Run("raised, then popped", func(t *testing.T) {
		s := NewPriorityStore[*[64]byte]()
		keep := new([64]byte)
		requireCollected(t, pushPopOne(s, func(x *[64]byte) {
			s.Push(x)
			s.Push(keep) // keeps level 0 alive, with x's hole before it
			s.Raise(x, 1)
		}), "a key raised away and popped")
		require.Equal(t, keep, s.Pop(), "the other key is still there")
	})
}

// pushPopOne makes a key, lets push store it, pops it and forgets it. It
// returns a channel that is closed once the key has been garbage collected.
//
//go:noinline
func pushPopOne(s Store[*[64]byte], push func(*[64]byte)) <-chan struct{} {
	x := new([64]byte)
	collected := make(chan struct{})
	runtime.AddCleanup(x, func(c chan struct{}) { close(c) }, collected)
	push(x)
	if s.Pop() != x {
		panic("pushPopOne: the store must hand out the key first")
	}
	return collected
}

// requireCollected runs the garbage collector and waits for collected to be
// closed. It does not sleep: it blocks on the channel, with a generous
// deadline only so that a leak fails instead of hanging.
func requireCollected(t *testing.T, collected <-chan struct{}, what string) {
	t.Helper()
	runtime.GC()
	select {
	case <-collected:
	case <-time.After(10 * time.Second):
		require.FailNow(t, what+" must be garbage collectable: the store still references it")
	}
}

// priorityStoreSlots counts the ring slots held by the store, spares
// included.
func priorityStoreSlots[T comparable](s *priorityStore[T]) int {
	n := 0
	for _, l := range s.levels.heap {
		n += len(l.fifo.buf)
	}
	for _, l := range s.levels.spare {
		n += len(l.fifo.buf)
	}
	return n
}

// checkPriorityStore checks the invariants that the store's complexity and
// memory claims rest on.
func checkPriorityStore[T comparable](t *testing.T, s *priorityStore[T]) {
	t.Helper()
	require.Len(t, s.levels.byPrio.m, len(s.levels.heap), "the heap and the levels map hold the same levels")
	live := 0
	for i, l := range s.levels.heap {
		require.Equal(t, i, l.hi, "level %d must know its heap index", l.prio)
		if i > 0 {
			require.Greater(t, s.levels.heap[(i-1)/2].prio, l.prio, "heap order at %d", i)
		}
		require.Same(t, l, s.levels.byPrio.m[l.prio], "levels map entry of %d", l.prio)
		require.Positive(t, l.live, "level %d is in the heap with no live key", l.prio)
		require.LessOrEqual(t, l.fifo.Len(), 2*l.live, "level %d: holes outnumber live keys", l.prio)
		n := 0
		for j := range l.fifo.Len() {
			if e := l.at(l.off + uint64(j)); e.ok {
				n++
				require.Equal(t, prioSlot{l.prio, l.off + uint64(j)}, s.index.m[e.item],
					"level %d: index slot of a live entry", l.prio)
			} else {
				require.Equal(t, prioEntry[T]{}, *e, "level %d: a hole must be zeroed", l.prio)
			}
		}
		require.Equal(t, l.live, n, "level %d: live count", l.prio)
		live += n
	}
	require.Equal(t, live, s.Len(), "every indexed key is live in its level")
	if s.levels.last != nil {
		require.Same(t, s.levels.last, s.levels.byPrio.m[s.levels.last.prio], "last must be a level in use")
	}
	require.LessOrEqual(t, len(s.levels.spare), maxSpareLevels)
	for _, l := range s.levels.spare {
		require.Zero(t, l.fifo.Len(), "a spare level is empty")
		require.LessOrEqual(t, len(l.fifo.buf), minRing, "a spare level keeps a small ring")
	}
}

// prioModel is the reference for FuzzPriorityStore: a slice kept sorted by
// (priority desc, seq asc), where seq counts pushes and raises.
type prioModel struct {
	keys []prioModelKey
	seq  int
}

type prioModelKey struct{ item, prio, seq int }

func (m *prioModel) find(item int) int {
	return slices.IndexFunc(m.keys, func(k prioModelKey) bool { return k.item == item })
}

func (m *prioModel) push(item, prio int) {
	m.seq++
	m.keys = append(m.keys, prioModelKey{item, prio, m.seq})
	slices.SortFunc(m.keys, func(a, b prioModelKey) int {
		if a.prio != b.prio {
			if a.prio > b.prio {
				return -1
			}
			return 1
		}
		return a.seq - b.seq
	})
}

func (m *prioModel) raise(item, prio int) {
	if i := m.find(item); i >= 0 && prio > m.keys[i].prio {
		m.keys = slices.Delete(m.keys, i, i+1)
		m.push(item, prio)
	}
}

func (m *prioModel) pop() int {
	item := m.keys[0].item
	m.keys = m.keys[1:]
	return item
}

// fuzzPrio maps a byte to a priority: mostly a few small ones, so that keys
// share levels, and now and then an extreme one.
func fuzzPrio(b byte) int {
	switch b {
	case 255:
		return math.MaxInt
	case 254:
		return math.MinInt
	}
	return int(b%7) - 2
}

// FuzzPriorityStore drives the priority store and prioModel with the same
// operations, three bytes each, and compares every result. Push of a key the
// store holds becomes Touch, as the queue would do; Raise is called with any
// key and priority, since the store defines what happens when it is absent
// or not higher.
func FuzzPriorityStore(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 1, 0, 0, 2, 0, 3, 0, 0, 3, 0, 0})
	f.Add([]byte{1, 1, 3, 1, 2, 1, 2, 1, 4, 3, 0, 0, 3, 0, 0, 4, 0, 0})
	f.Add([]byte{1, 1, 255, 1, 2, 254, 1, 3, 0, 2, 3, 255, 3, 0, 0, 3, 0, 0, 3, 0, 0})
	// Many keys in one level, most raised away: exercises compaction.
	var b []byte
	for i := range 24 {
		b = append(b, 0, byte(i), 0)
	}
	for i := range 20 {
		b = append(b, 2, byte(23-i), byte(3+i%2))
	}
	for range 24 {
		b = append(b, 3, 0, 0)
	}
	f.Add(b)

	f.Fuzz(func(t *testing.T, ops []byte) {
		s := NewPriorityStore[int]().(*priorityStore[int])
		var m prioModel
		for i := 0; i+2 < len(ops); i += 3 {
			op, item, prio := ops[i]%6, int(ops[i+1]%32), fuzzPrio(ops[i+2])
			switch op {
			case 0, 1: // Push / PushPriority, or Touch if present
				if m.find(item) >= 0 {
					s.Touch(item)
					break
				}
				if op == 0 {
					prio = 0
					s.Push(item)
				} else {
					s.PushPriority(item, prio)
				}
				m.push(item, prio)
			case 2:
				s.Raise(item, prio)
				m.raise(item, prio)
			case 3:
				if len(m.keys) > 0 {
					require.Equal(t, m.pop(), s.Pop(), "op %d: Pop", i/3)
				}
			case 4:
				require.Equal(t, len(m.keys), s.Len(), "op %d: Len", i/3)
			case 5:
				if m.find(item) >= 0 {
					s.Touch(item)
				}
			}
			checkPriorityStore(t, s)
		}
		for len(m.keys) > 0 {
			require.Equal(t, m.pop(), s.Pop(), "drain")
		}
		require.Zero(t, s.Len(), "drained")
		checkPriorityStore(t, s)
	})
}

// TestPriorityStoreInQueue checks the store behind a Queue: Get hands out
// keys by priority, and a duplicate AddWithPriority raises a ready key.
func TestPriorityStoreInQueue(t *testing.T) {
	t.Parallel()
	q := NewWithConfig(Config[string]{Store: NewPriorityStore[string]()})
	defer q.ShutDown()
	q.Add("resync/a")
	q.Add("resync/b")
	q.AddWithPriority("fresh/c", 10)
	q.AddWithPriority("resync/b", 10) // raised: to the back of level 10
	q.AddWithPriority("resync/a", -1) // lower: not demoted
	var got []string
	for q.Len() > 0 {
		k, shutdown := q.Get()
		require.False(t, shutdown)
		got = append(got, k)
		q.Done(k)
	}
	require.Equal(t, []string{"fresh/c", "resync/b", "resync/a"}, got, "Get order")
}
