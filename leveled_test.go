package workqueue

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// checkLevels verifies the structure of a leveled table: every ready entry
// is linked, exactly once, into the list of its own priority, the lists'
// links agree both ways and their ends and counts are right, no other entry
// has links, the heap holds exactly the non-empty levels in heap order and
// knows where each sits, and byPrio finds each of them. It returns the
// first fault found, or "".
func checkLevels[T comparable](tab *orderedTable[T]) string {
	if !tab.leveled {
		return "table not leveled"
	}
	linked := map[int]bool{}
	total := 0
	for i, l := range tab.lv.heap {
		if l.hi != i {
			return fmt.Sprintf("level %d at heap[%d] thinks it is at %d", l.prio, i, l.hi)
		}
		if i > 0 && tab.lv.heap[(i-1)/2].prio < l.prio {
			return fmt.Sprintf("heap[%d] (prio %d) is above its parent", i, l.prio)
		}
		if tab.lv.byPrio.m[l.prio] != l {
			return fmt.Sprintf("level %d is not in byPrio", l.prio)
		}
		if l.n == 0 {
			return fmt.Sprintf("empty level %d in the heap", l.prio)
		}
		n := 0
		var prev uint32
		for u := l.first; u != 0; u = tab.next[u-1] {
			p := int(u - 1)
			if p >= tab.tail || linked[p] {
				return fmt.Sprintf("level %d: entry %d past the tail or linked twice", l.prio, p)
			}
			linked[p] = true
			if tab.flags[p] != fDirty {
				return fmt.Sprintf("level %d links entry %d with flags %b", l.prio, p, tab.flags[p])
			}
			if int(tab.prio[p]) != l.prio {
				return fmt.Sprintf("level %d links entry %d of priority %d", l.prio, p, tab.prio[p])
			}
			if tab.prev[p] != prev {
				return fmt.Sprintf("level %d: entry %d's back link is %d, want %d", l.prio, p, tab.prev[p], prev)
			}
			prev = u
			n++
		}
		if l.last != prev || n != l.n {
			return fmt.Sprintf("level %d: last %d count %d, walked to %d and counted %d", l.prio, l.last, l.n, prev, n)
		}
		total += n
	}
	if len(tab.lv.byPrio.m) != len(tab.lv.heap) {
		return fmt.Sprintf("byPrio has %d levels, the heap %d", len(tab.lv.byPrio.m), len(tab.lv.heap))
	}
	if total != tab.ready {
		return fmt.Sprintf("levels hold %d entries, ready is %d", total, tab.ready)
	}
	for p := range len(tab.keys) {
		if !linked[p] && (tab.flags[p] == fDirty || tab.next[p] != 0 || tab.prev[p] != 0) {
			return fmt.Sprintf("entry %d (flags %b) is ready or has links but is in no level", p, tab.flags[p])
		}
	}
	return ""
}

