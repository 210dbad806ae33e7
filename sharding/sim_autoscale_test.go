package sharding

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/go-coalesce/workqueue/sharding/exclusion"
)

// The simulated autoscaler: the whole-ring simulation (sim_test.go), calm
// (no lost answers, stalls or partitions), runs keys of its own: events
// of asObjects objects arrive at random (Poisson) on a ring of simShards
// shards; the replica that admits an event's shard records it in its
// ledger and queues its key (none does while the shard moves). Each
// replica has a queue as a plain workqueue is: FIFO, a key that arrives
// while waiting waits once, one that arrives while it runs runs again
// after, at the tail. A replica whose admitted shards change does what
// its loop does, with its real ledger: it removes the keys of a shard it
// no longer admits (dropGone forgets them), and owes a run to every
// object of a shard it gains (every key that ever arrived of it: the
// catch-up, which the ledger feeds to its queue a few at a time as runs
// begin). Keys run on asWorkers workers per replica for asService each,
// begun and ended by the ledger. Each replica reports its shards' load as
// its ledger measures it in its membership writes (AnnotationReport,
// written and read as the replicas do), every replica computes the ring's
// signal from its view (signalOf), a scrape reads the max of their
// DesiredReplicas, and an autoscaler that follows the Kubernetes
// HorizontalPodAutoscaler's algorithm with the behaviour of the example's
// manifest (asManifest) sets the Deployment's replicas: an added pod
// joins the ring asPodStart later, a removed one leaves gracefully
// (SIGTERM: Run's context ends). The arrival rate triples at asStep,
// drops back for a lull of two minutes amid it, and drops back at asDrop.
//
// Checked: no two replicas run keys of one shard at once (the harness's
// check by hash range after every event, and the exclusion oracle on
// every run), no key runs twice at once, no key is lost (every arrival is
// followed by a run that starts after it, an arrival during a move by its
// shard's catch-up; at the end no key waits in a queue nor is pending in
// a ledger: every catch-up key was run or dropped with its shard), the
// ring reaches the replicas the step asks for (8) within asPeakBound, the
// backlog (the oldest event key waiting in a queue) is back under
// asTargetOldest within asRecoverBound of the step and stays there
// (through the scale-down's catch-ups), the replicas never fall between
// the step and the drop (the lull included) nor rise once they fell after
// it (no flapping: a catch-up that made the ring look behind or busy
// would), scale-down drains (every removed replica leaves gracefully, its
// runs finished, none cancelled) and the ring is back at its base
// replicas by the end. The figures are in docs/autoscale.md.

const (
	asWorkers = 4           // workers per replica
	asService = time.Second // the handler's time per key
	// asBase keys a second arrive before asStep and after asDrop, three
	// times as many between: 6.5 and 19.5 workers busy of 4 a replica
	// (3 at DefaultTargetBusy), which ask for 3 replicas and for 8: the
	// work of 6.5 replicas, but with 7 one holds two of the 8 shards,
	// 4.9 workers' work, more than its workers run.
	asBase  = 6.5
	asStart = 20 * time.Second // the first arrival
	// asObjects is how many objects the keys are of: an arrival is an
	// event of one at random. A shard's objects (about 320) are each owed
	// a run by the replica that gains it (its catch-up): 80 s of its 4
	// workers, as a shard of 160 objects at 2 s a run is.
	asObjects = 8 * 320
	asStep    = 3 * time.Minute
	// A lull: the base rate from asLull for asLullFor, amid the high
	// load, shorter than the HPA's down window, which holds the replicas.
	asLull         = asStep + 8*time.Minute
	asLullFor      = 2 * time.Minute
	asDrop         = 15 * time.Minute
	asStopArrivals = 26 * time.Minute
	asEnd          = asStopArrivals + time.Minute
	asHPAStart     = 90 * time.Second // once the work's window is full
	asSync         = 15 * time.Second // the HPA's sync, and Prometheus' scrape
	asPodStart     = 5 * time.Second  // from the Deployment's change to Run
	asTargetOldest = 10 * time.Second // Config.TargetOldest
	asMax          = simShards        // the most replicas that hold a shard
	asBaseReplicas = 3                // what asBase asks for
	// asRecoverBound is how long after the step the backlog may stay
	// over asTargetOldest: the signal's lag (a scrape and a sync, 30 s,
	// and a tick and a watch event), a backlog rising past its target at
	// half the step's excess rate (20 s), the pods' start and settledTicks
	// periods, the moves made before they are broken (a HandoffTimeout at
	// most), and the backlog drained by the added workers.
	asRecoverBound = 3 * time.Minute
	// asPeakBound is how long after the step the HPA may take to ask for
	// the peak's replicas: two scrapes and syncs once the reports show
	// the step (a tick and a watch event), one more for the backlog
	// to pass its target, and one for the HPA's rate of 4 pods per 15 s.
	asPeakBound = 75 * time.Second
	// asLeaveBound bounds a graceful leave: HandoffTimeout + GracePeriod
	// + RenewDeadline (the pod's terminationGracePeriodSeconds covers it).
	asLeaveBound = simHandoff + simGrace + simRenew
)

