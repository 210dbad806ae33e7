package workqueue

// Tests of AddAfter: the waiting rows of the state table (docs/protocol.md), the
// timer, shutdown and memory. Every test runs in a synctest bubble, so time
// is fake: time.Sleep moves the bubble's clock, and synctest.Wait lets the
// delay timer's callback finish before the test looks at the queue. A key
// that must become ready at its deadline is checked 1ns before it and
// exactly at it.
//
// The tests live inside the package so that they can check that the timer
// is really stopped and that the heap gives its memory back.

import (
	"context"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// delayAdvance moves the bubble's clock by d and waits until the timer
// callbacks that fired meanwhile have finished. It must run in a bubble.
func delayAdvance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// delayTake hands out the next ready key and fails the test if none is
// ready, rather than blocking the bubble forever.
func delayTake[T comparable](t *testing.T, q *Queue[T]) T {
	t.Helper()
	require.Positive(t, q.Len(), "a key should be ready to take")
	item, shutdown := q.Get()
	require.False(t, shutdown, "Get should hand out a ready key, not report shutdown")
	return item
}

// delayRequireStats checks Len and the counts of Stats at once.
func delayRequireStats[T comparable](t *testing.T, q *Queue[T], ready, waiting, processing, dirty int, msg string) {
	t.Helper()
	s := q.Stats()
	got := [4]int{s.Ready, s.Waiting, s.Processing, s.Dirty}
	want := [4]int{ready, waiting, processing, dirty}
	require.Equal(t, want, got, "%s: [Ready Waiting Processing Dirty]", msg)
	require.Equal(t, ready, q.Len(), "%s: Len counts ready keys only", msg)
}

// delayRequireEmpty checks that nothing is ready, waiting or processing, and
// that the key table has forgotten every key.
func delayRequireEmpty[T comparable](t *testing.T, q *Queue[T], msg string) {
	t.Helper()
	delayRequireStats(t, q, 0, 0, 0, 0, msg)
	q.mu.Lock()
	n := q.tab.live
	q.mu.Unlock()
	require.Zero(t, n, "%s: the key table should hold no key", msg)
}

// delayTimerStopped reports whether the queue's delay timer is stopped (or
// was never made): stopping it once more has nothing to stop.
func delayTimerStopped[T comparable](q *Queue[T]) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.delay.timer == nil || !q.delay.timer.Stop()
}

// absent + AddAfter(d) -> waiting at now+d: not ready 1ns before the
// deadline, ready exactly at it, handed out once.
func TestAddAfterAbsentBecomesReadyAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string]()
		const d = 10 * time.Millisecond
		q.AddAfter("a", d)
		delayRequireStats(t, q, 0, 1, 0, 0, "right after AddAfter")

		delayAdvance(d - time.Nanosecond)
		delayRequireStats(t, q, 0, 1, 0, 0, "1ns before the deadline")

		delayAdvance(time.Nanosecond)
		delayRequireStats(t, q, 1, 0, 0, 1, "exactly at the deadline")
		require.Equal(t, "a", delayTake(t, q), "the waiting key should be handed out")
		q.Done("a")
		delayRequireEmpty(t, q, "after Done")

		delayAdvance(time.Hour)
		delayRequireEmpty(t, q, "an hour later: the key runs once")
	})
}

// A goroutine blocked in Get (or GetContext) is woken by the deadline.
func TestAddAfterWakesBlockedGetter(t *testing.T) {
	for _, useCtx := range []bool{false, true} {
		t.Run(fmt.Sprintf("ctx=%v", useCtx), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := New[string]()
				start := time.Now()
				type result struct {
					item string
					at   time.Duration
					err  error
				}
				got := make(chan result, 1)
				go func() {
					var r result
					if useCtx {
						r.item, r.err = q.GetContext(context.Background())
					} else {
						var shutdown bool
						r.item, shutdown = q.Get()
						if shutdown {
							r.err = ErrShutDown
						}
					}
					r.at = time.Since(start)
					got <- r
				}()
				synctest.Wait() // the getter is blocked in Get
				const d = 10 * time.Millisecond
				q.AddAfter("a", d)
				delayAdvance(d - time.Nanosecond)
				select {
				case r := <-got:
					t.Fatalf("getter returned %+v before the deadline", r)
				default:
				}
				delayAdvance(time.Nanosecond)
				select {
				case r := <-got:
					require.NoError(t, r.err, "the getter should get the key")
					require.Equal(t, "a", r.item, "the getter should get the waiting key")
					require.Equal(t, d, r.at, "the getter should wake exactly at the deadline")
				default:
					t.Fatal("the getter is still blocked after the deadline passed")
				}
				q.Done("a")
				delayRequireEmpty(t, q, "after Done")
			})
		})
	}
}

