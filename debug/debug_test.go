package debug_test

import (
	"encoding/json"
	"html"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/debug"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// nopProvider turns metrics on (so the queue measures run starts) and
// reports them nowhere.
type nopProvider struct{}

func (nopProvider) NewQueueMetrics(string, func() workqueue.Stats) workqueue.QueueMetrics {
	return nopMetrics{}
}

type nopMetrics struct{}

func (nopMetrics) Added()               {}
func (nopMetrics) Retried()             {}
func (nopMetrics) Waited(time.Duration) {}
func (nopMetrics) Worked(time.Duration) {}
func (nopMetrics) ShutDown()            {}

// Keys that would break a page that wrote them raw.
const (
	scriptKey = `<script>document.body.setAttribute("data-pwned","1")</script>`
	quoteKey  = `default/"quoted" & 'single' </td></tr></table>`
)

// fill builds a rate-limiting queue with metrics in a known state: two
// runs going (started 3s and 1s ago), three keys failing with backoff, and
// ready keys, among them keys that are markup. It must run in a synctest
// bubble.
func fill(t *testing.T) *workqueue.RateLimitingQueue[string] {
	t.Helper()
	q := workqueue.NewRateLimitingQueueWithConfig(
		workqueue.NewItemExponentialFailureRateLimiter[string](time.Second, time.Hour),
		workqueue.Config[string]{Name: "deployments", Metrics: nopProvider{}})
	q.Add("default/slow")
	q.Add(scriptKey)
	k, _ := q.Get()
	require.Equal(t, "default/slow", k)
	time.Sleep(2 * time.Second)
	k, _ = q.Get()
	require.Equal(t, scriptKey, k)
	time.Sleep(time.Second)
	for i, name := range []string{"default/flaky", "default/broken", "default/bad"} {
		for range 2 + i {
			q.AddRateLimited(name) // 1s, 2s, … : the first deadline is kept
		}
	}
	q.Add(quoteKey)
	q.Add("default/next")
	return q
}

func get(t *testing.T, h http.Handler, target string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec.Code, rec.Body.String()
}

func TestJSON(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := fill(t)
		plain := workqueue.New[int]()
		plain.Add(7)
		h := debug.NewHandler(debug.Options{}, debug.Queue("deployments", q, nil), debug.Queue("numbers", plain, nil))
		code, body := get(t, h, "/debug/workqueue?format=json")
		require.Equal(t, http.StatusOK, code)
		var p debug.Page
		require.NoError(t, json.Unmarshal([]byte(body), &p))
		require.Len(t, p.Queues, 2, "the queues given, in order")
		d := p.Queues[0]
		require.Equal(t, "deployments", d.Name)
		require.Equal(t, debug.Stats{Ready: 2, Waiting: 3, Processing: 2, Dirty: 2,
			UnfinishedWorkSeconds: 4, LongestRunningSeconds: 3}, d.Stats)

		keys := func(ks []debug.Key) (out []string) {
			for _, k := range ks {
				out = append(out, k.Key)
			}
			return out
		}
		require.Equal(t, []string{"default/slow", scriptKey}, keys(d.Processing), "oldest run first, keys as given")
		require.Equal(t, 3.0, *d.Processing[0].AgeSeconds)
		require.Equal(t, 1.0, *d.Processing[1].AgeSeconds)
		require.Equal(t, []string{"default/flaky", "default/broken", "default/bad"}, keys(d.Waiting), "due soonest first")
		require.Equal(t, 1.0, *d.Waiting[0].DueInSeconds)
		require.Equal(t, []string{"default/bad", "default/broken", "default/flaky"}, keys(d.MostRequeued), "most requeues first")
		require.Equal(t, []int{4, 3, 2}, []int{d.MostRequeued[0].Requeues, d.MostRequeued[1].Requeues, d.MostRequeued[2].Requeues})
		require.Equal(t, []string{quoteKey, "default/next"}, keys(d.Ready), "next ready first")
		require.True(t, d.RateLimited)

		n := p.Queues[1]
		require.Equal(t, []string{"7"}, keys(n.Ready), "keys of any type, through fmt.Sprint")
		require.False(t, n.RateLimited, "a plain queue counts no requeues")
		require.Empty(t, n.MostRequeued)
		require.Contains(t, body, `\u003cscript\u003e`, "JSON escapes markup in keys")
		q.ShutDown()
	})
}

func TestHTMLEscapesKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := fill(t)
		h := debug.NewHandler(debug.Options{}, debug.Queue(`<b>"name"</b>`, q, nil))
		code, body := get(t, h, "/debug/workqueue")
		require.Equal(t, http.StatusOK, code)
		require.NotContains(t, body, "<script", "no key may open a script element")
		require.NotContains(t, body, "<b>", "nor any other element")
		require.NotContains(t, body, quoteKey, "nor close the table")
		require.Contains(t, body, html.EscapeString(scriptKey))
		require.Contains(t, body, html.EscapeString(quoteKey))
		require.Contains(t, body, `data-queue="&lt;b&gt;&#34;name&#34;&lt;/b&gt;"`, "names are escaped in attributes too")
		rows := cells(body, "processing")
		require.Equal(t, []string{"default/slow", scriptKey}, rows, "the key cells hold the keys as text")
		q.ShutDown()
	})
}

// cells returns the text of the key cells of the first table of class
// class in page, unescaped.
func cells(page, class string) []string {
	m := regexp.MustCompile(`(?s)<table class="` + class + `">(.*?)</table>`).FindStringSubmatch(page)
	if m == nil {
		return nil
	}
	var out []string
	for _, c := range regexp.MustCompile(`(?s)<td class="key">(.*?)</td>`).FindAllStringSubmatch(m[1], -1) {
		out = append(out, html.UnescapeString(c[1]))
	}
	return out
}

// column returns the text of the cells of class col in the table of class
// class of page.
func column(page, class, col string) []string {
	m := regexp.MustCompile(`(?s)<table class="` + class + `">(.*?)</table>`).FindStringSubmatch(page)
	if m == nil {
		return nil
	}
	var out []string
	for _, c := range regexp.MustCompile(`(?s)<td class="num `+col+`">(.*?)</td>`).FindAllStringSubmatch(m[1], -1) {
		out = append(out, html.UnescapeString(c[1]))
	}
	return out
}

// TestReadyAges checks the ready ages on the page: per priority, highest
// first, in JSON and HTML; "not measured" for a queue without metrics.
func TestReadyAges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.NewWithConfig(workqueue.Config[string]{Name: "q", Metrics: nopProvider{}, Store: workqueue.NewPriorityStore[string]()})
		q.AddWithPriority("resync", -100)
		time.Sleep(90 * time.Second)
		q.Add("event")
		time.Sleep(time.Second)
		plain := workqueue.New[string]()
		plain.Add("a")
		h := debug.NewHandler(debug.Options{}, debug.Queue("q", q, nil), debug.Queue("plain", plain, nil))

		p := h.Snapshot(0)
		require.True(t, p.Queues[0].ReadyAgesMeasured)
		require.Equal(t, []debug.ReadyAge{{Priority: 0, AgeSeconds: 1}, {Priority: -100, AgeSeconds: 91}}, p.Queues[0].ReadyAges,
			"each level's oldest key, highest priority first")
		require.False(t, p.Queues[1].ReadyAgesMeasured, "a queue without metrics keeps no times")
		require.Empty(t, p.Queues[1].ReadyAges)

		code, body := get(t, h, "/debug/workqueue")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, []string{"0", "-100"}, column(body, "ages", "prio"))
		require.Equal(t, []string{"1s", "1m31s"}, column(body, "ages", "age"))
		require.Contains(t, body, "not measured: the queue needs metrics")

		k, _ := q.Get()
		q.Done(k)
		k, _ = q.Get()
		q.Done(k)
		_, body = get(t, h, "/debug/workqueue")
		require.Contains(t, body, "no key is ready", "measured, and empty")
		q.ShutDown()
	})
}

