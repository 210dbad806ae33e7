package sharding

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/go-coalesce/workqueue/sharding/internal/shardcache"
)

// This file is what the replica reports of itself: the gauges and
// counters of Metrics, the per-shard view (ShardMetrics), and the report
// of its shards that each membership write carries for the other
// replicas' ring pages (AnnotationReport). The loop calls observe after
// each sync; the events are counted where they happen, by one call each
// (exec.go, replica.go, ringview.go, informer.go).

// Gauge is the one method of a metric the replica sets. A
// prometheus.Gauge satisfies it.
type Gauge interface{ Set(float64) }

// Counter is the one method of a counter the replica increments. A
// prometheus.Counter satisfies it.
type Counter interface{ Inc() }

// Metrics are the gauges and counters a replica keeps up to date. Each
// may be nil. They are set outside the replica's locks, from the
// replica's loop and from the sharded informers' goroutines; Set and Inc
// must be safe for concurrent use and cheap.
//
// The counters with a label are functions that return the counter of one
// label value, e.g. with a *prometheus.CounterVec:
//
//	Lists: func(resource, cause string) sharding.Counter { return lists.WithLabelValues(resource, cause) },
type Metrics struct {
	// ServerFiltering is 1 while the server filters the primary
	// informer's list and watch by shard (FilterServer), 0 while the
	// replica filters on the client (FilterClient).
	ServerFiltering Gauge
	// Shards is the number of shards whose keys the replica admits.
	Shards Gauge
	// Objects is the number of objects in the primary sharded informer.
	Objects Gauge
	// Forbidden is 1 while the API server refuses (403) a kind of request
	// the replica needs, 0 otherwise (forbidden.go; see Replica.Ready). It
	// is set under the permission tracker's lock.
	Forbidden Gauge
	// Mismatch is 1 while the ring's shard count is not this replica's
	// Config.Shards (it holds nothing and waits for the ring to switch to
	// its count), and once the replica refuses its ring (another
	// Config.Field: Run returns the error, which wraps ErrRingMismatch);
	// 0 otherwise (shardcount.go).
	Mismatch Gauge
	// WithoutUID counts the objects the primary informer added without a
	// metadata.uid while sharding by UID (Field = FieldUID): they all
	// hash alike, into one shard. The API server sets a UID on every
	// object; client-go's fake clientset does not (replica.go).
	WithoutUID Gauge

	// RingReady, RingOldestReady, RingBusy and DesiredReplicas are the
	// ring's scaling signal (signal.go; docs/autoscale.md), computed from
	// every member's report, so each replica exports the same values: the
	// keys waiting across the ring, the oldest one's age in seconds, the
	// busy fraction of the workers (handler time over Config.Workers ×
	// time, over the members that publish Workers), and the replica count
	// that load asks for (aiming at Config.TargetBusy and TargetOldest).
	// They are set at each decision of the loop.
	RingReady, RingOldestReady, RingBusy, DesiredReplicas Gauge

	// Gained counts the shards the replica acquired: each acquisition
	// of a shard Lease that was answered (a move to this replica, or a
	// shard's first holder).
	Gained Counter
	// Released counts the shards the replica released once their runs
	// had returned: planned moves away (to balance the ring, or leaving).
	// A shard lost with a lapsed session is not released; see Lapses.
	Released Counter
	// Fences counts the members this replica fenced: it deleted the
	// membership Lease of a member whose Lease had not changed for
	// LeaseDuration (a crashed or cut-off replica), freeing its shards.
	Fences Counter
	// Lapses counts the sessions of this replica that ended other than
	// by a graceful leave, by cause: "deadline" (no membership write
	// answered within RenewDeadline) or "fenced" (its membership Lease
	// was deleted by another replica, or names another session). Every
	// shard it held is lost at once, and its runs cancelled.
	Lapses func(cause string) Counter
	// Lists counts the lists the replica started, by resource (the
	// plural name: "deployments"; "leases" for the ring) and cause:
	// "initial" (the first fill of a sharded informer, or the ring's
	// first list), "gain" (a shard gained later: a move), "relist" (a
	// watch ended with 410 Gone or failed, and the resource or the ring
	// is listed again), "downgrade" (the server stopped filtering by
	// shard: every held shard listed again). A list's later pages are not
	// counted.
	Lists func(resource, cause string) Counter
	// Moves counts the planned moves of shards away from this replica,
	// when their drain begins, by cause: "join" (the taker held no shard:
	// a newcomer), "leave" (this replica leaves), "count" (the balance by
	// count) or "load" (the balance by load, Config.Balance). A shard lost
	// with a lapsed session, or freed by a fence, is no planned move.
	Moves func(cause string) Counter

	// PerShard, if set, is told of each shard the replica holds, and
	// only those: across the ring there is one series per shard, O(S),
	// however many replicas come and go.
	PerShard ShardMetrics
}

