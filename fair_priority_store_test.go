package workqueue

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// letterTenant is the tenant of the script tests: a key's first letter, so
// that "a1 a2 b1" are two keys of tenant a and one of b.
func letterTenant(key string) string { return key[:1] }

func newTestFP(cfg FairPriority[string]) *fairPriorityStore[string] {
	return NewFairPriorityStore(cfg).(*fairPriorityStore[string])
}

// runFPScript drives a fair priority store, inside a synctest bubble, with
// a script of space-separated steps:
//
//	a1      Push(a1)
//	a1@3    PushPriority(a1, 3)
//	^a1@3   Raise(a1, 3)
//	-a1     Pop() must return a1; then handedOut(a1), as Get does
//	+a1     finished(a1); +a1=2: and it must return 2
//	!a1     remove(a1)
//	~5s     let 5s pass
//	#2      available() must be 2
//	=3      Len() must be 3
//
// It checks the store's invariants after each step.
func runFPScript(t *testing.T, cfg FairPriority[string], script string) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		t.Helper()
		s := newTestFP(cfg)
		for i, step := range strings.Fields(script) {
			switch arg := step[1:]; step[0] {
			case '-':
				require.Positive(t, s.available(), "step %d (%s): a key must be available", i, step)
				require.Equal(t, arg, s.Pop(), "step %d: wrong key popped", i)
				s.handedOut(arg)
			case '+':
				item, want, ok := strings.Cut(arg, "=")
				n := s.finished(item)
				if ok {
					require.Equal(t, want, strconv.Itoa(n), "step %d (%s): keys made available", i, step)
				}
			case '!':
				s.remove(arg)
			case '^':
				item, p := splitPrio(t, arg)
				s.Raise(item, p)
			case '~':
				d, err := time.ParseDuration(arg)
				require.NoError(t, err)
				time.Sleep(d)
			case '#':
				require.Equal(t, arg, strconv.Itoa(s.available()), "step %d: available", i)
			case '=':
				require.Equal(t, arg, strconv.Itoa(s.Len()), "step %d: Len", i)
			default:
				if strings.Contains(step, "@") {
					item, p := splitPrio(t, step)
					s.PushPriority(item, p)
				} else {
					s.Push(step)
				}
			}
			checkFairPriorityStore(t, s)
		}
	})
}

type fpScript struct{ name, script string }

func runFPScripts(t *testing.T, cfg FairPriority[string], scripts []fpScript) {
	t.Helper()
	for _, tc := range scripts {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runFPScript(t, cfg, tc.script)
		})
	}
}

func TestFairPriorityStoreOrder(t *testing.T) {
	t.Parallel()
	runFPScripts(t, FairPriority[string]{Tenant: letterTenant}, []fpScript{
		{"higher priority first", "a1@1 b1@3 c1@2 d1 -b1 -c1 -a1 -d1 =0"},
		{"Push is priority 0, above negatives", "a1@-1 b1 c1@-5 -b1 -a1 -c1"},
		{"tenants take turns within a level", "a1 a2 a3 b1 b2 c1 -a1 -b1 -c1 -a2 -b2 -a3"},
		{"each level has its own round", "a1@1 a2@1 b1@1 a3 b2 b3 -a1 -b1 -a2 -a3 -b2 -b3"},
		{"a new tenant joins at the back", "a1 a2 b1 -a1 c1 -b1 -a2 -c1"},
		{"a tenant that empties leaves, and rejoins at the back", "a1 b1 b2 -a1 a2 -b1 -a2 -b2"},
		{"a higher level interrupts a round, which resumes", "a1 a2 b1 b2 -a1 c1@1 -c1 -b1 -a2 -b2"},
		{"raise moves to the back of the tenant's FIFO in the higher level",
			"a1@1 a2@1 a3 ^a3@1 -a1 -a2 -a3"},
		{"raise keeps the tenant's place in the new level's round", "a1@1 b1@1 b2 ^b2@1 -a1 -b1 -b2"},
		{"raise makes a new level", "a1 a2 b1 ^a2@3 -a2 -a1 -b1"},
		{"lower raise does not demote", "a1@2 b1@2 ^a1@1 -a1 -b1"},
		{"equal raise keeps the place", "a1@2 a2@2 ^a1@2 -a1 -a2"},
		{"raise of an absent key does nothing", "a1 ^z1@9 -a1 ^a1@9 =0"},
		{"remove from the middle of a FIFO", "a1 a2 a3 b1 !a2 -a1 -b1 -a3 =0"},
		{"remove the front of a FIFO", "a1 a2 b1 !a1 -a2 -b1 =0"},
		{"remove empties a level", "a1@1 b1 !a1 #1 -b1 =0"},
		{"remove of an absent key does nothing", "a1 !z1 -a1 !a1 =0"},
		{"re-pushed after remove sits at the back", "a1 a2 !a1 a1 -a2 -a1"},
	})
}

