package crmetrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/crpriority"
	"github.com/go-coalesce/workqueue/interop/hostmetrics/crmetrics"
	"github.com/go-coalesce/workqueue/interop/hostmetrics/internal/scrape"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/types"
	clientworkqueue "k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// seq makes queue names unique, so that a test run again in the same
// process (-count) starts from fresh series in the global registry.
var seq atomic.Int64

func unique(name string) string { return fmt.Sprintf("%s-%d", name, seq.Add(1)) }

type (
	request  = reconcile.Request
	limiter  = clientworkqueue.TypedRateLimiter[request]
	rlQueue  = clientworkqueue.TypedRateLimitingInterface[request]
	newQueue = func(name string, rl limiter) rlQueue
)

// ourPlainQueue is the one line of setup for a plain queue.
func ourPlainQueue(name string, rl limiter) rlQueue {
	return workqueue.NewRateLimitingQueueWithConfig(rl, workqueue.Config[request]{Name: name, Metrics: crmetrics.Provider()})
}

// ourPriorityQueue is the one line of setup for crpriority.
func ourPriorityQueue(name string, rl limiter) rlQueue {
	return crpriority.New(rl, workqueue.Config[request]{Name: name, Metrics: crmetrics.Provider()})
}

// item is a request the source adds, at a priority.
type item struct {
	name string
	prio int
}

// run runs a controller named name on the queue that newQueue makes (nil:
// controller-runtime's default, its priority queue; usePQ false: its
// client-go queue) with one worker, feeds it items through a source.TypedFunc
// (with their priorities when the queue takes them), and returns two scrapes
// of metrics.Registry for name: one while the first Reconcile is held, so
// that every other item is queued, and one once every item has settled. "b"
// fails once (AddRateLimited) and "c" asks to be requeued after 1ms
// (AddAfter); every other item succeeds at once.
func run(t *testing.T, name string, nq newQueue, usePQ bool, items []item) (mid, end map[string]scrape.Series) {
	t.Helper()
	var (
		mu      sync.Mutex
		calls   = map[string]int{}
		held    = make(chan struct{}) // closed by the first Reconcile
		release = make(chan struct{}) // closed by the test after its scrape
		settled = make(chan struct{})
		once    sync.Once
	)
	want := func() bool {
		for _, it := range items {
			n := 1
			if it.name == "b" || it.name == "c" {
				n = 2
			}
			if calls[it.name] < n {
				return false
			}
		}
		return true
	}
	rec := reconcile.Func(func(ctx context.Context, r request) (reconcile.Result, error) {
		mu.Lock()
		calls[r.Name]++
		n, total := calls[r.Name], 0
		for _, c := range calls {
			total += c
		}
		mu.Unlock()
		if total == 1 {
			close(held)
			<-release
		}
		defer func() {
			mu.Lock()
			if want() {
				once.Do(func() { close(settled) })
			}
			mu.Unlock()
		}()
		switch {
		case r.Name == "b" && n == 1:
			return reconcile.Result{}, errors.New("transient")
		case r.Name == "c" && n == 1:
			return reconcile.Result{RequeueAfter: time.Millisecond}, nil
		}
		return reconcile.Result{}, nil
	})
	skip := true
	c, err := controller.NewTypedUnmanaged(name, controller.TypedOptions[request]{
		Reconciler:              rec,
		MaxConcurrentReconciles: 1,
		SkipNameValidation:      &skip,
		NewQueue:                nq,
		UsePriorityQueue:        &usePQ,
	})
	require.NoError(t, err)
	require.NoError(t, c.Watch(source.TypedFunc[request](func(ctx context.Context, q rlQueue) error {
		for _, it := range items {
			r := request{NamespacedName: types.NamespacedName{Namespace: "default", Name: it.name}}
			if pq, ok := q.(priorityqueue.PriorityQueue[request]); ok {
				pq.AddWithOpts(priorityqueue.AddOpts{Priority: &it.prio}, r)
			} else {
				q.Add(r)
			}
		}
		return nil
	})))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- c.Start(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-stopped)
	}()

	select {
	case <-held:
	case err := <-stopped:
		t.Fatalf("controller %s stopped early: %v", name, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("controller %s never reconciled", name)
	}
	mid, err = scrape.Of(metrics.Registry, name)
	close(release)
	require.NoError(t, err, "a scrape of metrics.Registry must not fail")

	select {
	case <-settled:
	case <-time.After(30 * time.Second):
		t.Fatalf("controller %s did not settle", name)
	}
	// settled is closed inside the last Reconcile, before the controller
	// calls Done. Wait until every run is counted in work_duration (a queue
	// reports a run there once its Done has returned), and take the scrape
	// that shows it as the final one: one scrape is one cut (package
	// hostmetrics), so its gauges have every run ended. (A reader that
	// does this is how a longest running processor of a few ms showed
	// "after all work is done" while the host's histograms and our gauges
	// were collected apart.)
	require.Eventually(t, func() bool {
		s, err := scrape.Of(metrics.Registry, name)
		if err != nil || s[`workqueue_work_duration_seconds{controller=Q,name=Q}`].Value != float64(len(items)+2) {
			return false
		}
		end = s
		return true
	}, 30*time.Second, time.Millisecond, "every run of %s must be counted", name)
	return mid, end
}

