package workqueue

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// namespaceOf is the tenant function of the tests: the namespace of a
// "namespace/name" key.
func namespaceOf(key string) string {
	ns, _, _ := strings.Cut(key, "/")
	return ns
}

func newTestFairStore(weight func(string) int) *fairStore[string] {
	return NewWeightedFairStore(namespaceOf, weight).(*fairStore[string])
}

// drainFair pops every key, checking the invariants after each Pop.
func drainFair(t *testing.T, s *fairStore[string]) []string {
	t.Helper()
	var got []string
	for s.Len() > 0 {
		got = append(got, s.Pop())
		checkFairStore(t, s)
	}
	return got
}

func TestFairStoreOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		weight func(string) int
		push   string // space-separated keys, pushed in order
		want   string // the order Pop must hand them out in
	}{
		{"one tenant is FIFO", nil, "a/1 a/2 a/3", "a/1 a/2 a/3"},
		{"round-robin", nil, "a/1 a/2 a/3 b/1 b/2 c/1", "a/1 b/1 c/1 a/2 b/2 a/3"},
		{"tenants join in order of their first key", nil, "c/1 a/1 c/2 b/1 a/2", "c/1 a/1 b/1 c/2 a/2"},
		{"weights", func(ns string) int { return map[string]int{"a": 3, "b": 1}[ns] },
			"a/1 a/2 a/3 a/4 a/5 b/1 b/2", "a/1 a/2 a/3 b/1 a/4 a/5 b/2"},
		{"weight below 1 counts as 1", func(string) int { return -5 },
			"a/1 a/2 b/1 b/2", "a/1 b/1 a/2 b/2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newTestFairStore(tc.weight)
			for _, k := range strings.Fields(tc.push) {
				s.Push(k)
				checkFairStore(t, s)
			}
			require.Equal(t, strings.Fields(tc.want), drainFair(t, s), "pop order")
		})
	}
}

// TestFairStoreFloodDelaysOthersOneTurn is the guarantee: after 100
// keys of tenant a, a single key of tenant b is handed out no later than
// second, within one turn of the round.
func TestFairStoreFloodDelaysOthersOneTurn(t *testing.T) {
	t.Parallel()
	s := newTestFairStore(nil)
	for i := range 100 {
		s.Push("a/" + strconv.Itoa(i))
	}
	s.Push("b/x")
	got := drainFair(t, s)
	require.Equal(t, "a/0", got[0], "a's first key was ready first")
	require.Equal(t, "b/x", got[1], "b's key must not wait for a's flood")
	for i, k := range got[2:] {
		require.Equal(t, "a/"+strconv.Itoa(i+1), k, "a's keys stay FIFO")
	}
}

// TestFairStoreLateJoinerWaitsOneTurn checks the bound while the round is
// busy: a tenant that joins behind k-1 tenants with many keys is served
// after at most k-1 keys, also when it joins in the middle of a round.
func TestFairStoreLateJoinerWaitsOneTurn(t *testing.T) {
	t.Parallel()
	s := newTestFairStore(nil)
	for i := range 50 {
		for _, ns := range []string{"a", "b", "c"} {
			s.Push(ns + "/" + strconv.Itoa(i))
		}
	}
	require.Equal(t, "a/0", s.Pop())
	s.Push("d/x") // round is now b c a d
	var before []string
	for k := s.Pop(); k != "d/x"; k = s.Pop() {
		before = append(before, k)
	}
	require.Equal(t, []string{"b/0", "c/0", "a/1"}, before,
		"d waits for one key of each tenant ahead of it, no more")
}

// TestFairStoreTenantRejoinsAtBack checks that a tenant that ran out of
// keys leaves the round and, with its next key, joins at the back.
func TestFairStoreTenantRejoinsAtBack(t *testing.T) {
	t.Parallel()
	s := newTestFairStore(nil)
	s.Push("a/1")
	s.Push("b/1")
	s.Push("b/2")
	require.Equal(t, "a/1", s.Pop())
	require.NotContains(t, s.tenants.m, "a", "a has nothing ready: its bookkeeping must be gone")
	s.Push("c/1")
	s.Push("a/2")
	require.Equal(t, []string{"b/1", "c/1", "a/2", "b/2"}, drainFair(t, s))
}

// TestFairStoreWeightPerTurn checks that weight is asked when a turn starts,
// so a new weight applies from the tenant's next turn.
func TestFairStoreWeightPerTurn(t *testing.T) {
	t.Parallel()
	w := 2
	var asked []string
	s := newTestFairStore(func(ns string) int {
		asked = append(asked, ns)
		if ns == "a" {
			return w
		}
		return 1
	})
	for i := range 6 {
		s.Push("a/" + strconv.Itoa(i))
	}
	s.Push("b/0")
	s.Push("b/1")
	require.Equal(t, "a/0", s.Pop())
	w = 3 // a is in the middle of a turn of 2
	require.Equal(t, []string{"a/1", "b/0", "a/2", "a/3", "a/4", "b/1", "a/5"}, drainFair(t, s))
	require.Equal(t, []string{"a", "b", "a", "b", "a"}, asked, "weight is asked once per turn")
}