// TestFairPriorityStoreNoTenant checks that without Tenant each level is a
// plain FIFO: the store is NewPriorityStore.
func TestFairPriorityStoreNoTenant(t *testing.T) {
	t.Parallel()
	runFPScripts(t, FairPriority[string]{}, []fpScript{
		{"FIFO within a level", "a1 a2 b1 a3 -a1 -a2 -b1 -a3"},
		{"priority first", "a1 b1@2 c1@1 -b1 -c1 -a1"},
	})
}

func TestFairPriorityStoreWeight(t *testing.T) {
	t.Parallel()
	weight := func(tenant string) int {
		return map[string]int{"a": 2, "b": 0}[tenant] // b: below 1 counts as 1
	}
	runFPScripts(t, FairPriority[string]{Tenant: letterTenant, Weight: weight}, []fpScript{
		{"a hands out two in a row", "a1 a2 a3 b1 b2 -a1 -a2 -b1 -a3 -b2"},
		{"a turn left by a higher level resumes", "a1 a2 a3 b1 -a1 c1@1 -c1 -a2 -b1 -a3"},
		{"a tenant that empties mid-turn ends its turn", "a1 b1 b2 -a1 a2 a3 -b1 -a2 -a3 -b2"},
	})
}

// TestFairPriorityStoreMaxWait checks the wait bound, in simulated time.
func TestFairPriorityStoreMaxWait(t *testing.T) {
	t.Parallel()
	runFPScripts(t, FairPriority[string]{MaxWait: 10 * time.Second}, []fpScript{
		{"strict priority until MaxWait, then the old key",
			"l1@-100 h1 ~5s h2 -h1 ~5s h3 -h2 ~1s -l1 -h3"},
		{"exactly MaxWait is not overdue", "l1@-1 ~10s h1 -h1 -l1"},
		{"overdue keys go out oldest first, across levels",
			"l1@-1 m1@-2 ~1s l2@-1 ~11s h1@5 -l1 -m1 -l2 -h1"},
		{"an overdue key does not pass keys older than it", "h1@5 l1@-1 ~11s -h1 -l1"},
		{"raise restarts the wait", "l1@-1 ~8s ^l1@0 h1@1 ~8s -h1 -l1"},
		{"remove takes an overdue key out of the bound", "l1@-1 l2@-1 ~11s !l1 h1 -l2 -h1"},
	})
	runFPScripts(t, FairPriority[string]{Tenant: letterTenant, MaxWait: 10 * time.Second}, []fpScript{
		// b1 goes out of turn, so b is still at the front of the round.
		{"an overdue key does not use up its tenant's turn", "b1 ~11s a1 a2 b2 -b1 -b2 -a1 -a2"},
		{"the oldest front among tenants", "a1@-1 b1@-2 a2@-1 ~11s h1@3 -a1 -b1 -a2 -h1"},
	})
	// A capped tenant's overdue key waits for its tenant's Done.
	runFPScripts(t, FairPriority[string]{Tenant: letterTenant, MaxWait: 10 * time.Second, MaxInFlight: 1},
		[]fpScript{
			{"a held tenant's overdue key waits", "a1@-1 a2@-1 b1 b2 b3 ~11s -a1 -b1 +b1 +a1=1 -a2 -b2 +b2 -b3"},
		})
}

// TestFairPriorityStoreNoClockWithoutMaxWait checks that with MaxWait 0 the
// store stamps nothing and keeps no wait heap.
func TestFairPriorityStoreNoClockWithoutMaxWait(t *testing.T) {
	t.Parallel()
	s := newTestFP(FairPriority[string]{Tenant: letterTenant})
	for i := range 100 {
		s.PushPriority("a"+strconv.Itoa(i), i%3)
	}
	require.True(t, s.epoch.IsZero(), "no clock read at construction")
	for _, ln := range s.lanes.m {
		for j := range ln.fifo.Len() {
			require.Zero(t, ln.fifo.buf[(ln.fifo.head+j)&(len(ln.fifo.buf)-1)].at, "no stamp without MaxWait")
		}
	}
	require.Empty(t, s.wait, "no wait heap without MaxWait")
	for s.Len() > 0 {
		s.Pop()
	}
}

func TestFairPriorityStoreMaxInFlight(t *testing.T) {
	t.Parallel()
	runFPScripts(t, FairPriority[string]{Tenant: letterTenant, MaxInFlight: 1}, []fpScript{
		{"a tenant at its cap is skipped, others pass",
			"a1 a2 b1 b2 -a1 #2 =3 -b1 #0 =2 +a1=1 #1 -a2 +b1=1 -b2 +a2=0 +b2=0 =0"},
		{"a level whose tenants are all held is passed over", "a1@5 a2@5 b1 -a1 #1 -b1 +a1=1 -a2"},
		{"a held tenant's raised key stays held", "a1 a2 b1 -a1 ^a2@5 #1 -b1 +a1=1 -a2"},
		{"a held tenant's new keys stay held, in every level", "a1 b1 -a1 a2@3 a3 #1 -b1 +a1=2 -a2 +a2 -a3"},
		{"remove of a held key", "a1 a2 -a1 !a2 #0 =0 +a1=0"},
		{"Done frees the keys of every level", "a1 a2@1 a3@2 -a3 #0 +a3=2 -a2 +a2=1 -a1"},
		{"finished of a key not handed out does nothing", "a1 +a1=0 +z1=0 -a1 +a1=0 +a1=0"},
	})
	runFPScripts(t, FairPriority[string]{Tenant: letterTenant, MaxInFlight: 2}, []fpScript{
		{"below the cap Done frees nothing", "a1 a2 a3 -a1 +a1=0 -a2 -a3 #0 +a2=0"},
		// a and b reach their cap; a is freed first and c pushes after,
		// so the round is a, c, b.
		{"a freed tenant rejoins at the back",
			"a1 a2 a3 b1 b2 b3 c1 -a1 -b1 -c1 -a2 -b2 #0 +a1=1 c2 +b1=1 -a3 -c2 -b3"},
	})
}

