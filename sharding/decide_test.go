package sharding

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The ring's decisions (decide.go) against tables: each is a function of a
// view and of this replica's state, so each case is a view and an answer.

var t0 = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// testView builds a view: members by identity ("id" confirmed, "id?" a
// join, "id!" a join after a confirmed session, "id~" a member that
// announced its leave, each in session "s-id"), and shards by holder (""
// free; "id/x" the holder in another session; ">id" released for id).
func testView(members []string, holders []string) *view {
	v := &view{members: make(map[string]memberInfo)}
	for i, m := range members {
		id, join, rejoin, leaving := m, false, false, false
		switch id[len(id)-1] {
		case '?':
			id, join = id[:len(id)-1], true
		case '!':
			id, join, rejoin = id[:len(id)-1], true, true
		case '~':
			id, leaving = id[:len(id)-1], true
		}
		v.members[id] = memberInfo{ref: leaseRef{uid: types.UID("m-" + id), rv: string(rune('a' + i))}, session: "s-" + id, confirmed: !join, rejoined: rejoin, leaving: leaving, at: t0}
	}
	for i, h := range holders {
		s := shardInfo{exists: true, ref: leaseRef{uid: "u", rv: string(rune('A' + i))}}
		if next, ok := strings.CutPrefix(h, ">"); ok {
			s.next, h = next, ""
		}
		if h != "" {
			s.holder, s.session = h, "s-"+h
			if k := len(h) - 2; k > 0 && h[k] == '/' {
				s.holder, s.session = h[:k], "other"
			}
		}
		v.shards = append(v.shards, s)
	}
	return v
}

func TestBalanceOf(t *testing.T) {
	// 8 shards; b is a join (no share); d is not a member; a/x names a's
	// old session.
	v := testView([]string{"c", "a", "b?"}, []string{"a", "a", "a/x", "c", "b", "d", "", "c"})
	b := balanceOf(v, 8)
	if want := []string{"a", "c"}; !slices.Equal(b.ids, want) {
		t.Errorf("members counted %v, want %v (a join gets no share)", b.ids, want)
	}
	if b.held["a"] != 2 || b.held["c"] != 2 || b.held["b"] != 1 {
		t.Errorf("held %v, want a 2, c 2, b 1 (a join's shards are held)", b.held)
	}
	if want := []int{2, 5, 6}; !slices.Equal(b.free, want) {
		t.Errorf("free %v, want %v (old session, member gone, empty)", b.free, want)
	}
	for _, tc := range []struct {
		shards, n int
		want      []int
	}{
		{16, 3, []int{6, 5, 5}},
		{16, 5, []int{4, 3, 3, 3, 3}},
		{8, 2, []int{4, 4}},
		{4, 8, []int{1, 1, 1, 1, 0, 0, 0, 0}},
	} {
		b := balance{shards: tc.shards, ids: make([]string, tc.n)}
		var got []int
		for k := range tc.n {
			got = append(got, b.share(k))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("S=%d N=%d: shares %v, want %v (the first S mod N get one more)", tc.shards, tc.n, got, tc.want)
		}
	}
}

