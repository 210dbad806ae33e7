package sharding

import (
	"os"
	"runtime/debug"
	"strconv"
	"testing"
	"time"
)

// The simulation across changes of the shard count (shardcount.go): faults
// that start replicas of the other count, and rollouts of both of the
// manifests' strategies, to the other count and back. Exclusion is checked
// by hash range across the counts (simUnits), and check (e): once no
// replica of the ring's count runs, the ring switches within
// simSwitchBound.

// simCountScenarios are planned rollouts on a calm ring (no lost answers,
// stalls or partitions): each must switch the count as many times as it
// says, with every check holding from the start.
var simCountScenarios = []struct {
	name     string
	faults   []simFault
	switches int
}{
	{"surge 8 to 16", []simFault{{at: 30 * time.Second, kind: "surge", d: 5 * time.Second, shards: 16}}, 1},
	{"rolling 8 to 16", []simFault{{at: 30 * time.Second, kind: "rolling", d: 6 * time.Second, shards: 16}}, 1},
	{"surge 8 to 8", []simFault{{at: 30 * time.Second, kind: "surge", d: 5 * time.Second}}, 0},
	{"rolling 8 to 8", []simFault{{at: 30 * time.Second, kind: "rolling", d: 6 * time.Second}}, 0},
	// Rolled back before the old ones leave: no switch.
	{"surge 8 to 16, back at once", []simFault{
		{at: 30 * time.Second, kind: "surge", d: 10 * time.Second, shards: 16},
		{at: 35 * time.Second, kind: "surge", d: 5 * time.Second}}, 0},
	// Rolled back while the old count closes, and once switched.
	{"surge 8 to 16, back while closing", []simFault{
		{at: 30 * time.Second, kind: "surge", d: 5 * time.Second, shards: 16},
		{at: 36 * time.Second, kind: "surge", d: 5 * time.Second}}, 2},
	{"surge 8 to 16 and back", []simFault{
		{at: 30 * time.Second, kind: "surge", d: 5 * time.Second, shards: 16},
		{at: 90 * time.Second, kind: "surge", d: 5 * time.Second}}, 2},
	// Rolled back one pod at a time, half-way through.
	{"rolling 8 to 16, back half-way", []simFault{
		{at: 30 * time.Second, kind: "rolling", d: 6 * time.Second, shards: 16},
		{at: 39 * time.Second, kind: "rolling", d: 6 * time.Second}}, 0},
	{"rolling 8 to 16 and back", []simFault{
		{at: 30 * time.Second, kind: "rolling", d: 6 * time.Second, shards: 16},
		{at: 90 * time.Second, kind: "rolling", d: 6 * time.Second}}, 2},
}

// TestSimCount runs each scenario, then seeds of random faults with
// count faults and rollouts drawn among them (SHARDING_SIM_COUNT_SEEDS,
// default 20).
func TestSimCount(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(simGC))
	start, events := time.Now(), 0
	for _, sc := range simCountScenarios {
		for seed := range uint64(2) {
			s := newSim(seed)
			s.calm, s.replay, s.plan = true, true, sc.faults
			if v := s.run(3 * time.Minute); v != "" {
				t.Fatalf("%s, seed %d: %s\nfaults:\n%s", sc.name, seed, v, join(s.trace))
			}
			t.Logf("%s, seed %d: longest gap %v, after its drain %v (%d gaps)", sc.name, seed, s.move.maxGap, s.move.maxAfter, s.move.gaps)
			if s.switches != sc.switches {
				t.Errorf("%s, seed %d: %d switches of the count, want %d\n%s", sc.name, seed, s.switches, sc.switches, s.dump())
			}
			events += s.events
		}
	}
	t.Logf("%d scenarios: %d events in %v", len(simCountScenarios), events, time.Since(start))
	start, events = time.Now(), 0
	seeds, _ := strconv.ParseUint(os.Getenv("SHARDING_SIM_COUNT_SEEDS"), 10, 64)
	if seeds == 0 {
		seeds = 20
	}
	switches := 0
	for _, seed := range simCountSeeds(seeds) {
		s := newSim(seed)
		s.counts = true
		if v := s.run(simRingMinutes); v != "" {
			t.Fatalf("seed %d: %s\nfaults:\n%s", seed, v, join(s.trace))
		}
		switches += s.switches
		events += s.events
	}
	t.Logf("%d seeds with count faults: %d switches of the count, %d events in %v", len(simCountSeeds(seeds)), switches, events, time.Since(start))
}

// simCountPinned are seeds past the default ones that CI runs too: each
// drew a rare interleaving that no planned scenario reaches. Seed 26, under
// the simulation's earlier draws: a replica of the old count joins as a
// switch starts, amid lost answers and stalled watches, and at its third
// tick, closing, finds free Leases of its count not yet sealed (it must
// take none of them; the planned scenarios seal them long before a
// newcomer's third tick). A change to the draws changes what a seed draws:
// find the seed again by running the mutant the comment names over more
// seeds (proofs.md gives the one that catches it now). Seed 37: the same
// mutant, a closing replica that stays live, under the draws since the
// simulation takes a leave between the loop's steps (the default seeds
// no longer catch it).
var simCountPinned = []uint64{26, 37}

// simCountSeeds are the seeds below n, then the pinned ones not among them.
func simCountSeeds(n uint64) []uint64 {
	var seeds []uint64
	for seed := range n {
		seeds = append(seeds, seed)
	}
	for _, seed := range simCountPinned {
		if seed >= n {
			seeds = append(seeds, seed)
		}
	}
	return seeds
}
