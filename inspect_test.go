package workqueue_test

// Tests of Inspect, InspectLimited and State: every state of the state
// table as the snapshot reports it, the order of each part, the limits,
// the times, the requeues of a RateLimitingQueue, and the cost (one
// allocation, bounded output on a large queue).

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/go-coalesce/workqueue"
)

// brief renders a snapshot as "key:state" strings, for comparisons that
// read like the state table.
func brief[T comparable](infos []workqueue.KeyInfo[T]) []string {
	out := make([]string, len(infos))
	for i, e := range infos {
		out[i] = fmt.Sprint(e.Key) + ":" + e.State.String()
	}
	return out
}

// everyState puts one key in each state of the table: p (processing),
// pd (processing+dirty), pw (processing+waiting, due in 3s), w (waiting,
// due in 2s), r1 and r2 (ready, in that order). It must run in a synctest
// bubble; it leaves no getter blocked.
func everyState(t *testing.T, q *workqueue.Queue[string]) {
	t.Helper()
	for _, k := range []string{"p", "pd", "pw"} {
		q.Add(k)
		got, _ := q.Get()
		require.Equal(t, k, got)
		time.Sleep(time.Second) // distinct run starts, oldest first: p, pd, pw
	}
	q.Add("pd")
	q.AddAfter("pw", 3*time.Second)
	q.AddAfter("w", 2*time.Second)
	q.Add("r1")
	q.Add("r2")
}

func TestStateOfEveryKey(t *testing.T) {
	for _, qc := range queueConfigs {
		t.Run(qc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := qc.new()
				everyState(t, q)
				want := map[string]workqueue.KeyState{
					"p":      workqueue.KeyProcessing,
					"pd":     workqueue.KeyProcessingDirty,
					"pw":     workqueue.KeyProcessingWaiting,
					"w":      workqueue.KeyWaiting,
					"r1":     workqueue.KeyReady,
					"r2":     workqueue.KeyReady,
					"absent": workqueue.KeyAbsent,
				}
				for k, s := range want {
					require.Equal(t, s, q.State(k), "State(%q)", k)
				}
				// Transitions: Done of pd makes it ready, the deadline of
				// w makes it ready, Done of p makes it absent.
				q.Done("pd")
				q.Done("p")
				time.Sleep(2 * time.Second)
				synctest.Wait()
				require.Equal(t, workqueue.KeyReady, q.State("pd"), "Done of a processing+dirty key makes it ready")
				require.Equal(t, workqueue.KeyAbsent, q.State("p"), "Done of a processing key makes it absent")
				require.Equal(t, workqueue.KeyReady, q.State("w"), "a waiting key is ready once its deadline passes")
				q.Done("pw")
				require.Equal(t, workqueue.KeyWaiting, q.State("pw"), "Done of a processing+waiting key leaves it waiting")
				q.ShutDown()
			})
		})
	}
}

func TestInspectEveryState(t *testing.T) {
	for _, qc := range queueConfigs {
		t.Run(qc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := qc.new()
				start := time.Now()
				everyState(t, q)
				now := time.Now()
				got := q.Inspect(100)
				timed := qc.name == "metrics"
				wantProcs := []string{"p:processing", "pd:processing+dirty", "pw:processing+waiting"}
				if timed {
					require.Equal(t, wantProcs, brief(got[:3]), "processing keys come first, oldest run first")
				} else {
					require.ElementsMatch(t, wantProcs, brief(got[:3]), "processing keys come first; without metrics in no particular order")
				}
				require.Equal(t, []string{"w:waiting", "r1:ready", "r2:ready"}, brief(got[3:]),
					"then the waiting keys, then the ready keys in FIFO order")
				for _, e := range got {
					switch e.Key {
					case "pw":
						require.Equal(t, now.Add(3*time.Second), e.Due, "Due of %s", e.Key)
					case "w":
						require.Equal(t, now.Add(2*time.Second), e.Due, "Due of %s", e.Key)
					default:
						require.True(t, e.Due.IsZero(), "a key that does not wait has no Due: %s", e.Key)
					}
					if timed && e.State.Processing() {
						i := slices.Index([]string{"p", "pd", "pw"}, e.Key)
						require.Equal(t, start.Add(time.Duration(i)*time.Second), e.Started, "Started of %s", e.Key)
					} else {
						require.True(t, e.Started.IsZero(), "Started is measured only with metrics, and only for processing keys: %s", e.Key)
					}
					require.Zero(t, e.Requeues, "a plain Queue leaves Requeues zero")
				}
				q.ShutDown()
			})
		})
	}
}

func TestInspectLimitFillsPartsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.NewWithConfig(workqueue.Config[string]{Name: "t", Metrics: &countingMetrics{}})
		everyState(t, q)
		require.Nil(t, q.Inspect(0), "limit 0 gives nothing, and allocates nothing")
		require.Nil(t, q.Inspect(-1), "a negative limit gives nothing")
		require.Equal(t, []string{"p:processing", "pd:processing+dirty"}, brief(q.Inspect(2)),
			"the limit is spent on the oldest processing keys first")
		require.Equal(t, []string{"p:processing", "pd:processing+dirty", "pw:processing+waiting", "w:waiting", "r1:ready"},
			brief(q.Inspect(5)))
		require.Nil(t, q.InspectLimited(workqueue.InspectLimits{}), "no limits, no keys")
		require.Equal(t, []string{"p:processing", "w:waiting", "r1:ready"},
			brief(q.InspectLimited(workqueue.InspectLimits{Processing: 1, Waiting: 1, Ready: 1})),
			"each part has its own limit")
		require.Equal(t, []string{"w:waiting", "r1:ready", "r2:ready"},
			brief(q.InspectLimited(workqueue.InspectLimits{Waiting: 5, Ready: 5})),
			"a part with limit 0 is left out")
		require.Equal(t, []string{"r1:ready", "r2:ready"},
			brief(q.InspectLimited(workqueue.InspectLimits{Ready: 5})))
		q.ShutDown()
	})
}

// Waiting keys come soonest first whatever order their deadlines were
// given in (the in-order ring and the heap of the delay state), and a
// deadline moved earlier leaves a stale entry behind that must not show.
func TestInspectWaitingSoonestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[string]()
		now := time.Now()
		ds := []int{5, 3, 9, 1, 7, 3, 2}
		for i, d := range ds {
			q.AddAfter("k"+strconv.Itoa(i), time.Duration(d)*time.Second)
		}
		q.AddAfter("k2", 4*time.Second) // earlier than its 9s: the 9s entry goes stale
		q.AddAfter("k0", 8*time.Second) // later than 5s: ignored
		q.Add("k4")                     // waiting to ready: its entry goes stale
		q.AddAfter("early", time.Second/2)
		q.Add("early") // the soonest entry of all is stale
		got := q.Inspect(100)
		require.Equal(t, []string{"k3:waiting", "k6:waiting", "k1:waiting", "k5:waiting", "k2:waiting", "k0:waiting", "k4:ready", "early:ready"}, brief(got),
			"waiting keys soonest first; equal deadlines (k1, k5) in the order they were given; k4 is ready")
		wantDue := []int{1, 2, 3, 3, 4, 5}
		for i, d := range wantDue {
			require.Equal(t, now.Add(time.Duration(d)*time.Second), got[i].Due, "Due of %s", got[i].Key)
		}
		q.ShutDown()
	})
}

// The selection of the limit best keys must agree with a full sort, for
// any limit and any order of arrival.
func TestInspectSelectsTheSoonest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		q := workqueue.New[int]()
		due := map[int]time.Duration{}
		for k := range 2000 {
			d := time.Duration(1+rng.IntN(500)) * time.Millisecond
			q.AddAfter(k, d)
			if old, ok := due[k]; !ok || d < old {
				due[k] = d
			}
		}
		all := q.Inspect(1 << 20)
		require.Len(t, all, len(due), "every waiting key once")
		for i := 1; i < len(all); i++ {
			require.False(t, all[i].Due.Before(all[i-1].Due), "soonest first at %d", i)
		}
		for _, limit := range []int{1, 2, 3, 10, 100, 1999, 2000, 5000} {
			got := q.Inspect(limit)
			want := all[:min(limit, len(all))]
			require.Equal(t, brief(want), brief(got), "Inspect(%d) is the first %d of the full snapshot", limit, limit)
		}
		q.ShutDown()
	})
}

func TestInspectOldestRunsFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.NewWithConfig(workqueue.Config[int]{Name: "t", Metrics: &countingMetrics{}})
		for k := range 50 {
			q.Add(k)
		}
		order := rand.New(rand.NewPCG(3, 4)).Perm(50)
		for range 50 {
			q.Get()
			time.Sleep(time.Millisecond)
		}
		// Finish some runs out of order; the rest stay processing.
		for _, k := range order[:20] {
			q.Done(k)
		}
		// Run five of them again: their first runs' records are stale and
		// must not show, their new runs come last.
		for _, k := range order[:5] {
			q.Add(k)
			q.Get()
			time.Sleep(time.Millisecond)
		}
		var want []int
		for k := range 50 {
			if !slices.Contains(order[:20], k) {
				want = append(want, k)
			}
		}
		want = append(want, order[:5]...)
		got := q.Inspect(10)
		require.Len(t, got, 10)
		for i, e := range got {
			require.Equal(t, want[i], e.Key, "oldest runs first, at %d", i)
		}
		all := q.Inspect(100)
		require.Len(t, all, 35, "every processing key once")
		for i, e := range all {
			require.Equal(t, want[i], e.Key, "oldest runs first, at %d", i)
			require.Equal(t, workqueue.KeyProcessing, e.State)
		}
		q.ShutDown()
	})
}

func TestInspectReadyInPriorityOrder(t *testing.T) {
	q := workqueue.NewWithConfig(workqueue.Config[string]{Store: workqueue.NewPriorityStore[string]()})
	q.AddWithPriority("low", -1)
	q.Add("zero1")
	q.AddWithPriority("high1", 10)
	q.AddWithPriority("mid", 5)
	q.AddWithPriority("high2", 10)
	q.Add("zero2")
	q.AddWithPriority("zero1", 7) // raised: moves to the back of level 7, leaves a hole
	got := q.Inspect(100)
	require.Equal(t, []string{"high1:ready", "high2:ready", "zero1:ready", "mid:ready", "zero2:ready", "low:ready"}, brief(got),
		"ready keys in the order Get hands them out")
	prios := make([]int, len(got))
	for i, e := range got {
		prios[i] = e.Priority
	}
	require.Equal(t, []int{10, 10, 7, 5, 0, -1}, prios, "each key's pending priority")
	require.Equal(t, []string{"high1:ready", "high2:ready", "zero1:ready"}, brief(q.Inspect(3)))
	for _, e := range got {
		k, _ := q.Get()
		require.Equal(t, e.Key, k, "Get agrees with Inspect")
	}
}

// A store that is neither the FIFO nor the priority store cannot be read in
// order: its ready keys come from the key table, all of them, once.
func TestInspectReadyOfAnyStore(t *testing.T) {
	q := workqueue.NewWithConfig(workqueue.Config[string]{
		Store: workqueue.NewFairStore(func(k string) string { return k[:1] }),
	})
	keys := []string{"a1", "b1", "a2", "c1", "b2"}
	for _, k := range keys {
		q.Add(k)
	}
	q.Add("a1") // duplicate
	got := q.Inspect(100)
	require.Len(t, got, len(keys))
	var names []string
	for _, e := range got {
		require.Equal(t, workqueue.KeyReady, e.State)
		names = append(names, e.Key)
	}
	require.ElementsMatch(t, keys, names, "every ready key, once")
	require.Len(t, q.Inspect(2), 2, "the limit holds for ready keys read from the table")
	require.Len(t, q.InspectLimited(workqueue.InspectLimits{Ready: 3}), 3)
}

