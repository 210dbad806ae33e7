package sharding

import (
	"context"
	"math"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestReportRoundTrip(t *testing.T) {
	held := []heldShard{
		{shard: 0, state: stateAdmitted, objects: 12, known: true,
			load: shardLoad{work: 1500 * time.Millisecond, ready: 3, oldest: 250 * time.Millisecond}},
		{shard: 5, state: stateFilling, objects: 0},
		{shard: 7, state: stateDraining, objects: 4, known: true},
	}
	for _, workers := range []int{0, 8} {
		v := reportOf(held, workers)
		got, w := parseReport(v, 8)
		if !reflect.DeepEqual(got, held) || w != workers {
			t.Errorf("parseReport(%q) = %+v, %d; want %+v, %d", v, got, w, held, workers)
		}
	}
	// An older writer's entries (three fields) read with an unknown load;
	// unreadable entries and shards out of range are skipped.
	got, w := parseReport("w:x 1:a:3 2:a:5:x:1:1 9:a:1:1:1:1 3:d:2:10:0:0 4:a:1:1", 8)
	want := []heldShard{{shard: 1, state: stateAdmitted, objects: 3},
		{shard: 3, state: stateDraining, objects: 2, known: true, load: shardLoad{work: 10 * time.Millisecond}}}
	if !reflect.DeepEqual(got, want) || w != 0 {
		t.Errorf("parseReport = %+v, %d; want %+v, 0", got, w, want)
	}
}

// TestReportSize states the report's bound: at most reportEntryMax bytes
// per held shard (every number at its largest), and its size at 1,024
// shards, worst case, under the API server's 256 KiB for all of an
// object's annotations.
func TestReportSize(t *testing.T) {
	const shards = 1024
	held := make([]heldShard, shards)
	for i := range held {
		held[i] = heldShard{shard: i, state: stateAdmitted, objects: math.MaxInt, known: true,
			load: shardLoad{work: math.MaxInt64, ready: math.MaxInt, oldest: math.MaxInt64}}
	}
	v := reportOf(held, math.MaxInt)
	per := (len(v) - len("w:"+strconv.Itoa(math.MaxInt))) / shards
	if per > reportEntryMax {
		t.Errorf("%d bytes per held shard at worst, stated %d", per, reportEntryMax)
	}
	if len(v) > 256<<10 {
		t.Errorf("report of %d shards is %d bytes, over the 256 KiB of an object's annotations", shards, len(v))
	}
	// A realistic one: 1,024 shards of 100 objects, a second of work, 10
	// keys ready for 5 s.
	for i := range held {
		held[i] = heldShard{shard: i, state: stateAdmitted, objects: 100, known: true,
			load: shardLoad{work: time.Second, ready: 10, oldest: 5 * time.Second}}
	}
	t.Logf("FIGURES report: worst %d bytes per shard, %d at 1,024 shards; typical %d bytes at 1,024 shards",
		per, len(v), len(reportOf(held, 8)))
}

func TestWorkMeter(t *testing.T) {
	var w workMeter
	at := time.Unix(1000*int64(loadWindow/time.Second), 0) // a bucket's start
	w.add(time.Second, at)
	w.add(2*time.Second, at.Add(loadBucket))
	if got := w.total(at.Add(loadBucket)); got != 3*time.Second {
		t.Errorf("total %v, want 3s", got)
	}
	// The first bucket leaves the window loadWindow after it began.
	if got := w.total(at.Add(loadWindow)); got != 2*time.Second {
		t.Errorf("total a window later %v, want 2s (the first bucket forgotten)", got)
	}
	if got := w.total(at.Add(loadWindow + loadBucket)); got != 0 {
		t.Errorf("total after both left %v, want 0", got)
	}
	// A bucket reused a window later starts from zero.
	w.add(time.Second, at.Add(loadWindow))
	if got := w.total(at.Add(loadWindow)); got != 3*time.Second {
		t.Errorf("total %v, want 3s (2s, and the reused bucket's 1s)", got)
	}
}

func TestPendingKeys(t *testing.T) {
	var p pendingKeys
	p.init(2)
	at := time.Unix(0, 0)
	p.add("a", 0, at)
	p.add("b", 0, at.Add(time.Second))
	p.add("a", 0, at.Add(2*time.Second)) // coalesced: keeps its first time
	p.add("c", 1, at.Add(time.Second))
	if n, old := p.ready(0, at.Add(3*time.Second)); n != 2 || old != 3*time.Second {
		t.Errorf("shard 0: %d ready, oldest %v; want 2, 3s", n, old)
	}
	p.begun("a")
	if n, old := p.ready(0, at.Add(3*time.Second)); n != 1 || old != 2*time.Second {
		t.Errorf("shard 0 after a began: %d ready, oldest %v; want 1, 2s", n, old)
	}
	p.add("a", 0, at.Add(4*time.Second))
	p.begun("b")
	if n, old := p.ready(0, at.Add(5*time.Second)); n != 1 || old != time.Second {
		t.Errorf("shard 0: %d ready, oldest %v; want 1 (a again), 1s", n, old)
	}
	p.drop(0)
	if n, old := p.ready(0, at.Add(5*time.Second)); n != 0 || old != 0 {
		t.Errorf("shard 0 dropped: %d ready, oldest %v; want 0, 0", n, old)
	}
	if n, _ := p.ready(1, at.Add(5*time.Second)); n != 1 {
		t.Errorf("shard 1: %d ready, want 1 (another shard's drop leaves it)", n)
	}
	// Keys that come and go keep the FIFO within its bound.
	for i := range 10000 {
		k := strconv.Itoa(i)
		p.add(k, 1, at)
		p.begun(k)
	}
	if len(p.fifo[1]) > 2*p.n[1]+64 {
		t.Errorf("FIFO of %d entries for %d keys", len(p.fifo[1]), p.n[1])
	}
}

func TestLedgerMeasured(t *testing.T) {
	var b ledger
	b.init(3)
	at := time.Unix(1000*int64(loadWindow/time.Second), 0)
	for _, s := range []int{0, 1} {
		b.heldFrom(s, at)
	}
	b.heldFrom(2, at.Add(-loadWindow)) // held for longer than the window
	b.seedWork(1, 30*time.Second)
	for _, s := range []int{0, 1, 2} {
		b.work[s].add(time.Second, at.Add(5*time.Second))
	}
	now := at.Add(loadWindow / 2)
	got, _ := b.measured([]int{0, 1}, now)
	// Half a window held: shard 0, unseeded, is scaled up to the window;
	// shard 1 gets half its seed.
	if got[0].work != 2*time.Second || got[1].work != time.Second+15*time.Second {
		t.Errorf("half a window in: %v, %v; want 2s (scaled) and 16s (1s + half the 30s seed)", got[0].work, got[1].work)
	}
	// Held for over a window, at a bucket's start: the buckets cover 50 s
	// of the window, and 1 s in 50 s is 1.2 s a window.
	if got, _ := b.measured([]int{2}, now); got[0].work != 1200*time.Millisecond {
		t.Errorf("held for over a window: %v, want 1.2s (1s over the 50s the buckets cover)", got[0].work)
	}
	// Before loadMeasureMin, an unseeded shard's load is unknown; a seeded
	// one's known.
	early := at.Add(loadMeasureMin - time.Second)
	if got, known := b.measured([]int{0, 1}, early); known[0] || got[0].work != 0 || !known[1] {
		t.Errorf("%v before loadMeasureMin: known %v, work %v; want shard 0 unknown (unseeded), 1 known (seeded)", loadMeasureMin-time.Second, known, got[0].work)
	}
	if _, known := b.measured([]int{0, 1, 2}, now); !known[0] || !known[1] || !known[2] {
		t.Errorf("at loadMeasureMin: known %v, want every shard known", known)
	}
}

// TestPendingCatchUp checks a gained shard's keys: owed (ready) but not
// in the oldest age, fed catchUpWindow at a time as runs begin, made
// event keys by an event, and forgotten with their shard, fed or not.
func TestPendingCatchUp(t *testing.T) {
	var p pendingKeys
	p.init(2)
	at := time.Unix(0, 0)
	all := func(int) shardFeed { return feedKey }
	p.gain(0, at, []string{"a", "b", "c", "d"})
	p.gain(1, at, []string{"e"})
	if n, old := p.ready(0, at.Add(time.Minute)); n != 4 || old != 0 {
		t.Errorf("shard 0 gained: %d ready, oldest %v; want 4, 0 (a catch-up is not in the oldest)", n, old)
	}
	if got := p.take(all); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("first feed %v, want [a b]", got)
	}
	if got := p.take(all); got != nil {
		t.Errorf("feed with %d outstanding: %v, want nothing", p.outstanding, got)
	}
	if !p.begun("a") {
		t.Error("a's run is not told a catch-up")
	}
	if got := p.take(all); !slices.Equal(got, []string{"c"}) {
		t.Errorf("feed after a began %v, want [c]", got)
	}
	// An event for a fed key (b) and one for an unfed key (d): both wait
	// from the event on, and leave the feed.
	p.add("b", 0, at.Add(10*time.Second))
	p.add("d", 0, at.Add(20*time.Second))
	if n, old := p.ready(0, at.Add(30*time.Second)); n != 3 || old != 20*time.Second {
		t.Errorf("shard 0 after the events: %d ready, oldest %v; want 3 (b c d), 20s (b's event)", n, old)
	}
	if p.begun("b") {
		t.Error("b's run, after its event, is told a catch-up")
	}
	if got := p.take(all); !slices.Equal(got, []string{"e"}) {
		t.Errorf("feed %v, want [e] (d is an event key now)", got)
	}
	// A shard not admitted stops the feed where it is.
	p.gain(1, at, []string{"f"})
	p.begun("c")
	if got := p.take(func(s int) shardFeed { return map[bool]shardFeed{true: feedKey, false: feedWait}[s != 1] }); got != nil {
		t.Errorf("feed while shard 1 is not admitted: %v, want nothing", got)
	}
	// Dropped, shard 1's keys go, fed (e) or not (f), and free the window.
	p.drop(1)
	if len(p.at) != 1 || p.outstanding != 0 || p.feed != nil {
		t.Errorf("after shard 1's drop: %d keys pending, %d outstanding, feed %v; want 1 (d), 0, nil", len(p.at), p.outstanding, p.feed)
	}
	p.drop(0)
	if len(p.at) != 0 || p.n[0] != 0 || p.catchUp[0] != 0 {
		t.Errorf("after shard 0's drop: %d keys pending, n %d, catch-up %d; want none", len(p.at), p.n[0], p.catchUp[0])
	}
	// Gained again while its keys are still recorded (fed, an event's):
	// none of them is in the queue, and all are fed again.
	p.gain(0, at, []string{"g", "h"})
	p.take(all)
	p.add("i", 0, at)
	p.gain(0, at.Add(time.Second), []string{"g", "h", "i"})
	if got := append(p.take(all), p.take(all)...); !slices.Equal(got, []string{"g", "h"}) || p.n[0] != 3 {
		t.Errorf("gained again: fed %v, %d pending; want [g h] and 3", got, p.n[0])
	}
	p.begun("g")
	if got := p.take(all); !slices.Equal(got, []string{"i"}) {
		t.Errorf("gained again, then g began: fed %v, want [i] (its event's record was in no queue)", got)
	}
}

