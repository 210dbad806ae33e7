// Package ringpage serves a page that shows a sharded controller's ring as
// one replica sees it: every shard's range, holder, whether the holder is
// live, since when it holds the shard, whether its cache has synced the
// shard and its keys run, its objects and its load (handler time per
// minute, keys ready and the oldest's wait); the ring's members and their
// loads against the balance's band; the balance's plan of moves and why no
// further move is made (band, hysteresis, budget); and, given
// a key (?key=namespace/name, or ?uid= when sharding by UID), its shard,
// its holder, and the key's state in this replica's queue. Any replica
// serves the whole ring: the holders' states come from the reports their
// membership Leases carry (sharding.AnnotationReport), at most a
// RetryPeriod old. Mount it beside the queue's debug page, on an address
// only operators reach:
//
//	mux.Handle("/debug/ring", ringpage.New(replica, ringpage.Options{Queue: q}))
//
// The page is HTML; ?format=json gives the same data as JSON. The handler
// keeps no state between requests and starts no goroutine; each request
// costs one copy of the replica's view of the ring, O(S + N). Keys and
// identities are user data: html/template and encoding/json escape them.
package ringpage

import (
	"encoding/json"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
)

// Replica is what the page reads of a replica; *sharding.Replica
// implements it.
type Replica interface {
	Status() sharding.Status
	ShardOfKey(key string) (int, bool)
	Owns(key string) bool
}

// Inspector is what the page reads of the replica's queue for one key;
// *workqueue.RateLimitingQueue[string] and *workqueue.Queue[string]
// implement it. If it also has NumRequeues(string) int (a rate-limiting
// queue), the page shows the key's requeues.
type Inspector interface {
	State(key string) workqueue.KeyState
	InspectLimited(workqueue.InspectLimits) []workqueue.KeyInfo[string]
}

// Options configures a Handler. The zero value is usable.
type Options struct {
	// Queue, if set, is the replica's queue: the page shows a key's state
	// in it (ready, processing, waiting and until when).
	Queue Inspector
	// MaxScan bounds the keys read (InspectLimited) to find a waiting or
	// processing key's due or start time. Zero means 10,000.
	MaxScan int
}

// Handler serves the page. It is safe for concurrent use.
type Handler struct {
	r    Replica
	opts Options
}

// New returns the page of r.
func New(r Replica, opts Options) *Handler {
	if opts.MaxScan <= 0 {
		opts.MaxScan = 10000
	}
	return &Handler{r: r, opts: opts}
}

// Page is what the page shows, and the JSON ?format=json returns.
type Page struct {
	sharding.Status
	// Key is the answer for ?key= or ?uid=, if either was given.
	Key *KeyView `json:"key,omitempty"`
}

// KeyView is what the page says of one key.
type KeyView struct {
	Key string `json:"key,omitempty"`
	UID string `json:"uid,omitempty"`
	// Shard is the key's shard, if this replica can tell it (Found): see
	// sharding.Replica.ShardOfKey. Why says how, or why not.
	Found bool   `json:"found"`
	Shard int    `json:"shard"`
	Why   string `json:"why"`
	// Holder, HolderLive and HolderSynced describe the shard's holder
	// (from the ring's Leases and the holder's report).
	Holder       string `json:"holder,omitempty"`
	HolderLive   bool   `json:"holderLive"`
	HolderSynced bool   `json:"holderSynced"`
	// Owned is true when this replica would run the key now.
	Owned bool `json:"owned"`
	// Queue is the key's state in this replica's queue ("" without
	// Options.Queue); Due when a waiting key runs, Started when a
	// processing key's run began (if the queue measures it), Requeues
	// its rate limiter's count.
	Queue    string     `json:"queue,omitempty"`
	Due      *time.Time `json:"due,omitempty"`
	Started  *time.Time `json:"started,omitempty"`
	Requeues *int       `json:"requeues,omitempty"`
}