func TestMoves(t *testing.T) {
	none := make([]string, 8)
	for _, tc := range []struct {
		name           string
		members        []string
		holders        []string
		self           string
		aliveFor       int
		active         []int
		failed         []string
		drain, acquire []int
	}{
		{name: "a holds all, b joined: a gives up b's share",
			members: []string{"a", "b"}, holders: []string{"a", "a", "a", "a", "a", "a", "a", "a"},
			self: "a", aliveFor: 9, active: []int{0, 1, 2, 3, 4, 5, 6, 7}, drain: []int{4, 5, 6, 7}},
		{name: "already draining count against what is given up",
			members: []string{"a", "b"}, holders: []string{"a", "a", "a", "a", "a", "a", "a", "a"},
			self: "a", aliveFor: 9, active: []int{0, 1, 2, 3, 4, 5}, drain: []int{4, 5}},
		{name: "b is a join: nobody waits, a keeps all",
			members: []string{"a", "b?"}, holders: []string{"a", "a", "a", "a", "a", "a", "a", "a"},
			self: "a", aliveFor: 9, active: []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{name: "free shards cover part of b's wait: a gives up one",
			members: []string{"a", "b"}, holders: []string{"a", "a", "a", "a", "a", "", "", ""},
			self: "a", aliveFor: 9, active: []int{0, 1, 2, 3, 4}, drain: []int{4}},
		{name: "newcomer waits to its third tick",
			members: []string{"a", "b"}, holders: []string{"a", "a", "a", "a", "", "", "", ""},
			self: "b", aliveFor: 2},
		{name: "newcomer at its third tick takes its share",
			members: []string{"a", "b"}, holders: []string{"a", "a", "a", "a", "", "", "", ""},
			self: "b", aliveFor: 3, acquire: []int{4, 5, 6, 7}},
		{name: "free shards dealt in identity order: b takes after a's deficit",
			members: []string{"a", "b"}, holders: []string{"", "", "", "", "", "", "", ""},
			self: "b", aliveFor: 3, acquire: []int{4, 5, 6, 7}},
		{name: "a takes the first",
			members: []string{"a", "b"}, holders: []string{"", "", "", "", "", "", "", ""},
			self: "a", aliveFor: 3, acquire: []int{0, 1, 2, 3}},
		{name: "a write failed at this version is not retried",
			members: []string{"a", "b"}, holders: []string{"", "", "", "", "", "", "", ""},
			self: "a", aliveFor: 3, failed: []string{"", "B", "", "", "", "", "", ""}, acquire: []int{0, 2, 3}},
		{name: "a write failed at an older version is",
			members: []string{"a", "b"}, holders: []string{"", "", "", "", "", "", "", ""},
			self: "a", aliveFor: 3, failed: []string{"", "A", "", "", "", "", "", ""}, acquire: []int{0, 1, 2, 3}},
		{name: "free shards still naming a member go back to it (b)",
			members: []string{"a", "b"}, holders: []string{"b/x", "b/x", "a/x", "a/x", "", "", "", ""},
			self: "b", aliveFor: 3, acquire: []int{0, 1, 6, 7}},
		{name: "free shards still naming a member go back to it (a)",
			members: []string{"a", "b"}, holders: []string{"b/x", "b/x", "a/x", "a/x", "", "", "", ""},
			self: "a", aliveFor: 3, acquire: []int{2, 3, 4, 5}},
		{name: "a member's lapsed shards beyond its deficit are dealt",
			members: []string{"a", "b"}, holders: []string{"b/x", "b/x", "b/x", "b/x", "b/x", "b/x", "", ""},
			self: "a", aliveFor: 3, acquire: []int{4, 5, 6, 7}},
		{name: "kept for a rejoined member until its session counts",
			members: []string{"a", "b!"}, holders: []string{"b/x", "b/x", "b/x", "b/x", "", "", "", ""},
			self: "a", aliveFor: 3, acquire: []int{4, 5, 6, 7}},
		{name: "not kept for a member whose joins go unanswered",
			members: []string{"a", "b?"}, holders: []string{"b/x", "b/x", "b/x", "b/x", "", "", "", ""},
			self: "a", aliveFor: 3, acquire: []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{name: "naming no member any more (fenced): dealt",
			members: []string{"a", "b"}, holders: []string{"c/x", "c/x", "c/x", "c/x", "", "", "", ""},
			self: "a", aliveFor: 3, acquire: []int{0, 1, 2, 3}},
		{name: "not a counted member: nothing",
			members: []string{"a", "b?"}, holders: []string{"", "", "", "", "", "", "", ""},
			self: "b", aliveFor: 9},
		{name: "a leaver gives all its shards",
			members: []string{"a~", "b"}, holders: []string{"a", "a", "a", "a", "b", "b", "b", "b"},
			self: "a", aliveFor: 9, active: []int{0, 1, 2, 3}, drain: []int{0, 1, 2, 3}},
		{name: "a leaver's shards are planned, not free: b takes none",
			members: []string{"a~", "b"}, holders: []string{"a", "a", "a", "a", "b", "b", "b", "b"},
			self: "b", aliveFor: 9, active: []int{4, 5, 6, 7}},
		{name: "released for b: b takes it before the identity order's a",
			members: []string{"a", "b", "c"}, holders: []string{">b", "a", "a", "b", "b", "c", "c", "c"},
			self: "b", aliveFor: 9, acquire: []int{0}},
		{name: "released for b: a does not take it",
			members: []string{"a", "b", "c"}, holders: []string{">b", "a", "a", "b", "b", "c", "c", "c"},
			self: "a", aliveFor: 9},
		{name: "released for a member gone: dealt in order",
			members: []string{"a", "b", "c"}, holders: []string{">d", "a", "a", "b", "b", "c", "c", "c"},
			self: "a", aliveFor: 9, acquire: []int{0}},
	} {
		v := testView(tc.members, tc.holders)
		failed := tc.failed
		if failed == nil {
			failed = none
		}
		b := balanceOf(v, 8)
		drain, acquire := moves(v, b, b.plan(v), mover{self: tc.self, aliveFor: tc.aliveFor, active: tc.active, failed: failed})
		if !slices.Equal(drain, tc.drain) || !slices.Equal(acquire, tc.acquire) {
			t.Errorf("%s: drain %v acquire %v, want drain %v acquire %v", tc.name, drain, acquire, tc.drain, tc.acquire)
		}
	}
}

// TestPlan checks the planned moves: which shards are planned for which
// taker, what the taker prefetches, and when the holder hands over.
func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []string
		holders []string
		want    []string // the plan, shard by shard
	}{
		{name: "a join: a's last shards go to b",
			members: []string{"a", "b"}, holders: []string{"a", "a", "a", "a", "a", "a", "a", "a"},
			want: []string{"", "", "", "", "b", "b", "b", "b"}},
		{name: "a join of a third: each gives its surplus, in identity order",
			members: []string{"a", "b", "c"}, holders: []string{"a", "a", "a", "a", "b", "b", "b", "b"},
			want: []string{"", "", "", "c", "", "", "", "c"}},
		{name: "free shards first: one shard planned",
			members: []string{"a", "b"}, holders: []string{"a", "a", "a", "a", "a", "", "", ""},
			want: []string{"", "", "", "", "b", "", "", ""}},
		{name: "a join that does not count yet: nothing planned",
			members: []string{"a", "b?"}, holders: []string{"a", "a", "a", "a", "a", "a", "a", "a"},
			want: make([]string, 8)},
		{name: "a leaver: all its shards, to the members short of their share",
			members: []string{"a", "b~", "c"}, holders: []string{"a", "a", "a", "b", "b", "b", "c", "c"},
			want: []string{"", "", "", "a", "c", "c", "", ""}},
		{name: "a leaver alone: nothing planned",
			members: []string{"a~"}, holders: []string{"a", "a", "a", "a", "a", "a", "a", "a"},
			want: make([]string, 8)},
		{name: "a holder in another session holds nothing: no plan from it",
			members: []string{"a", "b"}, holders: []string{"a/x", "a/x", "a/x", "a/x", "a", "a", "a", "a"},
			want: make([]string, 8)},
		{name: "a balanced ring: nothing planned",
			members: []string{"a", "b"}, holders: []string{"a", "a", "a", "a", "b", "b", "b", "b"},
			want: make([]string, 8)},
	} {
		v := testView(tc.members, tc.holders)
		if got := balanceOf(v, 8).plan(v); !slices.Equal(got, tc.want) {
			t.Errorf("%s: plan %q, want %q", tc.name, got, tc.want)
		}
	}

	v := testView([]string{"a", "b"}, []string{"a", "a", "a", "a", "a", "a", ">b", ">a"})
	to := balanceOf(v, 8).plan(v)
	// a is two over (6 of 4): after the free 6 (kept for b) and 7 (a
	// has no deficit: dealt to b), b is short of 2: a's 4 and 5.
	if got, want := prefetch(v, to, "b"), []int{4, 5, 6}; !slices.Equal(got, want) {
		t.Errorf("b prefetches %v, want %v (planned for it, and released for it)", got, want)
	}
	if got := prefetch(v, to, "a"); !slices.Equal(got, []int{7}) {
		t.Errorf("a prefetches %v, want [7] (released for it)", got)
	}

	// handoffs: shard 4 synced by its taker, 5 not yet, 6 not for a bound.
	const wait = 15 * time.Second
	v = testView([]string{"a", "b"}, []string{"a", "a", "a", "a", "a", "a", "a", "a"})
	m := v.members["b"]
	m.synced = []int{4}
	v.members["b"] = m
	to = balanceOf(v, 8).plan(v)
	since := make([]time.Time, 8)
	for i := range since {
		since[i] = t0
	}
	since[7] = t0.Add(-wait)
	drain, next := handoffs(v, to, []int{4, 5, 6, 7}, handoffClock{since: since, now: t0.Add(time.Second), wait: wait})
	if !slices.Equal(drain, []int{4, 7}) || !next.Equal(t0.Add(wait)) {
		t.Errorf("handoffs drain %v next %v, want [4 7] (synced; bound over) and %v", drain, next, t0.Add(wait))
	}
	if drain, _ := handoffs(v, to, []int{5, 6}, handoffClock{since: since, now: t0.Add(wait), wait: wait}); !slices.Equal(drain, []int{5, 6}) {
		t.Errorf("handoffs at the bound drain %v, want [5 6]", drain)
	}
}

