package workqueue_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/stretchr/testify/require"
)

const (
	quiet   = 100 * time.Millisecond
	maxWait = time.Second
)

func newDebounced() *workqueue.Queue[string] {
	return workqueue.NewWithConfig(workqueue.Config[string]{
		Debounce: workqueue.Debounce{Quiet: quiet, MaxWait: maxWait},
	})
}

// runTimes records, on fake time measured from start, when a worker was
// handed each key. The worker calls Done at once unless hold says how long
// to keep a key.
type runTimes struct {
	mu   sync.Mutex
	runs []string
	at   []time.Duration
}

func (r *runTimes) record(k string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, k)
	r.at = append(r.at, d)
}

func (r *runTimes) get() ([]string, []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.runs...), append([]time.Duration(nil), r.at...)
}

// startWorker runs one worker on q until it shuts down, recording every
// run; each key is held for hold (fake time) before Done.
func startWorker(q *workqueue.Queue[string], start time.Time, hold time.Duration, r *runTimes) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			k, shutdown := q.Get()
			if shutdown {
				return
			}
			r.record(k, time.Since(start))
			time.Sleep(hold)
			q.Done(k)
		}
	})
	return &wg
}

// addsAt adds key at each of the given offsets from start (fake time).
func addsAt(q *workqueue.Queue[string], start time.Time, key string, offsets ...time.Duration) {
	for _, off := range offsets {
		time.Sleep(time.Until(start.Add(off)))
		q.Add(key)
	}
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestDebounce(t *testing.T) {
	cases := []struct {
		name     string
		hold     time.Duration // how long the worker keeps a key
		script   func(q *workqueue.Queue[string], start time.Time)
		wantRuns []time.Duration
	}{
		{
			name: "burst shorter than Quiet: one run, Quiet after the last Add",
			script: func(q *workqueue.Queue[string], start time.Time) {
				addsAt(q, start, "a", 0, ms(10), ms(20), ms(90))
			},
			wantRuns: []time.Duration{ms(190)},
		},
		{
			name: "adds further apart than Quiet: one run each",
			script: func(q *workqueue.Queue[string], start time.Time) {
				addsAt(q, start, "a", 0, ms(150), ms(300))
			},
			wantRuns: []time.Duration{ms(100), ms(250), ms(400)},
		},
		{
			name: "burst longer than MaxWait: a run every MaxWait while it lasts",
			script: func(q *workqueue.Queue[string], start time.Time) {
				// Every 30ms, so that no Add falls on the instant a run
				// becomes due (which of the two goes first would be up to
				// the scheduler).
				var offs []time.Duration
				for i := 0; i <= 2490/30; i++ {
					offs = append(offs, ms(30*i))
				}
				addsAt(q, start, "a", offs...)
			},
			// The first burst is capped at 0+1000. The next starts with
			// the Add at 1020, the first after that run started, and is
			// capped at 2020; the last Add, at 2490, makes the third run
			// due at 2590.
			wantRuns: []time.Duration{ms(1000), ms(2020), ms(2590)},
		},
		{
			name: "AddAfter inside a burst: the fixed time wins when earlier",
			script: func(q *workqueue.Queue[string], start time.Time) {
				addsAt(q, start, "a", 0)
				time.Sleep(ms(10))
				q.AddAfter("a", ms(30)) // fixed at 40
				addsAt(q, start, "a", ms(20), ms(30))
			},
			wantRuns: []time.Duration{ms(40)},
		},
		{
			name: "AddAfter before a burst: a debounced Add never puts it off",
			script: func(q *workqueue.Queue[string], start time.Time) {
				q.AddAfter("a", ms(50))
				addsAt(q, start, "a", ms(10), ms(40))
			},
			wantRuns: []time.Duration{ms(50)},
		},
		{
			name: "AddAfter later than the burst: the debounced time wins",
			script: func(q *workqueue.Queue[string], start time.Time) {
				q.AddAfter("a", time.Hour)
				addsAt(q, start, "a", ms(10))
			},
			wantRuns: []time.Duration{ms(110)},
		},
		{
			name: "AddAfter(0) inside a burst runs now",
			script: func(q *workqueue.Queue[string], start time.Time) {
				addsAt(q, start, "a", 0, ms(10))
				q.AddAfter("a", 0)
			},
			wantRuns: []time.Duration{ms(10)},
		},
		{
			name: "burst during a long run: one run after it, counted from the burst",
			hold: ms(500),
			script: func(q *workqueue.Queue[string], start time.Time) {
				q.AddAfter("a", 0) // run 1 at 0, held until 500
				addsAt(q, start, "a", ms(100), ms(150), ms(200))
			},
			// The burst settles at 300, while a is processing: the run is
			// due at Done, 500.
			wantRuns: []time.Duration{0, ms(500)},
		},
		{
			name: "burst at the end of a long run: due after Done, at its own time",
			hold: ms(500),
			script: func(q *workqueue.Queue[string], start time.Time) {
				q.AddAfter("a", 0)
				addsAt(q, start, "a", ms(450), ms(480))
			},
			wantRuns: []time.Duration{0, ms(580)},
		},
		{
			name: "README's timeline",
			hold: ms(370), // the run that starts at 80 ends at 450
			script: func(q *workqueue.Queue[string], start time.Time) {
				addsAt(q, start, "a", 0, ms(30))
				time.Sleep(time.Until(start.Add(ms(60))))
				q.AddAfter("a", ms(20))
				addsAt(q, start, "a", ms(70), ms(100), ms(150), ms(200), ms(250), ms(300), ms(350), ms(400))
			},
			wantRuns: []time.Duration{ms(80), ms(500)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newDebounced()
				start := time.Now()
				var r runTimes
				wg := startWorker(q, start, tc.hold, &r)
				tc.script(q, start)
				time.Sleep(time.Hour)
				synctest.Wait()
				q.ShutDown()
				wg.Wait()
				runs, at := r.get()
				require.Equal(t, tc.wantRuns, at, "runs of %v", runs)
			})
		})
	}
}

