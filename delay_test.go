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
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
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

// ShutDown drops the waiting keys, stops the timer, and nothing waiting is
// handed out later; ready keys are still handed out.
func TestShutDownDropsWaitingKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string]()
		q.Add("ready")
		q.Add("busy")
		require.Equal(t, "ready", delayTake(t, q), "ready is first")
		q.Add("ready") // processing+dirty
		require.Equal(t, "busy", delayTake(t, q), "busy is second")
		q.AddAfter("busy", 10*time.Millisecond) // processing+waiting
		for i := range 10 {
			q.AddAfter(fmt.Sprint("w", i), time.Duration(i+1)*time.Millisecond)
		}
		delayRequireStats(t, q, 0, 11, 2, 1, "before ShutDown")

		q.ShutDown()
		delayRequireStats(t, q, 0, 0, 2, 1, "ShutDown drops the waiting keys")
		require.True(t, delayTimerStopped(q), "ShutDown should stop the delay timer")

		delayAdvance(time.Hour)
		delayRequireStats(t, q, 0, 0, 2, 1, "an hour later nothing waiting was handed out")
		q.Done("busy")
		delayRequireStats(t, q, 0, 0, 1, 1, "Done of the processing+waiting key: absent")
		q.Done("ready")
		require.Equal(t, "ready", delayTake(t, q), "the dirty key still runs once more")
		q.Done("ready")
		_, shutdown := q.Get()
		require.True(t, shutdown, "Get reports shutdown once nothing is ready")
		delayRequireEmpty(t, q, "after shutdown and the last Done")
	})
}

// ShutDown stops a timer that is still armed for a key that is no longer
// waiting.
func TestShutDownStopsStaleTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string]()
		q.AddAfter("a", 10*time.Millisecond)
		q.Add("a")
		q.ShutDown()
		require.True(t, delayTimerStopped(q), "ShutDown should stop the delay timer")
		require.Equal(t, "a", delayTake(t, q), "the ready key is still handed out")
		q.Done("a")
		delayAdvance(time.Hour)
		delayRequireEmpty(t, q, "after shutdown")
	})
}

// After ShutDown, AddAfter is ignored, whatever d is, and makes no timer.
func TestAddAfterAfterShutDownIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string]()
		q.ShutDown()
		q.AddAfter("a", 10*time.Millisecond)
		q.AddAfter("b", 0)
		q.AddAfter("c", -time.Second)
		q.AddAfterWithPriority("d", time.Millisecond, 7)
		delayRequireEmpty(t, q, "AddAfter after ShutDown")
		q.mu.Lock()
		timer := q.delay.timer
		q.mu.Unlock()
		require.Nil(t, timer, "AddAfter after ShutDown should not make a timer")
		delayAdvance(time.Hour)
		delayRequireEmpty(t, q, "an hour later")
		_, shutdown := q.Get()
		require.True(t, shutdown, "Get reports shutdown")
	})
}

// delayBubbleGoroutines counts the goroutines of the caller's synctest
// bubble, from the headers of a full stack dump ("goroutine 7 [sleep,
// synctest bubble 3]:"). Unlike runtime.NumGoroutine it does not see other
// tests' goroutines, so it cannot flake when they come and go.
func delayBubbleGoroutines(t *testing.T) int {
	t.Helper()
	buf := make([]byte, 1<<20)
	own := string(buf[:runtime.Stack(buf, false)])
	first, _, _ := strings.Cut(own, "\n")
	i := strings.Index(first, "synctest bubble ")
	require.GreaterOrEqual(t, i, 0, "must run in a bubble: %q", first)
	bubble := strings.TrimSuffix(first[i:], ":") // "synctest bubble 3]"
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for line := range strings.Lines(string(buf)) {
		if strings.HasPrefix(line, "goroutine ") && strings.HasSuffix(strings.TrimSpace(line), bubble+":") {
			count++
		}
	}
	return count
}

