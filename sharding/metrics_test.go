package sharding_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"github.com/go-coalesce/workqueue/sharding"
)

// counters records every counter and per-shard series of one replica's
// Metrics, by name ("gained", "lists/deployments/gain", ...).
type counters struct {
	mu     sync.Mutex
	n      map[string]int
	shards map[int]string // shard → "admitted/<objects>" or "held/<objects>"
}

type counter struct {
	c    *counters
	name string
}

func (c counter) Inc() {
	c.c.mu.Lock()
	c.c.n[c.name]++
	c.c.mu.Unlock()
}

func (c *counters) SetShard(shard int, admitted bool, objects int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shards[shard] = fmt.Sprintf("%v/%d", map[bool]string{true: "admitted", false: "held"}[admitted], objects)
}

func (c *counters) DeleteShard(shard int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.shards[shard]; !ok {
		c.n["deleted a series never set"]++
	}
	delete(c.shards, shard)
}

func (c *counters) metrics() sharding.Metrics {
	return sharding.Metrics{
		Gained:   counter{c, "gained"},
		Released: counter{c, "released"},
		Fences:   counter{c, "fences"},
		Lapses:   func(cause string) sharding.Counter { return counter{c, "lapses/" + cause} },
		Lists: func(resource, cause string) sharding.Counter {
			return counter{c, "lists/" + resource + "/" + cause}
		},
		Moves:    func(cause string) sharding.Counter { return counter{c, "moves/" + cause} },
		PerShard: c,
	}
}

func (c *counters) get() (map[string]int, map[int]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n), maps.Clone(c.shards)
}

// TestMetricsCount follows one replica's counters and per-shard series
// through a start, a join, a kill (its fence) and a lapse: each event is
// counted once, where it happens, and the per-shard series are exactly
// the shards it holds.
func TestMetricsCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rg := newRing(t, 8, 200)
		defer rg.stopAll()
		cs := map[string]*counters{}
		var mu sync.Mutex
		rg.config = func(id string, cfg *sharding.Config) {
			c := &counters{n: map[string]int{}, shards: map[int]string{}}
			mu.Lock()
			cs[id] = c
			mu.Unlock()
			cfg.Metrics = c.metrics()
		}
		a := rg.start(false)
		rg.waitBalanced(time.Minute)
		time.Sleep(3 * retryPeriod) // objects are refreshed once per period
		n, shards := cs[a].get()
		want := map[string]int{"gained": 8, "lists/leases/initial": 1}
		check := func(stage string, n map[string]int, want map[string]int) {
			t.Helper()
			for k, v := range want {
				if n[k] != v {
					t.Errorf("%s: %s = %d, want %d (all: %v)", stage, k, n[k], v, n)
				}
			}
		}
		check("start", n, want)
		if n["lists/deployments/initial"] < 1 || n["lists/deployments/gain"] != 0 {
			t.Errorf("start: lists %v: want initial lists only", n)
		}
		total := 0
		for s, v := range shards {
			var objs int
			if _, err := fmt.Sscanf(v, "admitted/%d", &objs); err != nil {
				t.Errorf("start: shard %d series %q, want admitted", s, v)
			}
			total += objs
		}
		if len(shards) != 8 || total != 200 {
			t.Errorf("start: %d shard series, %d objects; want 8 and 200", len(shards), total)
		}

		b := rg.start(true) // a killed replica: stops without releasing
		rg.waitBalanced(time.Minute)
		n, shards = cs[a].get()
		want["released"] = 4
		check("join", n, want)
		if len(shards) != 4 {
			t.Errorf("join: %d shard series for 4 shards held: %v", len(shards), shards)
		}

		rg.stop(b)
		rg.waitBalanced(leaseDuration + time.Minute)
		time.Sleep(3 * retryPeriod)
		n, shards = cs[a].get()
		want["fences"], want["gained"] = 1, 12
		check("kill", n, want)
		if n["lists/deployments/gain"] < 1 || len(shards) != 8 {
			t.Errorf("kill: lists %v, %d shard series; want gain lists and 8 series", n, len(shards))
		}

		rg.leases.CutOff(a, true)
		time.Sleep(renewDeadline + retryPeriod)
		n, shards = cs[a].get()
		want["lapses/deadline"] = 1
		check("lapse", n, want)
		if len(shards) != 0 || n["lapses/fenced"] != 0 || n["deleted a series never set"] != 0 {
			t.Errorf("lapse: shard series %v, counters %v; want none left, no fenced lapse", shards, n)
		}
		rg.leases.CutOff(a, false)
		rg.waitBalanced(time.Minute)
	})
}

