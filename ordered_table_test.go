package workqueue

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkOrdered verifies every structural invariant of t against the keys
// the model says are processing (proc) and ready, in FIFO order (ready):
// each live key is found at its entry, the index holds exactly the live
// entries, dead entries are zeroed (so the log keeps no key alive), the
// processing entries lie before head and the ready ones from head on, in
// order.
func checkOrdered(t *testing.T, tab *orderedTable[string], proc map[string]uint8, ready []string) {
	t.Helper()
	require.Equal(t, len(proc)+len(ready), tab.live, "live")
	require.Equal(t, len(ready), tab.ready, "ready")
	occupied := 0
	for _, e := range tab.index {
		if e != 0 {
			occupied++
			p := int(uint32(e)) - 1
			require.Less(t, p, tab.tail, "an index slot points past the tail")
			require.NotZero(t, tab.flags[p], "an index slot points to a dead entry")
		}
	}
	require.Equal(t, tab.live, occupied, "index slots")
	if tab.keys == nil {
		require.Zero(t, tab.live)
		return
	}
	require.Len(t, tab.index, 2*len(tab.keys))
	if tab.timed {
		require.Len(t, tab.at, len(tab.keys))
		require.Len(t, tab.gen, len(tab.keys))
	}
	var gotReady []string
	for p := range len(tab.keys) {
		f := tab.flags[p]
		if f == 0 {
			require.Empty(t, tab.keys[p], "dead entry %d keeps its key", p)
			continue
		}
		require.Less(t, p, tab.tail, "live entry past the tail")
		k := tab.keys[p]
		_, _, pos := tab.find(k)
		require.Equal(t, p, pos, "key %v is not found at its entry", k)
		if p < tab.head {
			require.Equal(t, proc[k], f, "processing key %v has the wrong flags", k)
			if tab.timed {
				require.Equal(t, stamp(k)+1, tab.at[p], "processing key %v has lost its run start", k)
				require.Equal(t, uint16(stamp(k)), tab.gen[p], "processing key %v has lost its run's generation", k)
			}
		} else {
			if tab.timed {
				require.Equal(t, stamp(k), tab.at[p], "ready key %v has lost its dirty time", k)
			}
			require.Equal(t, fDirty, f, "ready key %v", k)
			gotReady = append(gotReady, k)
		}
	}
	if len(ready)+len(gotReady) > 0 {
		require.Equal(t, ready, gotReady, "ready keys in FIFO order")
	}
	for k := range proc {
		_, _, pos := tab.find(k)
		require.GreaterOrEqual(t, pos, 0, "processing key %v is lost", k)
	}
}

// orderedModel applies one operation to the table and to a model of it
// (proc: the processing keys and their flags; ready: the ready keys in
// FIFO order): op 0 adds k, 1 takes the oldest ready key, 2 finishes a
// processing key (Done: it dies, or moves to the tail if added again), 3
// removes k if it is ready.
func orderedModel(t *testing.T, tab *orderedTable[string], proc map[string]uint8, ready *[]string, op int, k string) {
	t.Helper()
	switch op {
	case 0:
		h, slot, pos := tab.find(k)
		switch {
		case pos < 0:
			if p := tab.insert(k, h, slot); tab.timed {
				tab.at[p] = stamp(k)
			}
			*ready = append(*ready, k)
		case tab.flags[pos]&fDirty == 0:
			tab.flags[pos] |= fDirty
			proc[k] |= fDirty
		}
	case 1:
		if tab.ready == 0 {
			return
		}
		got, p := tab.take()
		if tab.timed {
			tab.at[p], tab.gen[p] = stamp(got)+1, uint16(stamp(got))
		}
		require.Equal(t, (*ready)[0], got, "take is FIFO")
		*ready = (*ready)[1:]
		proc[got] = fProcessing
	case 2:
		pk, ok := proc[k]
		if !ok {
			for pk := range proc {
				k = pk // the map's order picks one
				break
			}
			if pk, ok = proc[k]; !ok {
				return
			}
		}
		_, slot, pos := tab.find(k)
		require.GreaterOrEqual(t, pos, 0)
		if pk&fDirty != 0 {
			if p := tab.requeue(slot, pos); tab.timed {
				tab.at[p] = stamp(k)
			}
			*ready = append(*ready, k)
		} else {
			tab.remove(slot, pos)
		}
		delete(proc, k)
	case 3:
		_, slot, pos := tab.find(k)
		if pos >= 0 && tab.flags[pos] == fDirty {
			tab.remove(slot, pos)
			*ready = slices.DeleteFunc(*ready, func(r string) bool { return r == k })
		}
	}
}

// stamp is the time a timed table's entry for k must carry, so that a
// compaction that moved a key without its time is caught.
func stamp(k string) int64 { return int64(len(k))<<8 | int64(k[len(k)-1]) }

// drainOrdered takes and finishes every key, and checks that the empty
// table keeps no more than the smallest log unless it keeps room for a
// recurring burst.
func drainOrdered(t *testing.T, tab *orderedTable[string], proc map[string]uint8, ready *[]string) {
	t.Helper()
	for tab.ready > 0 || len(proc) > 0 {
		orderedModel(t, tab, proc, ready, 1, "")
		orderedModel(t, tab, proc, ready, 2, "")
	}
	checkOrdered(t, tab, proc, *ready)
	require.Zero(t, tab.tail)
	if !tab.recurring() {
		require.LessOrEqual(t, len(tab.keys), minLog, "an empty table that keeps no burst holds at most the smallest log")
	}
}

