package kubemetrics_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/hostmetrics/internal/scrape"
	"github.com/go-coalesce/workqueue/interop/hostmetrics/kubemetrics"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	clientworkqueue "k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics/legacyregistry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// seq makes queue names unique, so that a test run again in the same
// process (-count) starts from fresh series in the global registry.
var seq atomic.Int64

func unique(name string) string { return fmt.Sprintf("%s-%d", name, seq.Add(1)) }

type rlQueue = clientworkqueue.TypedRateLimitingInterface[string]

func limiter() clientworkqueue.TypedRateLimiter[string] {
	return clientworkqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 10*time.Millisecond)
}

// theirs is a client-go queue as kube-controller-manager's controllers make
// them: it reports through client-go's global provider, component-base's.
func theirs(name string) rlQueue {
	return clientworkqueue.NewTypedRateLimitingQueueWithConfig(limiter(), clientworkqueue.TypedRateLimitingQueueConfig[string]{Name: name})
}

// ours is the one line of setup.
func ours(name string) rlQueue {
	return workqueue.NewRateLimitingQueueWithConfig(limiter(), workqueue.Config[string]{Name: name, Metrics: kubemetrics.Provider()})
}

var keys = []string{"default/a", "default/b", "default/c", "default/d", "default/e"}

// run is a small controller on q, written the client-go way: the keys are
// added as informer handlers would, one worker takes them; default/b fails
// once (AddRateLimited), default/c asks to run again in 1ms (AddAfter), the
// others succeed (Forget). It returns two scrapes of the legacy registry for
// name: one while the first sync is held, so every other key is queued, and
// one once every key has settled; then it shuts q down and waits for the
// worker.
func run(t *testing.T, q rlQueue, name string) (mid, end map[string]scrape.Series) {
	t.Helper()
	var (
		mu      sync.Mutex
		calls   = map[string]int{}
		held    = make(chan struct{})
		release = make(chan struct{})
		settled = make(chan struct{})
		exited  = make(chan struct{})
	)
	for _, k := range keys {
		q.Add(k)
	}
	go func() {
		defer close(exited)
		first, once := true, sync.Once{}
		for {
			key, shutdown := q.Get()
			if shutdown {
				return
			}
			if first {
				first = false
				close(held)
				<-release
			}
			mu.Lock()
			calls[key]++
			n := calls[key]
			done := calls["default/b"] >= 2 && calls["default/c"] >= 2
			for _, k := range keys {
				done = done && calls[k] >= 1
			}
			mu.Unlock()
			switch {
			case key == "default/b" && n == 1:
				q.AddRateLimited(key)
			case key == "default/c" && n == 1:
				q.Forget(key)
				q.AddAfter(key, time.Millisecond)
			default:
				q.Forget(key)
			}
			q.Done(key)
			if done {
				once.Do(func() { close(settled) })
			}
		}
	}()
	defer func() {
		q.ShutDown()
		<-exited
	}()

	<-held
	mid, err := scrape.Of(legacyregistry.DefaultGatherer, name)
	close(release)
	require.NoError(t, err, "a scrape of the legacy registry must not fail")
	select {
	case <-settled:
	case <-time.After(30 * time.Second):
		t.Fatalf("the controller on %s did not settle", name)
	}
	end, err = scrape.Of(legacyregistry.DefaultGatherer, name)
	require.NoError(t, err)
	return mid, end
}

// deterministic are the families whose values do not depend on timing.
var deterministic = []string{"workqueue_depth", "workqueue_adds_total", "workqueue_retries_total",
	"workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"}