// ready + AddAfter -> no change: the run due now is earlier.
func TestAddAfterOfReadyKeyChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string]()
		q.Add("a")
		q.Add("b")
		q.AddAfter("a", 10*time.Millisecond)
		delayRequireStats(t, q, 2, 0, 0, 2, "AddAfter of a ready key")
		require.Equal(t, "a", delayTake(t, q), "a keeps its place at the head")
		require.Equal(t, "b", delayTake(t, q), "b is second")
		require.Zero(t, q.Len(), "a is queued once only")
		q.Done("a")
		q.Done("b")
		delayAdvance(time.Hour)
		delayRequireEmpty(t, q, "the ignored AddAfter leaves no run behind")
	})
}

// waiting + Add -> ready now, heap entry removed: the key runs once, not
// again when its old deadline passes (client-go runs it twice:
// kubernetes#126027).
func TestAddOfWaitingKeyRunsOnce(t *testing.T) {
	t.Run("done before the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := New[string]()
			q.AddAfter("a", 10*time.Millisecond)
			q.Add("a")
			delayRequireStats(t, q, 1, 0, 0, 1, "Add of a waiting key")
			require.Equal(t, "a", delayTake(t, q), "the key is ready now")
			q.Done("a")
			delayRequireEmpty(t, q, "after Done")
			delayAdvance(20 * time.Millisecond)
			delayRequireEmpty(t, q, "after the old deadline: no second run")
		})
	})
	t.Run("processing when the deadline passes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := New[string]()
			q.AddAfter("a", 10*time.Millisecond)
			q.Add("a")
			require.Equal(t, "a", delayTake(t, q), "the key is ready now")
			delayAdvance(20 * time.Millisecond)
			delayRequireStats(t, q, 0, 0, 1, 0, "old deadline passed while processing")
			q.Done("a")
			delayRequireEmpty(t, q, "Done: the old deadline must not bring it back")
		})
	})
	t.Run("AddAfter d<=0 of a waiting key", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := New[string]()
			q.AddAfter("a", 10*time.Millisecond)
			q.AddAfter("a", 0)
			delayRequireStats(t, q, 1, 0, 0, 1, "AddAfter(0) of a waiting key")
			require.Equal(t, "a", delayTake(t, q), "the key is ready now")
			q.Done("a")
			delayAdvance(20 * time.Millisecond)
			delayRequireEmpty(t, q, "after the old deadline: no second run")
		})
	})
}

// waiting + AddAfter -> the earliest deadline is kept, in either order, and
// the key is handed out once.
func TestAddAfterOfWaitingKeyKeepsEarliest(t *testing.T) {
	for _, tc := range []struct {
		name         string
		first, again time.Duration
	}{
		{"shorter then longer", 5 * time.Millisecond, 10 * time.Millisecond},
		{"longer then shorter", 10 * time.Millisecond, 5 * time.Millisecond},
		{"equal", 5 * time.Millisecond, 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := New[string]()
				q.AddAfter("a", tc.first)
				q.AddAfter("a", tc.again)
				delayRequireStats(t, q, 0, 1, 0, 0, "two AddAfter of one key")
				earliest := min(tc.first, tc.again)
				delayAdvance(earliest - time.Nanosecond)
				delayRequireStats(t, q, 0, 1, 0, 0, "1ns before the earlier deadline")
				delayAdvance(time.Nanosecond)
				delayRequireStats(t, q, 1, 0, 0, 1, "at the earlier deadline")
				require.Equal(t, "a", delayTake(t, q), "the key is handed out")
				q.Done("a")
				delayAdvance(time.Hour)
				delayRequireEmpty(t, q, "the later deadline leaves no second run")
			})
		})
	}
}