func TestFairPriorityStoreTouch(t *testing.T) {
	t.Parallel()
	s := newTestFP(FairPriority[string]{Tenant: letterTenant})
	s.Push("a1")
	s.Push("a2")
	s.Touch("a1")
	require.Equal(t, 2, s.Len(), "Touch must not add a key")
	require.Equal(t, "a1", s.Pop(), "Touch must not move a key to the back")
	require.Equal(t, "a2", s.Pop())
}

func TestFairPriorityStoreFronts(t *testing.T) {
	t.Parallel()
	s := newTestFP(FairPriority[string]{Tenant: letterTenant, MaxInFlight: 1})
	require.Empty(t, frontsOf(s), "an empty store has no fronts")
	for _, k := range []string{"a1", "b1", "a2"} {
		s.Push(k)
	}
	s.PushPriority("c1", 4)
	s.PushPriority("a3", 7)
	require.Equal(t, []string{"0:a1", "0:b1", "4:c1", "7:a3"}, frontsOf(s), "the oldest key of each tenant's FIFO at each level")
	require.Equal(t, "a3", s.Pop())
	s.handedOut("a3") // a at its cap: its keys wait
	require.Equal(t, []string{"0:a1", "0:b1", "4:c1"}, frontsOf(s), "a held tenant's FIFO still has its front: its keys wait")
	s.remove("c1")
	require.Equal(t, []string{"0:a1", "0:b1"}, frontsOf(s))
	s.remove("b1")
	require.Equal(t, []string{"0:a1"}, frontsOf(s), "a level whose every tenant is held has its front")
	n := 0
	s.PushPriority("c2", 9)
	s.fronts(func(int, string) bool { n++; return false })
	require.Equal(t, 1, n, "fronts stops when yield returns false")
}

func TestFairPriorityStoreBadConfigPanics(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]FairPriority[string]{
		"MaxInFlight without Tenant": {MaxInFlight: 1},
		"negative MaxInFlight":       {Tenant: letterTenant, MaxInFlight: -1},
		"negative MaxWait":           {MaxWait: -time.Second},
	} {
		require.PanicsWithValue(t, "workqueue: NewFairPriorityStore: "+map[string]string{
			"MaxInFlight without Tenant": "MaxInFlight needs a Tenant function",
			"negative MaxInFlight":       "negative MaxInFlight",
			"negative MaxWait":           "negative MaxWait",
		}[name], func() { NewFairPriorityStore(cfg) }, name)
	}
}

// TestFairPriorityStoreIsPriorityStore checks that with no option the store
// hands out keys exactly as NewPriorityStore, and with a Tenant but a single
// level exactly as NewWeightedFairStore, over random operations.
func TestFairPriorityStoreIsPriorityStore(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	s := newTestFP(FairPriority[string]{})
	p := NewPriorityStore[string]()
	in := map[string]bool{}
	for i := range 20_000 {
		k := "k" + strconv.Itoa(rng.IntN(64))
		switch prio := rng.IntN(5) - 2; {
		case rng.IntN(3) == 0 && len(in) > 0:
			a, b := s.Pop(), p.Pop()
			require.Equal(t, b, a, "op %d: Pop", i)
			delete(in, a)
		case in[k]:
			s.Raise(k, prio)
			p.Raise(k, prio)
		default:
			s.PushPriority(k, prio)
			p.PushPriority(k, prio)
			in[k] = true
		}
	}
	checkFairPriorityStore(t, s)

	weight := func(ns string) int { return len(ns) - 2 }
	s = newTestFP(FairPriority[string]{Tenant: namespaceOf, Weight: weight})
	f := NewWeightedFairStore(namespaceOf, weight)
	for i := range 20_000 {
		if rng.IntN(2) == 0 && f.Len() > 0 {
			require.Equal(t, f.Pop(), s.Pop(), "op %d: Pop", i)
			continue
		}
		k := "ns" + strings.Repeat("x", rng.IntN(4)) + "/" + strconv.Itoa(i)
		s.Push(k)
		f.Push(k)
	}
	checkFairPriorityStore(t, s)
}