// TestReportAnnotation checks that each membership write carries the
// replica's held shards (AnnotationReport) once it holds them.
func TestReportAnnotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rg := newRing(t, 4, 40)
		defer rg.stopAll()
		rg.start(false)
		rg.waitBalanced(time.Minute)
		time.Sleep(2 * retryPeriod)
		var got string
		for _, l := range rg.leases.Leases() {
			if l.Labels[sharding.LabelRole] == "member" {
				got = l.Annotations[sharding.AnnotationReport]
			}
		}
		fields := strings.Fields(got)
		if len(fields) != 4 {
			t.Fatalf("report %q: want 4 entries", got)
		}
		total := 0
		for i, f := range fields {
			var s, objs int
			var st string
			if _, err := fmt.Sscanf(strings.ReplaceAll(f, ":", " "), "%d %s %d", &s, &st, &objs); err != nil || s != i || st != "a" {
				t.Errorf("entry %q: want shard %d admitted", f, i)
			}
			total += objs
		}
		if total != 40 {
			t.Errorf("report %q counts %d objects, want 40", got, total)
		}
	})
}

// TestUnreachableLogged cuts a replica off from the API server, its
// requests failing at once or never answered (a black hole), and checks
// that it says so at default verbosity within RenewDeadline of the cut,
// and again when its session lapses and when the server answers again.
func TestUnreachableLogged(t *testing.T) {
	for _, mode := range []string{"refused", "blackhole"} {
		t.Run(mode, func(t *testing.T) {
			var logs logLines
			klog.SetOutput(&logs)
			defer klog.SetOutput(io.Discard)
			synctest.Test(t, func(t *testing.T) {
				rg := newRing(t, 4, 20)
				defer rg.stopAll()
				var cut sync.Mutex
				var cutOff bool
				rg.react = func(_ string, cs *fake.Clientset) {
					if mode != "blackhole" {
						return
					}
					cs.PrependReactor("*", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
						cut.Lock()
						off := cutOff
						cut.Unlock()
						if !off {
							return false, nil, nil
						}
						// Never answered: the request ends at its
						// timeout, which the fake does not see.
						time.Sleep(2 * renewDeadline)
						return true, nil, context.DeadlineExceeded
					})
				}
				id := rg.start(false)
				rg.waitBalanced(time.Minute)
				klog.Flush()
				before := len(logs.String())
				start := time.Now()
				if mode == "blackhole" {
					cut.Lock()
					cutOff = true
					cut.Unlock()
				} else {
					rg.leases.CutOff(id, true)
				}
				var at time.Duration
				for at = 0; at <= renewDeadline+time.Second; at += 100 * time.Millisecond {
					klog.Flush()
					if l := logs.String()[before:]; strings.Contains(l, "sharding: a membership write failed") ||
						strings.Contains(l, "sharding: session lapsed") {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if at > renewDeadline {
					t.Fatalf("nothing logged at default verbosity %v after the cut: %q", time.Since(start), logs.String()[before:])
				}
				t.Logf("%s: first error logged %v after the cut", mode, time.Since(start))
				if mode == "refused" && at > maxPeriod {
					t.Errorf("a refused membership write was logged %v after the cut, want within a period (%v)", at, maxPeriod)
				}
				time.Sleep(renewDeadline + retryPeriod)
				klog.Flush()
				if !strings.Contains(logs.String()[before:], "sharding: session lapsed") {
					t.Errorf("no lapse logged: %q", logs.String()[before:])
				}
				if mode == "blackhole" {
					cut.Lock()
					cutOff = false
					cut.Unlock()
				} else {
					rg.leases.CutOff(id, false)
				}
				time.Sleep(3 * renewDeadline)
				klog.Flush()
				if mode == "refused" && !strings.Contains(logs.String()[before:], "the API server answers the membership writes again") {
					t.Errorf("no recovery logged: %q", logs.String()[before:])
				}
				rg.waitBalanced(time.Minute)
			})
		})
	}
}

// TestStatusDeadHolder checks what Status says of a killed replica: its
// shards are still held (nobody may take them before the fence), by a
// holder that is not live, until the fence; then another holds them.
func TestStatusDeadHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rg := newRing(t, 4, 40)
		defer rg.stopAll()
		var a *sharding.Replica
		rg.created = func(id string, r *sharding.Replica) {
			if a == nil {
				a = r
			}
		}
		rg.start(false)
		b := rg.start(true)
		rg.waitBalanced(time.Minute)
		time.Sleep(2 * retryPeriod)
		rg.stop(b)
		time.Sleep(renewDeadline + time.Second) // before the fence, at LeaseDuration
		st := a.Status()
		dead := 0
		for _, s := range st.Shards {
			if !s.Held {
				t.Errorf("shard %d free before the fence: %+v", s.Shard, s)
			}
			if s.Holder == b {
				dead++
				if s.HolderLive {
					t.Errorf("shard %d: holder %s killed %v ago shown live", s.Shard, b, renewDeadline+time.Second)
				}
			} else if !s.HolderLive || !s.Admitted {
				t.Errorf("shard %d: %+v, want admitted by a live holder", s.Shard, s)
			}
		}
		if dead != 2 || len(st.Members) != 2 || st.Members[1].Live {
			t.Errorf("%d shards of the dead holder, members %+v", dead, st.Members)
		}
		rg.waitBalanced(leaseDuration + time.Minute)
		for _, s := range a.Status().Shards {
			if s.Holder != st.Identity || !s.HolderLive {
				t.Errorf("after the fence, shard %d: %+v", s.Shard, s)
			}
		}
	})
}