// Snapshot takes the page's data; key and uid are the optional questions.
func (h *Handler) Snapshot(key, uid string) Page {
	p := Page{Status: h.r.Status()}
	if key == "" && uid == "" {
		return p
	}
	kv := &KeyView{Key: key, UID: uid}
	switch {
	case uid != "":
		kv.Shard, kv.Found = sharding.ShardOf(sharding.Hash(uid), p.ShardCount), true
		kv.Why = "from the UID"
	default:
		kv.Shard, kv.Found = h.r.ShardOfKey(key)
		switch {
		case kv.Found && p.Field == sharding.FieldNamespace:
			kv.Why = "from the key's namespace"
		case kv.Found:
			kv.Why = "from its object in this replica's cache"
		default:
			kv.Why = "not in this replica's cache, which holds only its own shards: sharded by uid, the shard follows from the object's UID; ask with ?uid= (kubectl get -o jsonpath='{.metadata.uid}')"
		}
	}
	if kv.Found && kv.Shard >= 0 && kv.Shard < len(p.Shards) {
		s := p.Shards[kv.Shard]
		if s.Held {
			kv.Holder = s.Holder
		}
		kv.HolderLive, kv.HolderSynced = s.HolderLive, s.Synced
	}
	if key != "" {
		kv.Owned = h.r.Owns(key)
		h.queueState(kv, key)
	}
	p.Key = kv
	return p
}

type requeuer interface{ NumRequeues(string) int }

// queueState fills kv's queue fields for key.
func (h *Handler) queueState(kv *KeyView, key string) {
	q := h.opts.Queue
	if q == nil {
		return
	}
	st := q.State(key)
	kv.Queue = st.String()
	if rq, ok := q.(requeuer); ok {
		n := rq.NumRequeues(key)
		kv.Requeues = &n
	}
	var lim workqueue.InspectLimits
	switch st {
	case workqueue.KeyWaiting:
		lim.Waiting = h.opts.MaxScan
	case workqueue.KeyProcessing, workqueue.KeyProcessingDirty, workqueue.KeyProcessingWaiting:
		lim.Processing = h.opts.MaxScan
	default:
		return
	}
	for _, e := range q.InspectLimited(lim) {
		if e.Key != key {
			continue
		}
		if !e.Due.IsZero() {
			d := e.Due
			kv.Due = &d
		}
		if !e.Started.IsZero() {
			s := e.Started
			kv.Started = &s
		}
		return
	}
}

// ServeHTTP writes the page: HTML, or JSON with ?format=json.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := h.Snapshot(strings.TrimSpace(q.Get("key")), strings.TrimSpace(q.Get("uid")))
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch q.Get("format") {
	case "json":
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(p) // a write error means the client went away
	case "", "html":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = page.Execute(w, view{Page: p})
	default:
		http.Error(w, "ringpage: format must be html or json", http.StatusBadRequest)
	}
}

// view adds the page's formatting to Page.
type view struct{ Page }

// Ago formats how long before the snapshot t was, for people.
func (v view) Ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return human(v.Time.Sub(t)) + " ago"
}

// In formats how long after the snapshot t is.
func (v view) In(t *time.Time) string {
	if t == nil {
		return ""
	}
	return "in " + human(t.Sub(v.Time))
}

// counts are the page's summary: shards held, and held by a live holder
// that admits them.
type counts struct{ Held, Admitted int }

// Counts counts the held shards and those a live holder admits.
func (v view) Counts() counts {
	var c counts
	for _, s := range v.Shards {
		if s.Held {
			c.Held++
			if s.HolderLive && s.Admitted {
				c.Admitted++
			}
		}
	}
	return c
}

// Dur formats a duration (a load: handler time per minute).
func (v view) Dur(d time.Duration) string { return human(d) }

// Why says why the plan by load makes no further move.
func (v view) Why(held string) string {
	switch held {
	case "band":
		return "No further move: every member is within the band."
	case "hysteresis":
		return "No further move: none would lower the larger of its two members' loads by the hysteresis' gain."
	case "budget":
		return "No further move now: the budget of moves in flight is spent."
	case "share":
		return "No further move now: the moves of the last minute carry a tenth of the ring's objects."
	case "unmeasured":
		return "No further move now: a shard held or in flight has no report of its load yet."
	}
	return ""
}