// TestDropGoneActive checks that a shard no longer admitted while still
// active (a renewal's answer late, an informer's start) forgets its
// pending keys with the queue's: gained again, every key is fed again.
func TestDropGoneActive(t *testing.T) {
	var b ledger
	b.init(1)
	at := time.Unix(0, 0)
	b.state[0].state, b.filled[0], b.alive, b.deadline = shardActive, true, true, at.Add(time.Hour)
	if got := b.gained(0, at, []string{"a", "b", "c"}); len(got) != catchUpWindow {
		t.Fatalf("first feed %v, want %d keys", got, catchUpWindow)
	}
	b.dropGone([]int{0})
	if n := len(b.pending.at); n != 0 || b.pending.outstanding != 0 {
		t.Errorf("after the drop of an active shard: %d keys pending, %d outstanding; want 0, 0", n, b.pending.outstanding)
	}
}

// TestRefusedWhileHeldIsOwed checks that a key refused while its shard is
// held but not admitted for the moment (here a renewal's answer awaited
// past the deadline) is owed a run, fed once the shard is admitted again:
// the queue has let it go, and no gain would bring it back, the shard
// never having been lost. A key of a shard given up is forgotten (its
// next holder catches it up).
func TestRefusedWhileHeldIsOwed(t *testing.T) {
	var b ledger
	b.init(2)
	at := time.Unix(0, 0)
	for s := range 2 {
		b.state[s].state, b.filled[s] = shardActive, true
	}
	b.alive, b.deadline = true, at.Add(10*time.Second)
	gap := at.Add(11 * time.Second)
	// d, refused while its shard is held, which is given up then, heads
	// the feed: dropped, it must not stop the feed.
	b.event("d", 1, false, true, gap)
	b.state[1].state = shardDraining
	if !b.event("a", 0, false, true, at) {
		t.Fatal("a's event refused while admitted")
	}
	if tk, ok := b.begin(context.Background(), "a", 0, true, gap); ok || tk.feed != nil {
		t.Fatalf("a's run past the deadline: admitted %v, feed %v; want refused, nothing fed", ok, tk.feed)
	}
	if b.event("b", 0, false, true, gap) || b.admit("c", 0, true, gap) {
		t.Fatal("b's event or c's Admit admitted past the deadline")
	}
	b.deadline = at.Add(20 * time.Second) // the renewal's answer came in time
	got := append(b.feed(gap), b.feed(gap)...)
	if len(got) == 0 {
		t.Fatal("nothing fed once admitted again")
	}
	if tk, ok := b.begin(context.Background(), got[0], 0, true, gap); ok {
		got = append(got, tk.feed...)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("fed once admitted again: %v, want [a b c] (d's shard is given up)", got)
	}
	if _, ok := b.pending.at["d"]; ok {
		t.Error("d, of a shard given up, still owed")
	}
}