// No goroutine runs while no key waits, nor while keys wait: the delay is a
// timer, not a goroutine.
func TestAddAfterStartsNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := delayBubbleGoroutines(t)
		q := New[string]()
		q.AddAfter("a", 10*time.Millisecond)
		q.AddAfter("b", time.Hour)
		synctest.Wait()
		require.Equal(t, base, delayBubbleGoroutines(t), "keys waiting: no goroutine")
		delayAdvance(10 * time.Millisecond)
		require.Equal(t, base, delayBubbleGoroutines(t), "after a deadline fired: no goroutine")
		q.Add("b")
		require.Equal(t, "a", delayTake(t, q), "a fired")
		require.Equal(t, "b", delayTake(t, q), "b was added now")
		q.Done("a")
		q.Done("b")
		delayAdvance(2 * time.Hour)
		require.Equal(t, base, delayBubbleGoroutines(t), "no key waiting: no goroutine")
		q.AddAfter("c", time.Minute)
		q.ShutDown()
		delayAdvance(2 * time.Hour)
		require.Equal(t, base, delayBubbleGoroutines(t), "after ShutDown: no goroutine")
		require.True(t, delayTimerStopped(q), "after ShutDown the timer is stopped")
	})
}

// A huge d waits (practically) forever: now+d must not overflow into the
// past, and it must not hold back the keys with earlier deadlines.
func TestAddAfterHugeDelay(t *testing.T) {
	for _, elapsed := range []time.Duration{0, time.Nanosecond, time.Hour} {
		for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 / 2, math.MaxInt64 - time.Hour + 1} {
			t.Run(fmt.Sprintf("elapsed=%v/d=%d", elapsed, int64(d)), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					q := New[string]()
					q.AddAfter("warmup", time.Nanosecond) // start the queue clock
					delayAdvance(time.Nanosecond)
					require.Equal(t, "warmup", delayTake(t, q), "warmup fired")
					q.Done("warmup")
					delayAdvance(elapsed)

					q.AddAfter("huge", d)
					delayRequireStats(t, q, 0, 1, 0, 0, "right after AddAfter(huge)")
					q.AddAfter("soon", time.Millisecond)
					delayAdvance(time.Millisecond)
					delayRequireStats(t, q, 1, 1, 0, 1, "the earlier key fires, the huge one waits")
					require.Equal(t, "soon", delayTake(t, q), "the earlier key is handed out")
					q.Done("soon")
					delayAdvance(100 * 365 * 24 * time.Hour)
					delayRequireStats(t, q, 0, 1, 0, 0, "a century later the huge key still waits")
					q.AddAfter("huge", time.Millisecond)
					delayAdvance(time.Millisecond)
					require.Equal(t, "huge", delayTake(t, q), "an earlier request still wins")
					q.Done("huge")
					delayRequireEmpty(t, q, "once only")
				})
			})
		}
	}
}

// With the default store, AddWithPriority and AddAfterWithPriority are Add
// and AddAfter: FIFO order, the priority is ignored, and the waiting rows
// of the state table hold.
func TestPriorityAddsWithDefaultStore(t *testing.T) {
	for _, cfg := range []struct {
		name string
		new  func() *Queue[string]
	}{
		{"New", New[string]},
		{"FIFOStore", func() *Queue[string] { return NewWithConfig(Config[string]{Store: NewFIFOStore[string]()}) }},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := cfg.new()
				q.AddWithPriority("low", -5)
				q.AddWithPriority("high", math.MaxInt)
				q.AddWithPriority("zero", 0)
				q.AddWithPriority("low", math.MaxInt) // already ready: no change
				delayRequireStats(t, q, 3, 0, 0, 3, "three priority adds")
				for _, want := range []string{"low", "high", "zero"} {
					require.Equal(t, want, delayTake(t, q), "the default store is FIFO")
				}
				for _, k := range []string{"low", "high", "zero"} {
					q.Done(k)
				}

				q.AddAfterWithPriority("w1", 10*time.Millisecond, math.MinInt)
				q.AddAfterWithPriority("w2", 10*time.Millisecond, math.MaxInt)
				q.AddAfterWithPriority("w3", 10*time.Millisecond, 3)
				q.AddAfterWithPriority("w1", time.Hour, 100) // merge: earliest kept
				delayRequireStats(t, q, 0, 3, 0, 0, "three priority AddAfter")
				delayAdvance(10*time.Millisecond - time.Nanosecond)
				delayRequireStats(t, q, 0, 3, 0, 0, "1ns before the deadline")
				delayAdvance(time.Nanosecond)
				delayRequireStats(t, q, 3, 0, 0, 3, "at the deadline")
				for _, want := range []string{"w1", "w2", "w3"} {
					require.Equal(t, want, delayTake(t, q), "equal deadlines in add order, priority ignored")
				}
				for _, k := range []string{"w1", "w2", "w3"} {
					q.Done(k)
				}
				delayAdvance(2 * time.Hour)
				delayRequireEmpty(t, q, "the merged w1 runs once")

				q.AddAfterWithPriority("x", 10*time.Millisecond, 1)
				q.AddWithPriority("x", 2) // waiting + Add: ready now
				delayRequireStats(t, q, 1, 0, 0, 1, "AddWithPriority of a waiting key")
				require.Equal(t, "x", delayTake(t, q), "x is ready now")
				q.AddAfterWithPriority("x", 0, 9) // d<=0 of processing: dirty
				delayRequireStats(t, q, 0, 0, 1, 1, "AddAfterWithPriority(0) of a processing key")
				q.Done("x")
				require.Equal(t, "x", delayTake(t, q), "x runs again")
				q.Done("x")
				delayAdvance(time.Hour)
				delayRequireEmpty(t, q, "no run left behind")
			})
		})
	}
}