// TestFairPriorityStoreMaxWaitGuarantee checks the godoc's promise over long
// random runs: whenever Pop returns a key, no available key that has been
// ready for longer than MaxWait entered its level before the returned one.
// It keeps its own record of when each key entered its level, so it relies
// on nothing the store computes.
func TestFairPriorityStoreMaxWaitGuarantee(t *testing.T) {
	t.Parallel()
	for _, capacity := range []int{0, 2} {
		t.Run("MaxInFlight="+strconv.Itoa(capacity), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				const maxWait = 10 * time.Second
				rng := rand.New(rand.NewPCG(3, uint64(capacity)))
				tenant := func(k int) string { return strconv.Itoa(k % 5) }
				s := NewFairPriorityStore(FairPriority[int]{Tenant: tenant, MaxWait: maxWait, MaxInFlight: capacity}).(*fairPriorityStore[int])
				type entered struct {
					n  int // order of entry into a level
					at time.Time
				}
				in := map[int]entered{}
				prio := map[int]int{}
				inflight := map[string]int{}
				var running []int
				n, overdueServed := 0, 0
				enter := func(k int) { n++; in[k] = entered{n, time.Now()} }
				for range 10_000 {
					k := rng.IntN(100)
					switch r := rng.IntN(10); {
					case r < 3: // a burst of high-priority keys
						if _, ok := in[k]; !ok {
							p := rng.IntN(3)
							s.PushPriority(k, p)
							prio[k] = p
							enter(k)
						}
					case r == 3:
						if _, ok := in[k]; !ok {
							s.PushPriority(k, -100)
							prio[k] = -100
							enter(k)
						} else if p := prio[k] + 1; p <= 2 {
							s.Raise(k, p)
							prio[k] = p
							enter(k)
						}
					case r < 8:
						if s.available() == 0 {
							break
						}
						got := s.Pop()
						g := in[got]
						for k, e := range in {
							held := capacity > 0 && inflight[tenant(k)] >= capacity
							if !held && time.Since(e.at) > maxWait {
								require.LessOrEqual(t, g.n, e.n,
									"key %d waited past MaxWait, but %d, which entered after it, went first", k, got)
							}
						}
						if time.Since(g.at) > maxWait {
							overdueServed++
						}
						delete(in, got)
						s.handedOut(got)
						inflight[tenant(got)]++
						running = append(running, got)
					case r == 8 && len(running) > 0:
						i := rng.IntN(len(running))
						s.finished(running[i])
						inflight[tenant(running[i])]--
						running = slices.Delete(running, i, i+1)
					default:
						time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
					}
				}
				require.Positive(t, overdueServed, "the run must exercise the bound")
			})
		})
	}
}

// TestFairPriorityStoreMemoryFollowsLiveKeys pushes 40k keys over many
// tenants and levels, pops them all, and checks that every structure gave
// its memory back.
func TestFairPriorityStoreMemoryFollowsLiveKeys(t *testing.T) {
	t.Parallel()
	const n = 40_000
	for _, cfg := range []struct {
		name string
		fp   FairPriority[int]
	}{
		{"plain", FairPriority[int]{}},
		{"tenants, MaxWait and MaxInFlight", FairPriority[int]{
			Tenant: func(i int) string { return strconv.Itoa(i % 1000) }, MaxWait: time.Minute, MaxInFlight: 1000,
		}},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			t.Parallel()
			s := NewFairPriorityStore(cfg.fp).(*fairPriorityStore[int])
			for i := range n {
				s.PushPriority(i, i%100)
			}
			for i := 0; i < n; i += 2 {
				s.Raise(i, 200) // holes everywhere
			}
			for s.Len() > 100 {
				s.handedOut(s.Pop())
			}
			checkFairPriorityStore(t, s)
			require.LessOrEqual(t, fpSlots(s), 8*s.Len()+minRing*len(s.lanes.m),
				"ring slots must follow the 100 live keys, not the 40k peak")
			for s.Len() > 0 {
				s.handedOut(s.Pop())
			}
			for i := range n {
				s.finished(i)
			}
			checkFairPriorityStore(t, s)
			require.Empty(t, s.index.m)
			require.Less(t, s.index.peak, shrinkMin, "the index must be rebuilt small after the burst")
			require.Empty(t, s.lanes.m, "no lane may outlive its keys")
			require.Less(t, s.lanes.peak, shrinkMin, "the lane map must be rebuilt small")
			require.Empty(t, s.levels.m, "no level may outlive its keys")
			require.Empty(t, s.tenants.m, "no tenant record may outlive its keys and runs")
			require.Less(t, s.tenants.peak, shrinkMin, "the tenant map must be rebuilt small")
			require.Empty(t, s.heap)
			require.LessOrEqual(t, cap(s.heap), 64, "the level heap must give back its array")
			require.Empty(t, s.wait)
			require.LessOrEqual(t, cap(s.wait), 64, "the wait heap must give back its array")
			require.LessOrEqual(t, fpSlots(s), maxSpareLanes*minRing, "only the spare lanes may keep a small ring")
		})
	}
}