// TestLeveledQueueModel drives a queue with the built-in priority store
// (whose levels its ordered table keeps) and the state-table model with
// priorities through random operations on 256 keys, in phases that fill
// the table, churn it and drain it, so that levels appear and empty and
// the log grows, compacts (renumbering the links) and shrinks. It checks
// every key handed out and its priority, the counts, and the table's
// structure after each operation.
func TestLeveledQueueModel(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 11))
				q := NewWithConfig(Config[uint8]{Store: NewPriorityStore[uint8]()})
				m := newDelayQueueModel()
				m.prios = true
				prios := []int{-100, -1, 0, 0, 0, 3, 7}
				var log []string
				fail := func(format string, args ...any) {
					t.Helper()
					if len(log) > 12 {
						log = log[len(log)-12:]
					}
					t.Fatalf("after ...%v: %s", log, fmt.Sprintf(format, args...))
				}
				grown := 0
				const steps = 30000
				for step := range steps {
					// Phases: fill, churn, drain.
					w := [][6]int{{50, 15, 15, 10, 5, 5}, {25, 15, 25, 25, 5, 5}, {5, 5, 40, 40, 0, 10}}[step*3/steps]
					op, r := 0, rng.IntN(100)
					for r >= w[op] {
						r -= w[op]
						op++
					}
					k := uint8(rng.IntN(256))
					p := prios[rng.IntN(len(prios))]
					d := time.Duration(rng.IntN(5)) * time.Millisecond
					switch op {
					case 0:
						log = append(log, fmt.Sprintf("AddWithPriority(%d, %d)", k, p))
						q.AddWithPriority(k, p)
						m.addPrio(k, p)
					case 1:
						log = append(log, fmt.Sprintf("AddAfterWithPriority(%d, %v, %d)", k, d, p))
						q.AddAfterWithPriority(k, d, p)
						m.addAfterPrio(k, d, p)
					case 2:
						if len(m.ready) == 0 {
							break
						}
						log = append(log, "Get()")
						got, prio, _ := q.GetWithPriority()
						want, wantPrio := m.get()
						if got != want || prio != wantPrio {
							fail("GetWithPriority = (%d, %d), model (%d, %d)", got, prio, want, wantPrio)
						}
					case 3:
						// Done of a processing key, mostly.
						for pk := range m.proc {
							k = pk
							break
						}
						log = append(log, fmt.Sprintf("Done(%d)", k))
						q.Done(k)
						m.done(k)
					case 4:
						log = append(log, fmt.Sprintf("Remove(%d)", k))
						if got, want := q.Remove(k), m.remove(k); got != want {
							fail("Remove(%d) = %v, model %v", k, got, want)
						}
					case 5:
						log = append(log, fmt.Sprintf("advance(%v)", d))
						delayAdvance(d)
						m.advance(d)
					}
					if got, want := q.Stats(), m.stats(); got != want {
						fail("Stats = %+v, model %+v", got, want)
					}
					q.mu.Lock()
					fault := checkLevels(&q.tab)
					grown = max(grown, len(q.tab.keys))
					q.mu.Unlock()
					if fault != "" {
						fail("%s", fault)
					}
				}
				delayAdvance(time.Hour)
				m.advance(time.Hour)
				for len(m.proc) > 0 || len(m.ready) > 0 {
					for k := range m.proc {
						q.Done(k)
						m.done(k)
					}
					if len(m.ready) > 0 {
						got, prio, _ := q.GetWithPriority()
						if want, wantPrio := m.get(); got != want || prio != wantPrio {
							fail("drain: GetWithPriority = (%d, %d), model (%d, %d)", got, prio, want, wantPrio)
						}
					}
				}
				if got := q.Stats(); got != (Stats{}) {
					fail("after the drain: Stats = %+v", got)
				}
				if grown < 256 {
					t.Fatalf("the log grew to %d entries only: the test does not reach compaction with many keys", grown)
				}
				q.mu.Lock()
				defer q.mu.Unlock()
				if fault := checkLevels(&q.tab); fault != "" || len(q.tab.lv.heap) != 0 || len(q.tab.keys) > minLog {
					t.Fatalf("after the drain: %q, %d levels, log of %d", fault, len(q.tab.lv.heap), len(q.tab.keys))
				}
			})
		})
	}
}

// A queue with the built-in priority store allocates nothing in steady
// state, with metrics or without: keys at three priorities are added,
// raised, retried with a delay and finished over and over, so that levels
// empty and come back (kept for reuse) and the log compacts in place.
func TestLeveledSteadyStateAllocatesNothing(t *testing.T) {
	for _, metrics := range []bool{false, true} {
		t.Run(fmt.Sprint("metrics=", metrics), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := Config[int]{Store: NewPriorityStore[int]()}
				if metrics {
					cfg.Name, cfg.Metrics = "steady", nopProvider{}
				}
				q := NewWithConfig(cfg)
				const n = 64
				for i := range n {
					q.AddWithPriority(i, -100)
				}
				round := 0
				cycle := func() {
					round++
					k, _, _ := q.GetWithPriority()
					q.AddWithPriority((k+7)%n, 5) // raise another, if it is ready
					if round%3 == 0 {
						q.AddAfterWithPriority(k, time.Millisecond, 0) // a retry
					} else {
						q.AddWithPriority(k, -100) // due again at Done
					}
					q.Done(k)
					if round%5 == 0 {
						delayAdvance(time.Millisecond)
					}
				}
				for range 10 * n { // warm up: every structure at its steady size
					cycle()
				}
				require.Zero(t, testing.AllocsPerRun(1000, cycle), "a steady priority queue should not allocate")
				q.mu.Lock()
				fault := checkLevels(&q.tab)
				q.mu.Unlock()
				require.Empty(t, fault)
			})
		})
	}
}