// asRules are one direction's behaviour of the HPA (autoscaling/v2
// HPAScalingRules): a stabilisation window, and policies of which the one
// that allows the largest change applies (selectPolicy Max).
type asRules struct {
	window   time.Duration
	policies []asPolicy
}

type asPolicy struct {
	pods   bool // a number of pods; else a percentage of the replicas
	value  int
	period time.Duration
}

// asHPA is the HPA algorithm on one External metric whose target is an
// AverageValue of 1 (the metric is the replica count it asks for), as
// the manifest sets it: desiredReplicas = ⌈current × (metric/current) / 1⌉,
// no change within the tolerance, then the stabilisation windows, then
// the rate policies, then [min, max].
type asHPA struct {
	min, max  int
	tolerance float64
	up, down  asRules
	recs      []asRec // recommendations, for the windows
	events    []asRec // changes made (replicas: the change, signed)
}

type asRec struct {
	at       time.Time
	replicas int
}

// asManifest is the example's HPA (docs/autoscale.md): the simulated
// autoscaler takes its bounds and behaviour from it, so that what is
// simulated is what users apply.
const asManifest = "examples/deployments/deploy/autoscale/hpa.yaml"

// asBehavior reads asManifest into an asHPA: scale up at once, doubling
// or adding 4 pods per 15 s, whichever is more; scale down only to the
// highest recommendation of the last 5 minutes, one pod per minute.
func asBehavior(t testing.TB) asHPA {
	t.Helper()
	b, err := os.ReadFile(asManifest)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.ToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	var h autoscalingv2.HorizontalPodAutoscaler
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil || h.Spec.Behavior == nil || h.Spec.MinReplicas == nil {
		t.Fatalf("%s: %v, or no behavior or minReplicas", asManifest, err)
	}
	rules := func(r *autoscalingv2.HPAScalingRules) asRules {
		if r == nil || r.StabilizationWindowSeconds == nil || (r.SelectPolicy != nil && *r.SelectPolicy != autoscalingv2.MaxChangePolicySelect) {
			t.Fatalf("%s: rules %+v: the simulation follows a window and selectPolicy Max", asManifest, r)
		}
		out := asRules{window: time.Duration(*r.StabilizationWindowSeconds) * time.Second}
		for _, p := range r.Policies {
			out.policies = append(out.policies, asPolicy{pods: p.Type == autoscalingv2.PodsScalingPolicy, value: int(p.Value),
				period: time.Duration(p.PeriodSeconds) * time.Second})
		}
		return out
	}
	return asHPA{min: int(*h.Spec.MinReplicas), max: int(h.Spec.MaxReplicas), tolerance: 0.1,
		up: rules(h.Spec.Behavior.ScaleUp), down: rules(h.Spec.Behavior.ScaleDown)}
}