// TestCatchUpShare checks the catch-up's share while other keys keep the
// queue busy: one key fed beyond the window for every catchUpShare runs
// of other keys begun.
func TestCatchUpShare(t *testing.T) {
	var p pendingKeys
	p.init(1)
	at := time.Unix(0, 0)
	all := func(int) shardFeed { return feedKey }
	keys := make([]string, 10)
	for i := range keys {
		keys[i] = "c" + strconv.Itoa(i)
	}
	p.gain(0, at, keys)
	if got := p.take(all); len(got) != catchUpWindow {
		t.Fatalf("first feed %v, want %d keys", got, catchUpWindow)
	}
	fed := 0
	for i := range 3 * catchUpShare {
		k := "e" + strconv.Itoa(i)
		p.add(k, 0, at)
		p.begun(k)
		fed += len(p.take(all))
	}
	if fed != 3 || p.outstanding != catchUpWindow+3 {
		t.Errorf("%d runs of other keys: %d more catch-up keys fed, %d outstanding; want 3 and %d", 3*catchUpShare, fed, p.outstanding, catchUpWindow+3)
	}
}

// TestLedgerMeasuredRate checks that a steady load reads as itself
// whatever the phase of the meter's current bucket: a shard held for
// long, busy one second in two, reads 30 s a window, not the 25-30 s of
// the buckets' sum (they cover 50-60 s of the window).
func TestLedgerMeasuredRate(t *testing.T) {
	at := time.Unix(1000*int64(loadWindow/time.Second), 0)
	for _, off := range []time.Duration{0, 2500 * time.Millisecond, 5 * time.Second, 9 * time.Second} {
		now := at.Add(off)
		var b ledger
		b.init(1)
		b.heldFrom(0, now.Add(-time.Hour))
		for k := 179; k >= 1; k -= 2 { // in order of time, as runs end
			b.work[0].add(time.Second, now.Add(-time.Duration(k)*time.Second))
		}
		got, _ := b.measured([]int{0}, now)
		if d := got[0].work - 30*time.Second; d < -2*time.Second || d > 2*time.Second {
			t.Errorf("%v into a bucket: %v a window, want 30s ± 2s", off, got[0].work)
		}
	}
}

