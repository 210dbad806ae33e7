package sharding

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// member builds a member whose report says workers, and per held shard
// "work:ready:oldest" in seconds (a "-" entry is a shard without load).
func signalMember(leaving bool, workers int, held ...string) memberInfo {
	m := memberInfo{leaving: leaving, load: memberLoad{workers: workers}}
	for i, h := range held {
		hs := heldShard{shard: i, state: stateAdmitted}
		if h != "-" {
			var w, o float64
			var r int
			if _, err := fmt.Sscanf(h, "%g:%d:%g", &w, &r, &o); err != nil {
				panic(h)
			}
			hs.known = true
			hs.load = shardLoad{work: time.Duration(w * float64(time.Second)), ready: r, oldest: time.Duration(o * float64(time.Second))}
		}
		m.load.held = append(m.load.held, hs)
	}
	return m
}

// withState sets the state of m's i-th held shard.
func withState(m memberInfo, i int, state string) memberInfo {
	m.load.held[i].state = state
	return m
}

func TestSignalOf(t *testing.T) {
	target := scaleTarget{busy: 0.75, oldest: 30 * time.Second, shards: 16}
	// A member with 4 workers at the target does 4 × 60 s × 0.75 = 180 s
	// of work a minute.
	cases := []struct {
		name    string
		members []memberInfo
		ring    int // the ring's Lease's count; 0 none
		want    signal
	}{
		{"no member", nil, 0, signal{desired: 1}},
		{"one idle member", []memberInfo{signalMember(false, 4, "0:0:0")}, 0, signal{replicas: 1, desired: 1}},
		{"two at target: two", []memberInfo{signalMember(false, 4, "90:1:0", "90:0:0"), signalMember(false, 4, "180:2:0.5")}, 0,
			signal{ready: 3, oldest: 500 * time.Millisecond, busy: 0.75, replicas: 2, desired: 2}},
		{"two, one over target: three", []memberInfo{signalMember(false, 4, "240:0:0"), signalMember(false, 4, "180:0:0")}, 0,
			signal{busy: 420.0 / 480, replicas: 2, desired: 3}},
		{"three at a third: one", []memberInfo{signalMember(false, 4, "60:0:0"), signalMember(false, 4, "60:0:0"), signalMember(false, 4, "60:0:0")}, 0,
			signal{busy: 0.25, replicas: 3, desired: 1}},
		// The workers per replica are the mean of those reported.
		{"unequal workers", []memberInfo{signalMember(false, 2, "120:0:0"), signalMember(false, 6, "240:0:0")}, 0,
			signal{busy: 360.0 / 480, replicas: 2, desired: 2}},
		// A leaving member's work counts (it moves to the others); it is
		// not one of the replicas.
		{"leaving member's work", []memberInfo{signalMember(false, 4, "180:0:0"), signalMember(true, 4, "180:0:0")}, 0,
			signal{busy: 0.75, replicas: 1, desired: 2}},
		// A member that reports no load counts as one replica at target.
		{"member without load", []memberInfo{signalMember(false, 4, "180:0:0"), signalMember(false, 0, "-", "-")}, 0,
			signal{busy: 0.75, replicas: 2, desired: 2}},
		{"member without load, the other idle", []memberInfo{signalMember(false, 4, "0:0:0"), signalMember(false, 0, "-")}, 0,
			signal{replicas: 2, desired: 1}},
		// Work from a member that publishes no workers counts in desired,
		// not in busy.
		{"member without workers", []memberInfo{signalMember(false, 4, "90:0:0"), signalMember(false, 0, "270:0:0")}, 0,
			signal{busy: 90.0 / 240, replicas: 2, desired: 2}},
		// No workers reported at all: the work says nothing.
		{"no workers", []memberInfo{signalMember(false, 0, "600:5:3"), signalMember(false, 0, "600:0:0")}, 0,
			signal{ready: 5, oldest: 3 * time.Second, replicas: 2, desired: 2}},
		// The backlog: oldest over the target raises desired in proportion,
		// at most twofold.
		{"behind", []memberInfo{signalMember(false, 4, "180:100:45"), signalMember(false, 4, "180:80:40")}, 0,
			signal{ready: 180, oldest: 45 * time.Second, busy: 0.75, replicas: 2, desired: 3}},
		{"far behind: twice", []memberInfo{signalMember(false, 4, "240:900:300"), signalMember(false, 4, "240:900:250")}, 0,
			signal{ready: 1800, oldest: 300 * time.Second, busy: 1, replicas: 2, desired: 4}},
		{"behind, work asks more", []memberInfo{signalMember(false, 4, "240:50:31"), signalMember(false, 4, "240:0:0"), signalMember(true, 4, "240:0:0")}, 0,
			signal{ready: 50, oldest: 31 * time.Second, busy: 1, replicas: 2, desired: 4}},
		{"at the target age: not behind", []memberInfo{signalMember(false, 4, "180:10:30")}, 0,
			signal{ready: 10, oldest: 30 * time.Second, busy: 0.75, replicas: 1, desired: 1}},
		// Keys waiting for a hand-over (a leaver's shards, a shard being
		// drained or filled) show in the gauges but ask for no replica.
		{"a leaver's keys wait: not behind", []memberInfo{signalMember(false, 4, "180:0:0"), signalMember(true, 4, "0:40:70")}, 0,
			signal{ready: 40, oldest: 70 * time.Second, busy: 180.0 / 480, replicas: 1, desired: 1}},
		{"a draining shard's keys wait: not behind", []memberInfo{withState(signalMember(false, 4, "180:0:0", "0:40:70"), 1, stateDraining)}, 0,
			signal{ready: 40, oldest: 70 * time.Second, busy: 0.75, replicas: 1, desired: 1}},
		{"a filling shard's keys wait: not behind", []memberInfo{withState(signalMember(false, 4, "180:0:0", "0:40:70"), 1, stateFilling)}, 0,
			signal{ready: 40, oldest: 70 * time.Second, busy: 0.75, replicas: 1, desired: 1}},
		{"no workers, behind", []memberInfo{signalMember(false, 0, "0:7:60")}, 0,
			signal{ready: 7, oldest: time.Minute, replicas: 1, desired: 2}},
		// An admitted shard whose holder has no load for it yet (taken
		// without its previous holder's measure) counts at the mean of
		// the known: 360 s over 2 shards, 540 s in all, not 360 s (2
		// replicas). A filling one is not counted: its old holder's
		// entry has the load.
		{"admitted without load: the mean", []memberInfo{signalMember(false, 4, "180:0:0", "-"), signalMember(false, 4, "180:0:0")}, 0,
			signal{busy: 540.0 / 480, replicas: 2, desired: 4}},
		{"filling without load: not counted", []memberInfo{withState(signalMember(false, 4, "180:0:0", "-"), 1, stateFilling), signalMember(false, 4, "180:0:0")}, 0,
			signal{busy: 360.0 / 480, replicas: 2, desired: 2}},
		// Within [1, S], S the ring's count if known.
		{"capped at the replica's count", []memberInfo{signalMember(false, 1, "6000:0:0")}, 0,
			signal{busy: 100, replicas: 1, desired: 16}},
		{"capped at the ring's count", []memberInfo{signalMember(false, 1, "6000:0:0")}, 4,
			signal{busy: 100, replicas: 1, desired: 4}},
		// Shards are whole: the work of 7 replicas at their target on 8
		// shards asks for 8 (7 would leave one with 2/8 of the work); on
		// 16, for 8 too (7 would leave two with 3/16).
		{"whole shards", []memberInfo{signalMember(false, 4, "240:0:0", "180:0:0"), signalMember(false, 4, "240:0:0", "180:0:0"), signalMember(false, 4, "240:0:0", "180:0:0")}, 8,
			signal{busy: 1260.0 / 720, replicas: 3, desired: 8}},
		{"whole shards, 16", []memberInfo{signalMember(false, 4, "240:0:0", "180:0:0"), signalMember(false, 4, "240:0:0", "180:0:0"), signalMember(false, 4, "240:0:0", "180:0:0")}, 0,
			signal{busy: 1260.0 / 720, replicas: 3, desired: 8}},
		{"16 shards, 4 replicas' work", []memberInfo{signalMember(false, 4, "360:0:0"), signalMember(false, 4, "360:0:0")}, 0,
			signal{busy: 720.0 / 480, replicas: 2, desired: 4}},
		{"surplus replicas", []memberInfo{signalMember(false, 0), signalMember(false, 0), signalMember(false, 0)}, 2,
			signal{replicas: 3, desired: 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := &view{members: map[string]memberInfo{}}
			for i, m := range c.members {
				v.members[fmt.Sprintf("m%d", i)] = m
			}
			if c.ring > 0 {
				v.ringLease = ringInfo{exists: true, conf: ringConf{shards: c.ring}}
			}
			got := signalOf(v, target)
			if math.Abs(got.busy-c.want.busy) < 1e-9 {
				got.busy = c.want.busy
			}
			if got != c.want {
				t.Errorf("signalOf = %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestSignalSameOnEveryReplica: the signal is a function of the view, not
// of who computes it: two replicas whose views hold the same members
// (in maps filled in other orders) export the same values.
func TestSignalSameOnEveryReplica(t *testing.T) {
	ms := []memberInfo{signalMember(false, 4, "100:3:2", "50:0:0"), signalMember(false, 8, "300:9:12"), signalMember(true, 4, "20:1:1"), signalMember(false, 0, "-")}
	a, b := &view{members: map[string]memberInfo{}}, &view{members: map[string]memberInfo{}}
	for i := range ms {
		a.members[fmt.Sprint(i)] = ms[i]
		b.members[fmt.Sprint(len(ms)-1-i)] = ms[len(ms)-1-i]
	}
	target := scaleTarget{busy: 0.5, oldest: 10 * time.Second, shards: 8}
	if sa, sb := signalOf(a, target), signalOf(b, target); sa != sb {
		t.Errorf("two views of one ring: %+v and %+v", sa, sb)
	}
}

// TestSignalGauges: the loop's decision sets the four gauges from the
// view; with none set, nothing is computed.
func TestSignalGauges(t *testing.T) {
	g := map[string]*testGauge{}
	for _, n := range []string{"ready", "oldest", "busy", "desired"} {
		g[n] = &testGauge{}
	}
	cfg := &Config{TargetBusy: 0.75, TargetOldest: 30 * time.Second, Metrics: Metrics{RingReady: g["ready"],
		RingOldestReady: g["oldest"], RingBusy: g["busy"], DesiredReplicas: g["desired"]}}
	o := &observer{cfg: cfg}
	v := &view{members: map[string]memberInfo{"a": signalMember(false, 4, "240:12:45.5"), "b": signalMember(false, 4, "240:0:0")}}
	o.signal(v, 16)
	want := map[string]float64{"ready": 12, "oldest": 45.5, "busy": 1, "desired": 4}
	for n, w := range want {
		if got := g[n].v; got != w {
			t.Errorf("gauge %s = %v, want %v", n, got, w)
		}
	}
	(&observer{cfg: &Config{}}).signal(v, 16) // no gauge: no panic, nothing done
}

type testGauge struct{ v float64 }

func (g *testGauge) Set(v float64) { g.v = v }
