// Package debug serves a page that shows what work queues are doing: for
// each queue its Stats, how long each priority level's next key has been
// ready (workqueue.Queue.ReadyAges: a level that keeps growing is starved),
// the keys being processed the longest, the keys due soonest, the keys
// that failed the most and the next ready keys. Mount it
// next to pprof, on an address only operators can reach:
//
//	mux.Handle("/debug/workqueue", debug.NewHandler(debug.Options{},
//		debug.Queue("deployments", q, nil),
//	))
//
// The page is HTML; ?format=json gives the same data as JSON, and ?n=50
// shows up to 50 keys per section (at most Options.MaxKeys).
//
// The handler keeps no state between requests and starts no goroutine;
// there is no global registry: it shows exactly the queues it is given.
// Every request takes one snapshot of each queue (InspectLimited, and
// MostRequeued for a rate-limiting queue), whose cost follows the keys
// shown rather than the keys queued where the queue keeps them in order
// (see workqueue.Queue.Inspect: a queue without metrics walks its key
// table to find its processing keys). The output is bounded by the
// per-section limit and the key length limit, however many keys the queue
// holds. Keys are user data: they are escaped by html/template and
// encoding/json, never written raw.
package debug

import (
	"cmp"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-coalesce/workqueue"
)

// Inspectable is what the page reads of a queue of keys of type T.
// *workqueue.Queue[T] and *workqueue.RateLimitingQueue[T] implement it; for
// the latter (anything with a MostRequeued method like it) the page also
// shows each key's requeues and the keys with the most.
type Inspectable[T comparable] interface {
	Stats() workqueue.Stats
	InspectLimited(workqueue.InspectLimits) []workqueue.KeyInfo[T]
}

// Source is one queue as the page shows it: a name and a way to take a
// snapshot. Make one with Queue. The zero Source shows nothing.
type Source struct {
	name     string
	snapshot func(lim workqueue.InspectLimits) (workqueue.Stats, []Key)
	requeues func(n int) []Key                  // nil unless the queue counts requeues
	ages     func(m map[int]time.Duration) bool // nil unless the queue has ReadyAges
}

// ager is what a *workqueue.Queue[T] (and so a RateLimitingQueue) has
// beyond Inspectable: the ready age of each priority level.
type ager interface {
	ReadyAges(m map[int]time.Duration) bool
}

// ranker is what a *workqueue.RateLimitingQueue[T] adds: its keys with the
// most requeues.
type ranker[T comparable] interface {
	MostRequeued(n int) []workqueue.KeyInfo[T]
}

// Queue returns the Source that shows q under name. format turns a key
// into the text the page shows; nil means fmt.Sprint. It is called on the
// request's goroutine, after the queue's lock is released.
func Queue[T comparable](name string, q Inspectable[T], format func(T) string) Source {
	if format == nil {
		format = func(k T) string { return fmt.Sprint(k) }
	}
	keys := func(infos []workqueue.KeyInfo[T]) []Key {
		out := make([]Key, len(infos))
		for i, e := range infos {
			out[i] = Key{
				Key:      format(e.Key),
				State:    e.State.String(),
				Priority: e.Priority,
				Requeues: e.Requeues,
				started:  e.Started,
				due:      e.Due,
			}
		}
		return out
	}
	src := Source{
		name: name,
		snapshot: func(lim workqueue.InspectLimits) (workqueue.Stats, []Key) {
			s := q.Stats()
			return s, keys(q.InspectLimited(lim))
		},
	}
	if r, ok := q.(ranker[T]); ok {
		src.requeues = func(n int) []Key { return keys(r.MostRequeued(n)) }
	}
	if a, ok := q.(ager); ok {
		src.ages = a.ReadyAges
	}
	return src
}

// Options configures a Handler. The zero value is usable.
type Options struct {
	// Keys is how many keys each section of a queue shows by default.
	// Zero means 20.
	Keys int
	// MaxKeys bounds what ?n= may ask for. Zero means 1000.
	MaxKeys int
	// MaxKeyLen bounds, in characters, the text shown for one key;
	// longer keys are cut and end with "…". Zero means 256.
	MaxKeyLen int
}

func (o Options) withDefaults() Options {
	if o.Keys <= 0 {
		o.Keys = 20
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = 1000
	}
	if o.MaxKeyLen <= 0 {
		o.MaxKeyLen = 256
	}
	return o
}