func TestInspectRequeues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.NewRateLimitingQueue(workqueue.NewItemExponentialFailureRateLimiter[string](time.Second, time.Minute))
		q.Add("ok")
		for range 3 {
			q.AddRateLimited("bad") // 1s, 2s, 4s: the earliest deadline, 1s, is kept
		}
		q.AddRateLimited("once")
		got := q.Inspect(10)
		req := map[string]int{}
		for _, e := range got {
			req[e.Key] = e.Requeues
		}
		require.Equal(t, map[string]int{"ok": 0, "bad": 3, "once": 1}, req, "Requeues is the limiter's NumRequeues")
		lim := q.InspectLimited(workqueue.InspectLimits{Waiting: 1})
		require.Len(t, lim, 1)
		require.Equal(t, 3, lim[0].Requeues, "InspectLimited fills Requeues too")
		q.ShutDown()
	})
}

// Inspect allocates only the slice it returns, whatever the store; State
// allocates nothing.
func TestInspectAllocations(t *testing.T) {
	stores := map[string]workqueue.Config[string]{
		"fifo":     {},
		"priority": {Store: workqueue.NewPriorityStore[string]()},
		"fair":     {Store: workqueue.NewFairStore(func(string) string { return "x" })},
		"metrics":  {Name: "t", Metrics: &countingMetrics{}},
	}
	for name, cfg := range stores {
		t.Run(name, func(t *testing.T) {
			q := workqueue.NewWithConfig(cfg)
			for i := range 100 {
				q.Add("k" + strconv.Itoa(i))
			}
			for range 10 {
				k, _ := q.Get()
				q.Add(k)
			}
			for i := range 10 {
				q.AddAfter("w"+strconv.Itoa(i), time.Hour)
			}
			allocs := testing.AllocsPerRun(20, func() { _ = q.Inspect(50) })
			require.Equal(t, 1.0, allocs, "Inspect allocates only the returned slice")
			allocs = testing.AllocsPerRun(20, func() {
				_ = q.InspectLimited(workqueue.InspectLimits{Processing: 5, Waiting: 5, Ready: 5})
			})
			require.Equal(t, 1.0, allocs, "InspectLimited allocates only the returned slice")
			allocs = testing.AllocsPerRun(20, func() { _ = q.State("k5") })
			require.Zero(t, allocs, "State allocates nothing")
			q.ShutDown()
		})
	}
}

// On a large queue the output stays bounded by the limit, and the parts
// are still the best keys of the whole queue.
func TestInspectLargeQueue(t *testing.T) {
	n := 200_000
	if workqueue.RaceBuild() || testing.Short() {
		n = 20_000
	}
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[int]()
		for k := range n {
			q.AddAfter(k, time.Duration(n-k)*time.Millisecond) // the last key is due soonest
		}
		for k := range n {
			q.Add(n + k)
		}
		got := q.InspectLimited(workqueue.InspectLimits{Waiting: 3, Ready: 2})
		require.Equal(t, []string{
			strconv.Itoa(n-1) + ":waiting", strconv.Itoa(n-2) + ":waiting", strconv.Itoa(n-3) + ":waiting",
			strconv.Itoa(n) + ":ready", strconv.Itoa(n+1) + ":ready",
		}, brief(got))
		require.Equal(t, 5, cap(got), "the slice is sized by the limits, not by the queue")
		q.ShutDown()
	})
}

func TestKeyStateString(t *testing.T) {
	names := map[workqueue.KeyState]string{
		workqueue.KeyAbsent:            "absent",
		workqueue.KeyReady:             "ready",
		workqueue.KeyWaiting:           "waiting",
		workqueue.KeyProcessing:        "processing",
		workqueue.KeyProcessingDirty:   "processing+dirty",
		workqueue.KeyProcessingWaiting: "processing+waiting",
		workqueue.KeyState(42):         "KeyState(42)",
	}
	for s, want := range names {
		require.Equal(t, want, s.String())
		b, err := s.MarshalText()
		require.NoError(t, err)
		require.Equal(t, want, string(b))
	}
	for _, s := range []workqueue.KeyState{workqueue.KeyProcessing, workqueue.KeyProcessingDirty, workqueue.KeyProcessingWaiting} {
		require.True(t, s.Processing(), "%v is processing", s)
	}
	for _, s := range []workqueue.KeyState{workqueue.KeyAbsent, workqueue.KeyReady, workqueue.KeyWaiting, workqueue.KeyState(42)} {
		require.False(t, s.Processing(), "%v is not processing", s)
	}
}