// sync is one sync of the HPA at now, with cur replicas and the metric's
// value: it returns the new replica count.
func (h *asHPA) sync(now time.Time, cur int, metric float64) int {
	proposal := cur
	if math.Abs(metric/float64(cur)-1) > h.tolerance {
		proposal = int(math.Ceil(metric))
	}
	// Stabilisation: up to the lowest recommendation of the up window,
	// down to the highest of the down window.
	upRec, downRec := proposal, proposal
	keep := h.recs[:0]
	for _, r := range h.recs {
		if age := now.Sub(r.at); age < max(h.up.window, h.down.window) {
			keep = append(keep, r)
		}
		if now.Sub(r.at) < h.up.window {
			upRec = min(upRec, r.replicas)
		}
		if now.Sub(r.at) < h.down.window {
			downRec = max(downRec, r.replicas)
		}
	}
	h.recs = append(keep, asRec{now, proposal})
	want := min(max(cur, upRec), downRec)
	// The rate: each policy's bound counts from the replicas at the start
	// of its period (the changes made within it undone).
	limit := func(rules asRules, up bool) int {
		best := cur
		for k, p := range rules.policies {
			start := cur
			for _, e := range h.events {
				if now.Sub(e.at) < p.period {
					start -= e.replicas
				}
			}
			change := p.value
			if !p.pods {
				change = int(math.Ceil(float64(start) * float64(p.value) / 100))
				if !up {
					change = int(float64(start) * float64(p.value) / 100)
				}
			}
			b := start + change
			if !up {
				b = start - change
			}
			if k == 0 || (up && b > best) || (!up && b < best) {
				best = b
			}
		}
		return best
	}
	switch {
	case want > cur:
		want = min(want, max(limit(h.up, true), cur))
	case want < cur:
		want = max(want, min(limit(h.down, false), cur))
	}
	want = min(max(want, h.min), h.max)
	if want != cur {
		h.events = append(h.events, asRec{now, want - cur})
	}
	return want
}

// asKey is one object's state: its shard, whether a run of it is in
// flight, and since when it is owed a run (zero: not owed): its first
// arrival not yet followed by the start of a run. An arrival no replica
// admits (its shard moving) is owed through the catch-up of the shard's
// next admitter.
type asKey struct {
	shard   int
	running bool
	owed    time.Time
}

// asQueue is one replica's queue, as a plain workqueue keeps it: a key
// waits once (dirty), in order of addition (fifo), and one added while
// it runs (processing) waits again once its run returns, at the tail.
type asQueue struct {
	fifo       []asEntry
	dirty      map[string]asWait
	processing map[string]bool
}

// asEntry is a place in the FIFO, valid while its key's dirty record has
// its seq (a key removed and added again has a later place).
type asEntry struct {
	key string
	seq int
}

// asWait is a key waiting in a queue: since when (an event's arrival, or
// a catch-up key's feed), and whether it is a catch-up key.
type asWait struct {
	since   time.Time
	seq     int
	catchUp bool
}

// asRun is a run in flight.
type asRun struct {
	key, replica string
	shard        int
	start, end   time.Time // end: when it returns unless cancelled
	catchUp      bool
}

// asModel is the keys, the queue, the autoscaler and the figures.
type asModel struct {
	s      *sim
	rnd    *rand.Rand
	hpa    asHPA
	target scaleTarget

	names   []string // the objects' keys
	keys    map[string]*asKey
	objects [simShards][]string     // per shard, every key that ever arrived: its objects
	queues  map[string]*asQueue     // per replica
	prev    map[string][]int        // per replica, its admitted shards at the last sync
	held    map[string]map[int]bool // per replica, its held shards at the last report
	qseq    int
	runs    map[int]asRun // by run number
	track   exclusion.Tracker

	replicas  int // the Deployment's
	starting  int // pods added not yet started
	cancelled int // of those, removed before they started
	metric    float64
	leaves    map[string]time.Time // a removed replica: when it began to leave

	// Figures.
	timeline    []asRec       // the Deployment's replicas over time
	behindAt    time.Time     // after the step: the last scrape with the backlog over its target
	maxOldest   time.Duration // after the step
	cancels     int           // runs cancelled (a drain that did not finish them)
	arrivals    int
	ran         int
	maxLeave    time.Duration
	failed      string
	leavesDone  int
	firstUp     time.Time
	peakAt      time.Time
	peak        int
	scaleDownAt time.Time
	gains       int           // shards gained with objects owed a catch-up
	owedKeys    int           // the catch-up keys owed, summed
	catchUpRuns int           // runs of catch-up keys
	maxOwed     time.Duration // the longest an arrival waited for its run, after the drop
	maxDown     time.Duration // after the drop: the oldest waiting event key, at the scrapes
}

