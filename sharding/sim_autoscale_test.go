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
// (no lost answers, stalls or partitions), runs keys of its own: they
// arrive at random (Poisson) on a ring of simShards shards, wait in the
// queue of their shard's admitter, coalesce as in the queue (a key that
// arrives while waiting waits once; one that arrives while it runs runs
// again after), and run on asWorkers workers per replica for asService
// each. Each replica reports its shards' load in its membership writes
// (AnnotationReport, written and read as the replicas do), every replica
// computes the ring's signal from its view (signalOf), a scrape reads
// the max of their DesiredReplicas, and an autoscaler that follows the
// Kubernetes HorizontalPodAutoscaler's algorithm with the behaviour of
// the example's manifest (asManifest) sets the Deployment's replicas:
// an added pod joins the ring asPodStart later, a removed one leaves
// gracefully (SIGTERM: Run's context ends). The arrival rate triples at
// asStep, drops back for a lull of two minutes amid it, and drops back at
// asDrop.
//
// Checked: no two replicas run keys of one shard at once (the harness's
// check by hash range after every event, and the exclusion oracle on
// every run), no key runs twice at once, no key is lost (every arrival is
// followed by a run that starts after it, and no key waits at the end),
// the ring reaches the replicas the step asks for (8) within asPeakBound,
// the backlog (the oldest waiting key's age) is back under
// asTargetOldest within asRecoverBound of the step and stays there, the
// replicas never fall between the step and the drop (the lull included)
// nor rise once they fell after it (no flapping), scale-down drains (every removed replica leaves
// gracefully, its runs finished, none cancelled) and the ring is back at
// its base replicas by the end. The figures are in docs/autoscale.md.

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
	asStep  = 3 * time.Minute
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

// asKey is one key's state in the queue.
type asKey struct {
	shard   int
	since   time.Time // waiting since (zero: not waiting); while running, arrived again since
	running bool
}

// asRun is a run in flight.
type asRun struct {
	key, replica string
	shard        int
	start, end   time.Time // end: when it returns unless cancelled
	since        time.Time // when the key it serves began waiting
}

// asSpan is a finished run, for the work of the last loadWindow.
type asSpan struct {
	shard      int
	start, end time.Time
}

// asModel is the keys, the queue, the autoscaler and the figures.
type asModel struct {
	s      *sim
	rnd    *rand.Rand
	hpa    asHPA
	target scaleTarget

	keys  map[string]*asKey
	queue [simShards][]string // per shard, the keys waiting, oldest first
	runs  map[int]asRun       // by run number
	spans map[string][]asSpan // per replica, the last loadWindow's finished runs
	track exclusion.Tracker

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
}

