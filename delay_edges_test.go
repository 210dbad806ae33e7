package workqueue

// More tests of AddAfter (see delay_test.go for the helpers and the state
// table's waiting rows): ShutDown with waiting keys, goroutines, huge
// delays, priorities on the default store, concurrency, allocations and
// memory.

import (
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