// TestSeriesLikeClientGo runs the controller on a client-go queue and on
// ours, under two names, and compares what the legacy registry shows for
// each: the same series (names, types, help with its stability level, the
// name label, buckets) and the same values wherever they do not depend on
// timing, mid-run and at the end. Ours have one family more,
// workqueue_oldest_ready_seconds, from the scrape that found keys ready.
func TestSeriesLikeClientGo(t *testing.T) {
	o, th := unique("kcm-ours"), unique("kcm-theirs")
	oursMid, oursEnd := run(t, ours(o), o)
	theirsMid, theirsEnd := run(t, theirs(th), th)

	require.Contains(t, oursMid, `workqueue_oldest_ready_seconds{name=Q,priority=0}`, "mid-run: keys are ready at priority 0")
	require.Zero(t, oursEnd[`workqueue_oldest_ready_seconds{name=Q,priority=0}`].Value, "at the end none is, and the series stays at 0")
	oursMid, oursEnd = scrape.Without(oursMid, scrape.OldestReady), scrape.Without(oursEnd, scrape.OldestReady)

	require.Len(t, theirsEnd, 7, "client-go's seven workqueue series")
	require.Equal(t, scrape.Shapes(theirsEnd), scrape.Shapes(oursEnd), "our series must be client-go's")
	require.Equal(t, scrape.Values(theirsMid, deterministic...), scrape.Values(oursMid, deterministic...), "mid-run values must agree")
	require.Equal(t, scrape.Values(theirsEnd, deterministic...), scrape.Values(oursEnd, deterministic...), "final values must agree")
	require.Equal(t, 4.0, oursMid[`workqueue_depth{name=Q}`].Value, "mid-run: four keys wait behind the held one")
	require.Equal(t, 7.0, oursEnd[`workqueue_adds_total{name=Q}`].Value, "five adds and two requeues")
	require.Equal(t, 2.0, oursEnd[`workqueue_retries_total{name=Q}`].Value, "one AddRateLimited and one AddAfter")
	require.Equal(t, "1e-08 1e-07 1e-06 9.999999999999999e-06 9.999999999999999e-05 0.001 0.01 0.1 1 10",
		oursEnd[`workqueue_work_duration_seconds{name=Q}`].Bounds, "component-base's 10 buckets")
	// Exact at scrape time: ours report the held sync's age; client-go's
	// are refreshed every 500 ms and may still read 0.
	require.Positive(t, oursMid[`workqueue_longest_running_processor_seconds{name=Q}`].Value)
	require.Positive(t, oursMid[`workqueue_unfinished_work_seconds{name=Q}`].Value)

	all, err := scrape.Of(legacyregistry.DefaultGatherer, "go-coalesce-workqueue-hostmetrics-probe")
	require.NoError(t, err)
	require.Empty(t, all, "the queue that made component-base register its families must leave no series")
}

// TestSameNameAsClientGo is the Deployment controller swap: the
// client-go queue named "deployment" runs, then ours under the same name.
// The series are the same ones, and ours add to them what the client-go
// queue added, as a second client-go queue of that name would.
func TestSameNameAsClientGo(t *testing.T) {
	before, err := scrape.Of(legacyregistry.DefaultGatherer, "deployment")
	require.NoError(t, err)
	_, first := run(t, theirs("deployment"), "deployment")
	_, second := run(t, ours("deployment"), "deployment")

	require.Equal(t, scrape.Shapes(first), scrape.Shapes(scrape.Without(second, scrape.OldestReady)), "the same series, and our ready age")
	require.Contains(t, second, `workqueue_oldest_ready_seconds{name=Q,priority=0}`)
	counts := []string{"workqueue_adds_total", "workqueue_retries_total",
		"workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"}
	b := scrape.Values(before, counts...)
	for k, v := range scrape.Values(first, counts...) {
		require.Positive(t, v-b[k], "%s: the client-go queue counted", k)
		require.Equal(t, v-b[k], second[k].Value-v, "%s: our queue's counts add to client-go's, as much", k)
	}
	require.Zero(t, second[`workqueue_depth{name=Q}`].Value)
}

// TestStarvingLevelInTheScrape: a queue of ours with a priority store
// (three keys at -100, a stream of priority-0 events that the worker always
// takes first, on synctest's clock) reports into the legacy registry, beside
// a client-go queue; the scrape shows, beside component-base's families,
// how long the -100 level has waited, growing while it is passed over.
func TestStarvingLevelInTheScrape(t *testing.T) {
	kubemetrics.Provider() // outside the bubble: its first call makes a client-go queue
	synctest.Test(t, func(t *testing.T) {
		name, th := unique("starving"), unique("starving-theirs")
		c := theirs(th)
		defer c.ShutDown()
		c.Add("default/a")
		q := workqueue.NewWithConfig(workqueue.Config[string]{Name: name, Metrics: kubemetrics.Provider(), Store: workqueue.NewPriorityStore[string]()})
		defer q.ShutDown()
		for _, k := range []string{"default/a", "default/b", "default/c"} {
			q.AddWithPriority(k, -100)
		}
		for i := range 10 { // one event a second, each handled at once
			q.AddWithPriority(fmt.Sprintf("default/event-%d", i), 0)
			time.Sleep(time.Second)
			k, _ := q.Get()
			require.Equal(t, fmt.Sprintf("default/event-%d", i), k, "priority 0 goes first")
			q.Done(k)
		}
		time.Sleep(time.Second / 2)

		s, err := scrape.Of(legacyregistry.DefaultGatherer, name)
		require.NoError(t, err, "a scrape of the legacy registry must not fail")
		require.Equal(t, 10.5, s[`workqueue_oldest_ready_seconds{name=Q,priority=-100}`].Value, "the -100 level has waited 10.5s")
		require.NotContains(t, s, `workqueue_oldest_ready_seconds{name=Q,priority=0}`, "no scrape found a key ready at 0: no series")
		require.Contains(t, s[`workqueue_oldest_ready_seconds{name=Q,priority=-100}`].Help, "A value that keeps growing means the priority is not being served.")
		require.Equal(t, 3.0, s[`workqueue_depth{name=Q}`].Value, "component-base's depth, all priorities")
		require.Equal(t, 13.0, s[`workqueue_adds_total{name=Q}`].Value)
		cs, err := scrape.Of(legacyregistry.DefaultGatherer, th)
		require.NoError(t, err)
		require.Equal(t, 1.0, cs[`workqueue_depth{name=Q}`].Value, "the client-go queue's, in the same registry")
		require.NotContains(t, cs, `workqueue_oldest_ready_seconds{name=Q,priority=0}`, "which has no ready age")

		time.Sleep(5 * time.Second)
		s, err = scrape.Of(legacyregistry.DefaultGatherer, name)
		require.NoError(t, err)
		require.Equal(t, 15.5, s[`workqueue_oldest_ready_seconds{name=Q,priority=-100}`].Value, "and it keeps growing while nothing serves it")
	})
}