// Handler serves the page for a fixed list of queues. It is safe for
// concurrent use and keeps nothing between requests.
type Handler struct {
	opts   Options
	queues []Source
}

// NewHandler returns a Handler for queues, shown in the order given.
func NewHandler(opts Options, queues ...Source) *Handler {
	return &Handler{opts: opts.withDefaults(), queues: slices.Clone(queues)}
}

// Page is what the page shows, and the JSON that ?format=json returns.
type Page struct {
	// Time is when the snapshots were taken; ages and due times count
	// from it.
	Time   time.Time   `json:"time"`
	Queues []QueueView `json:"queues"`
}

// QueueView is one queue on the page.
type QueueView struct {
	Name  string `json:"name"`
	Stats Stats  `json:"stats"`
	// ReadyAges holds, for each priority level with a ready key, highest
	// first, how long the level's oldest key by arrival has been ready,
	// also while a tenant's cap holds the level's keys back.
	// ReadyAgesMeasured reports whether the queue measures it: only with
	// metrics (workqueue.MeasureOnly will do), and a FIFO,
	// NewPriorityStore or NewFairPriorityStore (see
	// workqueue.Queue.ReadyAges). Read just after Stats, under a second
	// brief lock of the queue.
	ReadyAges         []ReadyAge `json:"readyAges"`
	ReadyAgesMeasured bool       `json:"readyAgesMeasured"`
	// Processing holds the keys being processed, oldest run first (in no
	// particular order when the queue has no metrics).
	Processing []Key `json:"processing"`
	// Waiting holds the keys waiting for a deadline, due soonest first.
	Waiting []Key `json:"waiting"`
	// Ready holds the next ready keys, in the order Get takes them where
	// the store can say (see workqueue.Queue.Inspect).
	Ready []Key `json:"ready"`
	// MostRequeued holds the keys with the most requeues, most first, for
	// a rate-limiting queue (workqueue.RateLimitingQueue.MostRequeued);
	// keys with none are left out.
	MostRequeued []Key `json:"mostRequeued"`
	// RateLimited reports whether the queue counts requeues.
	RateLimited bool `json:"rateLimited"`
}

// Stats is workqueue.Stats with durations in seconds.
type Stats struct {
	Ready                 int     `json:"ready"`
	Waiting               int     `json:"waiting"`
	Processing            int     `json:"processing"`
	Dirty                 int     `json:"dirty"`
	UnfinishedWorkSeconds float64 `json:"unfinishedWorkSeconds"`
	LongestRunningSeconds float64 `json:"longestRunningSeconds"`
}

// ReadyAge is one priority level of a queue on the page.
type ReadyAge struct {
	Priority   int     `json:"priority"`
	AgeSeconds float64 `json:"ageSeconds"`
}

// Age returns the age, rounded for people.
func (a ReadyAge) Age() string {
	return human(time.Duration(a.AgeSeconds * float64(time.Second)))
}

// Key is one key on the page.
type Key struct {
	Key      string `json:"key"`
	State    string `json:"state"`
	Priority int    `json:"priority"`
	Requeues int    `json:"requeues"`
	// Started and AgeSeconds are set for a processing key when the queue
	// measures run starts (with metrics).
	Started    *time.Time `json:"started,omitempty"`
	AgeSeconds *float64   `json:"ageSeconds,omitempty"`
	// Due and DueInSeconds are set for a key that waits for a deadline.
	Due          *time.Time `json:"due,omitempty"`
	DueInSeconds *float64   `json:"dueInSeconds,omitempty"`

	started, due time.Time
}

// Age returns how long the key's run has been going, rounded for people,
// or "" if the queue does not measure it.
func (k Key) Age() string {
	if k.AgeSeconds == nil {
		return ""
	}
	return human(time.Duration(*k.AgeSeconds * float64(time.Second)))
}

// DueIn returns how long until the key's run is due, rounded for people,
// or "".
func (k Key) DueIn() string {
	if k.DueInSeconds == nil {
		return ""
	}
	return human(time.Duration(*k.DueInSeconds * float64(time.Second)))
}

// human rounds d to three significant figures or so, which is what a
// person reads off a debug page.
func human(d time.Duration) string {
	switch a := d.Abs(); {
	case a >= time.Hour:
		return d.Round(time.Second).String()
	case a >= time.Second:
		return d.Round(time.Millisecond).String()
	case a >= time.Millisecond:
		return d.Round(time.Microsecond).String()
	}
	return d.String()
}