func TestFairStoreTouch(t *testing.T) {
	t.Parallel()
	s := newTestFairStore(nil)
	s.Push("a/1")
	s.Push("a/2")
	s.Touch("a/1")
	require.Equal(t, 2, s.Len(), "Touch must not add a key")
	require.Equal(t, []string{"a/1", "a/2"}, drainFair(t, s), "Touch must not move a key")
}

func TestFairStoreNilTenantPanics(t *testing.T) {
	t.Parallel()
	require.PanicsWithValue(t, "workqueue: NewFairStore needs a tenant function", func() {
		NewFairStore[string](nil)
	}, "a fair store cannot work without tenants")
}

// TestFairStoreMemoryFollowsLiveKeys pushes 100k keys of 1000 tenants, pops
// them all and checks that the tenants' bookkeeping was given back.
func TestFairStoreMemoryFollowsLiveKeys(t *testing.T) {
	t.Parallel()
	const n, tenants = 100_000, 1000
	s := newTestFairStore(nil)
	for i := range n {
		s.Push(strconv.Itoa(i%tenants) + "/" + strconv.Itoa(i))
	}
	require.Equal(t, n, s.Len())
	require.Len(t, s.tenants.m, tenants)
	for s.Len() > 100 {
		s.Pop()
	}
	checkFairStore(t, s)
	require.Len(t, s.tenants.m, 100, "round-robin leaves one key for each of the last 100 tenants")
	require.LessOrEqual(t, fairStoreSlots(s), 100*minRing+maxSpareTenants*minRing,
		"each tenant left holds a small ring")
	for s.Len() > 0 {
		s.Pop()
	}
	checkFairStore(t, s)
	require.Nil(t, s.tail, "the round is empty")
	require.Empty(t, s.tenants.m)
	require.Less(t, s.tenants.peak, shrinkMin, "the tenant map must be rebuilt small after the burst")
	require.LessOrEqual(t, fairStoreSlots(s), maxSpareTenants*minRing,
		"only the few spare tenants may keep a small ring")
}

// TestFairStoreRingShrinks checks that one tenant's burst does not pin its
// ring once the burst is handed out.
func TestFairStoreRingShrinks(t *testing.T) {
	t.Parallel()
	s := newTestFairStore(nil)
	for i := range 100_000 {
		s.Push("a/" + strconv.Itoa(i))
	}
	for s.Len() > 10 {
		s.Pop()
	}
	require.LessOrEqual(t, fairStoreSlots(s), 4*minRing, "the ring follows the 10 live keys")
}

func TestFairStoreReleasesKeys(t *testing.T) {
	t.Parallel()
	s := NewFairStore(func(*[64]byte) string { return "a" })
	keep := new([64]byte)
	requireCollected(t, pushPopOne(s, func(x *[64]byte) {
		s.Push(x)
		s.Push(keep) // keeps the tenant, and the ring that held x, in use
	}), "a popped key")
	require.Equal(t, keep, s.Pop(), "the other key is still there")
}

// fairStoreSlots counts the ring slots held by the store, spares included.
func fairStoreSlots[T comparable](s *fairStore[T]) int {
	n := 0
	for _, t := range s.tenants.m {
		n += len(t.fifo.buf)
	}
	for _, t := range s.spare {
		n += len(t.fifo.buf)
	}
	return n
}

// checkFairStore checks the invariants behind the store's O(1) claims: the
// round holds exactly the tenants with ready keys, and only the front one
// can be in the middle of a turn.
func checkFairStore[T comparable](t *testing.T, s *fairStore[T]) {
	t.Helper()
	if s.tail == nil {
		require.Zero(t, s.n, "an empty round means an empty store")
		require.Empty(t, s.tenants.m, "no tenant outside the round")
	} else {
		tenants, keys := 0, 0
		for x := s.tail.next; ; x = x.next {
			require.Same(t, x, s.tenants.m[x.name], "tenant %q in the round and the map", x.name)
			require.Positive(t, x.fifo.Len(), "tenant %q is in the round with nothing ready", x.name)
			if x != s.tail.next {
				require.Zero(t, x.credit, "only the front tenant may be in the middle of a turn")
			}
			tenants++
			keys += x.fifo.Len()
			require.LessOrEqual(t, tenants, len(s.tenants.m), "the round must be a cycle over the map")
			if x == s.tail {
				break
			}
		}
		require.Len(t, s.tenants.m, tenants, "every mapped tenant is in the round")
		require.Equal(t, s.n, keys, "Len counts the keys of all tenants")
	}
	if s.last != nil {
		require.Same(t, s.last, s.tenants.m[s.last.name], "last must be a tenant in the round")
	}
	require.LessOrEqual(t, len(s.spare), maxSpareTenants)
	for _, x := range s.spare {
		require.Zero(t, x.fifo.Len(), "a spare tenant is empty")
		require.LessOrEqual(t, len(x.fifo.buf), minRing, "a spare tenant keeps a small ring")
		require.Empty(t, x.name, "a spare tenant keeps no name alive")
	}
}