// Many goroutines use AddAfter, Add, Get and Done at once while deadlines
// pass: every key that was asked for is handed out, never to two workers at
// once, and nothing is left afterwards.
func TestAddAfterConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[int]()
		const (
			producers = 8
			workers   = 4
			perProd   = 200
			keys      = 16
		)
		var (
			mu        sync.Mutex
			busy      = map[int]bool{}
			handed    = 0
			violation string
		)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for {
					k, shutdown := q.Get()
					if shutdown {
						return
					}
					mu.Lock()
					if busy[k] && violation == "" {
						violation = fmt.Sprintf("worker %d got key %d while another worker has it", w, k)
					}
					busy[k] = true
					handed++
					mu.Unlock()
					time.Sleep(time.Duration(k%3) * time.Millisecond)
					mu.Lock()
					busy[k] = false
					mu.Unlock()
					q.Done(k)
				}
			})
		}
		var pg sync.WaitGroup
		for p := range producers {
			pg.Go(func() {
				for i := range perProd {
					k := (p*7 + i) % keys
					switch i % 3 {
					case 0:
						q.Add(k)
					default:
						q.AddAfter(k, time.Duration(i%7)*time.Millisecond)
					}
					if i%5 == 0 {
						time.Sleep(time.Millisecond)
					}
				}
			})
		}
		pg.Wait()
		delayAdvance(time.Second) // every deadline has passed, every key is Done
		s := q.Stats()
		q.ShutDown()
		wg.Wait()
		require.Empty(t, violation, "a key was handed to two workers at once")
		require.Equal(t, Stats{}, s, "after every deadline and Done nothing is left")
		require.Positive(t, handed, "keys were handed out")
		delayRequireEmpty(t, q, "after shutdown")
	})
}

// raceBuild reports whether the test binary was built with -race, which
// makes every lock and map operation several times slower, so that the
// largest tests can shrink their size (never skip) under it. The external
// tests reach it as workqueue.RaceBuild (export_test.go).
func raceBuild() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// 1M waiting keys work, fire by deadline and then in add order, and the
// heap, its index and the key table give their memory back once the keys
// have fired and been processed.
func TestAddAfterMillionKeysGiveMemoryBack(t *testing.T) {
	n := 1_000_000
	if testing.Short() || raceBuild() {
		n = 1 << 16 // same code paths, a sixteenth of the time
	}
	synctest.Test(t, func(t *testing.T) {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc

		q := New[int]()
		for i := range n {
			// Eight deadlines 1ns apart, so that eight timer callbacks
			// each move an eighth of the keys.
			q.AddAfter(i, time.Millisecond+time.Duration(i&7))
		}
		delayRequireStats(t, q, 0, n, 0, 0, "n waiting keys")
		q.mu.Lock()
		require.Equal(t, n, q.delay.len(), "the deadlines hold every waiting key (sanity)")
		q.mu.Unlock()

		delayAdvance(time.Millisecond + 6)
		delayRequireStats(t, q, n/8*7, n/8, 0, n/8*7, "seven eighths fired")
		q.mu.Lock()
		require.LessOrEqual(t, cap(q.delay.heap), 4*len(q.delay.heap)+64, "the heap array should shrink as keys fire")
		require.LessOrEqual(t, len(q.delay.inOrder.buf), max(4*q.delay.inOrder.Len(), 2*keepMax), "the in-order ring should shrink as keys fire")
		q.mu.Unlock()

		delayAdvance(1)
		delayRequireStats(t, q, n, 0, 0, n, "every key fired")
		q.mu.Lock()
		require.Zero(t, cap(q.delay.heap), "the heap array should be dropped once empty")
		require.LessOrEqual(t, len(q.delay.inOrder.buf), minRing, "the in-order ring should shrink to its minimum once empty")
		q.mu.Unlock()

		for r := range 8 {
			for i := r; i < n; i += 8 {
				k, _ := q.Get()
				if k != i {
					require.Equal(t, i, k, "keys should fire by deadline, then in add order")
				}
				q.Done(k)
			}
		}
		delayRequireEmpty(t, q, "every key drained")
		q.mu.Lock()
		require.LessOrEqual(t, len(q.tab.keys), minLog, "the key table should have let go of its arrays")
		q.mu.Unlock()

		runtime.GC()
		runtime.ReadMemStats(&ms)
		after := int64(ms.HeapAlloc) - int64(base)
		t.Logf("%d keys: heap %+d KB after they fired and drained", n, after>>10)
		require.Less(t, after, int64(1<<20), "memory should follow the live key count (0), not the peak")
		runtime.KeepAlive(q)
	})
}

