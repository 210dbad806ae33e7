package exclusion_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/exclusion"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOverlapsAgreesWithShardOf checks Overlaps against its definition:
// two shards overlap if and only if some hash lies in both, as
// sharding.ShardOf places hashes. Hashes are drawn at the edges of every
// shard of the largest count (where an off-by-one would show) and at
// random; every pair of shards of counts 1 to 64 is compared.
func TestOverlapsAgreesWithShardOf(t *testing.T) {
	counts := []int{1, 2, 4, 8, 16, 64}
	var hashes []uint64
	for i := range uint64(64) {
		first := i << 58
		hashes = append(hashes, first, first+1, first+1<<58-1, first+1<<57)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		hashes = append(hashes, rng.Uint64())
	}
	for _, c1 := range counts {
		for _, c2 := range counts {
			for i := range c1 {
				for j := range c2 {
					a, b := exclusion.Shard{Index: i, Count: c1}, exclusion.Shard{Index: j, Count: c2}
					share := false
					for _, h := range hashes {
						if sharding.ShardOf(h, c1) == i && sharding.ShardOf(h, c2) == j {
							share = true
							break
						}
					}
					if got := a.Overlaps(b); got != share {
						t.Fatalf("%v.Overlaps(%v) = %v; a hash lies in both: %v", a, b, got, share)
					}
				}
			}
		}
	}
}

func TestOverlapsInvalid(t *testing.T) {
	whole := exclusion.Shard{Index: 0, Count: 1}
	for _, s := range []exclusion.Shard{{}, {Index: 0, Count: 3}, {Index: 4, Count: 4}, {Index: -1, Count: 4}} {
		if s.Overlaps(whole) || whole.Overlaps(s) {
			t.Errorf("%v is no range: it overlaps nothing", s)
		}
	}
}

func TestTracker(t *testing.T) {
	s := func(i, n int) exclusion.Shard { return exclusion.Shard{Index: i, Count: n} }
	type step struct {
		exit         bool
		replica, key string
		shard        exclusion.Shard
		violation    string // a substring of the violation this step records, or ""
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"disjoint shards run together", []step{
			{false, "a", "k1", s(0, 4), ""},
			{false, "b", "k2", s(1, 4), ""},
			{false, "a", "k3", s(0, 4), ""}, // a replica runs many keys of its shard
			{true, "a", "k1", s(0, 4), ""},
			{true, "b", "k2", s(1, 4), ""},
			{true, "a", "k3", s(0, 4), ""},
		}},
		{"one shard, one after the other", []step{
			{false, "a", "k1", s(2, 4), ""},
			{true, "a", "k1", s(2, 4), ""},
			{false, "b", "k2", s(2, 4), ""},
			{true, "b", "k2", s(2, 4), ""},
		}},
		{"one key on two replicas", []step{
			{false, "a", "k", s(2, 4), ""},
			{false, "b", "k", s(2, 4), "b entered k (shard 2/4) while [a runs it (shard 2/4)]"},
			{true, "a", "k", s(2, 4), ""},
			{true, "b", "k", s(2, 4), ""},
		}},
		{"one key on two replicas, shard unknown", []step{
			{false, "a", "k", exclusion.Shard{}, ""},
			{false, "b", "k", exclusion.Shard{}, "b entered k (shard 0/0) while [a runs it"},
		}},
		{"two keys of one shard on two replicas", []step{
			{false, "a", "k1", s(2, 4), ""},
			{false, "b", "k2", s(2, 4), "b entered k2 (shard 2/4) while [a runs k1 of shard 2/4]"},
		}},
		{"across counts: a half of the old count's shard", []step{
			{false, "a", "k1", s(1, 4), ""},
			{false, "b", "k2", s(3, 8), "b entered k2 (shard 3/8) while [a runs k1 of shard 1/4]"},
		}},
		{"across counts: the old count's shard over the new one's", []step{
			{false, "b", "k2", s(2, 8), ""},
			{false, "a", "k1", s(1, 4), "a entered k1 (shard 1/4) while [b runs k2 of shard 2/8]"},
		}},
		{"across counts: disjoint", []step{
			{false, "a", "k1", s(1, 4), ""},
			{false, "b", "k2", s(4, 8), ""},
			{false, "c", "k3", s(1, 8), ""},
		}},
		{"one replica, two counts (a replica never has two, but the tracker does not care)", []step{
			{false, "a", "k1", s(1, 4), ""},
			{false, "a", "k2", s(3, 8), ""},
		}},
		{"a replica enters a key it runs", []step{
			{false, "a", "k", s(0, 2), ""},
			{false, "a", "k", s(0, 2), "a entered k (shard 0/2) while [a already runs it]"},
		}},
		{"a mismatched exit: another replica's run", []step{
			{false, "a", "k", s(0, 2), ""},
			{true, "b", "k", s(0, 2), "b left k, which it was not running"},
		}},
		{"a mismatched exit: nobody's run", []step{
			{true, "a", "k", s(0, 2), "a left k, which it was not running"},
		}},
		{"an exit twice", []step{
			{false, "a", "k", s(0, 2), ""},
			{true, "a", "k", s(0, 2), ""},
			{true, "a", "k", s(0, 2), "a left k, which it was not running"},
		}},
		{"no shard", []step{
			{false, "a", "k", s(0, 3), "a entered k in shard 0/3, which is no shard"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr exclusion.Tracker // the zero value is ready
			enters := 0
			for i, st := range tc.steps {
				before := len(tr.Violations())
				if st.exit {
					tr.Exit(st.replica, st.key)
				} else {
					tr.Enter(st.replica, st.key, st.shard)
					enters++
				}
				v := tr.Violations()
				if st.violation == "" {
					if len(v) != before {
						t.Fatalf("step %d (%+v) records no violation, got %q", i, st, v[before:])
					}
					continue
				}
				if len(v) != before+1 || !strings.Contains(v[before], st.violation) {
					t.Fatalf("step %d (%+v) records one violation with %q, got %q", i, st, st.violation, v[before:])
				}
			}
			if got := tr.Runs(); got != enters {
				t.Errorf("Runs() = %d, want the %d entered", got, enters)
			}
		})
	}
}

