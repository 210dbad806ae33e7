package workqueue

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// tableModel is what an ordered table must hold: the processing keys and
// their flags (fProcessing, maybe with fDirty or fWaiting), the ready keys
// in FIFO order, and the keys that only wait for a deadline.
type tableModel struct {
	proc  map[string]uint8
	ready []string
	waits map[string]bool
}

func newTableModel() *tableModel {
	return &tableModel{proc: map[string]uint8{}, waits: map[string]bool{}}
}

// checkOrdered verifies every structural invariant of tab against m: each
// live key is found at its entry, the index holds exactly the live entries,
// dead entries are zeroed (so the log keeps no key alive), processing
// entries lie before head and ready ones from head on, in order, waiting
// ones anywhere, and the times and deadlines of a timed or delayed table
// moved with their keys.
func checkOrdered(t *testing.T, tab *orderedTable[string], m *tableModel) {
	t.Helper()
	require.Equal(t, len(m.proc)+len(m.ready)+len(m.waits), tab.live, "live")
	require.Equal(t, len(m.ready), tab.ready, "ready")
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
	if tab.delayed {
		require.Len(t, tab.when, len(tab.keys))
		require.Len(t, tab.wseq, len(tab.keys))
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
		if f&fWaiting != 0 {
			require.Equal(t, stamp(k)+2, tab.when[p], "waiting key %v has lost its deadline", k)
			require.Equal(t, uint64(stamp(k)+3), tab.wseq[p], "waiting key %v has lost its delay entry", k)
		}
		switch {
		case f == fWaiting:
			require.True(t, m.waits[k], "key %v waits in the table only", k)
		case p < tab.head:
			require.Equal(t, m.proc[k], f, "processing key %v has the wrong flags", k)
			if tab.timed {
				require.Equal(t, stamp(k)+1, tab.at[p], "processing key %v has lost its run start", k)
				require.Equal(t, uint16(stamp(k)), tab.gen[p], "processing key %v has lost its run's generation", k)
			}
		default:
			require.Equal(t, fDirty, f, "key %v after head", k)
			if tab.timed {
				require.Equal(t, stamp(k), tab.at[p], "ready key %v has lost its dirty time", k)
			}
			gotReady = append(gotReady, k)
		}
	}
	if len(m.ready)+len(gotReady) > 0 {
		require.Equal(t, m.ready, gotReady, "ready keys in FIFO order")
	}
	for k := range m.proc {
		_, _, pos := tab.find(k)
		require.GreaterOrEqual(t, pos, 0, "processing key %v is lost", k)
	}
}

// orderedOps is how many operations orderedModel knows.
const orderedOps = 6