func newAsModel(t testing.TB, seed uint64) *asModel {
	s := newSim(seed)
	s.calm, s.replay = true, true // no faults: the autoscaler's moves only
	m := &asModel{s: s, rnd: rand.New(rand.NewPCG(seed, 0xa5ca1e)), hpa: asBehavior(t),
		target: scaleTarget{busy: DefaultTargetBusy, oldest: asTargetOldest, shards: simShards},
		keys:   map[string]*asKey{}, queues: map[string]*asQueue{}, prev: map[string][]int{}, held: map[string]map[int]bool{},
		runs: map[int]asRun{}, replicas: asBaseReplicas, leaves: map[string]time.Time{}}
	s.keys, s.report, s.hook = m.fill, m.report, m.event
	// Random names, as UIDs are: the shards hold about as many each.
	names := rand.New(rand.NewPCG(seed, 0x0b1ec7))
	for range asObjects {
		m.names = append(m.names, fmt.Sprintf("k%016x", names.Uint64()))
	}
	m.timeline = append(m.timeline, asRec{t0, asBaseReplicas})
	s.at(asStart, "arrive", "")
	s.at(asHPAStart-asSync/2, "scrape", "")
	s.at(asHPAStart, "hpa", "")
	return m
}

// rate is the arrival rate at t, keys a second.
func (m *asModel) rate(t time.Time) float64 {
	if d := t.Sub(t0); d >= asStep && d < asDrop && (d < asLull || d >= asLull+asLullFor) {
		return 3 * asBase
	}
	return asBase
}

// event is the simulation's hook, after every event.
func (m *asModel) event(e simEvent) {
	s := m.s
	switch e.kind {
	case "arrive":
		m.arrive()
		if s.now.Sub(t0) < asStopArrivals {
			s.at(time.Duration(m.rnd.ExpFloat64()/m.rate(s.now)*float64(time.Second)), "arrive", "")
		}
	case "runend":
		m.runEnd(s.reps[e.id], e.n)
	case "scrape":
		m.scrape()
		s.at(asSync, "scrape", "")
	case "hpa":
		m.scale(m.hpa.sync(s.now, m.replicas, m.metric))
		s.at(asSync, "hpa", "")
	case "podstart":
		if m.cancelled > 0 {
			m.cancelled--
		} else {
			s.start("", 0)
		}
		m.starting--
	}
	// Any event may change a replica's admitted shards (a decision, a
	// session's end) or free a worker: each queue follows, and the free
	// workers take its keys.
	for _, rp := range s.list {
		m.fill(rp)
	}
	for _, rp := range s.list {
		if rp.leaving && rp.dead {
			if at, ok := m.leaves[rp.id]; ok {
				m.maxLeave = max(m.maxLeave, s.now.Sub(at))
				m.leavesDone++
				delete(m.leaves, rp.id)
			}
		}
	}
	for id, at := range m.leaves {
		if s.now.Sub(at) > asLeaveBound && m.failed == "" {
			m.failed = fmt.Sprintf("at %v %s has been leaving for %v (bound %v)", s.now.Sub(t0), id, s.now.Sub(at), asLeaveBound)
		}
	}
}

