package sharding

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// The machine (step.go) driven directly: observations in, actions out,
// answers back, with no API server, clock or goroutine.

func testMachine(self string, shards int) machine {
	return newMachine(machineConf{self: self, ring: "r", namespace: "ns", own: ringConf{shards: shards, field: FieldUID},
		leaseDuration: 15 * time.Second, handoffWait: 15 * time.Second, grace: 5 * time.Second})
}

func acquired(a actions) []int {
	var out []int
	for _, w := range a.acquire {
		out = append(out, w.i)
	}
	return out
}

func TestStepSettlesBeforeTaking(t *testing.T) {
	v := testView([]string{"a", "b"}, make([]string, 8))
	m := testMachine("b", 8)
	alive := sessionState{alive: true, session: "s-b"}
	for tick := 1; tick < settledTicks; tick++ {
		if a := m.Step(observation{now: t0, tick: true, v: v, session: alive}); len(a.acquire) > 0 {
			t.Fatalf("tick %d: acquires %v before its session settled", tick, acquired(a))
		}
	}
	a := m.Step(observation{now: t0, tick: true, v: v, session: alive})
	if got, want := acquired(a), []int{4, 5, 6, 7}; !slices.Equal(got, want) {
		t.Fatalf("settled: acquires %v, want %v (b's deal, after a's)", got, want)
	}
	for _, w := range a.acquire {
		if w.session != "s-b" || w.s != v.shards[w.i] {
			t.Errorf("acquisition of shard %d in session %q at %+v, want session s-b at the view's version", w.i, w.session, w.s)
		}
	}
	if !m.plans.counted || m.plans.share != 4 {
		t.Errorf("counted %v share %d, want true 4", m.plans.counted, m.plans.share)
	}

	// An acquisition refused at a version is not retried at that version
	// before the next tick; a reaction to a change does not count a tick.
	m.acquireFailed(a.acquire[0], false)
	b := m.Step(observation{now: t0, v: v, session: alive})
	if got, want := acquired(b), []int{5, 6, 7}; !slices.Equal(got, want) {
		t.Errorf("after a Conflict on shard 4: acquires %v, want %v", got, want)
	}
	m.newTick()
	if got := acquired(m.Step(observation{now: t0, tick: true, v: v, session: alive})); !slices.Contains(got, 4) {
		t.Errorf("next tick: acquires %v, want shard 4 tried again", got)
	}
}

func TestStepLapsedForgetsPlan(t *testing.T) {
	v := testView([]string{"a", "b"}, []string{"b", "b", "b", "b", "a", "a", "a", "a"})
	m := testMachine("b", 8)
	m.plans.prefetch = []int{1}
	if a := m.Step(observation{now: t0, tick: true, v: v}); len(a.acquire)+len(a.drain) > 0 || m.plans.prefetch != nil || m.aliveFor != 0 {
		t.Errorf("lapsed session: actions %+v, prefetch %v, aliveFor %d; want none", a, m.plans.prefetch, m.aliveFor)
	}
}

func TestStepLeavingHandsOver(t *testing.T) {
	// b leaves, a counts: b's shards are planned for a, and drained once
	// a says it synced them, or once the handoff bound has passed.
	v := testView([]string{"a", "b~"}, []string{"a", "a", "a", "a", "b", "b", "b", "b"})
	m := testMachine("b", 8)
	m.leaveAt = t0
	leaving := sessionState{alive: true, session: "s-b", leaving: true}
	o := observation{now: t0, v: v, session: leaving, active: []int{4, 5, 6, 7}}
	a := m.Step(o)
	if len(a.drain) > 0 || len(a.acquire) > 0 {
		t.Fatalf("leaving, taker not synced: drains %v acquires %v, want neither", a.drain, acquired(a))
	}
	if want := t0.Add(15 * time.Second); !m.wakeAt().Equal(want) {
		t.Errorf("wakes at %v, want the handoff bound %v", m.wakeAt(), want)
	}
	am := v.members["a"]
	am.synced = []int{5}
	v.members["a"] = am
	if a := m.Step(o); !slices.Equal(a.drain, []int{5}) || m.plans.giveTo[5] != "a" {
		t.Errorf("a synced shard 5: drains %v (giveTo %q), want [5] to a", a.drain, m.plans.giveTo[5])
	}
	o.now = t0.Add(15 * time.Second)
	if a := m.Step(o); !slices.Equal(a.drain, []int{4, 5, 6, 7}) || !a.graceEnd.Equal(o.now.Add(5*time.Second)) {
		t.Errorf("bound over: drains %v until %v, want every active shard until %v", a.drain, a.graceEnd, o.now.Add(5*time.Second))
	}
	rel := m.releases([]drained{{i: 4, s: v.shards[4]}, {i: 0, s: v.shards[0]}}, "s-b", v.ringLease)
	if len(rel) != 1 || rel[0].i != 4 || rel[0].next != "a" || rel[0].seal != -1 || rel[0].ref != v.shards[4].ref {
		t.Errorf("releases %+v, want shard 4 alone, at its version, naming a, unsealed", rel)
	}
}