func human(d time.Duration) string {
	switch a := d.Abs(); {
	case a >= time.Minute:
		return d.Round(time.Second).String()
	case a >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

var page = template.Must(template.New("page").Parse(pageHTML))

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Ring {{.Ring}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.4em; margin: 0 0 .2em; }
h2 { font-size: 1.2em; margin: 1.4em 0 .4em; border-bottom: 2px solid #d0d7de; padding-bottom: .2em; }
p.meta { color: #666; margin: 0 0 1em; }
table { border-collapse: collapse; margin-bottom: .5em; }
th, td { border: 1px solid #d0d7de; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.mono, span.mono { font-family: ui-monospace, Menlo, Consolas, monospace; overflow-wrap: anywhere; }
.state { font-size: .9em; padding: 0 .4em; border-radius: .6em; background: #eef; }
.state-admitted { background: #e6ffec; }
.state-filling { background: #fff3cd; }
.state-draining { background: #e7f0ff; }
.state-warm { background: #f3e8ff; }
.bad { color: #b42318; font-weight: 600; }
.ok { color: #1a7f37; }
.none { color: #888; font-style: italic; }
tr.self td:first-child { font-weight: 600; }
form { margin: .5em 0 1em; }
input[type=text] { width: 28em; font-family: ui-monospace, Menlo, Consolas, monospace; }
</style>
</head>
<body>
<h1>Ring {{.Ring}}</h1>
{{$p := .}}{{$c := .Counts}}
<p class="meta">As replica <b>{{.Identity}}</b> sees it at {{.Time.UTC.Format "2006-01-02 15:04:05.000 MST"}} · namespace {{.Namespace}} · {{.ShardCount}} shards by {{.Field}} · cache filtered by the {{.Filtering}} · <a href="?format=json">JSON</a></p>
{{if or (ne .Mode "live") (and .RingShards (ne .RingShards .ShardCount))}}<p class="summary"><span class="bad">The ring's shard count is {{.RingShards}} (generation {{.Generation}}){{with .Target}}, switching to {{.}}{{end}}; this replica has {{.ShardCount}} and is {{.Mode}}.</span></p>{{end}}
<p class="summary">{{$c.Held}} of {{.ShardCount}} shards held, {{$c.Admitted}} admitted by a live holder. This replica: {{if .Alive}}<span class="ok">alive</span>, session {{.Session}}{{with .SessionStart}} since {{$p.Ago .}}{{end}}{{else}}<span class="bad">no live session</span>{{end}}{{with .Ready}} · <span class="bad">not ready: {{.}}</span>{{end}}</p>

<form method="get"><label>Key <input type="text" name="key" placeholder="namespace/name" value="{{with .Key}}{{.Key}}{{end}}"></label> <button type="submit">Find</button> · <label>or UID <input type="text" name="uid" value="{{with .Key}}{{.UID}}{{end}}"></label> <button type="submit">Find</button></form>
{{with .Key}}<section class="key">
<h2>Key {{if .Key}}{{.Key}}{{else}}with UID {{.UID}}{{end}}</h2>
<table class="key">
<tr><th>shard</th><td>{{if .Found}}{{.Shard}}{{else}}<span class="none">unknown</span>{{end}} <span class="none">({{.Why}})</span></td></tr>
{{if .Found}}<tr><th>holder</th><td>{{if .Holder}}{{.Holder}}{{else}}<span class="bad">none: the shard is free</span>{{end}}</td></tr>
<tr><th>holder live</th><td>{{if .HolderLive}}<span class="ok">yes</span>{{else}}<span class="bad">no</span>{{end}}</td></tr>
<tr><th>holder synced</th><td>{{if .HolderSynced}}<span class="ok">yes</span>{{else}}<span class="bad">no</span>{{end}}</td></tr>{{end}}
{{if .Key}}<tr><th>runs here</th><td>{{if .Owned}}<span class="ok">yes: this replica admits it</span>{{else}}no{{end}}</td></tr>
{{with .Queue}}<tr><th>in this replica's queue</th><td><span class="state">{{.}}</span>{{with $.Key.Due}} · due {{$p.In .}}{{end}}{{with $.Key.Started}} · running for {{$p.Ago .}}{{end}}{{with $.Key.Requeues}} · {{.}} requeues{{end}}</td></tr>{{end}}{{end}}
</table>
</section>{{end}}

<h2>Balance</h2>
{{with .Balance}}{{if eq .By "load"}}<p class="summary balance">By load: mean {{$p.Dur .Mean}}/min, heaviest shard {{$p.Dur .Heaviest}}/min, band up to <b>{{$p.Dur .Bound}}</b>/min (1.15 × the larger); a move must gain {{$p.Dur .Gain}}/min (hysteresis); {{.InFlight}} of {{.Budget}} moves in flight.
{{range .Moves}}<br>Move shard {{.Shard}} ({{$p.Dur .Work}}/min) from {{.From}} to {{.To}}{{if .Cause}} ({{.Cause}}){{else}} (in flight){{end}}.{{end}}
<br>{{$p.Why .Held}}</p>{{else}}<p class="summary balance">By count{{with .Fallback}} ({{.}}){{end}}: every member holds ⌊S/N⌋ or ⌈S/N⌉ shards.{{range .Moves}}<br>Move shard {{.Shard}} from {{.From}} to {{.To}} ({{.Cause}}).{{end}}</p>{{end}}{{end}}

<h2>Shards</h2>
<table class="shards">
<tr><th>shard</th><th>range</th><th>holder</th><th>holder live</th><th>held for</th><th>holder's session</th><th>state</th><th>objects</th><th>work/min</th><th>ready</th><th>oldest ready</th><th>move</th><th>reported</th><th>here</th></tr>
{{range .Shards}}<tr data-shard="{{.Shard}}"><td class="num">{{.Shard}}</td><td class="mono">{{.Range}}</td><td>{{if .Held}}{{.Holder}}{{else}}<span class="bad">free</span>{{if .Holder}} <span class="none">(was {{.Holder}})</span>{{end}}{{end}}</td><td>{{if .Held}}{{if .HolderLive}}<span class="ok">yes</span>{{else}}<span class="bad">no</span>{{end}}{{end}}</td><td>{{if .Held}}{{$p.Ago .Since}}{{end}}</td><td>{{if .Held}}{{$p.Ago .HolderSessionStart}}{{end}}</td><td>{{with .State}}<span class="state state-{{.}}">{{.}}</span>{{else}}{{if .Held}}<span class="none">not reported</span>{{end}}{{end}}</td><td class="num">{{if .State}}{{.Objects}}{{end}}</td><td class="num">{{if .LoadKnown}}{{$p.Dur .Work}}{{end}}</td><td class="num">{{if .LoadKnown}}{{.Ready}}{{end}}</td><td class="num">{{if .LoadKnown}}{{$p.Dur .Oldest}}{{end}}</td><td>{{with .MoveTo}}→ {{.}}{{end}}</td><td>{{$p.Ago .ReportedAt}}</td><td>{{with .Local}}<span class="state state-{{.}}">{{.}}</span>{{end}}</td></tr>
{{end}}</table>

<h2>Members</h2>
{{if .Members}}<table class="members">
<tr><th>identity</th><th>live</th><th>confirmed</th><th>share</th><th>held</th><th>load/min</th><th>workers</th><th>session since</th><th>last renewal</th><th>Lease unchanged for</th></tr>
{{range .Members}}<tr{{if eq .Identity $p.Identity}} class="self"{{end}}><td>{{.Identity}}</td><td>{{if .Live}}<span class="ok">yes</span>{{else}}<span class="bad">no</span>{{end}}</td><td>{{if .Confirmed}}yes{{else}}joining{{end}}</td><td class="num">{{.Share}}</td><td class="num">{{.Held}}</td><td class="num">{{if .OverBound}}<span class="bad">{{$p.Dur .Load}} (over the band)</span>{{else}}{{$p.Dur .Load}}{{end}}</td><td class="num">{{with .Workers}}{{.}}{{end}}</td><td>{{$p.Ago .SessionStart}}</td><td>{{$p.Ago .Renewed}}</td><td>{{$p.Ago .Seen}}</td></tr>
{{end}}</table>{{else}}<p class="none">no member</p>{{end}}
<p class="meta">A shard is held while its Lease names a member's current session; a member is live while its Lease is confirmed and changed less than RenewDeadline ({{.RenewDeadline}}) ago as this replica's watch saw it (a member stops running keys RenewDeadline after its last answered write, and is fenced once its Lease has not changed for LeaseDuration, {{.LeaseDuration}}). States are each holder's own, from its last membership write.</p>
</body>
</html>
`