// orderedModel applies one operation to the table and to m, as the queue
// makes them: 0 adds k, 1 takes the oldest ready key, 2 finishes a
// processing key (Done: it dies, moves to the tail if added again, or
// keeps waiting), 3 removes k if it is ready or only waiting, 4 gives k a
// deadline (AddAfter: an absent key's entry is appended as waiting, a
// processing one is marked), 5 makes a waiting key due (its deadline
// passed: it moves to the tail, or a processing one becomes dirty).
func orderedModel(t *testing.T, tab *orderedTable[string], m *tableModel, op int, k string) {
	t.Helper()
	switch op {
	case 0:
		h, slot, pos := tab.find(k)
		switch {
		case pos < 0:
			if p := tab.insert(k, h, slot, 0); tab.timed {
				tab.at[p] = stamp(k)
			}
			m.ready = append(m.ready, k)
		case tab.flags[pos]&fDirty != 0:
		case tab.flags[pos]&fWaiting != 0:
			orderedModel(t, tab, m, 5, k)
		default:
			tab.flags[pos] |= fDirty
			m.proc[k] |= fDirty
		}
	case 1:
		if tab.ready == 0 {
			return
		}
		got, p := tab.take()
		if tab.timed {
			tab.at[p], tab.gen[p] = stamp(got)+1, uint16(stamp(got))
		}
		require.Equal(t, m.ready[0], got, "take is FIFO")
		m.ready = m.ready[1:]
		m.proc[got] = fProcessing
	case 2:
		pk, ok := m.proc[k]
		if !ok {
			for pk := range m.proc {
				k = pk // the map's order picks one
				break
			}
			if pk, ok = m.proc[k]; !ok {
				return
			}
		}
		_, slot, pos := tab.find(k)
		require.GreaterOrEqual(t, pos, 0)
		switch {
		case pk&fDirty != 0:
			if p := tab.requeue(slot, pos); tab.timed {
				tab.at[p] = stamp(k)
			}
			m.ready = append(m.ready, k)
		case pk&fWaiting != 0:
			tab.flags[pos] = fWaiting
			m.waits[k] = true
		default:
			tab.remove(slot, pos)
		}
		delete(m.proc, k)
	case 3:
		_, slot, pos := tab.find(k)
		if pos >= 0 && (tab.flags[pos] == fDirty || tab.flags[pos] == fWaiting) {
			tab.remove(slot, pos)
			m.ready = slices.DeleteFunc(m.ready, func(r string) bool { return r == k })
			delete(m.waits, k)
		}
	case 4:
		tab.enableDelays()
		h, slot, pos := tab.find(k)
		switch {
		case pos < 0:
			pos = tab.insertAs(k, h, slot, fWaiting, 0)
			m.waits[k] = true
		case tab.flags[pos] == fProcessing:
			tab.flags[pos] |= fWaiting
			m.proc[k] |= fWaiting
		default:
			return // due already, or waiting: nothing changes here
		}
		tab.when[pos], tab.wseq[pos] = stamp(k)+2, uint64(stamp(k)+3)
	case 5:
		if !m.waits[k] && m.proc[k]&fWaiting == 0 {
			for wk := range m.waits {
				k = wk
				break
			}
		}
		_, slot, pos := tab.find(k)
		if pos < 0 || tab.flags[pos]&fWaiting == 0 {
			return
		}
		if tab.flags[pos]&fProcessing != 0 {
			tab.flags[pos] = fProcessing | fDirty
			m.proc[k] = fProcessing | fDirty
			return
		}
		if p := tab.promote(slot, pos); tab.timed {
			tab.at[p] = stamp(k)
		}
		delete(m.waits, k)
		m.ready = append(m.ready, k)
	}
}

// stamp is the time a timed table's entry for k must carry, so that a
// compaction that moved a key without its time is caught.
func stamp(k string) int64 { return int64(len(k))<<8 | int64(k[len(k)-1]) }

// drainOrdered fires, takes and finishes every key, and checks that the
// empty table keeps no more than the smallest log unless it keeps room for
// a recurring burst.
func drainOrdered(t *testing.T, tab *orderedTable[string], m *tableModel) {
	t.Helper()
	for tab.ready > 0 || len(m.proc) > 0 || len(m.waits) > 0 {
		orderedModel(t, tab, m, 5, "")
		orderedModel(t, tab, m, 1, "")
		orderedModel(t, tab, m, 2, "")
	}
	checkOrdered(t, tab, m)
	require.Zero(t, tab.tail)
	if !tab.recurring() {
		require.LessOrEqual(t, len(tab.keys), minLog, "an empty table that keeps no burst holds at most the smallest log")
	}
}

// TestOrderedTableModel drives the table with random operations (the ones
// the queue makes) over small and large key spaces, so that probe runs
// collide, the log compacts, grows and shrinks, and checks it against the
// model.
func TestOrderedTableModel(t *testing.T) {
	for _, tc := range []struct {
		space          int
		timed, delayed bool
	}{{3, false, false}, {40, false, false}, {3000, false, false}, {40, true, false}, {3000, true, false}, {40, true, true}, {3000, false, true}} {
		space := tc.space
		t.Run(fmt.Sprintf("keys=%d/timed=%v/delayed=%v", space, tc.timed, tc.delayed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(space), 7))
			tab := orderedTable[string]{timed: tc.timed}
			m := newTableModel()
			steps := 20000
			for step := range steps {
				// Phases: fill, mixed, drain, so that the table
				// grows, churns and shrinks.
				weights := [][orderedOps]int{{60, 15, 10, 5, 5, 5}, {35, 25, 20, 10, 5, 5}, {10, 35, 35, 10, 0, 10}}[step*3/steps]
				if !tc.delayed {
					weights[0] += weights[4] + weights[5]
					weights[4], weights[5] = 0, 0
				}
				op, r := 0, rng.IntN(100)
				for r >= weights[op] {
					r -= weights[op]
					op++
				}
				orderedModel(t, &tab, m, op, "ns/"+strconv.Itoa(rng.IntN(space)))
				if space < 100 || step%499 == 0 {
					checkOrdered(t, &tab, m)
				}
			}
			drainOrdered(t, &tab, m)
		})
	}
}