// TestFairPriorityStoreReleasesKeys checks that the store keeps no
// reference to a key it handed out or removed, also when the key left a
// hole by being raised first.
func TestFairPriorityStoreReleasesKeys(t *testing.T) {
	t.Parallel()
	newStore := func() *fairPriorityStore[*[64]byte] {
		tenant := func(*[64]byte) string { return "t" }
		return NewFairPriorityStore(FairPriority[*[64]byte]{Tenant: tenant, MaxWait: time.Hour, MaxInFlight: 2}).(*fairPriorityStore[*[64]byte])
	}
	t.Run("popped", func(t *testing.T) {
		s := newStore()
		requireCollected(t, pushPopOne(s, func(x *[64]byte) { s.Push(x) }), "a popped key")
	})
	t.Run("raised, then popped", func(t *testing.T) {
		s := newStore()
		keep := new([64]byte)
		requireCollected(t, pushPopOne(s, func(x *[64]byte) {
			s.Push(x)
			s.Push(keep) // keeps the lane alive, with x's hole before it
			s.Raise(x, 1)
		}), "a key raised away and popped")
		require.Equal(t, keep, s.Pop(), "the other key is still there")
	})
	t.Run("removed", func(t *testing.T) {
		s := newStore()
		keep := new([64]byte)
		requireCollected(t, removeOne(s, keep), "a removed key")
		require.Equal(t, keep, s.Pop(), "the other key is still there")
	})
}

// removeOne pushes a key behind keep, removes it and forgets it. It returns
// a channel closed once the key has been garbage collected.
//
//go:noinline
func removeOne(s *fairPriorityStore[*[64]byte], keep *[64]byte) <-chan struct{} {
	x := new([64]byte)
	collected := make(chan struct{})
	runtime.AddCleanup(x, func(c chan struct{}) { close(c) }, collected)
	s.Push(keep)
	s.Push(x)
	s.Push(new([64]byte))
	s.remove(x) // a hole between two live keys
	return collected
}

// fpSlots counts the ring slots held by the store, spares included.
func fpSlots[T comparable](s *fairPriorityStore[T]) int {
	n := 0
	for _, ln := range s.lanes.m {
		n += len(ln.fifo.buf)
	}
	for _, ln := range s.spareLanes {
		n += len(ln.fifo.buf)
	}
	return n
}