// arrive is an event of an object at random: every replica's informer
// sees it, and the one that admits its shard queues its key (the
// Replica's event handler, which records it in the ledger first). If none
// does (its shard moving), its next admitter's catch-up owes it a run.
func (m *asModel) arrive() {
	m.arrivals++
	key := m.names[m.rnd.IntN(asObjects)]
	k := m.keys[key]
	if k == nil {
		k = &asKey{shard: ShardOf(Hash(key), simShards)}
		m.keys[key] = k
		m.objects[k.shard] = append(m.objects[k.shard], key)
	}
	if k.owed.IsZero() {
		k.owed = m.s.now
	}
	for _, rp := range m.s.list {
		if !rp.dead && rp.led.event(key, k.shard, false, true, m.s.clock(rp)) {
			m.add(rp, key, false)
		}
	}
}

// queue returns rp's queue.
func (m *asModel) queue(rp *simReplica) *asQueue {
	q := m.queues[rp.id]
	if q == nil {
		q = &asQueue{dirty: map[string]asWait{}, processing: map[string]bool{}}
		m.queues[rp.id] = q
	}
	return q
}

// add is the queue's Add of key to rp's queue: a key waiting already
// waits once (an event for a fed catch-up key makes it an event key, as
// the ledger does: it waits for the event from now), one running waits
// again once its run returns.
func (m *asModel) add(rp *simReplica, key string, catchUp bool) {
	q := m.queue(rp)
	if w, ok := q.dirty[key]; ok {
		if !catchUp && w.catchUp {
			w.since, w.catchUp = m.s.now, false
			q.dirty[key] = w
		}
		return
	}
	m.qseq++
	q.dirty[key] = asWait{since: m.s.now, seq: m.qseq, catchUp: catchUp}
	if !q.processing[key] {
		q.fifo = append(q.fifo, asEntry{key: key, seq: m.qseq})
	}
}

// feed adds catch-up keys the ledger fed to rp's queue.
func (m *asModel) feed(rp *simReplica, keys []string) {
	for _, key := range keys {
		m.add(rp, key, true)
	}
}

// pop takes the key at the head of the queue, as Get does.
func (q *asQueue) pop() (string, bool) {
	for len(q.fifo) > 0 {
		e := q.fifo[0]
		q.fifo = q.fifo[1:]
		if w, ok := q.dirty[e.key]; ok && w.seq == e.seq && !q.processing[e.key] {
			delete(q.dirty, e.key)
			return e.key, true
		}
	}
	return "", false
}

// sync is the loop's admitted for rp's queue, with the ledger's calls it
// makes: it compares rp's admitted shards with those of the last call,
// removes the keys of the shards no longer admitted (dropGone forgets
// their pending keys), owes a catch-up run to every object of the gained
// ones (gained feeds the first few), and otherwise feeds a stalled feed.
func (m *asModel) sync(rp *simReplica) {
	now := rp.led.active()
	gained, lost := diff(m.prev[rp.id], now), diff(now, m.prev[rp.id])
	m.prev[rp.id] = now
	at := m.s.clock(rp)
	if len(gained)+len(lost) == 0 {
		m.feed(rp, rp.led.feed(at))
		return
	}
	gone := rp.led.dropGone(lost)
	q := m.queue(rp)
	for _, s := range lost {
		for _, key := range m.objects[s] {
			delete(q.dirty, key) // Queue.Remove
		}
	}
	for _, s := range gained {
		keys := slices.Clone(m.objects[s])
		if len(keys) > 0 {
			m.gains++
			m.owedKeys += len(keys)
		}
		m.feed(rp, rp.led.gained(s, at, keys))
	}
	for _, key := range gone {
		delete(q.dirty, key)
	}
	m.feed(rp, rp.led.feed(at))
}