// deterministic are the families whose values do not depend on timing.
var deterministic = []string{"workqueue_depth", "workqueue_adds_total", "workqueue_retries_total",
	"workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"}

// TestPlainQueueReportsLikeControllerRuntimesQueues runs one controller on
// our plain queue (the NewQueue one-liner), one on controller-runtime's
// default queue (its priority queue) and one on its client-go queue, each
// under its own name, and compares what metrics.Registry shows for each
// name. Ours must have exactly the series of controller-runtime's default
// queue (names, types, help, labels including controller and
// priority="0", buckets, native-histogram settings) with the same values
// for everything that does not depend on timing, mid-run and at the end;
// the client-go queue's differ only in depth's priority label, which
// controller-runtime leaves empty for it. Ours have one family more,
// workqueue_oldest_ready_seconds, from the scrape that found keys ready.
func TestPlainQueueReportsLikeControllerRuntimesQueues(t *testing.T) {
	items := []item{{"a", 0}, {"b", 0}, {"c", 0}, {"d", 0}, {"e", 0}}
	oursMid, oursEnd := run(t, unique("plain-ours"), ourPlainQueue, true, items)
	crMid, crEnd := run(t, unique("plain-cr"), nil, true, items)
	cgMid, cgEnd := run(t, unique("plain-clientgo"), nil, false, items)

	require.Contains(t, oursMid, `workqueue_oldest_ready_seconds{controller=Q,name=Q,priority=0}`, "mid-run: keys are ready at priority 0")
	require.Zero(t, oursEnd[`workqueue_oldest_ready_seconds{controller=Q,name=Q,priority=0}`].Value, "at the end none is, and the series stays at 0")
	oursMid, oursEnd = scrape.Without(oursMid, scrape.OldestReady), scrape.Without(oursEnd, scrape.OldestReady)

	require.Equal(t, scrape.Shapes(crEnd), scrape.Shapes(oursEnd), "our series must be controller-runtime's priority queue's")
	require.Equal(t, scrape.Values(crMid, deterministic...), scrape.Values(oursMid, deterministic...), "mid-run values must agree")
	require.Equal(t, scrape.Values(crEnd, deterministic...), scrape.Values(oursEnd, deterministic...), "final values must agree")
	require.Equal(t, 4.0, oursMid[`workqueue_depth{controller=Q,name=Q,priority=0}`].Value, "mid-run: four requests wait behind the held one")
	require.Equal(t, 7.0, oursEnd[`workqueue_adds_total{controller=Q,name=Q}`].Value, "five adds and two requeues")
	require.Equal(t, 2.0, oursEnd[`workqueue_retries_total{controller=Q,name=Q}`].Value, "one AddRateLimited and one AddAfter")

	// Exact at scrape time: the held Reconcile is running, so ours report
	// its age; controller-runtime's are refreshed every 500 ms and may
	// still read 0.
	require.Positive(t, oursMid[`workqueue_longest_running_processor_seconds{controller=Q,name=Q}`].Value)
	require.Positive(t, oursMid[`workqueue_unfinished_work_seconds{controller=Q,name=Q}`].Value)
	require.Zero(t, oursEnd[`workqueue_longest_running_processor_seconds{controller=Q,name=Q}`].Value, "nothing runs at the end")

	// The client-go queue: the same series but for depth's priority label.
	relabel := func(ss map[string]scrape.Series) map[string]scrape.Series {
		out := map[string]scrape.Series{}
		for _, s := range ss {
			if s.Family == "workqueue_depth" {
				s.Labels = "controller=Q,name=Q,priority=0"
			}
			out[s.Key()] = s
		}
		return out
	}
	require.Contains(t, cgEnd, `workqueue_depth{controller=Q,name=Q,priority=}`)
	require.Equal(t, scrape.Shapes(relabel(cgEnd)), scrape.Shapes(oursEnd), "a client-go queue differs only in depth's priority label")
	require.Equal(t, scrape.Values(relabel(cgMid), deterministic...), scrape.Values(oursMid, deterministic...))
	require.Equal(t, scrape.Values(relabel(cgEnd), deterministic...), scrape.Values(oursEnd, deterministic...))
}