// Snapshot takes the page's data: one snapshot of each queue, at most n
// keys per section (n <= 0 means Options.Keys, and n is capped at
// Options.MaxKeys).
func (h *Handler) Snapshot(n int) Page {
	if n <= 0 {
		n = h.opts.Keys
	}
	n = min(n, h.opts.MaxKeys)
	p := Page{Time: time.Now(), Queues: make([]QueueView, 0, len(h.queues))}
	for _, src := range h.queues {
		if src.snapshot == nil {
			continue
		}
		p.Queues = append(p.Queues, h.view(src, n, p.Time))
	}
	return p
}

func (h *Handler) view(src Source, n int, now time.Time) QueueView {
	s, keys := src.snapshot(workqueue.InspectLimits{Processing: n, Waiting: n, Ready: n})
	var ranked []Key
	if src.requeues != nil {
		ranked = src.requeues(n)
	}
	v := QueueView{
		Name: src.name,
		Stats: Stats{
			Ready: s.Ready, Waiting: s.Waiting, Processing: s.Processing, Dirty: s.Dirty,
			UnfinishedWorkSeconds: s.UnfinishedWork.Seconds(),
			LongestRunningSeconds: s.LongestRunning.Seconds(),
		},
		RateLimited: src.requeues != nil,
		ReadyAges:   []ReadyAge{},
		Processing:  []Key{},
		Waiting:     []Key{},
		Ready:       []Key{},
	}
	for i := range keys {
		k := h.finish(keys[i], now)
		switch k.State {
		case "processing", "processing+dirty", "processing+waiting":
			v.Processing = append(v.Processing, k)
		case "waiting":
			v.Waiting = append(v.Waiting, k)
		case "ready":
			v.Ready = append(v.Ready, k)
		}
	}
	if src.ages != nil {
		m := map[int]time.Duration{}
		v.ReadyAgesMeasured = src.ages(m)
		for prio, d := range m {
			v.ReadyAges = append(v.ReadyAges, ReadyAge{Priority: prio, AgeSeconds: d.Seconds()})
		}
		slices.SortFunc(v.ReadyAges, func(a, b ReadyAge) int { return cmp.Compare(b.Priority, a.Priority) })
	}
	v.MostRequeued = make([]Key, len(ranked))
	for i := range ranked {
		v.MostRequeued[i] = h.finish(ranked[i], now)
	}
	return v
}

// finish cuts k's text and fills in its times as seen at now.
func (h *Handler) finish(k Key, now time.Time) Key {
	k.Key = cut(k.Key, h.opts.MaxKeyLen)
	if !k.started.IsZero() {
		t, age := k.started, now.Sub(k.started).Seconds()
		k.Started, k.AgeSeconds = &t, &age
	}
	if !k.due.IsZero() {
		t, in := k.due, k.due.Sub(now).Seconds()
		k.Due, k.DueInSeconds = &t, &in
	}
	return k
}

// cut returns s cut to at most max characters, ending with "…" if it was
// longer. It never splits a UTF-8 sequence.
func cut(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	i, n := 0, 0
	for i = range s {
		if n == max-1 {
			break
		}
		n++
	}
	return s[:i] + "…"
}

// ServeHTTP writes the page: HTML, or JSON with ?format=json. ?n= sets the
// keys per section.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := 0
	if s := r.URL.Query().Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			http.Error(w, "debug: n must be a positive integer", http.StatusBadRequest)
			return
		}
		n = v
	}
	p := h.Snapshot(n)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch f := r.URL.Query().Get("format"); f {
	case "json":
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(p) // a write error means the client went away
	case "", "html":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = page.Execute(w, p)
	default:
		http.Error(w, "debug: format must be html or json", http.StatusBadRequest)
	}
}