// fill brings rp's queue in line with its admitted shards (sync), then
// starts runs on its free workers, the keys in its queue's order, as its
// Handler does: a run that begins (or is refused) adds the catch-up keys
// the ledger feeds; a refused key is done.
func (m *asModel) fill(rp *simReplica) {
	m.sync(rp)
	s := m.s
	q := m.queue(rp)
	for !rp.dead && len(rp.runs) < asWorkers {
		key, ok := q.pop()
		if !ok {
			return
		}
		k := m.keys[key]
		tk, ok := rp.led.begin(context.Background(), key, k.shard, true, s.clock(rp))
		m.feed(rp, tk.feed)
		if !ok {
			continue
		}
		q.processing[key] = true
		m.track.Enter(rp.id, key, exclusion.Shard{Index: k.shard, Count: simShards})
		s.seq++
		n := s.seq
		rp.runs = append(rp.runs, simRun{n: n, tk: tk})
		m.runs[n] = asRun{key: key, replica: rp.id, shard: k.shard, start: s.now, end: s.now.Add(asService), catchUp: tk.catchUp}
		if tk.catchUp {
			m.catchUpRuns++
		}
		if !k.owed.IsZero() && s.now.Sub(t0) >= asDrop {
			m.maxOwed = max(m.maxOwed, s.now.Sub(k.owed))
		}
		k.owed, k.running = time.Time{}, true
		m.ran++
		s.q.push(simEvent{at: s.now.Add(asService), seq: n, kind: "runend", id: rp.id, n: n})
	}
}

// runEnd is told a runend event of rp's run n: the run returned if the
// harness removed it (once; a cancelled run's natural end finds it gone).
// The key is done: if it was added meanwhile it waits again, at the tail.
func (m *asModel) runEnd(rp *simReplica, n int) {
	r, ok := m.runs[n]
	if !ok || slices.ContainsFunc(rp.runs, func(x simRun) bool { return x.n == n }) {
		return
	}
	delete(m.runs, n)
	m.track.Exit(r.replica, r.key)
	k := m.keys[r.key]
	k.running = false
	q := m.queue(rp)
	delete(q.processing, r.key)
	if m.s.now.Before(r.end) { // cancelled: owed again, by the shard's next admitter
		m.cancels++
		if k.owed.IsZero() {
			k.owed = r.start
		}
	}
	if w, ok := q.dirty[r.key]; ok {
		q.fifo = append(q.fifo, asEntry{key: r.key, seq: w.seq})
	}
}

// report is rp's AnnotationReport as its membership write carries it,
// read back as the other replicas read it: its held shards' load as its
// ledger measures it (the observer's, on rp's clock).
func (m *asModel) report(rp *simReplica) memberLoad {
	now := m.s.clock(rp)
	active, draining := rp.led.states()
	admitted := rp.led.active()
	var held []heldShard
	for _, i := range active {
		state := stateFilling
		if _, ok := slices.BinarySearch(admitted, i); ok {
			state = stateAdmitted
		}
		held = append(held, heldShard{shard: i, state: state})
	}
	for _, i := range draining {
		held = append(held, heldShard{shard: i, state: stateDraining})
	}
	slices.SortFunc(held, func(a, b heldShard) int { return a.shard - b.shard })
	prev, cur := m.held[rp.id], map[int]bool{}
	ids := make([]int, len(held))
	for i, h := range held {
		ids[i], cur[h.shard] = h.shard, true
		if !prev[h.shard] {
			rp.led.heldFrom(h.shard, now)
		}
	}
	m.held[rp.id] = cur
	loads, known := rp.led.measured(ids, now)
	for i := range held {
		held[i].load, held[i].known = loads[i], known[i]
	}
	var l memberLoad
	l.held, l.workers = parseReport(reportOf(held, asWorkers), simShards)
	return l
}

// oldest is the age of the oldest event key waiting in a queue now: the
// backlog a user sees. Catch-up keys are not events; an event that came
// while its shard moved waits for the catch-up (maxOwed).
func (m *asModel) oldest() time.Duration {
	var d time.Duration
	for _, q := range m.queues {
		for _, w := range q.dirty {
			if !w.catchUp {
				d = max(d, m.s.now.Sub(w.since))
			}
		}
	}
	return d
}