// FuzzOrderedTable is TestOrderedTableModel driven by the fuzzer: each
// byte is an operation (low 3 bits, modulo orderedOps) on one of 32 keys
// (high 5 bits), and the table is checked after every one.
func FuzzOrderedTable(f *testing.F) {
	f.Add([]byte{0, 8, 16, 1, 1, 2, 2})
	f.Add([]byte{0, 1, 0, 2, 1, 2, 3})
	f.Add([]byte{4, 12, 5, 1, 0, 1, 4, 2, 5, 1, 2})
	f.Add([]byte("the quick brown fox jumps over the lazy dog, 0123456789 times"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		// The first byte chooses a plain or a timed table.
		tab := orderedTable[string]{timed: len(ops) > 0 && ops[0]&1 == 1}
		m := newTableModel()
		for _, b := range ops {
			orderedModel(t, &tab, m, int(b&7)%orderedOps, "k"+strconv.Itoa(int(b>>3)))
			checkOrdered(t, &tab, m)
		}
		drainOrdered(t, &tab, m)
	})
}

// A burst larger than keepMax is given back once drained; a smaller burst
// that recurs keeps its room, so the third and later bursts allocate
// nothing.
func TestOrderedTableMemory(t *testing.T) {
	fill := func(tab *orderedTable[int], n int) {
		for i := range n {
			h, slot, _ := tab.find(i)
			tab.insert(i, h, slot, 0)
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
		drain.insert(i, h, slot, 0)
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
// page's calls) reads the key table where it is. The snapshot lists
// processing keys and then the ready ones in FIFO order.
func TestInspectReadsOrderedTable(t *testing.T) {
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
		})
	}
}

// Done on a plain queue with metrics reports the run's duration after it
// has released the lock; by then another goroutine may have changed the
// key table (a first priority allocates its prio column here), so Done
// must not read the table to decide. Run under -race.
func TestDoneReportsAfterUnlockWithoutReadingTable(t *testing.T) {
	q := NewWithConfig(Config[string]{Name: "race", Metrics: nopProvider{}})
	const n = 2000
	for i := range n {
		q.Add(strconv.Itoa(i))
	}
	done, started := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			k, _ := q.Get()
			q.Done(k)
			if i == 10 {
				close(started)
			}
		}
	}()
	<-started
	q.AddWithPriority("p", 1) // gives the table its prio column, concurrently
	<-done
	require.True(t, q.tab.prioritized)
}

// A plain queue (no Store) given priorities keeps each run's priority in
// its table's prio column, allocated by the first priority other than 0,
// and GetWithPriority hands it back, also for a key that Done moves to the
// tail of the log and for keys that were there before the column was.
func TestPlainQueueKeepsPriorities(t *testing.T) {
	q := New[string]()
	q.Add("x") // before the column exists: priority 0
	q.AddWithPriority("a", 5)
	require.True(t, q.tab.prioritized, "the first priority other than 0 allocates the column")
	for _, want := range []struct {
		k string
		p int
	}{{"x", 0}, {"a", 5}} {
		k, p, _ := q.GetWithPriority()
		require.Equal(t, want.k, k, "a plain queue is FIFO whatever the priorities")
		require.Equal(t, want.p, p, "the priority of %s's run", k)
	}
	q.AddWithPriority("a", 7) // processing+dirty: due again at Done, at 7
	q.Done("a")               // moves a's entry to the tail of the log
	q.Done("x")
	k, p, _ := q.GetWithPriority()
	require.Equal(t, "a", k)
	require.Equal(t, 7, p, "the priority travels with the entry Done moves")
	q.Done(k)
	require.Zero(t, q.tab.live)
}