// Random operations, then a full snapshot checked against State and Stats:
// every key once, each with the state State gives, the parts as large as
// Stats counts them and in their order, and every smaller limit a prefix
// of each part. Stale delay entries, sweeps and processing records of
// finished runs all occur on the way.
func TestInspectAgreesWithStateAndStats(t *testing.T) {
	for _, qc := range []struct {
		name string
		cfg  workqueue.Config[int]
	}{
		{"plain", workqueue.Config[int]{}},
		{"metrics", workqueue.Config[int]{Name: "t", Metrics: &countingMetrics{}}},
		{"priority", workqueue.Config[int]{Store: workqueue.NewPriorityStore[int]()}},
	} {
		t.Run(qc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(5, 6))
				q := workqueue.NewWithConfig(qc.cfg)
				var processing []int
				for step := range 3000 {
					k := rng.IntN(300)
					switch op := rng.IntN(10); {
					case op < 3:
						q.AddWithPriority(k, rng.IntN(3))
					case op < 6:
						q.AddAfter(k, time.Duration(1+rng.IntN(5000))*time.Millisecond)
					case op < 8 && q.Len() > 0:
						got, _ := q.Get()
						processing = append(processing, got)
					case len(processing) > 0:
						i := rng.IntN(len(processing))
						q.Done(processing[i])
						processing = slices.Delete(processing, i, i+1)
					}
					if step%100 == 0 {
						time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
						synctest.Wait()
					}
				}
				all := q.Inspect(1 << 20)
				st := q.Stats()
				count := map[workqueue.KeyState]int{}
				seen := map[int]bool{}
				for i, e := range all {
					require.False(t, seen[e.Key], "key %d listed twice", e.Key)
					seen[e.Key] = true
					require.Equal(t, q.State(e.Key), e.State, "key %d", e.Key)
					count[e.State]++
					if i == 0 {
						continue
					}
					prev := all[i-1]
					switch {
					case e.State.Processing():
						require.True(t, prev.State.Processing(), "processing keys come first")
						require.False(t, e.Started.Before(prev.Started), "oldest run first")
					case e.State == workqueue.KeyWaiting:
						require.NotEqual(t, workqueue.KeyReady, prev.State, "waiting keys before ready ones")
						if prev.State == workqueue.KeyWaiting {
							require.False(t, e.Due.Before(prev.Due), "due soonest first")
						}
					}
				}
				procs := count[workqueue.KeyProcessing] + count[workqueue.KeyProcessingDirty] + count[workqueue.KeyProcessingWaiting]
				require.Equal(t, st.Processing, procs)
				require.Equal(t, st.Waiting, count[workqueue.KeyWaiting]+count[workqueue.KeyProcessingWaiting])
				require.Equal(t, st.Ready, count[workqueue.KeyReady])
				if qc.cfg.Metrics != nil { // without metrics processing keys have no order
					for _, limit := range []int{1, 7, 50, len(all) - 1} {
						require.Equal(t, brief(all[:limit]), brief(q.Inspect(limit)), "Inspect(%d) is a prefix", limit)
					}
				}
				waiting, ready := all[procs:procs+count[workqueue.KeyWaiting]], all[procs+count[workqueue.KeyWaiting]:]
				for _, limit := range []int{1, 7, 50} {
					got := q.InspectLimited(workqueue.InspectLimits{Waiting: limit, Ready: limit})
					want := append(slices.Clone(waiting[:min(limit, len(waiting))]), ready[:min(limit, len(ready))]...)
					require.Equal(t, brief(want), brief(got), "InspectLimited(%d) gives a prefix of each part", limit)
				}
				for _, k := range []int{-1, 300} {
					require.False(t, seen[k])
					require.Equal(t, workqueue.KeyAbsent, q.State(k))
				}
				for k := range 300 {
					if !seen[k] {
						require.Equal(t, workqueue.KeyAbsent, q.State(k), "key %d is absent from the snapshot, so from the queue", k)
					}
				}
				q.ShutDown()
			})
		})
	}
}