// TestPriorityQueueReportsLikeControllerRuntimesPriorityQueue does the same
// for crpriority against controller-runtime's priority queue, with requests
// at two priorities: depth is labelled by priority in both.
func TestPriorityQueueReportsLikeControllerRuntimesPriorityQueue(t *testing.T) {
	items := []item{{"a", 0}, {"b", 0}, {"c", 0}, {"low1", -100}, {"low2", -100}}
	oursMid, oursEnd := run(t, unique("prio-ours"), ourPriorityQueue, true, items)
	crMid, crEnd := run(t, unique("prio-cr"), nil, true, items)

	require.Contains(t, oursMid, `workqueue_oldest_ready_seconds{controller=Q,name=Q,priority=0}`)
	require.Contains(t, oursMid, `workqueue_oldest_ready_seconds{controller=Q,name=Q,priority=-100}`)
	oursMid, oursEnd = scrape.Without(oursMid, scrape.OldestReady), scrape.Without(oursEnd, scrape.OldestReady)

	require.Equal(t, scrape.Shapes(crEnd), scrape.Shapes(oursEnd), "our series must be controller-runtime's priority queue's")
	require.Equal(t, scrape.Values(crMid, deterministic...), scrape.Values(oursMid, deterministic...), "mid-run values must agree")
	require.Equal(t, scrape.Values(crEnd, deterministic...), scrape.Values(oursEnd, deterministic...), "final values must agree")
	require.Equal(t, 2.0, oursMid[`workqueue_depth{controller=Q,name=Q,priority=0}`].Value, "mid-run: two requests at 0 behind the held one")
	require.Equal(t, 2.0, oursMid[`workqueue_depth{controller=Q,name=Q,priority=-100}`].Value, "mid-run: two requests at -100")
}

// TestSameNameAsClientGoQueue puts a client-go queue (reporting through
// controller-runtime's global provider) and one of ours under one name:
// the scrape succeeds, the counters are shared, and the age gauges are
// combined into one series.
func TestSameNameAsClientGoQueue(t *testing.T) {
	name := unique("shared")
	theirs := clientworkqueue.NewTypedRateLimitingQueueWithConfig(clientworkqueue.DefaultTypedControllerRateLimiter[string](),
		clientworkqueue.TypedRateLimitingQueueConfig[string]{Name: name})
	defer theirs.ShutDown()
	ours := workqueue.NewRateLimitingQueueWithConfig(workqueue.DefaultControllerRateLimiter[string](),
		workqueue.Config[string]{Name: name, Metrics: crmetrics.Provider()})
	defer ours.ShutDown()
	for _, k := range []string{"x", "y"} {
		theirs.Add(k)
		ours.Add(k)
	}
	k, _ := ours.Get()
	defer ours.Done(k)

	s, err := scrape.Of(metrics.Registry, name)
	require.NoError(t, err, "two queues of one name must not break the scrape")
	require.Equal(t, 4.0, s[`workqueue_adds_total{controller=Q,name=Q}`].Value, "the adds counter is shared")
	require.Equal(t, 2.0, s[`workqueue_depth{controller=Q,name=Q,priority=}`].Value, "client-go's depth, unlabelled by priority")
	require.Equal(t, 1.0, s[`workqueue_depth{controller=Q,name=Q,priority=0}`].Value, "ours, at priority 0")
	require.Contains(t, s, `workqueue_longest_running_processor_seconds{controller=Q,name=Q}`)
	require.Positive(t, s[`workqueue_longest_running_processor_seconds{controller=Q,name=Q}`].Value, "ours is running a key now")
}