// scrape reads every running replica's DesiredReplicas, as its gauge
// has it from its view, and keeps their max (the manifests' query).
func (m *asModel) scrape() {
	m.metric = 0
	for _, rp := range m.s.list {
		if rp.dead {
			continue
		}
		var v view
		rp.ring.snapshot(&v)
		m.metric = max(m.metric, float64(signalOf(&v, m.target).desired))
	}
	since := m.s.now.Sub(t0)
	if since >= asStep {
		o := m.oldest()
		m.maxOldest = max(m.maxOldest, o)
		if o > asTargetOldest {
			m.behindAt = m.s.now
		}
		if since >= asDrop {
			m.maxDown = max(m.maxDown, o)
		}
	}
}

// scale sets the Deployment's replicas to n: added pods start
// asPodStart later; removed ones are those not started yet, then the
// newest running, which leave gracefully.
func (m *asModel) scale(n int) {
	s := m.s
	since := s.now.Sub(t0)
	if n == m.replicas {
		return
	}
	if n > m.replicas && since >= asStep && m.firstUp.IsZero() {
		m.firstUp = s.now
	}
	if n < m.replicas && since >= asDrop && m.scaleDownAt.IsZero() {
		m.scaleDownAt = s.now
	}
	switch {
	case since >= asStep && since < asDrop && n < m.replicas && m.failed == "":
		m.failed = fmt.Sprintf("at %v the replicas fall from %d to %d between the step and the drop", since, m.replicas, n)
	case since >= asDrop && !m.scaleDownAt.IsZero() && n > m.replicas && m.failed == "":
		m.failed = fmt.Sprintf("at %v the replicas rise from %d to %d after the load dropped", since, m.replicas, n)
	}
	for ; m.replicas < n; m.replicas++ {
		m.starting++
		s.at(asPodStart, "podstart", "")
	}
	for ; m.replicas > n; m.replicas-- {
		if m.starting-m.cancelled > 0 {
			m.cancelled++
			continue
		}
		live := s.live()
		rp := s.reps[live[len(live)-1]]
		m.leaves[rp.id] = s.now
		s.leave(rp)
	}
	if n > m.peak {
		m.peak, m.peakAt = n, s.now
	}
	m.timeline = append(m.timeline, asRec{s.now, n})
}

// run runs the scenario and returns its first violation ("" none).
func (m *asModel) run() string {
	if v := m.s.run(asEnd); v != "" {
		return v
	}
	if m.failed != "" {
		return m.failed
	}
	if v := m.track.Violations(); len(v) > 0 {
		return "exclusion: " + strings.Join(v, "; ")
	}
	waiting, queued, pending := 0, 0, 0
	for _, k := range m.keys {
		if !k.owed.IsZero() || k.running {
			waiting++
		}
	}
	for _, q := range m.queues {
		queued += len(q.dirty)
	}
	for _, rp := range m.s.list {
		rp.led.mu.Lock()
		pending += len(rp.led.pending.at)
		rp.led.mu.Unlock()
	}
	switch {
	case waiting > 0:
		return fmt.Sprintf("%d keys still owed a run or running at the end: lost", waiting)
	case queued > 0 || pending > 0:
		return fmt.Sprintf("%d keys queued, %d pending in the ledgers (a catch-up not fed or not dropped with its shard) at the end", queued, pending)
	case m.cancels > 0:
		return fmt.Sprintf("%d runs cancelled: a scale-down did not drain", m.cancels)
	case m.firstUp.IsZero() || m.peak < asMax:
		return fmt.Sprintf("the step did not scale the ring up to %d: peak %d replicas", asMax, m.peak)
	case m.peakAt.Sub(t0.Add(asStep)) > asPeakBound:
		return fmt.Sprintf("the ring reached its peak %v after the step (bound %v)", m.peakAt.Sub(t0.Add(asStep)), asPeakBound)
	case m.behindAt.Sub(t0.Add(asStep)) > asRecoverBound:
		return fmt.Sprintf("the backlog over its target until %v after the step (bound %v)", m.behindAt.Sub(t0.Add(asStep)), asRecoverBound)
	case m.replicas != asBaseReplicas || len(m.s.live()) != asBaseReplicas:
		return fmt.Sprintf("the ring is at %d replicas (%d live) at the end, not back at %d", m.replicas, len(m.s.live()), asBaseReplicas)
	case len(m.leaves) > 0:
		return fmt.Sprintf("%d replicas still leaving at the end", len(m.leaves))
	}
	return ""
}