func newAsModel(t testing.TB, seed uint64) *asModel {
	s := newSim(seed)
	s.calm, s.replay = true, true // no faults: the autoscaler's moves only
	m := &asModel{s: s, rnd: rand.New(rand.NewPCG(seed, 0xa5ca1e)), hpa: asBehavior(t),
		target: scaleTarget{busy: DefaultTargetBusy, oldest: asTargetOldest, shards: simShards},
		keys:   map[string]*asKey{}, runs: map[int]asRun{}, spans: map[string][]asSpan{},
		replicas: asBaseReplicas, leaves: map[string]time.Time{}}
	s.keys, s.report, s.hook = m.fill, m.report, m.event
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

// arrive adds a key at random, as the queue would: a waiting key waits
// once; a running one runs again once it returns.
func (m *asModel) arrive() {
	m.arrivals++
	key := "k" + strconv.Itoa(m.rnd.IntN(1<<20))
	k := m.keys[key]
	if k == nil {
		k = &asKey{shard: ShardOf(Hash(key), simShards)}
		m.keys[key] = k
	}
	if !k.since.IsZero() {
		return
	}
	k.since = m.s.now
	if !k.running {
		m.queue[k.shard] = append(m.queue[k.shard], key)
		for _, rp := range m.s.list {
			m.fill(rp)
		}
	}
}

// admits reports whether rp admits shard i now.
func (m *asModel) admits(rp *simReplica, i int) bool {
	rp.led.mu.Lock()
	defer rp.led.mu.Unlock()
	return rp.led.admitsLocked(i, m.s.clock(rp))
}

// fill starts runs on rp's free workers: the oldest waiting key of the
// shards it admits first.
func (m *asModel) fill(rp *simReplica) {
	s := m.s
	for !rp.dead && len(rp.runs) < asWorkers {
		best := -1
		for i := range simShards {
			if len(m.queue[i]) == 0 || !m.admits(rp, i) {
				continue
			}
			if best < 0 || m.keys[m.queue[i][0]].since.Before(m.keys[m.queue[best][0]].since) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		key := m.queue[best][0]
		tk, ok := rp.led.begin(context.Background(), key, best, true, s.clock(rp))
		if !ok {
			return
		}
		m.queue[best] = m.queue[best][1:]
		k := m.keys[key]
		m.track.Enter(rp.id, key, exclusion.Shard{Index: best, Count: simShards})
		s.seq++
		n := s.seq
		rp.runs = append(rp.runs, simRun{n: n, tk: tk})
		m.runs[n] = asRun{key: key, replica: rp.id, shard: best, start: s.now, end: s.now.Add(asService), since: k.since}
		k.since, k.running = time.Time{}, true
		m.ran++
		s.q.push(simEvent{at: s.now.Add(asService), seq: n, kind: "runend", id: rp.id, n: n})
	}
}

// runEnd is told a runend event of rp's run n: the run returned if the
// harness removed it (once; a cancelled run's natural end finds it gone).
func (m *asModel) runEnd(rp *simReplica, n int) {
	r, ok := m.runs[n]
	if !ok || slices.ContainsFunc(rp.runs, func(x simRun) bool { return x.n == n }) {
		return
	}
	delete(m.runs, n)
	m.track.Exit(r.replica, r.key)
	now := m.s.now
	m.spans[rp.id] = append(m.spans[rp.id], asSpan{shard: r.shard, start: r.start, end: now})
	k := m.keys[r.key]
	k.running = false
	if now.Before(r.end) { // cancelled: the key waits again, since it first did
		m.cancels++
		if k.since.IsZero() || r.since.Before(k.since) {
			k.since = r.since
		}
	}
	if !k.since.IsZero() {
		m.queue[k.shard] = append(m.queue[k.shard], r.key)
		// The queue is kept oldest first.
		q := m.queue[k.shard]
		slices.SortStableFunc(q, func(a, b string) int { return m.keys[a].since.Compare(m.keys[b].since) })
	}
	for _, rp := range m.s.list {
		m.fill(rp)
	}
}

// report is rp's AnnotationReport as its membership write carries it,
// read back as the other replicas read it.
func (m *asModel) report(rp *simReplica) memberLoad {
	now := m.s.now
	from := now.Add(-loadWindow)
	work := make(map[int]time.Duration)
	spans := m.spans[rp.id][:0]
	for _, sp := range m.spans[rp.id] {
		if sp.end.After(from) {
			spans = append(spans, sp)
			work[sp.shard] += sp.end.Sub(later(sp.start, from))
		}
	}
	m.spans[rp.id] = spans
	for _, r := range rp.runs {
		if x, ok := m.runs[r.n]; ok {
			work[x.shard] += now.Sub(later(x.start, from))
		}
	}
	active, draining := rp.led.states()
	var held []heldShard
	add := func(i int, state string) {
		h := heldShard{shard: i, state: state, known: true, load: shardLoad{work: work[i]}}
		if state == stateAdmitted && len(m.queue[i]) > 0 {
			h.load.ready = len(m.queue[i])
			h.load.oldest = now.Sub(m.keys[m.queue[i][0]].since)
		}
		held = append(held, h)
	}
	for _, i := range active {
		state := stateFilling
		if m.admits(rp, i) {
			state = stateAdmitted
		}
		add(i, state)
	}
	for _, i := range draining {
		add(i, stateDraining)
	}
	slices.SortFunc(held, func(a, b heldShard) int { return a.shard - b.shard })
	var l memberLoad
	l.held, l.workers = parseReport(reportOf(held, asWorkers), simShards)
	return l
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// oldest is the oldest waiting key's age now, whoever admits its shard.
func (m *asModel) oldest() time.Duration {
	var d time.Duration
	for i := range simShards {
		if len(m.queue[i]) > 0 {
			d = max(d, m.s.now.Sub(m.keys[m.queue[i][0]].since))
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
	waiting := 0
	for _, k := range m.keys {
		if !k.since.IsZero() || k.running {
			waiting++
		}
	}
	switch {
	case waiting > 0:
		return fmt.Sprintf("%d keys still wait or run a minute after the last arrival: lost", waiting)
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
		"first scale-down %v after the drop; %d leaves, the longest %v; %d arrivals, %d runs; replicas: %s",
		m.firstUp.Sub(t0.Add(asStep)), m.peak, m.peakAt.Sub(t0.Add(asStep)), asTargetOldest, rec, m.maxOldest.Round(time.Second),
		m.scaleDownAt.Sub(t0.Add(asDrop)), m.leavesDone, m.maxLeave.Round(100*time.Millisecond), m.arrivals, m.ran, strings.Join(tl, " "))
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