// fairModel is the reference for FuzzFairStore: a naive simulation with a
// slice for the round and a slice of keys per tenant.
type fairModel struct {
	tenant func(int) string
	weight func(string) int // nil: 1
	round  []string         // tenants with ready keys, front first
	keys   map[string][]int
	credit int // pops left in the front tenant's turn; 0: not started
}

func (m *fairModel) has(item int) bool {
	return slices.Contains(m.keys[m.tenant(item)], item)
}

func (m *fairModel) len() int {
	n := 0
	for _, ks := range m.keys {
		n += len(ks)
	}
	return n
}

func (m *fairModel) push(item int) {
	ns := m.tenant(item)
	if len(m.keys[ns]) == 0 {
		m.round = append(m.round, ns)
	}
	m.keys[ns] = append(m.keys[ns], item)
}

func (m *fairModel) pop() int {
	ns := m.round[0]
	if m.credit == 0 {
		m.credit = 1
		if m.weight != nil {
			m.credit = max(1, m.weight(ns))
		}
	}
	item := m.keys[ns][0]
	m.keys[ns] = m.keys[ns][1:]
	m.credit--
	switch {
	case len(m.keys[ns]) == 0:
		delete(m.keys, ns)
		m.round = m.round[1:]
		m.credit = 0
	case m.credit == 0:
		m.round = append(m.round[1:], ns)
	}
	return item
}

// FuzzFairStore drives the fair store and fairModel with the same
// operations, two bytes each, and compares every result. The first byte
// chooses between equal and uneven weights. Keys are 0..63 and key k
// belongs to tenant k%5; Push of a key the store holds becomes Touch, as
// the queue would do.
func FuzzFairStore(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 1, 0, 2, 0, 6, 1, 0, 1, 0, 1, 0, 1, 0})
	f.Add([]byte{1, 0, 0, 0, 5, 0, 10, 0, 1, 1, 0, 1, 0, 1, 0, 1, 0, 2, 0})
	var flood []byte
	flood = append(flood, 0)
	for i := range 12 {
		flood = append(flood, 0, byte(5*i)) // tenant 0 only
	}
	flood = append(flood, 0, 3, 1, 0, 1, 0) // then one key of tenant 3
	f.Add(flood)

	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 {
			return
		}
		tenant := func(k int) string { return "t" + strconv.Itoa(k%5) }
		var weight func(string) int
		if ops[0]%2 == 1 {
			// t0..t4 weigh -1..3: both clamping and multi-key turns.
			weight = func(ns string) int { return int(ns[1]-'0') - 1 }
		}
		s := NewWeightedFairStore(tenant, weight).(*fairStore[int])
		m := &fairModel{tenant: tenant, weight: weight, keys: map[string][]int{}}
		ops = ops[1:]
		for i := 0; i+1 < len(ops); i += 2 {
			item := int(ops[i+1] % 64)
			switch ops[i] % 4 {
			case 0: // Push, or Touch if present
				if m.has(item) {
					s.Touch(item)
					break
				}
				s.Push(item)
				m.push(item)
			case 1:
				if m.len() > 0 {
					require.Equal(t, m.pop(), s.Pop(), "op %d: Pop", i/2)
				}
			case 2:
				require.Equal(t, m.len(), s.Len(), "op %d: Len", i/2)
			case 3:
				if m.has(item) {
					s.Touch(item)
				}
			}
			checkFairStore(t, s)
		}
		for m.len() > 0 {
			require.Equal(t, m.pop(), s.Pop(), "drain")
		}
		require.Zero(t, s.Len(), "drained")
		checkFairStore(t, s)
	})
}

// TestFairStoreInQueue checks the guarantee through a Queue: a flood
// of one namespace does not hold back another namespace's key.
func TestFairStoreInQueue(t *testing.T) {
	t.Parallel()
	q := NewWithConfig(Config[string]{Store: NewFairStore(namespaceOf)})
	defer q.ShutDown()
	for i := range 100 {
		q.Add("noisy/" + strconv.Itoa(i))
	}
	q.Add("quiet/x")
	var got []string
	for range 2 {
		k, shutdown := q.Get()
		require.False(t, shutdown)
		got = append(got, k)
		q.Done(k)
	}
	require.Equal(t, []string{"noisy/0", "quiet/x"}, got, "quiet's key is handed out second")
}