// hiddenLimiter is a limiter from elsewhere: MostRequeued cannot ask it to
// rank, only about each key.
type hiddenLimiter struct{ l workqueue.RateLimiter[string] }

func (h hiddenLimiter) When(k string) time.Duration { return h.l.When(k) }
func (h hiddenLimiter) Forget(k string)             { h.l.Forget(k) }
func (h hiddenLimiter) NumRequeues(k string) int    { return h.l.NumRequeues(k) }

func TestMostRequeued(t *testing.T) {
	exp := func() workqueue.RateLimiter[string] {
		return workqueue.NewItemExponentialFailureRateLimiter[string](time.Second, time.Hour)
	}
	limiters := map[string]func() workqueue.RateLimiter[string]{
		"exponential": exp,
		"default":     workqueue.DefaultControllerRateLimiter[string],
		"fastslow": func() workqueue.RateLimiter[string] {
			return workqueue.NewItemFastSlowRateLimiter[string](time.Second, time.Hour, 3)
		},
		"maxwait(maxof)": func() workqueue.RateLimiter[string] {
			return workqueue.NewWithMaxWaitRateLimiter(workqueue.NewMaxOfRateLimiter(exp(),
				workqueue.NewItemFastSlowRateLimiter[string](time.Second, time.Hour, 3)), time.Hour)
		},
		"elsewhere": func() workqueue.RateLimiter[string] { return hiddenLimiter{exp()} },
	}
	for name, mk := range limiters {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := workqueue.NewRateLimitingQueue(mk())
				require.Nil(t, q.MostRequeued(5), "no failures, no keys")
				// 1200 keys failing once, due within the hour, and
				// "hot" failing 9 times, given last: beyond the 1000
				// waiting keys due soonest.
				for i := range 1200 {
					q.AddRateLimited("k" + strconv.Itoa(i))
				}
				for range 9 {
					q.AddRateLimited("hot")
				}
				for range 4 {
					q.AddRateLimited("warm")
				}
				q.Add("busy")
				q.Get()
				q.AddRateLimited("busy")
				q.AddRateLimited("busy")     // processing+waiting, 2 requeues
				q.RateLimiter().When("gone") // counted, never queued
				q.RateLimiter().When("gone")
				q.RateLimiter().When("gone")

				got := q.MostRequeued(3)
				if name == "elsewhere" {
					// Only the snapshot's keys are asked about: hot and
					// warm wait beyond the 1000 soonest, gone is not queued.
					require.Len(t, got, 3)
					require.Equal(t, "busy", got[0].Key, "the most requeued key the snapshot holds")
					require.Equal(t, 2, got[0].Requeues)
					q.ShutDown()
					return
				}
				require.Equal(t, []string{"hot:waiting", "warm:waiting", "gone:absent"}, brief(got), "most requeues first, exact")
				require.Equal(t, []int{9, 4, 3}, []int{got[0].Requeues, got[1].Requeues, got[2].Requeues})
				require.False(t, got[0].Due.IsZero(), "a waiting key has its Due")
				got = q.MostRequeued(4)
				require.Equal(t, "busy:processing+waiting", brief(got)[3])
				require.Len(t, q.MostRequeued(10_000), 1200+4, "every key with requeues, once")
				q.ShutDown()
			})
		})
	}
}