// TestDebounceStates checks Stats while a key is debounced and the merges
// with a ready key, a processing+dirty key and Remove.
func TestDebounceStates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newDebounced()
		q.Add("a")
		require.Equal(t, workqueue.Stats{Waiting: 1}, trimStats(q.Stats()), "a debounced key waits")
		require.Zero(t, q.Len())

		q.AddAfter("b", 0) // ready now
		q.Add("b")         // due now already: stays ready, nothing waits
		require.Equal(t, workqueue.Stats{Ready: 1, Waiting: 1, Dirty: 1}, trimStats(q.Stats()))

		b, _ := q.Get()
		q.AddAfter(b, 0) // processing+dirty
		q.Add(b)         // no change: due at Done
		require.Equal(t, workqueue.Stats{Waiting: 1, Processing: 1, Dirty: 1}, trimStats(q.Stats()))
		q.Done(b)
		expectGetFrom(t, q, "b")
		q.Done("b")

		require.True(t, q.Remove("a"), "Remove cancels a debounced run")
		time.Sleep(time.Hour)
		synctest.Wait()
		require.Equal(t, workqueue.Stats{}, trimStats(q.Stats()), "nothing runs after Remove")

		// A key removed while debounced starts a fresh burst when added
		// again: MaxWait counts from the new first Add.
		start := time.Now()
		q.Add("a")
		require.True(t, q.Remove("a"))
		time.Sleep(ms(50))
		q.Add("a")
		time.Sleep(quiet)
		synctest.Wait()
		require.Equal(t, 1, q.Len(), "due Quiet after the Add that followed Remove")
		require.Equal(t, ms(150), time.Since(start))
		q.ShutDown()
	})
}

// TestDebounceShutDown checks that ShutDown makes debounced keys ready
// rather than dropping them (their Add came first), while keys that only
// wait for an AddAfter deadline are dropped as always; and that a drain
// runs the debounced keys.
func TestDebounceShutDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newDebounced()
		q.Add("a")
		q.AddAfter("later", time.Hour)
		q.Add("b")
		q.AddAfter("c", time.Hour)
		q.Add("c") // debounced, with a fixed time behind it
		var r runTimes
		start := time.Now()
		wg := startWorker(q, start, 0, &r)
		time.Sleep(ms(10))
		require.NoError(t, q.ShutDownWithDrainAll(context.Background()))
		runs, at := r.get()
		require.Equal(t, []string{"a", "b", "c"}, runs, "the drain runs the debounced keys, in deadline order")
		require.Equal(t, []time.Duration{ms(10), ms(10), ms(10)}, at, "at once, not at their deadlines")
		wg.Wait()
		require.Equal(t, workqueue.Stats{}, trimStats(q.Stats()), "the AddAfter key was dropped")
		q.Add("d")
		require.Equal(t, workqueue.Stats{}, trimStats(q.Stats()), "Add after ShutDown is ignored")
	})
}