// checkFairPriorityStore checks the invariants that the store's order,
// complexity and memory claims rest on: every count matches what the
// structures hold, a held lane is in no round and no heap, an active one in
// both, and holes stay fewer than live keys.
func checkFairPriorityStore[T comparable](t *testing.T, s *fairPriorityStore[T]) {
	t.Helper()
	keys, avail, activeLanes := 0, 0, 0
	lanesOf := map[*fpLevel[T]]int{}
	availOf := map[*fpLevel[T]]int{}
	activeOf := map[*fpLevel[T]]int{}
	for k, ln := range s.lanes.m {
		require.Equal(t, laneKey{ln.name, ln.level.prio}, k, "lane map key")
		require.Same(t, ln.level, s.levels.m[k.prio], "lane %v: its level is mapped", k)
		require.Positive(t, ln.live, "lane %v exists without keys", k)
		require.NotZero(t, ln.fifo.peek().seq, "lane %v: the front is live", k)
		require.LessOrEqual(t, ln.fifo.Len(), 2*ln.live, "lane %v: holes outnumber live keys", k)
		live := 0
		var prev uint64
		for j := range ln.fifo.Len() {
			r := &ln.fifo
			e := r.buf[(r.head+j)&(len(r.buf)-1)]
			if e.seq == 0 {
				require.Equal(t, fpEntry[T]{}, e, "lane %v: a hole must be zeroed", k)
				continue
			}
			live++
			require.Greater(t, e.seq, prev, "lane %v: entries in the order they entered", k)
			prev = e.seq
			require.Equal(t, fpSlot[T]{ln, ln.off + uint64(j)}, s.index.m[e.item], "lane %v: index slot", k)
			if s.maxWait == 0 {
				require.Zero(t, e.at, "no stamp without MaxWait")
			}
		}
		require.Equal(t, ln.live, live, "lane %v: live count", k)
		keys += live
		lanesOf[ln.level]++
		if s.maxInFlight > 0 {
			require.NotNil(t, ln.owner, "lane %v: a tenant record", k)
			require.Same(t, ln.owner, s.tenants.m[ln.name], "lane %v: its tenant record is mapped", k)
			require.Same(t, ln, ln.owner.lanes[ln.oi], "lane %v: listed by its tenant", k)
		} else {
			require.Nil(t, ln.owner, "no tenant records without MaxInFlight")
		}
		if ln.held() {
			require.Nil(t, ln.next, "lane %v: held, so in no round", k)
			require.Equal(t, -1, ln.wi, "lane %v: held, so not in the wait heap", k)
			require.Zero(t, ln.credit, "lane %v: held, so in no turn", k)
			continue
		}
		avail += live
		availOf[ln.level] += live
		activeOf[ln.level]++
		activeLanes++
		require.NotNil(t, ln.next, "lane %v: active, so in its round", k)
		if s.maxWait > 0 {
			require.Same(t, ln, s.wait[ln.wi], "lane %v: active, so in the wait heap", k)
		} else {
			require.Equal(t, -1, ln.wi, "no wait heap without MaxWait")
		}
	}
	require.Equal(t, keys, s.Len(), "every indexed key is live in its lane")
	require.Equal(t, avail, s.available(), "available counts the keys of active lanes")
	require.Len(t, s.levels.m, len(lanesOf), "every level has a lane")
	inHeap := 0
	for p, lv := range s.levels.m {
		require.Equal(t, p, lv.prio)
		require.Equal(t, lanesOf[lv], lv.lanes, "level %d: lane count", p)
		require.Equal(t, availOf[lv], lv.avail, "level %d: available count", p)
		require.Equal(t, lv.avail > 0, lv.inHeap, "level %d: in the heap iff it has available keys", p)
		if lv.inHeap {
			require.Same(t, lv, s.heap[lv.hi], "level %d: heap index", p)
			inHeap++
		}
		round := 0
		for x := lv.front; x != nil; x = x.next {
			require.Same(t, x, x.next.prev, "level %d: round links", p)
			require.Same(t, lv, x.level, "level %d: a lane of another level in the round", p)
			if x != lv.front {
				require.Zero(t, x.credit, "level %d: only the front lane may be in a turn", p)
			}
			round++
			require.LessOrEqual(t, round, lv.lanes, "level %d: the round must be a cycle", p)
			if x.next == lv.front {
				break
			}
		}
		require.Equal(t, activeOf[lv], round, "level %d: the round holds its active lanes", p)
	}
	require.Len(t, s.heap, inHeap, "the heap holds only mapped levels")
	for i := 1; i < len(s.heap); i++ {
		require.Greater(t, s.heap[(i-1)/2].prio, s.heap[i].prio, "level heap order at %d", i)
	}
	if s.maxWait > 0 {
		require.Len(t, s.wait, activeLanes, "the wait heap holds every active lane")
	} else {
		require.Empty(t, s.wait)
	}
	for i, ln := range s.wait {
		require.Equal(t, i, ln.wi, "wait heap index")
		if i > 0 {
			require.Less(t, s.wait[(i-1)/2].fifo.peek().seq, ln.fifo.peek().seq, "wait heap order at %d", i)
		}
	}
	for name, tr := range s.tenants.m {
		require.Equal(t, name, tr.name)
		require.Equal(t, tr.inflight >= s.maxInFlight, tr.held, "tenant %q: held iff at its cap", name)
		require.True(t, tr.inflight > 0 || len(tr.lanes) > 0, "tenant %q: a record with nothing to track", name)
		for i, ln := range tr.lanes {
			require.Equal(t, i, ln.oi)
			require.Same(t, tr, ln.owner)
			require.Same(t, ln, s.lanes.m[laneKey{name, ln.level.prio}], "tenant %q: a released lane", name)
		}
	}
	if s.last != nil {
		require.Same(t, s.last, s.lanes.m[laneKey{s.last.name, s.last.level.prio}], "last must be a lane in use")
	}
	require.LessOrEqual(t, len(s.spareLanes), maxSpareLanes)
	require.LessOrEqual(t, len(s.spareLevels), maxSpareLevels)
	require.LessOrEqual(t, len(s.spareTenants), maxSpareTenants)
	for _, ln := range s.spareLanes {
		require.Zero(t, ln.fifo.Len(), "a spare lane is empty")
		require.LessOrEqual(t, len(ln.fifo.buf), minRing, "a spare lane keeps a small ring")
		require.Empty(t, ln.name, "a spare lane keeps no name alive")
	}
}

// fpModel is the reference for FuzzFairPriorityStore: every key in one
// slice in the order it entered its level, and per level a slice of the
// tenants in its round, front first. Each operation is a scan.
type fpModel struct {
	tenant      func(int) string
	weight      func(string) int // nil: 1
	maxWait     time.Duration
	maxInFlight int

	keys     []fpModelKey
	seq      int
	rounds   map[int][]string // per priority: tenants with available keys there
	credit   map[int]int      // per priority: keys left in its front tenant's turn; 0: not started
	inflight map[string]int
}

type fpModelKey struct {
	item, prio, seq int
	tenant          string
	at              time.Time
}

func (m *fpModel) find(item int) int {
	return slices.IndexFunc(m.keys, func(k fpModelKey) bool { return k.item == item })
}

func (m *fpModel) held(tenant string) bool {
	return m.maxInFlight > 0 && m.inflight[tenant] >= m.maxInFlight
}

// count is how many keys tenant has at prio.
func (m *fpModel) count(tenant string, prio int) int {
	n := 0
	for _, k := range m.keys {
		if k.tenant == tenant && k.prio == prio {
			n++
		}
	}
	return n
}