func TestStepLeavingBeforeTheWatchShowsIt(t *testing.T) {
	// b has written its leave, but its view still shows it a member that
	// counts: it plans as the others will once they see the leave (its
	// shards to a, handed over once a has synced them), not a give-up of
	// every shard at once with no taker.
	v := testView([]string{"a", "b"}, []string{"a", "a", "a", "a", "b", "b", "b", "b"})
	m := testMachine("b", 8)
	m.leaveAt = t0
	o := observation{now: t0, v: v, session: sessionState{alive: true, session: "s-b", leaving: true}, active: []int{4, 5, 6, 7}}
	if a := m.Step(o); len(a.drain) > 0 {
		t.Fatalf("leave not yet seen: drains %v at once, want none before the handoff", a.drain)
	}
	for i := 4; i < 8; i++ {
		if m.plans.to[i] != "a" {
			t.Errorf("shard %d planned for %q, want a", i, m.plans.to[i])
		}
	}
	if v.members["b"].leaving != true {
		t.Errorf("the decision's view does not show b leaving")
	}
}

func TestStepCountSwitch(t *testing.T) {
	// The ring switches from 8 to 16 shards: b, of 8, is closing; it
	// takes nothing, gives up its shards at once, and seals each release.
	v := testView([]string{"a", "b"}, []string{"b", "b", "b", "b", "a", "a", "a", "a"})
	v.ringLease = ringInfo{exists: true, ref: leaseRef{uid: "ring", rv: "9"}, conf: ringConf{shards: 8, field: FieldUID}, gen: 2, target: 16}
	m := testMachine("b", 8)
	m.aliveFor = settledTicks
	o := observation{now: t0, v: v, session: sessionState{alive: true, session: "s-b"}, active: []int{0, 1, 2, 3}}
	a := m.Step(o)
	if !a.modeChanged || a.mode != modeClosing || !slices.Equal(a.drain, []int{0, 1, 2, 3}) || len(a.acquire) > 0 {
		t.Fatalf("closing: mode %v (changed %v), drains %v, acquires %v; want closing, every shard, none", a.mode, a.modeChanged, a.drain, acquired(a))
	}
	if a := m.Step(o); a.modeChanged {
		t.Errorf("mode reported changed twice")
	}
	rel := m.releases([]drained{{i: 0, s: v.shards[0]}}, "s-b", v.ringLease)
	if len(rel) != 1 || rel[0].seal != 2 || rel[0].next != "" {
		t.Errorf("releases %+v, want shard 0 sealed in generation 2, for no taker", rel)
	}
}

func TestCheckRefusesAndFences(t *testing.T) {
	v := testView([]string{"a", "b", "c"}, make([]string, 8))
	m := testMachine("b", 8)
	// a and c were seen at t0: due LeaseDuration later.
	if fence, err := m.check(v, t0.Add(time.Second)); err != nil || len(fence) > 0 || !m.fenceAt.Equal(t0.Add(15*time.Second)) {
		t.Fatalf("before LeaseDuration: %v, fences %v, next %v", err, fence, m.fenceAt)
	}
	fence, err := m.check(v, t0.Add(15*time.Second))
	if err != nil || len(fence) != 2 || fence[0].id != "a" || fence[0].ref != v.members["a"].ref || fence[1].id != "c" {
		t.Fatalf("at LeaseDuration: %v, fences %+v, want a and c at their versions", err, fence)
	}
	m.fenceFailed(fence[0])
	if fence, _ := m.check(v, t0.Add(15*time.Second)); len(fence) != 1 || fence[0].id != "c" {
		t.Errorf("after a's fence failed: fences %+v, want c alone until the next tick", fence)
	}
	v.ringLease = ringInfo{exists: true, conf: ringConf{shards: 8, field: FieldNamespace}}
	if _, err := m.check(v, t0); !errors.Is(err, ErrRingMismatch) {
		t.Errorf("ring of another field: %v, want ErrRingMismatch", err)
	}
	m.stopped = true
	if _, err := m.check(v, t0); err != nil {
		t.Errorf("stopped: %v, want no refusal once the replica leaves on an error", err)
	}
}

func TestStepRenewal(t *testing.T) {
	m := testMachine("b", 8)
	m.plans.synced = []int{3}
	lapsed := sessionState{session: "old"}
	w, ok := m.renewal(lapsed, t0, "new")
	if !ok || w.session != "new" || !w.start.Equal(t0) || !w.now.Equal(t0) {
		t.Fatalf("lapsed, no run in flight: %+v %v, want a join in the fresh session, started now", w, ok)
	}
	m.aliveFor = 5
	m.joined(w)
	if m.aliveFor != 0 || !m.sessionStart.Equal(t0) {
		t.Errorf("joined: aliveFor %d, start %v; want 0, %v", m.aliveFor, m.sessionStart, t0)
	}
	later := t0.Add(2 * time.Second)
	w, ok = m.renewal(sessionState{alive: true, session: "new"}, later, "other")
	if !ok || w.session != "new" || !w.start.Equal(t0) || !w.now.Equal(later) || !slices.Equal(w.mark.synced, []int{3}) {
		t.Errorf("alive: %+v %v, want a renewal of the session, started at its join, saying what it synced", w, ok)
	}
	for _, st := range []sessionState{{session: "old", inflight: 1}, {session: "old", leaving: true}} {
		if w, ok := m.renewal(st, later, "other"); ok {
			t.Errorf("%+v: writes %+v, want nothing (runs of the old session in flight, or leaving)", st, w)
		}
	}
}