// TestDebounceMetrics checks that a debounced key counts in the waiting
// gauge, is one add per run however many Adds its burst had, and that its
// queue latency counts from the first Add.
func TestDebounceMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &durationMetrics{}
		q := workqueue.NewWithConfig(workqueue.Config[string]{
			Name: "q", Metrics: m, Debounce: workqueue.Debounce{Quiet: quiet, MaxWait: maxWait},
		})
		start := time.Now()
		addsAt(q, start, "a", 0, ms(10), ms(20))
		require.Equal(t, workqueue.Stats{Waiting: 1}, trimStats(m.stats()), "the waiting gauge counts it")
		time.Sleep(time.Hour)
		synctest.Wait()
		k, _ := q.Get()
		q.Done(k)
		require.Equal(t, int64(1), m.added.Load(), "one add for the burst's one run")
		require.Zero(t, m.retried.Load(), "a debounced Add is not a retry")
		require.Equal(t, []time.Duration{time.Hour + ms(20)}, m.waitedDurations(), "queue latency counts from the first Add")
		q.ShutDown()
	})
}

// durationMetrics is countingMetrics that also keeps the queue latencies.
type durationMetrics struct {
	countingMetrics
	mu     sync.Mutex
	waited []time.Duration
}

func (m *durationMetrics) NewQueueMetrics(name string, stats func() workqueue.Stats) workqueue.QueueMetrics {
	m.countingMetrics.NewQueueMetrics(name, stats)
	return m
}

func (m *durationMetrics) Waited(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.waited = append(m.waited, d)
}

func (m *durationMetrics) waitedDurations() []time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]time.Duration(nil), m.waited...)
}

// TestDebounceBadConfig checks that a configuration that could not work is
// refused when the queue is made, with the field named.
func TestDebounceBadConfig(t *testing.T) {
	for _, tc := range []struct {
		d    workqueue.Debounce
		want string
	}{
		{workqueue.Debounce{Quiet: -1, MaxWait: time.Second}, "workqueue: Config.Debounce.Quiet is negative (-1ns)"},
		{workqueue.Debounce{Quiet: time.Second, MaxWait: -1}, "workqueue: Config.Debounce.MaxWait is negative (-1ns)"},
		{workqueue.Debounce{MaxWait: time.Second}, "workqueue: Config.Debounce.MaxWait is 1s but Quiet is zero, which turns debouncing off; set Quiet too"},
		{workqueue.Debounce{Quiet: time.Second, MaxWait: time.Millisecond}, "workqueue: Config.Debounce.MaxWait (1ms) is less than Quiet (1s); MaxWait bounds how long a burst may put a run off and must be at least Quiet"},
		{workqueue.Debounce{Quiet: time.Second}, "workqueue: Config.Debounce.MaxWait (0s) is less than Quiet (1s); MaxWait bounds how long a burst may put a run off and must be at least Quiet"},
	} {
		require.PanicsWithValue(t, tc.want, func() {
			workqueue.NewWithConfig(workqueue.Config[string]{Debounce: tc.d})
		}, "%+v", tc.d)
	}
	require.NotPanics(t, func() {
		workqueue.NewWithConfig(workqueue.Config[string]{Debounce: workqueue.Debounce{Quiet: time.Second, MaxWait: time.Second}})
	}, "MaxWait == Quiet is a fixed window, and valid")
}

// TestDebounceSteadyStateDoesNotAllocate checks that a debounced burst on a
// recurring set of keys allocates nothing once the tables have grown.
func TestDebounceSteadyStateDoesNotAllocate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.NewWithConfig(workqueue.Config[int]{Debounce: workqueue.Debounce{Quiet: quiet, MaxWait: maxWait}})
		round := func() {
			for k := range 100 {
				for range 3 {
					q.Add(k)
				}
			}
			time.Sleep(maxWait)
			synctest.Wait()
			for q.Len() > 0 {
				k, _ := q.Get()
				q.Done(k)
			}
		}
		round()
		round()
		require.Zero(t, testing.AllocsPerRun(5, round), "a debounced burst must not allocate in steady state")
		q.ShutDown()
	})
}