// TestStarvingLevelInTheScrape is what MIGRATING.md's controller-runtime
// user sees: crpriority with crmetrics.Provider(), an initial list of three
// keys at handler.LowPriority (-100), and a stream of priority-0 events that
// the worker always takes first, on synctest's clock. A scrape of
// metrics.Registry then shows, beside controller-runtime's own families for
// the controller (depth by priority, adds), how long the -100 level has
// waited, growing while it is passed over, and the priority-0 level's small
// age; once the worker gets to the -100 keys their age goes to 0.
func TestStarvingLevelInTheScrape(t *testing.T) {
	crmetrics.Provider() // outside the bubble: found once per process
	synctest.Test(t, func(t *testing.T) {
		name := unique("starving")
		q := crpriority.New(strLimiter(), workqueue.Config[string]{Name: name, Metrics: crmetrics.Provider()})
		defer q.ShutDown()
		for _, k := range []string{"default/a", "default/b", "default/c"} {
			q.AddWithOpts(priorityqueue.AddOpts{Priority: new(handler.LowPriority)}, k)
		}
		event := func(i int) string { return fmt.Sprintf("default/event-%d", i) }
		for i := range 10 { // one event a second, each handled at once
			q.AddWithOpts(priorityqueue.AddOpts{Priority: new(0)}, event(i))
			time.Sleep(time.Second)
			k, prio, _ := q.GetWithPriority()
			require.Equal(t, event(i), k, "priority 0 goes first")
			require.Zero(t, prio)
			q.Done(k)
		}
		q.AddWithOpts(priorityqueue.AddOpts{Priority: new(0)}, event(10))
		time.Sleep(time.Second / 2)

		s, err := scrape.Of(metrics.Registry, name)
		require.NoError(t, err, "a scrape of metrics.Registry must not fail")
		require.Equal(t, 10.5, s[`workqueue_oldest_ready_seconds{controller=Q,name=Q,priority=-100}`].Value, "the initial list has waited 10.5s")
		require.Equal(t, 0.5, s[`workqueue_oldest_ready_seconds{controller=Q,name=Q,priority=0}`].Value, "the event, 0.5s")
		require.Equal(t, "GAUGE", s[`workqueue_oldest_ready_seconds{controller=Q,name=Q,priority=-100}`].Type)
		require.Contains(t, s[`workqueue_oldest_ready_seconds{controller=Q,name=Q,priority=-100}`].Help, "A value that keeps growing means the priority is not being served.")
		// Beside controller-runtime's own series of the controller.
		require.Equal(t, 3.0, s[`workqueue_depth{controller=Q,name=Q,priority=-100}`].Value)
		require.Equal(t, 1.0, s[`workqueue_depth{controller=Q,name=Q,priority=0}`].Value)
		require.Equal(t, 14.0, s[`workqueue_adds_total{controller=Q,name=Q}`].Value, "three keys and eleven events")
		require.Equal(t, 10.0, s[`workqueue_work_duration_seconds{controller=Q,name=Q}`].Value, "ten runs")

		time.Sleep(5 * time.Second)
		s, err = scrape.Of(metrics.Registry, name)
		require.NoError(t, err)
		require.Equal(t, 15.5, s[`workqueue_oldest_ready_seconds{controller=Q,name=Q,priority=-100}`].Value, "and it keeps growing while nothing serves it")

		for range 4 {
			k, _ := q.Get()
			q.Done(k)
		}
		s, err = scrape.Of(metrics.Registry, name)
		require.NoError(t, err)
		require.Zero(t, s[`workqueue_oldest_ready_seconds{controller=Q,name=Q,priority=-100}`].Value, "served: nothing ready at -100")
		require.Zero(t, s[`workqueue_oldest_ready_seconds{controller=Q,name=Q,priority=0}`].Value)
	})
}