// ShardMetrics is the per-shard view of Metrics: a gauge per shard the
// replica holds, labelled by shard, whose series is deleted when the
// shard is no longer held. Its methods are called from the replica's
// loop goroutine only, outside its locks, and must be cheap.
type ShardMetrics interface {
	// SetShard reports that the replica holds shard: admitted is true
	// while its keys run (false while its cache is being filled, or it is
	// being given up), objects is its objects in the primary informer.
	// It is called when the shard's state changes, and at most once per
	// RetryPeriod otherwise, to refresh objects.
	SetShard(shard int, admitted bool, objects int)
	// DeleteShard reports that the replica no longer holds shard
	// (released, or lost): its series should go.
	DeleteShard(shard int)
}

func setGauge(g Gauge, v float64) {
	if g != nil {
		g.Set(v)
	}
}

func inc(c Counter) {
	if c != nil {
		c.Inc()
	}
}

// The causes of Metrics.Lapses.
const (
	lapseDeadline = "deadline"
	lapseFenced   = "fenced"
)

// The states of a held shard, as the ring page and the report name them.
const (
	stateAdmitted = "admitted" // synced, keys run
	stateFilling  = "filling"  // held, the cache is being filled: no key runs yet
	stateDraining = "draining" // being given up: synced, no new run
	stateWarm     = "warm"     // not held: the session lapsed, the cache kept (keepWarm)
)

// AnnotationReport is set on each membership Lease to the shards its
// replica held when it wrote it, and their load (load.go), for every
// replica's ring page (ringpage) and balance: space-separated entries
// <shard>:<state>:<objects>:<work>:<ready>:<oldest>, where state is a
// (admitted: synced, its keys run), f (filling: held, its cache not yet
// synced) or d (draining: being given up), and the last three are the
// shard's shardLoad in milliseconds, keys and milliseconds; and one entry
// w:<workers>, the replica's workers (memberLoad). An entry of three
// fields (a replica that measures no load) has an unknown load. It is
// about 20 bytes per held shard, reportEntryMax at most (every number at
// its largest: 74 KiB at 1,024 shards, under the API server's 256 KiB for
// all annotations), and is written with the renewals, never on its own.
const AnnotationReport = "sharding.go-coalesce.io/report"

// reportEntryMax is the most bytes an entry of AnnotationReport takes,
// with its separator: a shard index under 1,024, and the other five
// numbers at their largest.
const reportEntryMax = 75

// heldShard is one held shard as observe saw it, or as a member's report
// says it (known is false for an entry without load).
type heldShard struct {
	shard   int
	state   string
	objects int
	load    shardLoad
	known   bool
}

// observer is what observe keeps between calls. New sets its cfg.
// Touched only by the loop goroutine, but for mu's fields.
type observer struct {
	cfg       *Config     // the replica's, set by New
	last      []heldShard // as last told to PerShard, by shard
	objectsAt time.Time   // when objects were last counted
	streak    int         // membership writes failed in a row

	mu     sync.Mutex  // protects the fields below (read by Status)
	held   []heldShard // the held shards, by shard
	report string      // AnnotationReport's value for the next write
}