// A steady AddAfter load, where keys keep waiting while others fire and are
// given a new deadline, allocates nothing: heap entries are recycled.
func TestAddAfterSteadyLoadDoesNotAllocate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[int]()
		const n = 100
		for i := range n {
			q.AddAfter(i, time.Duration(i+1)*time.Millisecond)
		}
		cycle := func() {
			delayAdvance(time.Millisecond)
			k, _ := q.Get() // exactly one key fired
			q.Done(k)
			q.AddAfter(k, n*time.Millisecond)
		}
		for range 3 * n { // warm up: every structure at its steady size
			cycle()
		}
		allocs := testing.AllocsPerRun(1000, cycle)
		require.Zero(t, allocs, "a steady fire / Get / Done / AddAfter cycle should not allocate")
		delayRequireStats(t, q, 0, n, 0, 0, "n keys keep waiting")
	})
}

// A burst of AddAfter of distinct keys, fired and drained, costs about one
// allocation per key (its heap entry); the maps, the heap array and the
// ring regrow after the previous burst gave them back, which adds a few
// percent at 10,000 keys.
func TestAddAfterBurstAllocsPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 10000
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprint("default/deployment-", i)
		}
		q := New[string]()
		burst := func() {
			for _, k := range keys {
				q.AddAfter(k, time.Millisecond)
			}
			delayAdvance(time.Millisecond)
			for range keys {
				k, _ := q.Get()
				q.Done(k)
			}
		}
		burst()
		perKey := testing.AllocsPerRun(5, burst) / n
		t.Logf("%.3f allocs per key", perKey)
		require.LessOrEqual(t, perKey, 1.05, "a burst should cost about one allocation per key")
		delayRequireEmpty(t, q, "after the bursts")
	})
}

// ShutDownWithDrain does not wait for waiting keys: they are dropped, so it
// returns as soon as the ready and processing keys are done, without the
// clock moving to their deadlines.
func TestShutDownWithDrainDropsWaitingKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New[string]()
		q.Add("busy")
		require.Equal(t, "busy", delayTake(t, q), "busy is handed out")
		q.AddAfter("busy", time.Hour) // processing+waiting
		q.AddAfter("w", time.Hour)
		start := time.Now()
		drained := make(chan time.Duration, 1)
		go func() {
			q.ShutDownWithDrain()
			drained <- time.Since(start)
		}()
		synctest.Wait()
		delayRequireStats(t, q, 0, 0, 1, 0, "ShutDownWithDrain dropped the waiting keys")
		select {
		case <-drained:
			t.Fatal("ShutDownWithDrain returned while a key is processing")
		default:
		}
		q.Done("busy")
		synctest.Wait()
		select {
		case took := <-drained:
			require.Zero(t, took, "ShutDownWithDrain should return at once, not at a dropped deadline")
		default:
			t.Fatal("ShutDownWithDrain did not return after the last Done")
		}
		delayRequireEmpty(t, q, "after the drain")
	})
}