// The merge of a later request into a waiting key must not delay it, even
// after time has passed: the earlier absolute deadline wins.
func TestAddAfterMergeComparesAbsoluteDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string]()
		q.AddAfter("a", 10*time.Millisecond) // due at 10ms
		delayAdvance(6 * time.Millisecond)
		q.AddAfter("a", 5*time.Millisecond) // would be 11ms: later, ignored
		delayAdvance(4*time.Millisecond - time.Nanosecond)
		delayRequireStats(t, q, 0, 1, 0, 0, "1ns before 10ms")
		delayAdvance(time.Nanosecond)
		delayRequireStats(t, q, 1, 0, 0, 1, "at 10ms")
		require.Equal(t, "a", delayTake(t, q), "the key is handed out at 10ms")
		q.Done("a")
		delayAdvance(time.Hour)
		delayRequireEmpty(t, q, "no second run at 11ms")

		q.AddAfter("b", 10*time.Millisecond) // due at +10ms
		delayAdvance(6 * time.Millisecond)
		q.AddAfter("b", 3*time.Millisecond) // +9ms: earlier, kept
		delayAdvance(3*time.Millisecond - time.Nanosecond)
		delayRequireStats(t, q, 0, 1, 0, 0, "1ns before +9ms")
		delayAdvance(time.Nanosecond)
		delayRequireStats(t, q, 1, 0, 0, 1, "at +9ms")
		require.Equal(t, "b", delayTake(t, q), "the key is handed out at +9ms")
		q.Done("b")
		delayAdvance(time.Hour)
		delayRequireEmpty(t, q, "no second run at +10ms")
	})
}

// processing + AddAfter -> processing+waiting; Done -> waiting; handed out
// at the deadline.
func TestAddAfterOfProcessingKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string]()
		q.Add("a")
		require.Equal(t, "a", delayTake(t, q), "the key is handed out")
		const d = 10 * time.Millisecond
		q.AddAfter("a", d)
		delayRequireStats(t, q, 0, 1, 1, 0, "processing+waiting")
		delayAdvance(2 * time.Millisecond)
		q.Done("a")
		delayRequireStats(t, q, 0, 1, 0, 0, "Done of processing+waiting: waiting")
		delayAdvance(d - 2*time.Millisecond - time.Nanosecond)
		delayRequireStats(t, q, 0, 1, 0, 0, "1ns before the deadline")
		delayAdvance(time.Nanosecond)
		delayRequireStats(t, q, 1, 0, 0, 1, "at the deadline")
		require.Equal(t, "a", delayTake(t, q), "the key is handed out again")
		q.Done("a")
		delayAdvance(time.Hour)
		delayRequireEmpty(t, q, "once only")
	})
}

// processing+waiting, the deadline passes -> processing+dirty (never handed
// to a second worker); Done -> ready.
func TestDeadlinePassesWhileProcessing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string]()
		q.Add("a")
		require.Equal(t, "a", delayTake(t, q), "the key is handed out")
		const d = 10 * time.Millisecond
		q.AddAfter("a", d)
		delayAdvance(d)
		delayRequireStats(t, q, 0, 0, 1, 1, "deadline passed while processing")
		q.Done("a")
		delayRequireStats(t, q, 1, 0, 0, 1, "Done of processing+dirty: ready")
		require.Equal(t, "a", delayTake(t, q), "the key is handed out again")
		q.Done("a")
		delayAdvance(time.Hour)
		delayRequireEmpty(t, q, "once only")
	})
}

// processing+waiting + Add -> processing+dirty, heap entry removed.
func TestAddOfProcessingWaitingKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string]()
		q.Add("a")
		require.Equal(t, "a", delayTake(t, q), "the key is handed out")
		q.AddAfter("a", 10*time.Millisecond)
		q.Add("a")
		delayRequireStats(t, q, 0, 0, 1, 1, "Add of processing+waiting")
		delayAdvance(20 * time.Millisecond)
		delayRequireStats(t, q, 0, 0, 1, 1, "the old deadline passed while processing")
		q.Done("a")
		delayRequireStats(t, q, 1, 0, 0, 1, "Done of processing+dirty: ready")
		require.Equal(t, "a", delayTake(t, q), "the key is handed out again")
		q.Done("a")
		delayAdvance(time.Hour)
		delayRequireEmpty(t, q, "the heap entry was removed: no third run")
	})
}

// processing+dirty + AddAfter -> no change.
func TestAddAfterOfProcessingDirtyKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string]()
		q.Add("a")
		require.Equal(t, "a", delayTake(t, q), "the key is handed out")
		q.Add("a")
		q.AddAfter("a", 10*time.Millisecond)
		delayRequireStats(t, q, 0, 0, 1, 1, "AddAfter of processing+dirty")
		q.Done("a")
		delayRequireStats(t, q, 1, 0, 0, 1, "Done: ready now")
		require.Equal(t, "a", delayTake(t, q), "the key is handed out again")
		q.Done("a")
		delayAdvance(time.Hour)
		delayRequireEmpty(t, q, "the ignored AddAfter leaves no run behind")
	})
}