// observe refreshes the per-shard view and the report after the loop's
// sync: the shards held, their states, and (at most once per RetryPeriod,
// or when a state changed) their objects and load (load.go).
func (o *observer) observe(runs *ledger, inf *informer) {
	active, draining := runs.states()
	admitted := runs.active()
	now := time.Now()
	refresh := o.objectsAt.IsZero() || now.Sub(o.objectsAt) >= o.cfg.RetryPeriod
	held := make([]heldShard, 0, len(active)+len(draining))
	prev := make(map[int]heldShard, len(o.last))
	for _, h := range o.last {
		prev[h.shard] = h
	}
	add := func(s int, state string) {
		p := prev[s]
		h := heldShard{shard: s, state: state, objects: p.objects, load: p.load, known: p.known}
		if _, ok := prev[s]; !ok || p.state != state {
			refresh = true
		}
		held = append(held, h)
	}
	for _, s := range active {
		state := stateFilling
		if _, ok := slices.BinarySearch(admitted, s); ok {
			state = stateAdmitted
		}
		add(s, state)
	}
	for _, s := range draining {
		add(s, stateDraining)
	}
	slices.SortFunc(held, func(a, b heldShard) int { return a.shard - b.shard })
	ids := make([]int, len(held))
	for i, h := range held {
		ids[i] = h.shard
		if _, ok := prev[h.shard]; !ok {
			runs.heldFrom(h.shard, now)
		}
	}
	if refresh { // the load at the same pace as the objects: once per RetryPeriod
		loads, known := runs.measured(ids, now)
		for i, l := range loads {
			held[i].load, held[i].known = l, known[i]
		}
	}
	if refresh && inf != nil {
		o.objectsAt = now
		for i := range held {
			held[i].objects = len(inf.ByShard(held[i].shard))
		}
	}
	if m := o.cfg.Metrics.PerShard; m != nil {
		now := make(map[int]bool, len(held))
		for _, h := range held {
			now[h.shard] = true
			if p, ok := prev[h.shard]; !ok || p.state != h.state || p.objects != h.objects || refresh {
				m.SetShard(h.shard, h.state == stateAdmitted, h.objects)
			}
		}
		for _, p := range o.last {
			if !now[p.shard] {
				m.DeleteShard(p.shard)
			}
		}
	}
	o.last = held
	o.mu.Lock()
	o.held = held
	o.report = reportOf(held, o.cfg.Workers)
	o.mu.Unlock()
}

// heldNow returns the held shards as observe last saw them.
func (o *observer) heldNow() []heldShard {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.held
}

// reportNow returns AnnotationReport's value for the next membership
// write.
func (o *observer) reportNow() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.report
}

// reportOf encodes held, and workers (0: unknown, not written), as
// AnnotationReport's value. A shard whose load is not known is written
// in three fields.
func reportOf(held []heldShard, workers int) string {
	var b strings.Builder
	if workers > 0 {
		b.WriteString("w:")
		b.WriteString(strconv.Itoa(workers))
	}
	for _, h := range held {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(h.shard))
		b.WriteByte(':')
		b.WriteByte(h.state[0])
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(h.objects))
		if h.known {
			b.WriteByte(':')
			b.WriteString(strconv.FormatInt(h.load.work.Milliseconds(), 10))
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(h.load.ready))
			b.WriteByte(':')
			b.WriteString(strconv.FormatInt(h.load.oldest.Milliseconds(), 10))
		}
	}
	return b.String()
}