// TestTrackerConcurrent runs replicas that each take a disjoint set of
// shards, over two counts, from many goroutines: no violation, and every
// run accounted for. Under -race it also checks the locking.
func TestTrackerConcurrent(t *testing.T) {
	var tr exclusion.Tracker
	var wg sync.WaitGroup
	// Replica r runs keys of shard r of 4 and, as if after a switch, of
	// shards 2r+0 and 2r+1 of 8 — inside its own range, never another's.
	for r := range 4 {
		for w := range 4 {
			wg.Go(func() {
				id := fmt.Sprintf("r%d", r)
				for i := range 200 {
					key := fmt.Sprintf("%s-w%d-%d", id, w, i)
					s := exclusion.Shard{Index: r, Count: 4}
					if i%2 == 1 {
						s = exclusion.Shard{Index: 2*r + i%4/2, Count: 8}
					}
					tr.Enter(id, key, s)
					tr.Exit(id, key)
				}
			})
		}
	}
	wg.Wait()
	if v := tr.Violations(); len(v) > 0 {
		t.Fatalf("replicas in disjoint ranges: %d violations, the first %q", len(v), v[0])
	}
	if tr.Runs() != 4*4*200 || tr.InFlight() != 0 {
		t.Fatalf("Runs() = %d, InFlight() = %d; want %d and 0", tr.Runs(), tr.InFlight(), 4*4*200)
	}

	// And one run of r1 in r0's range, while r0 runs: caught.
	tr.Enter("r0", "x", exclusion.Shard{Index: 0, Count: 4})
	tr.Enter("r1", "y", exclusion.Shard{Index: 1, Count: 8})
	if v := tr.Violations(); len(v) != 1 || !strings.Contains(v[0], "r1 entered y (shard 1/8) while [r0 runs x of shard 0/4]") {
		t.Fatalf("a run in another replica's range: want one violation, got %q", v)
	}
}