// Done of a key that is only waiting changes nothing.
func TestDoneOfWaitingKeyIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string]()
		q.AddAfter("a", 10*time.Millisecond)
		q.Done("a")
		delayRequireStats(t, q, 0, 1, 0, 0, "Done of a waiting key")
		delayAdvance(10 * time.Millisecond)
		require.Equal(t, "a", delayTake(t, q), "the key is handed out at its deadline")
		q.Done("a")
		delayAdvance(time.Hour)
		delayRequireEmpty(t, q, "once only")
	})
}

// AddAfter(item, d<=0) is Add(item) in every state.
func TestAddAfterNonPositiveIsAdd(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Nanosecond, -time.Hour, math.MinInt64} {
		t.Run(d.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := New[string]()
				q.AddAfter("a", d)
				q.Add("b")
				q.AddAfter("a", d)
				delayRequireStats(t, q, 2, 0, 0, 2, "AddAfter(d<=0) of absent, then of ready")
				require.Equal(t, "a", delayTake(t, q), "a is ready now, first in line")

				q.AddAfter("a", d)
				delayRequireStats(t, q, 1, 0, 1, 2, "AddAfter(d<=0) of processing: dirty")
				q.AddAfter("a", d)
				delayRequireStats(t, q, 1, 0, 1, 2, "AddAfter(d<=0) of processing+dirty: no change")
				q.Done("a")
				require.Equal(t, "b", delayTake(t, q), "b keeps its place")
				require.Equal(t, "a", delayTake(t, q), "a is pushed at the tail by Done")
				q.AddAfter("a", time.Second)
				q.AddAfter("a", d)
				delayRequireStats(t, q, 0, 0, 2, 1, "AddAfter(d<=0) of processing+waiting: dirty")
				q.Done("a")
				q.Done("b")
				require.Equal(t, "a", delayTake(t, q), "a is ready after Done")
				q.Done("a")
				delayAdvance(time.Hour)
				delayRequireEmpty(t, q, "no run is left behind")
			})
		})
	}
}

// Stats().Waiting counts waiting keys: distinct keys add up, merges do not,
// and each key leaves the count at its own deadline.
func TestAddAfterStatsWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[int]()
		const n = 50
		for i := range n {
			q.AddAfter(i, time.Duration(i+1)*time.Millisecond)
		}
		delayRequireStats(t, q, 0, n, 0, 0, "after n distinct AddAfter")
		for i := range n {
			q.AddAfter(i, time.Hour)
		}
		delayRequireStats(t, q, 0, n, 0, 0, "merges do not add waiting keys")
		for i := range n {
			delayAdvance(time.Millisecond - time.Nanosecond)
			delayRequireStats(t, q, i, n-i, 0, i, fmt.Sprintf("1ns before key %d's deadline", i))
			delayAdvance(time.Nanosecond)
			delayRequireStats(t, q, i+1, n-i-1, 0, i+1, fmt.Sprintf("at key %d's deadline", i))
		}
		for i := range n {
			require.Equal(t, i, delayTake(t, q), "keys come out in deadline order")
			q.Done(i)
		}
		delayAdvance(2 * time.Hour)
		delayRequireEmpty(t, q, "every key ran once")
	})
}

// Keys with equal deadlines become ready in the order they were added, and
// keys with different deadlines in deadline order, however many fire at
// one timer callback.
func TestAddAfterEqualDeadlinesFireInAddOrder(t *testing.T) {
	t.Run("same call time", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := New[int]()
			const n = 200
			// Add in a scrambled order; the order of the AddAfter
			// calls is what must come out.
			order := make([]int, n)
			for i := range order {
				order[i] = (i * 37) % n
			}
			for _, k := range order {
				q.AddAfter(k, 10*time.Millisecond)
			}
			delayAdvance(10 * time.Millisecond)
			for i, want := range order {
				require.Equal(t, want, delayTake(t, q), "key %d out of order", i)
			}
		})
	})
	t.Run("same deadline from different call times", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := New[string]()
			q.AddAfter("first", 10*time.Millisecond)
			delayAdvance(4 * time.Millisecond)
			q.AddAfter("second", 6*time.Millisecond)
			delayAdvance(time.Millisecond)
			q.AddAfter("third", 5*time.Millisecond)
			delayAdvance(5*time.Millisecond - time.Nanosecond)
			delayRequireStats(t, q, 0, 3, 0, 0, "1ns before the shared deadline")
			delayAdvance(time.Nanosecond)
			delayRequireStats(t, q, 3, 0, 0, 3, "at the shared deadline")
			for _, want := range []string{"first", "second", "third"} {
				require.Equal(t, want, delayTake(t, q), "equal deadlines come out in add order")
			}
		})
	})
	t.Run("deadline order beats add order", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := New[string]()
			q.AddAfter("late", 20*time.Millisecond)
			q.AddAfter("early", 10*time.Millisecond)
			q.AddAfter("middle", 15*time.Millisecond)
			delayAdvance(time.Hour)
			for _, want := range []string{"early", "middle", "late"} {
				require.Equal(t, want, delayTake(t, q), "keys come out in deadline order")
			}
		})
	})
}