// TestNameAloneReportsNothingWithoutRegister is the other half of the
// register package's test: in a binary that does not import
// kubemetrics/register (this one), a queue with a Name and no
// Config.Metrics has no series in the legacy registry, even though
// component-base's families are there. This is why the register import (or
// Config.Metrics: kubemetrics.Provider()) is needed.
func TestNameAloneReportsNothingWithoutRegister(t *testing.T) {
	kubemetrics.Provider() // the families are registered
	name := unique("configmaps-unregistered")
	q := workqueue.NewRateLimitingQueueWithConfig(limiter(), workqueue.Config[string]{Name: name})
	defer q.ShutDown()
	q.Add("default/a")
	got, err := scrape.Of(legacyregistry.DefaultGatherer, name)
	require.NoError(t, err)
	require.Empty(t, got, "without the register import a name alone reports nothing")

	theirs := unique("configmaps-theirs")
	c := clientworkqueue.NewTypedRateLimitingQueueWithConfig(limiter(), clientworkqueue.TypedRateLimitingQueueConfig[string]{Name: theirs})
	defer c.ShutDown()
	c.Add("default/a")
	got, err = scrape.Of(legacyregistry.DefaultGatherer, theirs)
	require.NoError(t, err)
	require.NotEmpty(t, got, "while client-go's queue of a name reports (so the scrape can see series)")
}

// TestSeriesAtIdleAfterWorkAndAfterShutDown puts side by side a client-go
// queue reporting through component-base's provider (in the legacy
// registry) and ours through kubemetrics (the same registry), each under its
// own name, and compares their series for series at idle, once all work is
// done, and after ShutDown, with time on synctest's clock so that
// client-go's age gauges, refreshed every 500 ms, are current. kubemetrics
// must show client-go's series exactly (help included). Every gauge reads 0
// at idle, after the work and after ShutDown, and no series goes away:
// component-base never deletes one, and neither do we. (The Prometheus
// adapter's side of the same comparison is integration/adapterseries, in
// the test-only module, so that interop/go.mod need not require the
// adapter's module.)
func TestSeriesAtIdleAfterWorkAndAfterShutDown(t *testing.T) {
	kubemetrics.Provider() // outside the bubble: its first call makes a client-go queue
	synctest.Test(t, func(t *testing.T) {
		th, o := unique("idle-theirs"), unique("idle-ours")
		queues := []rlQueue{theirs(th), ours(o)}

		check := func(phase string) {
			theirsS, err := scrape.Of(legacyregistry.DefaultGatherer, th)
			require.NoError(t, err)
			oursS, err := scrape.Of(legacyregistry.DefaultGatherer, o)
			require.NoError(t, err)

			require.Len(t, theirsS, 7, "%s: client-go's seven series", phase)
			require.Equal(t, theirsS, oursS, "%s: kubemetrics' series and values must be client-go's", phase)
			for _, s := range theirsS {
				if s.Type == "GAUGE" {
					require.Zero(t, s.Value, "%s: %s", phase, s.Key())
				}
			}
		}

		time.Sleep(time.Second) // a refresh of client-go's age gauges
		check("idle")
		for _, q := range queues {
			work(q)
		}
		time.Sleep(time.Second)
		check("all work done")
		for _, q := range queues {
			q.ShutDown()
		}
		time.Sleep(time.Second)
		check("shut down")
		check("shut down, scraped again")
	})
}

// work runs keys on q with one worker in the calling goroutine, as run's
// controller does (default/b fails once, default/c runs again after 1ms):
// seven runs. The delays pass on synctest's clock while Get waits.
func work(q rlQueue) {
	for _, k := range keys {
		q.Add(k)
	}
	calls := map[string]int{}
	for range len(keys) + 2 {
		key, _ := q.Get()
		calls[key]++
		switch {
		case key == "default/b" && calls[key] == 1:
			q.AddRateLimited(key)
		case key == "default/c" && calls[key] == 1:
			q.Forget(key)
			q.AddAfter(key, time.Millisecond)
		default:
			q.Forget(key)
		}
		q.Done(key)
	}
}