// figures describes the run, for the log and docs/autoscale.md.
func (m *asModel) figures() string {
	var tl []string
	for _, r := range m.timeline {
		tl = append(tl, fmt.Sprintf("%v:%d", r.at.Sub(t0), r.replicas))
	}
	rec := time.Duration(0)
	if !m.behindAt.IsZero() {
		rec = m.behindAt.Sub(t0.Add(asStep)) + asSync
	}
	return fmt.Sprintf("first scale-up %v after the step, peak %d replicas %v after it; backlog over %v until %v after the step (max oldest %v); "+
		"first scale-down %v after the drop; %d leaves, the longest %v; %d arrivals, %d runs; "+
		"%d shards gained with a catch-up, %d keys owed, %d catch-up runs; after the drop: oldest %v, an arrival's longest wait for its run %v; replicas: %s",
		m.firstUp.Sub(t0.Add(asStep)), m.peak, m.peakAt.Sub(t0.Add(asStep)), asTargetOldest, rec, m.maxOldest.Round(time.Second),
		m.scaleDownAt.Sub(t0.Add(asDrop)), m.leavesDone, m.maxLeave.Round(100*time.Millisecond), m.arrivals, m.ran,
		m.gains, m.owedKeys, m.catchUpRuns, m.maxDown.Round(time.Second), m.maxOwed.Round(time.Second), strings.Join(tl, " "))
}

// TestSimAutoscale runs the scenario for seed 0; SHARDING_AUTOSCALE_SEEDS=n
// runs n seeds from SHARDING_AUTOSCALE_FROM (default 0).
func TestSimAutoscale(t *testing.T) {
	seeds, _ := strconv.ParseUint(os.Getenv("SHARDING_AUTOSCALE_SEEDS"), 10, 64)
	if seeds == 0 {
		seeds = 1 // CI's budget: about 6 s under -race
	}
	start := time.Now()
	from, _ := strconv.ParseUint(os.Getenv("SHARDING_AUTOSCALE_FROM"), 10, 64)
	for seed := from; seed < from+seeds; seed++ {
		m := newAsModel(t, seed)
		if v := m.run(); v != "" {
			t.Errorf("seed %d: %s\n%s\n%s", seed, v, m.figures(), m.s.dump())
		}
		t.Logf("seed %d: %s", seed, m.figures())
	}
	t.Logf("%d seeds in %v", seeds, time.Since(start))
}

// TestSimAutoscaleHPA checks asHPA against the HPA algorithm's cases:
// the tolerance, the windows and the policies.
func TestSimAutoscaleHPA(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	h := asBehavior(t)
	steps := []struct {
		at     int
		cur    int
		metric float64
		want   int
	}{
		{0, 3, 3.2, 3},     // within the tolerance
		{15, 3, 20, 7},     // 4 pods beat doubling
		{30, 7, 20, 14},    // doubling beats 4 pods
		{45, 14, 30, 16},   // the max
		{60, 16, 2, 16},    // the down window holds the highest of 5 minutes
		{345, 16, 2, 15},   // 5 minutes on: one pod per minute
		{360, 15, 2, 15},   // within that minute
		{405, 15, 2, 14},   // the next minute
		{410, 14, 0.1, 14}, // still within the minute
		{465, 14, 1.5, 13}, // and the next
		{480, 13, 50, 16},  // up at once, to the max
		{481, 16, 17, 16},  // at the max
		{495, 16, 1, 16},   // the window holds 16
		{800, 16, 15, 16},  // within the tolerance, down
	}
	for _, st := range steps {
		if got := h.sync(at(st.at), st.cur, st.metric); got != st.want {
			t.Fatalf("at %ds, %d replicas, metric %v: %d, want %d", st.at, st.cur, st.metric, got, st.want)
		}
	}
}