// TestProviderIsOnePerProcess checks that every call gives the same
// Provider, so the host's gauges are wrapped once.
func TestProviderIsOnePerProcess(t *testing.T) {
	require.Same(t, crmetrics.Provider(), crmetrics.Provider())
	_, err := crmetrics.NewProvider()
	require.NoError(t, err)
}

// strLimiter is a per-key backoff from 1ms, for the queues of
// TestSeriesAtIdleAfterWorkAndAfterShutDown.
func strLimiter() clientworkqueue.TypedRateLimiter[string] {
	return clientworkqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 10*time.Millisecond)
}

// work runs the keys queued on q, n of them, and the runs they ask for,
// with one worker in the calling goroutine, controller-style: "b" fails
// once (AddRateLimited) and "c" asks to run again in 1ms (AddAfter), the
// others succeed (Forget): n+2 runs. The queue's delays pass on synctest's
// clock while Get waits.
func work(q clientworkqueue.TypedRateLimitingInterface[string], n int) {
	calls := map[string]int{}
	for range n + 2 {
		k, _ := q.Get()
		calls[k]++
		switch {
		case k == "b" && calls[k] == 1:
			q.AddRateLimited(k)
		case k == "c" && calls[k] == 1:
			q.Forget(k)
			q.AddAfter(k, time.Millisecond)
		default:
			q.Forget(k)
		}
		q.Done(k)
	}
}