// MaxOf ranks by each key's largest count, whichever limiter holds it.
func TestMostRequeuedMaxOf(t *testing.T) {
	a := workqueue.NewItemExponentialFailureRateLimiter[string](time.Second, time.Hour)
	b := workqueue.NewItemFastSlowRateLimiter[string](time.Second, time.Hour, 1)
	for range 5 {
		a.When("x")
	}
	b.When("x")
	for range 3 {
		b.When("y")
	}
	for range 2 {
		a.When("z")
	}
	// b first: its count of x (1) is the first the ranking meets, and
	// must give way to a's (5).
	q := workqueue.NewRateLimitingQueue(workqueue.NewMaxOfRateLimiter[string](b, a))
	got := q.MostRequeued(2)
	require.Equal(t, []string{"x:absent", "y:absent"}, brief(got), "x counts 5 in a, y 3 in b")
	require.Equal(t, []int{5, 3}, []int{got[0].Requeues, got[1].Requeues})
	require.Len(t, q.MostRequeued(5), 3)
}

// TestInspectSkipsGhosts checks that the entries Remove leaves in the
// store are not listed: a key removed and added again is listed once, at
// the place Get will hand it out (its ghost's, in a Store), and a ghost
// left behind not at all.
func TestInspectSkipsGhosts(t *testing.T) {
	for _, tc := range []struct {
		store workqueue.Store[string]
		want  []string
	}{
		{nil, []string{"c", "a", "d"}},
		{workqueue.NewFIFOStore[string](), []string{"a", "c", "d"}}, // b's ghost is passed over
	} {
		q := workqueue.NewWithConfig(workqueue.Config[string]{Store: tc.store})
		for _, k := range []string{"a", "b", "c"} {
			q.Add(k)
		}
		q.Remove("a")
		q.Remove("b")
		q.Add("a")
		q.Add("d")
		var got []string
		for _, k := range q.Inspect(10) {
			got = append(got, k.Key)
		}
		require.Equal(t, tc.want, got, "Inspect lists each ready key once, in Get's order")
		for _, want := range got {
			k, _ := q.Get()
			require.Equal(t, want, k, "Get agrees with Inspect")
			q.Done(k)
		}
	}
}

// TestInspectPriorityOfARun checks KeyInfo.Priority of a processing key
// with every kind of store: the pending run's priority while it has one
// (added again while processing), and 0 once it has none, whatever the
// priority of the run in progress or of a re-run Remove cancelled.
func TestInspectPriorityOfARun(t *testing.T) {
	for _, sc := range []struct {
		name  string
		store func() workqueue.Store[string]
	}{
		{"default", func() workqueue.Store[string] { return nil }},
		{"fifo", workqueue.NewFIFOStore[string]},
		{"priority", func() workqueue.Store[string] { return workqueue.NewPriorityStore[string]() }},
		{"fairpriority", func() workqueue.Store[string] {
			return workqueue.NewFairPriorityStore(workqueue.FairPriority[string]{Tenant: tenantOf, MaxInFlight: 1})
		}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			q := workqueue.NewWithConfig(workqueue.Config[string]{Store: sc.store()})
			q.AddWithPriority("a/1", 5)
			k, prio, _ := q.GetWithPriority()
			require.Equal(t, "a/1", k)
			if sc.name != "default" && sc.name != "fifo" {
				require.Equal(t, 5, prio)
			}
			priorityOf := func() int {
				infos := q.Inspect(10)
				require.Len(t, infos, 1)
				return infos[0].Priority
			}
			require.Zero(t, priorityOf(), "a processing key with no pending run has priority 0, whatever its run's")
			q.AddWithPriority("a/1", 7)
			require.Equal(t, 7, priorityOf(), "added again while processing: the pending run's priority")
			require.True(t, q.Remove("a/1"))
			require.Zero(t, priorityOf(), "the re-run removed: no pending run, priority 0")
			q.AddAfterWithPriority("a/1", time.Hour, 3)
			require.Equal(t, 3, priorityOf(), "a run at a deadline: its priority")
			q.ShutDown()
			require.Zero(t, priorityOf(), "ShutDown dropped the deadline: no pending run, priority 0")
			q.Done("a/1")
		})
	}
}