func (m *fpModel) available() int {
	n := 0
	for _, k := range m.keys {
		if !m.held(k.tenant) {
			n++
		}
	}
	return n
}

func (m *fpModel) push(item, prio int) {
	tenant := m.tenant(item)
	if m.count(tenant, prio) == 0 && !m.held(tenant) {
		m.rounds[prio] = append(m.rounds[prio], tenant)
	}
	m.seq++
	m.keys = append(m.keys, fpModelKey{item: item, prio: prio, seq: m.seq, tenant: tenant, at: time.Now()})
}

// leave takes tenant out of prio's round, ending its turn if it had one.
func (m *fpModel) leave(tenant string, prio int) {
	if i := slices.Index(m.rounds[prio], tenant); i >= 0 {
		if i == 0 {
			m.credit[prio] = 0
		}
		m.rounds[prio] = slices.Delete(m.rounds[prio], i, i+1)
	}
}

// del removes the key at i; a tenant left without keys at its level leaves
// that level's round.
func (m *fpModel) del(i int) fpModelKey {
	k := m.keys[i]
	m.keys = slices.Delete(m.keys, i, i+1)
	if m.count(k.tenant, k.prio) == 0 {
		m.leave(k.tenant, k.prio)
	}
	return k
}

func (m *fpModel) raise(item, prio int) {
	if i := m.find(item); i >= 0 && prio > m.keys[i].prio {
		m.del(i)
		m.push(item, prio)
	}
}

func (m *fpModel) pop() int {
	if m.maxWait > 0 {
		for i, k := range m.keys { // oldest first
			if !m.held(k.tenant) {
				if time.Since(k.at) > m.maxWait {
					return m.del(i).item
				}
				break
			}
		}
	}
	top, found := 0, false
	for p, r := range m.rounds {
		if len(r) > 0 && (!found || p > top) {
			top, found = p, true
		}
	}
	tenant := m.rounds[top][0]
	if m.credit[top] == 0 {
		m.credit[top] = 1
		if m.weight != nil {
			m.credit[top] = max(1, m.weight(tenant))
		}
	}
	m.credit[top]--
	credit := m.credit[top]
	i := slices.IndexFunc(m.keys, func(k fpModelKey) bool { return k.tenant == tenant && k.prio == top })
	k := m.del(i)
	if m.count(tenant, top) > 0 && credit == 0 {
		m.rounds[top] = append(m.rounds[top][1:], tenant) // turn used up
	}
	return k.item
}

func (m *fpModel) handedOut(item int) {
	if m.maxInFlight == 0 {
		return
	}
	tenant := m.tenant(item)
	m.inflight[tenant]++
	if m.inflight[tenant] == m.maxInFlight {
		for p := range m.rounds {
			m.leave(tenant, p)
		}
	}
}

func (m *fpModel) finished(item int) int {
	tenant := m.tenant(item)
	if m.maxInFlight == 0 || m.inflight[tenant] == 0 {
		return 0
	}
	wasHeld := m.held(tenant)
	m.inflight[tenant]--
	if !wasHeld {
		return 0
	}
	n := 0
	levels := map[int]bool{}
	for _, k := range m.keys {
		if k.tenant == tenant {
			n++
			if !levels[k.prio] {
				levels[k.prio] = true
				m.rounds[k.prio] = append(m.rounds[k.prio], tenant) // at the back
			}
		}
	}
	return n
}

// fronts is the front (oldest key) of every lane, held tenants' included,
// as "prio:item", sorted.
func (m *fpModel) fronts() []string {
	seen := map[string]bool{}
	var f []string
	for _, k := range m.keys { // oldest first
		lane := fmt.Sprint(k.prio, "/", k.tenant)
		if !seen[lane] {
			seen[lane] = true
			f = append(f, fmt.Sprint(k.prio, ":", k.item))
		}
	}
	slices.Sort(f)
	return f
}

// frontsOf is what s.fronts yields, as fpModel.fronts has it.
func frontsOf[T comparable](s *fairPriorityStore[T]) []string {
	var f []string
	s.fronts(func(p int, item T) bool { f = append(f, fmt.Sprint(p, ":", item)); return true })
	slices.Sort(f)
	return f
}