// page is parsed once; html/template escapes every value it writes in the
// context it writes it in, so a key such as <script> shows as text.
var page = template.Must(template.New("page").Parse(pageHTML))

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Work queues</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.4em; margin: 0 0 .2em; }
h2 { font-size: 1.2em; margin: 1.6em 0 .4em; border-bottom: 2px solid #d0d7de; padding-bottom: .2em; }
h3 { font-size: 1em; margin: 1em 0 .3em; color: #444; }
p.meta { color: #666; margin: 0 0 1em; }
table { border-collapse: collapse; margin-bottom: .5em; }
th, td { border: 1px solid #d0d7de; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.key { font-family: ui-monospace, Menlo, Consolas, monospace; max-width: 48em; overflow-wrap: anywhere; }
.state { font-size: .9em; padding: 0 .4em; border-radius: .6em; background: #eef; }
.state-processing, .state-processing\+dirty, .state-processing\+waiting { background: #fff3cd; }
.state-waiting { background: #e7f0ff; }
.state-ready { background: #e6ffec; }
.stats td { min-width: 5em; }
.none { color: #888; font-style: italic; }
</style>
</head>
<body>
<h1>Work queues</h1>
<p class="meta">Snapshot taken {{.Time.UTC.Format "2006-01-02 15:04:05.000 MST"}} · <a href="?format=json">JSON</a></p>
{{range .Queues}}
<section class="queue" data-queue="{{.Name}}">{{$rl := .RateLimited}}
<h2>{{.Name}}</h2>
<table class="stats">
<tr><th>ready</th><th>waiting</th><th>processing</th><th>dirty</th><th>longest running</th><th>unfinished work</th></tr>
<tr><td class="num">{{.Stats.Ready}}</td><td class="num">{{.Stats.Waiting}}</td><td class="num">{{.Stats.Processing}}</td><td class="num">{{.Stats.Dirty}}</td><td class="num">{{printf "%.3fs" .Stats.LongestRunningSeconds}}</td><td class="num">{{printf "%.3fs" .Stats.UnfinishedWorkSeconds}}</td></tr>
</table>

<h3>Ready, by priority: how long the oldest key has waited</h3>
{{if .ReadyAges}}<table class="ages">
<tr><th>priority</th><th>oldest key ready for</th></tr>
{{range .ReadyAges}}<tr><td class="num prio">{{.Priority}}</td><td class="num age">{{.Age}}</td></tr>
{{end}}</table>{{else if .ReadyAgesMeasured}}<p class="none">no key is ready</p>{{else}}<p class="none">not measured: the queue needs metrics (a Name and a MetricsProvider; workqueue.MeasureOnly{} keeps the times without exporting them), and a FIFO or priority store</p>{{end}}

<h3>Processing, oldest first</h3>
{{if .Processing}}<table class="processing">
<tr><th>key</th><th>state</th><th>running for</th><th>priority</th>{{if .RateLimited}}<th>requeues</th>{{end}}</tr>
{{range .Processing}}<tr><td class="key">{{.Key}}</td><td><span class="state state-{{.State}}">{{.State}}</span></td><td class="num">{{with .Age}}{{.}}{{else}}<span class="none">not measured</span>{{end}}</td><td class="num">{{.Priority}}</td>{{if $rl}}<td class="num">{{.Requeues}}</td>{{end}}</tr>
{{end}}</table>{{else}}<p class="none">no key is processing</p>{{end}}

<h3>Waiting, due soonest</h3>
{{if .Waiting}}<table class="waiting">
<tr><th>key</th><th>due in</th><th>priority</th>{{if .RateLimited}}<th>requeues</th>{{end}}</tr>
{{range .Waiting}}<tr><td class="key">{{.Key}}</td><td class="num">{{.DueIn}}</td><td class="num">{{.Priority}}</td>{{if $rl}}<td class="num">{{.Requeues}}</td>{{end}}</tr>
{{end}}</table>{{else}}<p class="none">no key is waiting</p>{{end}}

{{if .RateLimited}}<h3>Most requeues</h3>
{{if .MostRequeued}}<table class="requeues">
<tr><th>key</th><th>requeues</th><th>state</th></tr>
{{range .MostRequeued}}<tr><td class="key">{{.Key}}</td><td class="num">{{.Requeues}}</td><td><span class="state state-{{.State}}">{{.State}}</span></td></tr>
{{end}}</table>{{else}}<p class="none">no key has failed</p>{{end}}{{end}}

<h3>Ready, next first</h3>
{{if .Ready}}<table class="ready">
<tr><th>key</th><th>priority</th></tr>
{{range .Ready}}<tr><td class="key">{{.Key}}</td><td class="num">{{.Priority}}</td></tr>
{{end}}</table>{{else}}<p class="none">no key is ready</p>{{end}}
</section>
{{else}}<p class="none">no queues</p>
{{end}}
</body>
</html>
`