// parseReport decodes AnnotationReport's value: the held shards, and the
// workers (0 if not given). Entries it cannot read are skipped (a newer
// writer's, or a hand edit).
func parseReport(v string, shards int) (held []heldShard, workers int) {
	var out []heldShard
	for _, e := range strings.Fields(v) {
		parts := strings.Split(e, ":")
		if len(parts) == 2 && parts[0] == "w" {
			if n, err := strconv.Atoi(parts[1]); err == nil && n > 0 {
				workers = n
			}
			continue
		}
		if len(parts) != 3 && len(parts) != 6 {
			continue
		}
		s, err1 := strconv.Atoi(parts[0])
		n, err2 := strconv.Atoi(parts[2])
		if err1 != nil || err2 != nil || s < 0 || s >= shards || n < 0 {
			continue
		}
		var l shardLoad
		known := len(parts) == 6
		if known {
			w, err1 := strconv.ParseInt(parts[3], 10, 64)
			r, err2 := strconv.Atoi(parts[4])
			o, err3 := strconv.ParseInt(parts[5], 10, 64)
			if err1 != nil || err2 != nil || err3 != nil || w < 0 || r < 0 || o < 0 {
				continue
			}
			l = shardLoad{work: time.Duration(w) * time.Millisecond, ready: r, oldest: time.Duration(o) * time.Millisecond}
		}
		var state string
		switch parts[1] {
		case "a":
			state = stateAdmitted
		case "f":
			state = stateFilling
		case "d":
			state = stateDraining
		default:
			continue
		}
		out = append(out, heldShard{shard: s, state: state, objects: n, load: l, known: known})
	}
	return out, workers
}

// The event hooks: each is called at the one place its event happens.

// listed counts a list of resource for cause.
func (o *observer) listed(resource, cause string) {
	if f := o.cfg.Metrics.Lists; f != nil {
		inc(f(resource, cause))
	}
}

// ringListed counts a list of the ring's Leases: its first, or a relist.
func (o *observer) ringListed(first bool) {
	cause := shardcache.ListRelist
	if first {
		cause = shardcache.ListInitial
	}
	o.listed("leases", cause)
}

// lapse is told that the ledger ended a live session while the replica
// was not leaving; forced is false when its deadline passed (no
// membership write answered within RenewDeadline), true when the ring
// showed it over (fenced). It is logged at default verbosity and counted.
func (o *observer) lapse(forced bool) {
	cause := lapseDeadline
	msg := "sharding: session lapsed: no membership write answered within RenewDeadline; the replica stops admitting keys, cancels its runs and joins again once the API server answers"
	if forced {
		cause = lapseFenced
		msg = "sharding: session over: the ring no longer shows this replica's membership Lease in its session (another replica fenced it); the replica stops admitting keys and joins again"
	}
	klog.ErrorS(nil, msg, "ring", o.cfg.Name, "identity", o.cfg.Identity, "renewDeadline", o.cfg.RenewDeadline)
	if f := o.cfg.Metrics.Lapses; f != nil {
		inc(f(cause))
	}
}

// memberWrite is told the outcome of each membership write (a renewal or
// a join): the first failure after an answered write is logged at
// default verbosity (a replica that cannot reach the API server says so
// within a period, not only when its session lapses), the others at
// V(2); the first answer after failures is logged at default verbosity
// too.
func (o *observer) memberWrite(err error) {
	if err == nil {
		if o.streak > 0 {
			klog.InfoS("sharding: the API server answers the membership writes again", "ring", o.cfg.Name, "identity", o.cfg.Identity, "failedInARow", o.streak)
		}
		o.streak = 0
		return
	}
	o.streak++
	if o.streak == 1 {
		klog.ErrorS(err, "sharding: a membership write failed: the API server may be unreachable; the session lapses RenewDeadline after the last answered write unless one is answered",
			"ring", o.cfg.Name, "identity", o.cfg.Identity, "renewDeadline", o.cfg.RenewDeadline)
		return
	}
	klog.V(2).InfoS("sharding: membership write failed", "ring", o.cfg.Name, "identity", o.cfg.Identity, "failedInARow", o.streak, "err", err)
}