func TestShardsAnnotation(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{{"", nil}, {"3", []int{3}}, {"7,3,3", []int{3, 7}}, {"1,x", nil}, {"8", nil}, {"-1", nil}} {
		if got := parseShards(tc.in, 8); !slices.Equal(got, tc.want) {
			t.Errorf("parseShards(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if got := formatShards([]int{3, 7}); got != "3,7" {
		t.Errorf("formatShards = %q", got)
	}
}

func TestFences(t *testing.T) {
	const ld = 15 * time.Second
	v := testView([]string{"a", "b", "c", "d"}, nil)
	set := func(id string, at time.Time) {
		m := v.members[id]
		m.at = at
		v.members[id] = m
	}
	set("a", t0)                    // self: never
	set("b", t0)                    // due at t0+15s
	set("c", t0.Add(3*time.Second)) // due at t0+18s
	set("d", t0.Add(time.Second))   // due at t0+16s
	for _, tc := range []struct {
		name   string
		now    time.Time
		failed map[string]leaseRef
		due    []string
		next   time.Time
	}{
		{"before any", t0.Add(ld - time.Nanosecond), nil, nil, t0.Add(ld)},
		{"b at LeaseDuration after it was seen", t0.Add(ld), nil, []string{"b"}, t0.Add(ld + time.Second)},
		{"b and d", t0.Add(ld + 2*time.Second), nil, []string{"b", "d"}, t0.Add(ld + 3*time.Second)},
		{"all, sorted", t0.Add(time.Minute), nil, []string{"b", "c", "d"}, time.Time{}},
		{"a fence failed at this version", t0.Add(time.Minute), map[string]leaseRef{"c": v.members["c"].ref}, []string{"b", "d"}, time.Time{}},
		{"a fence failed at another", t0.Add(time.Minute), map[string]leaseRef{"c": {uid: "m-c", rv: "z"}}, []string{"b", "c", "d"}, time.Time{}},
	} {
		due, next := fences(v, "a", ld, tc.now, tc.failed)
		if !slices.Equal(due, tc.due) || !next.Equal(tc.next) {
			t.Errorf("%s: fences %v next %v, want %v next %v", tc.name, due, next, tc.due, tc.next)
		}
	}
}

func TestSessionOverAndAdopt(t *testing.T) {
	v := testView([]string{"a"}, nil)
	if sessionOver(v, "a", true, "s-a") {
		t.Error("our Lease with our session: over")
	}
	if !sessionOver(v, "a", true, "s-old") || !sessionOver(v, "b", true, "s-b") {
		t.Error("our Lease with another session, or gone: not over")
	}
	if sessionOver(v, "b", false, "") {
		t.Error("no session alive: over")
	}
	mine := shardInfo{exists: true, holder: "a", session: "s"}
	theirs := shardInfo{exists: true, holder: "b", session: "t"}
	for _, tc := range []struct {
		name    string
		s       shardInfo
		alive   bool
		state   uint8
		unknown string
		leaving bool
		want    adoptAction
	}{
		{"ours, active", mine, true, shardActive, "", false, adoptKeep},
		{"taken by b while active", theirs, true, shardActive, "", false, adoptFree},
		{"released while draining", shardInfo{exists: true}, true, shardDraining, "", false, adoptFree},
		{"session over", mine, false, shardActive, "", false, adoptFree},
		{"names us, free, answer lost", mine, true, shardFree, "s", false, adoptActive},
		{"names us, free, answer lost, leaving", mine, true, shardFree, "s", true, adoptDraining},
		{"names us, free, no lost answer: a stale version", mine, true, shardFree, "", false, adoptKeep},
		{"names us, lost answer of another session", mine, true, shardFree, "old", false, adoptKeep},
		{"theirs, free", theirs, true, shardFree, "s", false, adoptKeep},
	} {
		if got := adoptShard(tc.s, adopter{self: "a", session: "s", alive: tc.alive, leaving: tc.leaving}, tc.state, tc.unknown); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRelease(t *testing.T) {
	s := shardInfo{exists: true, ref: leaseRef{rv: "7"}, holder: "a", session: "s"}
	for _, tc := range []struct {
		name     string
		s        shardInfo
		session  string
		failedAt string
		want     bool
	}{
		{"ours", s, "s", "", true},
		{"ours, failed at this version", s, "s", "7", false},
		{"ours, failed at an older one", s, "s", "6", true},
		{"another session of ours", s, "t", "", false},
		{"someone else's", shardInfo{exists: true, holder: "b", session: "s"}, "s", "", false},
		{"gone", shardInfo{}, "s", "", false},
	} {
		if got := mayRelease(tc.s, "a", tc.session, tc.failedAt); got != tc.want {
			t.Errorf("%s: mayRelease %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		s    shard
		now  time.Time
		want drainAction
	}{
		{"active", shard{state: shardActive, inflight: 3}, t0, drainNone},
		{"draining, no run", shard{state: shardDraining, graceEnd: t0.Add(time.Second)}, t0, drainRelease},
		{"draining, runs, in grace", shard{state: shardDraining, inflight: 1, graceEnd: t0.Add(time.Second)}, t0, drainWait},
		{"draining, runs, grace over", shard{state: shardDraining, inflight: 1, graceEnd: t0}, t0, drainCancel},
		{"draining, runs, cancelled", shard{state: shardDraining, inflight: 1, graceEnd: t0, cancelled: true}, t0, drainNone},
	} {
		if got := drainStep(tc.s, tc.now); got != tc.want {
			t.Errorf("%s: drainStep %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestKeepWarm(t *testing.T) {
	const ttl = 30 * time.Second
	lapsed := t0.Add(-10 * time.Second)
	for _, tc := range []struct {
		name      string
		s         shardInfo
		lapsedAt  time.Time
		want      bool
		wantUntil time.Time
	}{
		{"never lapsed", shardInfo{exists: true}, time.Time{}, false, time.Time{}},
		{"free", shardInfo{exists: true}, lapsed, true, lapsed.Add(ttl)},
		{"Lease gone", shardInfo{}, lapsed, true, lapsed.Add(ttl)},
		{"our old session still named", shardInfo{exists: true, holder: "a", session: "old"}, lapsed, true, lapsed.Add(ttl)},
		{"held by another member", shardInfo{exists: true, holder: "b", session: "s-b"}, lapsed, false, time.Time{}},
		{"ttl over", shardInfo{exists: true}, t0.Add(-ttl), false, time.Time{}},
	} {
		got, until := keepWarm(tc.s, "a", tc.lapsedAt, t0, ttl)
		if got != tc.want || !until.Equal(tc.wantUntil) {
			t.Errorf("%s: keepWarm %v until %v, want %v until %v", tc.name, got, until, tc.want, tc.wantUntil)
		}
	}
}

func TestMembership(t *testing.T) {
	for _, tc := range []struct {
		alive, leaving    bool
		inflight          int
		wantWrite, wantJn bool
	}{
		{true, false, 3, true, false},
		{true, true, 0, true, false},
		{false, false, 0, true, true},
		{false, false, 1, false, false}, // old runs not returned: no new session
		{false, true, 0, false, false},
	} {
		w, j := membershipWrite(tc.alive, tc.leaving, tc.inflight)
		if w != tc.wantWrite || j != tc.wantJn {
			t.Errorf("membershipWrite(alive %v, leaving %v, inflight %d) = %v, %v; want %v, %v",
				tc.alive, tc.leaving, tc.inflight, w, j, tc.wantWrite, tc.wantJn)
		}
	}

	const rd = 10 * time.Second
	sent := t0
	for _, tc := range []struct {
		name     string
		now      time.Time
		wasAlive bool
		alive    bool
		cur      string
		deadline time.Time
		want     answer
	}{
		{"join answered in time", sent.Add(time.Second), false, false, "", time.Time{}, answerJoined},
		{"join answered at RenewDeadline", sent.Add(rd), false, false, "", time.Time{}, answerIgnored},
		{"renewal of the live session", sent.Add(time.Second), true, true, "s", sent.Add(5 * time.Second), answerRenewed},
		{"renewal after the session's deadline", sent.Add(6 * time.Second), true, true, "s", sent.Add(5 * time.Second), answerIgnored},
		{"renewal of a session that ended", sent.Add(time.Second), true, false, "s", sent.Add(5 * time.Second), answerIgnored},
		{"renewal of a session replaced", sent.Add(time.Second), true, true, "t", sent.Add(5 * time.Second), answerIgnored},
	} {
		if got := acceptAnswer(sentWrite{at: sent, wasAlive: tc.wasAlive, session: "s"}, tc.now, rd, liveSession{alive: tc.alive, session: tc.cur, deadline: tc.deadline}); got != tc.want {
			t.Errorf("%s: acceptAnswer %v, want %v", tc.name, got, tc.want)
		}
	}

	gr := coordinationv1.Resource("leases")
	for _, tc := range []struct {
		err  error
		want memberFate
	}{
		{apierrors.NewNotFound(gr, "x"), memberGone},
		{apierrors.NewConflict(gr, "x", errors.New("rv")), memberRead},
		{apierrors.NewAlreadyExists(gr, "x"), memberRead},
		{errors.New("timeout"), memberUnknown},
		{apierrors.NewForbidden(gr, "x", errors.New("rbac")), memberUnknown},
	} {
		if got := afterMemberError(tc.err); got != tc.want {
			t.Errorf("afterMemberError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	known := leaseRef{uid: "u1", rv: "5"}
	lease := func(uid, rv string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), ResourceVersion: rv}}
	}
	if next, gone := afterMemberGet(known, nil, apierrors.NewNotFound(gr, "x")); gone != true || next.known() {
		t.Errorf("Get NotFound: next %v gone %v, want create, gone", next, gone)
	}
	if next, gone := afterMemberGet(known, nil, errors.New("timeout")); gone || next != known {
		t.Errorf("Get failed: next %v gone %v, want %v, not gone", next, gone, known)
	}
	if next, gone := afterMemberGet(known, lease("u1", "9"), nil); gone || next != (leaseRef{uid: "u1", rv: "9"}) {
		t.Errorf("same Lease, newer version: next %v gone %v, want it, not gone", next, gone)
	}
	re := lease("u1", "9")
	re.UID = "u2"
	if next, gone := afterMemberGet(known, re, nil); !gone || next != (leaseRef{uid: "u2", rv: "9"}) {
		t.Errorf("Lease created again: next %v gone %v, want the new one, gone", next, gone)
	}
	if next, gone := afterMemberGet(leaseRef{}, re, nil); gone || next != (leaseRef{uid: "u2", rv: "9"}) {
		t.Errorf("AlreadyExists of a Lease we did not know: next %v gone %v, want it, not gone", next, gone)
	}

	if got := jitterMax(2*time.Second, 10*time.Second); got != 200*time.Millisecond {
		t.Errorf("jitterMax(2s, 10s) = %v, want 200ms", got)
	}
	if got := jitterMax(4*time.Second, 4500*time.Millisecond); got != 250*time.Millisecond {
		t.Errorf("jitterMax(4s, 4.5s) = %v, want 250ms (half of the margin)", got)
	}
}

// TestReshard checks the decisions of a switch of the ring's count
// (shardcount.go): who starts it, who seals which Lease of the ring's
// count, and when it is complete.
func TestReshard(t *testing.T) {
	// Members "id:count", suffixed '?' for a join, '~' for a leave. The
	// ring's count is 4, in generation 1; its Leases are "" free, "id"
	// held by id, "#g" sealed in generation g, "-" missing.
	build := func(target int, members []string, leases []string, own int) *view {
		v := &view{members: make(map[string]memberInfo), others: make(map[shardKey]shardInfo),
			ringLease: ringInfo{exists: true, ref: leaseRef{uid: "r", rv: "1"}, conf: ringConf{shards: 4, field: FieldUID}, gen: 1, target: target}}
		for _, m := range members {
			spec, count, _ := strings.Cut(m, ":")
			mi := memberInfo{confirmed: true}
			switch count[len(count)-1] {
			case '?':
				count, mi.confirmed = count[:len(count)-1], false
			case '~':
				count, mi.leaving = count[:len(count)-1], true
			}
			mi.conf.shards = map[string]int{"4": 4, "8": 8}[count]
			mi.session = "s-" + spec
			v.members[spec] = mi
		}
		v.shards = make([]shardInfo, own)
		for i, l := range leases {
			s := shardInfo{exists: l != "-", ref: leaseRef{uid: "u", rv: strconv.Itoa(i)}}
			if g, ok := strings.CutPrefix(l, "#"); ok {
				s.sealed, s.sealedGen = true, int(g[0]-'0')
			} else if l != "-" && l != "" {
				s.holder, s.session = l, "s-"+l
			}
			if own == 4 {
				v.shards[i] = s
			} else {
				v.others[shardKey{4, i}] = s
			}
		}
		return v
	}
	free := []string{"", "", "", ""}
	for _, c := range []struct {
		name     string
		target   int
		members  []string
		leases   []string
		self     string
		own      int
		settled  bool
		want     reshardStep
		wantMode ringMode
	}{
		{"no member of the ring's count: start", 0, []string{"b:8"}, free, "b", 8, true, reshardStep{start: true}, modeWaiting},
		{"not settled yet: wait", 0, []string{"b:8"}, free, "b", 8, false, reshardStep{}, modeWaiting},
		{"a member of the ring's count: wait", 0, []string{"a:4", "b:8"}, free, "b", 8, true, reshardStep{}, modeWaiting},
		{"a member of the ring's count that does not count yet: wait", 0, []string{"a:4?", "b:8"}, free, "b", 8, true, reshardStep{}, modeWaiting},
		{"the ring's count leaving: start", 0, []string{"a:4~", "b:8"}, free, "b", 8, true, reshardStep{start: true}, modeWaiting},
		{"a waiting member that does not count: nothing", 0, []string{"b:8?"}, free, "b", 8, true, reshardStep{}, modeWaiting},
		{"the ring's count, no switch: nothing", 0, []string{"a:4"}, free, "a", 4, true, reshardStep{}, modeLive},
		{"switching: seal my part of the free ones", 8, []string{"a:4", "b:8"}, []string{"#1", "a", "", "-"}, "b", 8, true, reshardStep{seal: []int{3}}, modeWaiting},
		{"switching: the holder's part, a held one it releases itself", 8, []string{"a:4", "b:8"}, []string{"#1", "a", "", "-"}, "a", 4, true, reshardStep{seal: []int{2}}, modeClosing},
		{"switching: a seal of an earlier generation is none", 8, []string{"b:8"}, []string{"#0", "#1", "#1", "#1"}, "b", 8, true, reshardStep{seal: []int{0}}, modeWaiting},
		{"switching: every Lease sealed: complete", 8, []string{"b:8"}, []string{"#1", "#1", "#1", "#1"}, "b", 8, true, reshardStep{complete: true}, modeWaiting},
		{"switching, all sealed, not counted: nothing", 8, []string{"b:8?"}, []string{"#1", "#1", "#1", "#1"}, "b", 8, true, reshardStep{}, modeWaiting},
	} {
		v := build(c.target, c.members, c.leases, c.own)
		got := reshard(v, c.self, c.own, c.settled)
		if got.start != c.want.start || got.complete != c.want.complete || !slices.Equal(got.seal, c.want.seal) {
			t.Errorf("%s: reshard = %+v, want %+v", c.name, got, c.want)
		}
		if m := modeOf(v.ringLease, c.own); m != c.wantMode {
			t.Errorf("%s: modeOf = %v, want %v", c.name, m, c.wantMode)
		}
	}
	if m := modeOf(ringInfo{}, 8); m != modeLive {
		t.Errorf("modeOf without the ring's Lease = %v, want live", m)
	}
}