// One timer serves every key: a new earliest deadline re-arms it earlier, and
// a timer left armed for a key that is no longer waiting does not delay the
// keys behind it.
func TestAddAfterTimerFollowsEarliestDeadline(t *testing.T) {
	t.Run("earlier deadline re-arms", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := New[string]()
			q.AddAfter("late", 20*time.Millisecond)
			q.AddAfter("early", 10*time.Millisecond)
			delayAdvance(10*time.Millisecond - time.Nanosecond)
			delayRequireStats(t, q, 0, 2, 0, 0, "1ns before the earlier deadline")
			delayAdvance(time.Nanosecond)
			delayRequireStats(t, q, 1, 1, 0, 1, "at the earlier deadline")
			require.Equal(t, "early", delayTake(t, q), "the earlier key first")
			delayAdvance(10*time.Millisecond - time.Nanosecond)
			delayRequireStats(t, q, 0, 1, 1, 0, "1ns before the later deadline")
			delayAdvance(time.Nanosecond)
			delayRequireStats(t, q, 1, 0, 1, 1, "at the later deadline")
			require.Equal(t, "late", delayTake(t, q), "then the later key")
		})
	})
	t.Run("merge to an earlier deadline re-arms", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := New[string]()
			q.AddAfter("a", time.Hour)
			q.AddAfter("a", 10*time.Millisecond)
			delayAdvance(10*time.Millisecond - time.Nanosecond)
			delayRequireStats(t, q, 0, 1, 0, 0, "1ns before the merged deadline")
			delayAdvance(time.Nanosecond)
			delayRequireStats(t, q, 1, 0, 0, 1, "at the merged deadline")
		})
	})
	t.Run("later key after the earliest was added now", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := New[string]()
			q.AddAfter("a", 10*time.Millisecond)
			q.Add("a") // the timer may still be armed for 10ms
			q.AddAfter("b", 15*time.Millisecond)
			delayAdvance(15*time.Millisecond - time.Nanosecond)
			delayRequireStats(t, q, 1, 1, 0, 1, "1ns before b's deadline")
			delayAdvance(time.Nanosecond)
			delayRequireStats(t, q, 2, 0, 0, 2, "at b's deadline")
			require.Equal(t, "a", delayTake(t, q), "a was added first")
			require.Equal(t, "b", delayTake(t, q), "b follows")
		})
	})
	t.Run("earlier key after the earliest was added now", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := New[string]()
			q.AddAfter("a", 10*time.Millisecond)
			q.Add("a")
			q.AddAfter("b", 5*time.Millisecond)
			delayAdvance(5*time.Millisecond - time.Nanosecond)
			delayRequireStats(t, q, 1, 1, 0, 1, "1ns before b's deadline")
			delayAdvance(time.Nanosecond)
			delayRequireStats(t, q, 2, 0, 0, 2, "at b's deadline")
		})
	})
	t.Run("keys added while the timer is idle", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := New[string]()
			q.AddAfter("a", 10*time.Millisecond)
			delayAdvance(time.Hour)
			require.Equal(t, "a", delayTake(t, q), "a fired")
			q.Done("a")
			q.AddAfter("b", 10*time.Millisecond)
			delayAdvance(10*time.Millisecond - time.Nanosecond)
			delayRequireStats(t, q, 0, 1, 0, 0, "1ns before b's deadline")
			delayAdvance(time.Nanosecond)
			delayRequireStats(t, q, 1, 0, 0, 1, "the fired timer is armed again for b")
		})
	})
}