// TestOrderedTableModel drives the table with random operations (the ones
// the queue makes: add, take, done, remove) over small and large key
// spaces, so that probe runs collide, the log compacts, grows and shrinks,
// and checks it against the model.
func TestOrderedTableModel(t *testing.T) {
	for _, tc := range []struct {
		space int
		timed bool
	}{{3, false}, {40, false}, {3000, false}, {40, true}, {3000, true}} {
		space := tc.space
		t.Run(fmt.Sprintf("keys=%d/timed=%v", space, tc.timed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(space), 7))
			tab := orderedTable[string]{timed: tc.timed}
			proc := map[string]uint8{}
			var ready []string
			steps := 20000
			for step := range steps {
				// Phases: fill, mixed, drain, so that the table
				// grows, churns and shrinks.
				weights := [][4]int{{70, 15, 10, 5}, {40, 25, 25, 10}, {10, 40, 40, 10}}[step*3/steps]
				op, r := 0, rng.IntN(100)
				for r >= weights[op] {
					r -= weights[op]
					op++
				}
				orderedModel(t, &tab, proc, &ready, op, "ns/"+strconv.Itoa(rng.IntN(space)))
				if space < 100 || step%499 == 0 {
					checkOrdered(t, &tab, proc, ready)
				}
			}
			drainOrdered(t, &tab, proc, &ready)
		})
	}
}

// FuzzOrderedTable is TestOrderedTableModel driven by the fuzzer: each
// byte is an operation (low 2 bits) on one of 64 keys (high 6 bits), and
// the table is checked after every one.
func FuzzOrderedTable(f *testing.F) {
	f.Add([]byte{0, 4, 8, 1, 1, 2, 2})
	f.Add([]byte{0, 1, 0, 2, 1, 2, 3})
	f.Add([]byte("the quick brown fox jumps over the lazy dog, 0123456789 times"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		// The first byte chooses a plain or a timed table.
		tab := orderedTable[string]{timed: len(ops) > 0 && ops[0]&1 == 1}
		proc := map[string]uint8{}
		var ready []string
		for _, b := range ops {
			orderedModel(t, &tab, proc, &ready, int(b&3), "k"+strconv.Itoa(int(b>>2)))
			checkOrdered(t, &tab, proc, ready)
		}
		drainOrdered(t, &tab, proc, &ready)
	})
}

// A burst larger than keepMax is given back once drained; a smaller burst
// that recurs keeps its room, so the third and later bursts allocate
// nothing.
func TestOrderedTableMemory(t *testing.T) {
	fill := func(tab *orderedTable[int], n int) {
		for i := range n {
			h, slot, _ := tab.find(i)
			tab.insert(i, h, slot)
		}
		for range n {
			k, _ := tab.take()
			_, slot, pos := tab.find(k)
			tab.remove(slot, pos)
		}
	}
	var big orderedTable[int]
	fill(&big, 4*keepMax)
	require.LessOrEqual(t, len(big.keys), minLog, "a drained large burst leaves at most the smallest log")

	var small orderedTable[int]
	fill(&small, 1000)
	fill(&small, 1000)
	allocs := testing.AllocsPerRun(5, func() { fill(&small, 1000) })
	require.Zero(t, allocs, "a recurring burst of 1000 keys allocates")
	require.Len(t, small.keys, 1024)

	// Shrinks while it drains, not only once empty.
	var drain orderedTable[int]
	for i := range 100000 {
		h, slot, _ := drain.find(i)
		drain.insert(i, h, slot)
	}
	peak := len(drain.keys)
	for range 99000 {
		k, _ := drain.take()
		_, slot, pos := drain.find(k)
		drain.remove(slot, pos)
	}
	require.LessOrEqual(t, len(drain.keys), peak/16, "1000 live keys keep a log sized for 100000")
}

// A queue whose keys cycle through processing+dirty fills its log with
// dead entries; compaction in place reclaims them without allocating.
func TestOrderedTableSteadyChurnAllocatesNothing(t *testing.T) {
	q := New[int]()
	for i := range 100 {
		q.Add(i)
	}
	cycle := func() {
		k, _ := q.Get()
		q.Add(k) // processing+dirty: Done moves it to the tail
		q.Done(k)
	}
	for range 1000 {
		cycle()
	}
	require.Zero(t, testing.AllocsPerRun(1000, cycle))
	require.LessOrEqual(t, len(q.tab.keys), 256, "the log grew without bound")
}

// Looking inside a plain queue (Inspect, State, MostRequeued, the debug
// page's calls) reads the ordered table where it is: it must not move the
// queue to the full table, which would cost it its memory and speed for
// good. The snapshot lists processing keys and then the ready ones in FIFO
// order.
func TestInspectKeepsOrderedTable(t *testing.T) {
	for _, metrics := range []bool{false, true} {
		t.Run(fmt.Sprintf("metrics=%v", metrics), func(t *testing.T) {
			q := New[string]()
			if metrics {
				q = NewWithConfig(Config[string]{Name: "inspect", Metrics: nopProvider{}})
			}
			for _, k := range []string{"a", "b", "c", "d"} {
				q.Add(k)
			}
			k, _ := q.Get() // a: processing
			q.Add(k)        // processing+dirty
			require.True(t, q.Remove("c"))
			got := q.Inspect(10)
			require.False(t, q.full, "Inspect moved a plain queue to the full table")
			var brief []string
			for _, e := range got {
				brief = append(brief, e.Key+":"+e.State.String())
				if metrics && e.State.Processing() {
					require.False(t, e.Started.IsZero(), "a processing key's start is known with metrics")
				}
			}
			require.Equal(t, []string{"a:" + KeyProcessingDirty.String(), "b:" + KeyReady.String(), "d:" + KeyReady.String()}, brief)
			require.Equal(t, KeyProcessingDirty, q.State("a"))
			require.Equal(t, KeyAbsent, q.State("c"))
			require.False(t, q.full, "State moved a plain queue to the full table")
		})
	}
}