// TestSeriesAtIdleAfterWorkAndAfterShutDown puts our plain queue and
// crpriority side by side with controller-runtime's priority queue (its
// default) and its client-go queue, each reporting its own way into
// metrics.Registry, and compares their series for series (names, types,
// help, labels, buckets, values) at idle, with work queued, once all work
// is done, and after ShutDown, with time on synctest's clock so that
// controller-runtime's age gauges, refreshed every 500 ms, are current. At
// idle, after the work and after ShutDown every gauge is at 0 in both, and
// no series has gone: controller-runtime never deletes one, and neither do
// we (a shut-down queue is released, its series stay at the host's 0).
//
// Depth by priority: controller-runtime's priority queue makes a priority's
// series at the first add at it; ours, at the first scrape that finds a key
// at it (see the crmetrics package doc). The scrape with work queued is
// that scrape here, so the series line up from then on. Ours also have
// workqueue_oldest_ready_seconds by priority from that scrape on (3 s: the
// keys were queued that long before it), which controller-runtime's do not
// have: it is compared apart, and reads 0 in every later phase.
func TestSeriesAtIdleAfterWorkAndAfterShutDown(t *testing.T) {
	crmetrics.Provider() // outside the bubble: found once per process
	synctest.Test(t, func(t *testing.T) {
		names := struct{ ours, oursPrio, cr, crPrio, clientgo string }{
			unique("idle-ours"), unique("idle-ours-prio"), unique("idle-cr"), unique("idle-cr-prio"), unique("idle-clientgo"),
		}
		type rlq = clientworkqueue.TypedRateLimitingInterface[string]
		crQueue := func(name string) rlq {
			return priorityqueue.New(name, func(o *priorityqueue.Opts[string]) { o.RateLimiter = strLimiter() })
		}
		queues := map[string]rlq{
			names.ours:     workqueue.NewRateLimitingQueueWithConfig(strLimiter(), workqueue.Config[string]{Name: names.ours, Metrics: crmetrics.Provider()}),
			names.oursPrio: crpriority.New(strLimiter(), workqueue.Config[string]{Name: names.oursPrio, Metrics: crmetrics.Provider()}),
			names.cr:       crQueue(names.cr),
			names.crPrio:   crQueue(names.crPrio),
			names.clientgo: clientworkqueue.NewTypedRateLimitingQueueWithConfig(strLimiter(), clientworkqueue.TypedRateLimitingQueueConfig[string]{Name: names.clientgo}),
		}
		plain := []item{{"a", 0}, {"b", 0}, {"c", 0}, {"d", 0}}
		prio := []item{{"a", 0}, {"b", 0}, {"c", -100}, {"d", -100}}
		adds := map[string][]item{names.ours: plain, names.cr: plain, names.clientgo: plain, names.oursPrio: prio, names.crPrio: prio}

		scrapeAll := func() map[string]map[string]scrape.Series {
			synctest.Wait() // controller-runtime's queue counts adds in a goroutine of its own
			out := map[string]map[string]scrape.Series{}
			for name := range queues {
				s, err := scrape.Of(metrics.Registry, name)
				require.NoError(t, err, "a scrape of metrics.Registry must not fail")
				out[name] = s
			}
			return out
		}
		// The client-go queue's depth has priority="" where the priority
		// queue's has "0".
		relabel := func(ss map[string]scrape.Series) map[string]scrape.Series {
			out := map[string]scrape.Series{}
			for _, s := range ss {
				if s.Family == "workqueue_depth" {
					s.Labels = strings.Replace(s.Labels, "priority=", "priority=0", 1)
				}
				out[s.Key()] = s
			}
			return out
		}
		zeroGauges := func(phase string, s map[string]scrape.Series) {
			for _, g := range s {
				if g.Type == "GAUGE" {
					require.Zero(t, g.Value, "%s: %s", phase, g.Key())
				}
			}
		}
		check := func(phase string, clientgoToo bool) map[string]map[string]scrape.Series {
			s := scrapeAll()
			ours, oursPrio := scrape.Without(s[names.ours], scrape.OldestReady), scrape.Without(s[names.oursPrio], scrape.OldestReady)
			require.Equal(t, s[names.cr], ours, "%s: our plain queue's series and values must be controller-runtime's priority queue's", phase)
			require.Equal(t, s[names.crPrio], oursPrio, "%s: crpriority's series and values must be controller-runtime's priority queue's", phase)
			if clientgoToo {
				require.Equal(t, relabel(s[names.clientgo]), ours, "%s: a client-go queue's differ only in depth's priority label", phase)
			}
			return s
		}

		time.Sleep(time.Second) // a refresh of controller-runtime's age gauges
		s := check("idle", false)
		require.Len(t, s[names.ours], 6, "idle: no depth series before the first add, as controller-runtime's priority queue")
		require.Contains(t, s[names.clientgo], `workqueue_depth{controller=Q,name=Q,priority=}`, "a client-go queue has depth from its constructor")
		for name, q := range queues {
			zeroGauges("idle "+name, s[name])
			for _, it := range adds[name] {
				if pq, ok := q.(priorityqueue.PriorityQueue[string]); ok {
					pq.AddWithOpts(priorityqueue.AddOpts{Priority: &it.prio}, it.name)
				} else {
					q.Add(it.name)
				}
			}
		}
		time.Sleep(3 * time.Second)
		s = check("queued", true)
		require.Equal(t, 2.0, s[names.oursPrio][`workqueue_depth{controller=Q,name=Q,priority=-100}`].Value)
		oldest := func(prio string) string {
			return `workqueue_oldest_ready_seconds{controller=Q,name=Q,priority=` + prio + `}`
		}
		require.Equal(t, map[string]float64{oldest("0"): 3}, scrape.Values(s[names.ours], scrape.OldestReady), "queued: our plain queue's keys have been ready 3s")
		require.Equal(t, map[string]float64{oldest("0"): 3, oldest("-100"): 3}, scrape.Values(s[names.oursPrio], scrape.OldestReady), "queued: crpriority's, at both priorities")

		for name, q := range queues {
			work(q, len(adds[name]))
		}
		time.Sleep(time.Second)
		s = check("all work done", true)
		require.Equal(t, 6.0, s[names.ours][`workqueue_work_duration_seconds{controller=Q,name=Q}`].Value, "four runs and two again")
		require.Len(t, s[names.oursPrio], 10, "depth and the ready age at priorities 0 and -100, at 0, and the six others")
		for name := range queues {
			zeroGauges("all work done "+name, s[name])
		}

		for _, q := range queues {
			q.ShutDown()
		}
		time.Sleep(time.Second)
		for _, phase := range []string{"shut down", "shut down, scraped again"} {
			s = check(phase, true)
			for name := range queues {
				zeroGauges(phase+" "+name, s[name])
			}
		}
		require.Len(t, s[names.ours], 8, "every series stays after ShutDown")
	})
}