// TestCatchUpStall checks that a catch-up that stopped moving on (its
// fed keys let go by the queue without a run, or its first key of a
// shard held but not admitted for long) is fed again after catchUpStall:
// its objects' runs come, whatever stopped it.
func TestCatchUpStall(t *testing.T) {
	var b ledger
	b.init(2)
	at := time.Unix(0, 0)
	for s := range 2 {
		b.state[s].state, b.filled[s] = shardActive, true
	}
	b.alive, b.deadline = true, at.Add(time.Hour)
	first := b.gained(0, at, []string{"a", "b", "c"})
	if len(first) != catchUpWindow {
		t.Fatalf("first feed %v", first)
	}
	// The queue lets a and b go; no run begins.
	if got := b.feed(at.Add(catchUpStall)); got != nil {
		t.Errorf("fed %v before catchUpStall passed", got)
	}
	later := at.Add(catchUpStall + time.Second)
	got := b.feed(later)
	// Run what is fed, as workers would: a, b and c all come.
	for i := 0; i < len(got); i++ {
		if tk, ok := b.begin(context.Background(), got[i], 0, true, later); ok {
			got = append(got, tk.feed...)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("run after the stall: %v, want [a b c]", got)
	}
	// A key of a shard held but not filled (d, owed) heads the feed for
	// longer than catchUpStall: the keys behind it (e) are fed anyway.
	var c ledger
	c.init(2)
	c.state[0].state, c.state[1].state, c.filled[1] = shardActive, shardActive, true
	c.alive, c.deadline = true, at.Add(time.Hour)
	c.event("d", 0, false, true, at)
	if got := c.gained(1, at, []string{"e"}); got != nil {
		t.Errorf("fed %v past a shard not admitted", got)
	}
	got = c.feed(at.Add(catchUpStall + time.Second))
	if !slices.Contains(got, "e") {
		t.Errorf("fed after the stall: %v, want e among them", got)
	}
}
