package sharding

import (
	"fmt"
	"runtime/debug"
	"slices"
	"testing"
	"time"
)

// Replicas started together, on a calm ring (no lost answers, stalls or
// partitions), as a Deployment's pods start: at one instant, each
// replica's clock at its own rate. Invariant 4 asks that they be cheap:
//
// (f) each shard is dealt out once: in a calm ring that nobody joins or
// leaves after the start, the shard Leases come to name a replica's
// session S times in all (a newcomer that took shards before the others
// it started with counted would hand them on, a second acquisition each);
//
// (g) each replica renews between RetryPeriod and RetryPeriod plus a
// tenth of it (Config's bound on the jitter) after its previous renewal,
// on its clock, and not every time after the same period: the jitter
// keeps replicas started together from renewing at one instant period
// after period (a burst of writes on the API server each RetryPeriod),
// and stays within the bound that the write budget and the RenewDeadline
// margin assume.

// simStartRings are the rings started together: how many replicas.
var simStartRings = []int{3, 5, 8}

// simStartSeeds is how many seeds each ring runs.
const simStartSeeds = 10

// TestSimStart runs each ring, seeds 0 to simStartSeeds−1, for a minute,
// with checks (f) and (g) on top of the simulation's.
func TestSimStart(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(simGC))
	// Config's stated bound, written out (jitterMax is what is tested).
	maxPeriod := simRetry + min(simRetry/10, (simRenew-simRetry)/2)
	for _, n := range simStartRings {
		for seed := range uint64(simStartSeeds) {
			var plan []simFault
			for k := 3; k < n; k++ {
				plan = append(plan, simFault{kind: "join", id: fmt.Sprintf("r%02d", k)})
			}
			s := newSim(seed)
			s.calm, s.replay, s.plan, s.together = true, true, plan, true
			if v := s.run(time.Minute); v != "" {
				t.Fatalf("%d replicas, seed %d: %s\nfaults:\n%s", n, seed, v, join(s.trace))
			}
			if s.acquired != simShards {
				t.Errorf("%d replicas started together, seed %d: check (f): %d shard acquisitions, want one per shard (%d)\n%s",
					n, seed, s.acquired, simShards, s.dump())
			}
			for _, rp := range s.list {
				if err := checkPeriods(rp.renewedAt, simRetry, maxPeriod); err != "" {
					t.Errorf("%d replicas, seed %d: check (g): %s %s", n, seed, rp.id, err)
				}
			}
		}
	}
}

// checkPeriods checks the times of a replica's renewals, on its clock:
// every period within [lo, hi] (to the simulation's rounding of clocks),
// and not all the same.
func checkPeriods(at []time.Time, lo, hi time.Duration) string {
	const round = time.Microsecond
	var ds []time.Duration
	for k := 1; k < len(at); k++ {
		d := at[k].Sub(at[k-1])
		if d < lo-round || d > hi+round {
			return fmt.Sprintf("renewed %v after its previous renewal, want %v to %v", d, lo, hi)
		}
		ds = append(ds, d.Round(round))
	}
	if len(ds) < 10 {
		return fmt.Sprintf("renewed %d times in a calm minute", len(at))
	}
	slices.Sort(ds)
	if ds[0] == ds[len(ds)-1] {
		return fmt.Sprintf("renewed every %v, %d times: no jitter, replicas started together renew in lockstep", ds[0], len(ds))
	}
	return ""
}

// simRingScenarios are planned faults on a calm ring that draw an
// interleaving the random seeds draw too rarely to catch its mutant.
var simRingScenarios = []struct {
	name   string
	faults []simFault
}{
	// A replica whose writes land with their answers lost (refusals and
	// reads answered) for longer than it takes to settle: its session
	// lapses, and it reads its Lease back and writes a join every few
	// periods, none of which it learns of, so none is confirmed. Its
	// shards must go to the others (completeness); its joins counted in
	// the shares, it would be dealt a share it cannot take.
	{"answers lost for 70 s", []simFault{{at: 30 * time.Second, kind: "deaf", id: "r01", d: 70 * time.Second}}},
	// A leaver's releases land with their answers lost, its watch behind:
	// it tries them again at the version its view shows (refused), and
	// once the view shows the Leases moved on, it must drop them (adopt)
	// and finish its leave (check (i)).
	{"a leaver's releases unanswered, its watch behind", []simFault{
		{at: 30 * time.Second, kind: "leave", id: "r02"},
		{at: 44500 * time.Millisecond, kind: "deaf", id: "r02", d: 3 * time.Second},
		{at: 44500 * time.Millisecond, kind: "stall", id: "r02", d: 6 * time.Second}}},
}

// TestSimScenarios runs each of simRingScenarios, seeds 0 and 1, for 3
// minutes, with every check of the simulation from the start but (c),
// the planned moves' gap: a lapse's moves are not planned.
func TestSimScenarios(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(simGC))
	for _, sc := range simRingScenarios {
		for seed := range uint64(2) {
			s := newSim(seed)
			s.calm, s.replay, s.plan, s.unplanned = true, true, sc.faults, true
			if v := s.run(3 * time.Minute); v != "" {
				t.Fatalf("%s, seed %d: %s\nfaults:\n%s", sc.name, seed, v, join(s.trace))
			}
		}
	}
}