// TestReadyAgesHeldByCap checks that the page shows the age of a level
// whose keys all wait behind a tenant's MaxInFlight cap, with no provider
// but workqueue.MeasureOnly.
func TestReadyAgesHeldByCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tenant := func(k string) string { return k[:1] }
		q := workqueue.NewWithConfig(workqueue.Config[string]{
			Name: "q", Metrics: workqueue.MeasureOnly{},
			Store: workqueue.NewFairPriorityStore(workqueue.FairPriority[string]{Tenant: tenant, MaxInFlight: 1}),
		})
		q.AddWithPriority("a1", -100)
		q.AddWithPriority("a2", -100)
		k, _ := q.Get()
		require.Equal(t, "a1", k)
		time.Sleep(time.Minute)
		h := debug.NewHandler(debug.Options{}, debug.Queue("q", q, nil))
		p := h.Snapshot(0)
		require.True(t, p.Queues[0].ReadyAgesMeasured, "MeasureOnly keeps the times")
		require.Equal(t, []debug.ReadyAge{{Priority: -100, AgeSeconds: 60}}, p.Queues[0].ReadyAges,
			"a2 waits behind a's cap: its level shows its age")
		_, body := get(t, h, "/debug/workqueue")
		require.Equal(t, []string{"1m0s"}, column(body, "ages", "age"))
		q.Done("a1")
		q.ShutDown()
	})
}

func TestOptionsAndErrors(t *testing.T) {
	q := workqueue.New[string]()
	for i := range 100 {
		q.Add("k" + strconv.Itoa(i))
	}
	long := workqueue.New[string]()
	long.Add(strings.Repeat("é", 10_000))
	long.Add("12345678")
	h := debug.NewHandler(debug.Options{Keys: 5, MaxKeys: 50, MaxKeyLen: 8},
		debug.Queue("q", q, nil), debug.Source{}, debug.Queue("long", long, nil))
	p := h.Snapshot(0)
	require.Len(t, p.Queues, 2, "the zero Source shows nothing")
	require.Len(t, p.Queues[0].Ready, 5, "Options.Keys per section")
	require.Len(t, h.Snapshot(1000).Queues[0].Ready, 50, "n is capped at MaxKeys")
	require.Equal(t, strings.Repeat("é", 7)+"…", p.Queues[1].Ready[0].Key, "a long key is cut, on a character boundary")
	require.Equal(t, "12345678", p.Queues[1].Ready[1].Key, "a key of MaxKeyLen characters is whole")

	code, _ := get(t, h, "/?n=abc")
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = get(t, h, "/?n=0")
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = get(t, h, "/?format=xml")
	require.Equal(t, http.StatusBadRequest, code)
	code, body := get(t, h, "/?n=3&format=json")
	require.Equal(t, http.StatusOK, code)
	var pg debug.Page
	require.NoError(t, json.Unmarshal([]byte(body), &pg))
	require.Len(t, pg.Queues[0].Ready, 3, "?n= sets the keys per section")

	empty := debug.NewHandler(debug.Options{})
	_, body = get(t, empty, "/")
	require.Contains(t, body, "no queues")
}