// FuzzFairPriorityStore drives the store and fpModel with the same
// operations in simulated time and compares every result. The first byte
// picks the options (Tenant, Weight, MaxWait, MaxInFlight); then each
// operation is three bytes: what, a key, and a priority or a duration. Like
// the queue, it calls handedOut after each Pop and Pops only when a key is
// available; Push of a key the store holds becomes Touch. After each
// operation it also checks the wait bound directly against the model's
// stamps.
func FuzzFairPriorityStore(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{0x14, 0, 1, 0, 0, 2, 0, 3, 0, 0, 3, 0, 0, 4, 0, 0})
	f.Add([]byte{0x16, 1, 1, 3, 1, 2, 1, 0, 5, 1, 6, 0, 7, 3, 0, 0, 3, 0, 0, 2, 1, 4, 3, 0, 0, 4, 0, 0, 4, 1, 1})
	f.Add([]byte{0x24, 1, 0, 0, 1, 4, 1, 1, 8, 2, 3, 0, 0, 3, 0, 0, 6, 0, 7, 6, 0, 7, 1, 12, 4, 3, 0, 0, 3, 0, 0, 4, 0, 0, 3, 0, 0})
	f.Add([]byte{0x08, 1, 0, 254, 1, 1, 255, 6, 0, 7, 1, 2, 3, 3, 0, 0, 5, 1, 0, 3, 0, 0})
	// Many keys of one tenant in one level, most raised away or removed:
	// exercises compaction and holes at the front.
	b := []byte{0x10}
	for i := range 16 {
		b = append(b, 0, byte(4*i), 0)
	}
	for i := range 12 {
		b = append(b, 2+3*byte(i%2), byte(4*(15-i)), 3)
	}
	for range 16 {
		b = append(b, 3, 0, 0)
	}
	f.Add(b)

	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 {
			return
		}
		synctest.Test(t, func(t *testing.T) {
			c := ops[0]
			cfg := FairPriority[int]{
				MaxWait:     []time.Duration{0, time.Second, 3 * time.Second}[(c>>2)%3],
				MaxInFlight: int(c>>4) % 3,
			}
			m := fpModel{
				tenant:      func(int) string { return "" },
				rounds:      map[int][]string{},
				credit:      map[int]int{},
				inflight:    map[string]int{},
				maxWait:     cfg.MaxWait,
				maxInFlight: cfg.MaxInFlight,
			}
			if c&1 == 0 || cfg.MaxInFlight > 0 {
				cfg.Tenant = func(i int) string { return "t" + strconv.Itoa(i%4) }
				m.tenant = cfg.Tenant
			}
			if c&2 != 0 {
				// t1: 3 keys a turn; t2: 2; no tenant: -1, so 1.
				cfg.Weight = func(tenant string) int {
					return len(tenant) - 1 + 2*strings.Count(tenant, "1") + strings.Count(tenant, "2")
				}
				m.weight = cfg.Weight
			}
			s := NewFairPriorityStore(cfg).(*fairPriorityStore[int])
			var running []int
			for i := 1; i+2 < len(ops); i += 3 {
				op, item, arg := ops[i]%9, int(ops[i+1]%16), ops[i+2]
				switch op {
				case 0, 1: // Push / PushPriority, or Touch if present
					if m.find(item) >= 0 {
						s.Touch(item)
					} else if op == 0 {
						s.Push(item)
						m.push(item, 0)
					} else {
						s.PushPriority(item, fuzzPrio(arg))
						m.push(item, fuzzPrio(arg))
					}
				case 2:
					s.Raise(item, fuzzPrio(arg))
					m.raise(item, fuzzPrio(arg))
				case 3, 4: // Pop, as Get does
					if m.available() == 0 {
						break
					}
					got := s.Pop()
					j := m.find(got)
					require.GreaterOrEqual(t, j, 0, "op %d: Pop returned %d, which the store does not hold", i/3, got)
					for _, k := range m.keys {
						if m.maxWait > 0 && !m.held(k.tenant) && time.Since(k.at) > m.maxWait {
							require.LessOrEqual(t, m.keys[j].seq, k.seq,
								"op %d: %d waited past MaxWait, but %d, which entered after it, went first", i/3, k.item, got)
						}
					}
					require.Equal(t, m.pop(), got, "op %d: Pop", i/3)
					s.handedOut(got)
					m.handedOut(got)
					running = append(running, got)
				case 5: // Done of a running key
					if len(running) > 0 {
						j := int(arg) % len(running)
						require.Equal(t, m.finished(running[j]), s.finished(running[j]), "op %d: finished", i/3)
						running = slices.Delete(running, j, j+1)
					}
				case 6:
					if m.find(item) >= 0 {
						s.remove(item)
						m.del(m.find(item))
					}
				case 7:
					time.Sleep(time.Duration(arg%8) * 500 * time.Millisecond)
				case 8:
					s.Touch(item)
				}
				require.Equal(t, len(m.keys), s.Len(), "op %d: Len", i/3)
				require.Equal(t, m.available(), s.available(), "op %d: available", i/3)
				require.Equal(t, m.fronts(), frontsOf(s), "op %d: fronts", i/3)
				checkFairPriorityStore(t, s)
			}
			for len(running) > 0 || len(m.keys) > 0 {
				for m.available() > 0 {
					got := s.Pop()
					require.Equal(t, m.pop(), got, "drain: Pop")
					running = append(running, got)
					s.handedOut(got)
					m.handedOut(got)
				}
				if len(running) > 0 {
					require.Equal(t, m.finished(running[0]), s.finished(running[0]), "drain: finished")
					running = running[1:]
				}
			}
			require.Zero(t, s.Len(), "drained")
			checkFairPriorityStore(t, s)
			require.Empty(t, s.tenants.m, "no tenant record once nothing runs")
		})
	})
}