// The page's size is bounded by its limits, not by the queue's keys.
func TestPageBounded(t *testing.T) {
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	synctest.Test(t, func(t *testing.T) {
		q := bigQueue(n, true)
		plain := bigQueue(n, false)
		h := debug.NewHandler(debug.Options{}, debug.Queue("big", q, nil))
		_, body := get(t, h, "/")
		_, plainBody := get(t, debug.NewHandler(debug.Options{}, debug.Queue("plain", plain, nil)), "/")
		require.Len(t, cells(plainBody, "processing"), 4, "without metrics the walk finds every processing key")
		require.Equal(t, cells(body, "waiting"), cells(plainBody, "waiting"))
		plain.ShutDown()
		require.Less(t, len(body), 64<<10, "a page of 20 keys per section stays small")
		require.Len(t, cells(body, "ready"), 20)
		require.Len(t, cells(body, "waiting"), 20)
		require.Len(t, cells(body, "processing"), 4)
		require.Equal(t, "default/soonest", cells(body, "waiting")[0], "the key due soonest first")
		require.Len(t, cells(body, "requeues"), 20)
		require.Contains(t, cells(body, "requeues")[0], "default/key-", "a key failing three times")
		q.ShutDown()
	})
}

// bigQueue holds n keys: 4 processing, half of the rest ready, and the
// other half waiting: four fifths at random deadlines an hour and more
// away (most in the delay heap), one fifth failing one to three times
// (counted by the limiter).
func bigQueue(n int, metrics bool) *workqueue.RateLimitingQueue[string] {
	cfg := workqueue.Config[string]{}
	if metrics {
		cfg = workqueue.Config[string]{Name: "big", Metrics: nopProvider{}}
	}
	q := workqueue.NewRateLimitingQueueWithConfig(
		workqueue.NewItemExponentialFailureRateLimiter[string](time.Hour, 4*time.Hour), cfg)
	for i := range 4 {
		q.Add("default/run-" + strconv.Itoa(i))
		q.Get()
	}
	for i := range n / 2 {
		q.Add("default/key-" + strconv.Itoa(i))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := n / 2; i < n-n/10; i++ {
		q.AddAfter("default/key-"+strconv.Itoa(i), time.Hour+time.Duration(1+rng.IntN(n))*time.Millisecond)
	}
	for i := n - n/10; i < n; i++ {
		for range 1 + i%3 {
			q.AddRateLimited("default/key-" + strconv.Itoa(i))
		}
	}
	q.AddAfter("default/key-0", time.Hour) // ready already: changes nothing
	q.AddAfter("default/soonest", time.Minute)
	return q
}

// BenchmarkPage1M renders the HTML page of a rate-limiting queue holding a
// million keys (bigQueue): 4 processing, 500k ready, 500k waiting of which
// 100k failing. With metrics the snapshot reads the processing set and the
// delay state; without, it walks the key table to find the processing
// keys. MostRequeued walks the limiter's 100k counts, under its lock.
func BenchmarkPage1M(b *testing.B) {
	for _, metrics := range []bool{true, false} {
		b.Run("metrics="+strconv.FormatBool(metrics), func(b *testing.B) {
			q := bigQueue(1_000_000, metrics)
			defer q.ShutDown()
			h := debug.NewHandler(debug.Options{}, debug.Queue("big", q, nil))
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(discard{}, req)
			}
		})
	}
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(p []byte) (int, error) { return io.Discard.Write(p) }
func (discard) WriteHeader(int)             {}

// The most requeued keys back off the longest, so they are due last: the
// ranking reads more waiting keys (Options.RequeueScan) than the waiting
// section shows.
func TestMostRequeuedLooksBeyondTheSection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.NewRateLimitingQueue(workqueue.NewItemExponentialFailureRateLimiter[string](time.Second, time.Hour))
		for i := range 5 {
			q.AddRateLimited("once-" + strconv.Itoa(i)) // due in 1s
		}
		for range 6 {
			q.AddRateLimited("hot") // 6 failures; its first deadline (1s, given last) is kept
		}
		h := debug.NewHandler(debug.Options{Keys: 2}, debug.Queue("q", q, nil))
		p := h.Snapshot(0).Queues[0]
		require.Len(t, p.Waiting, 2)
		require.NotEmpty(t, p.MostRequeued)
		require.Equal(t, "hot", p.MostRequeued[0].Key, "the most requeued key, though not among the 2 due soonest")
		require.Equal(t, 6, p.MostRequeued[0].Requeues)
		q.ShutDown()
	})
}
