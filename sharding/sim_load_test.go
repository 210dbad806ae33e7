package sharding

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strconv"
	"testing"
	"time"
)

// The whole-ring simulation (sim_test.go) with balance by load: each
// replica publishes, in its membership writes, the work of the shards it
// holds (a skewed load per shard, measured with noise), and plans by
// load. Under the same faults as TestSimRing (crashes, partitions, lost
// answers, joins, leaves), every check of the simulation holds: no hash
// range admitted or run by two replicas at once, every range admitted
// once the faults stop, planned moves' gaps, Lease writes; and once the
// faults stop, the ring ends within the band.

// simLoads draws the shards' true work per minute: Zipf (s = 1.1) over a
// random order of the shards.
func simLoads(seed uint64) []time.Duration {
	rnd := rand.New(rand.NewPCG(seed, 0x10ad))
	out := make([]time.Duration, simShards)
	for k, i := range rnd.Perm(simShards) {
		out[i] = time.Duration(float64(20*time.Second) / math.Pow(float64(k+1), 1.1))
	}
	return out
}

// loadReport is rp's AnnotationReport as a membership write carries it:
// the shards it holds, with their work (load) measured with 10% noise
// (drawn apart from the seed's other draws, so that a fault dropped does
// not change them).
func (s *sim) loadReport(rp *simReplica, load []time.Duration) memberLoad {
	var l memberLoad
	active, draining := rp.led.states()
	rnd := rand.New(rand.NewPCG(s.seed, uint64(s.now.UnixNano())))
	add := func(i int, state string) {
		w := float64(load[i]) * (1 + 0.1*(2*rnd.Float64()-1))
		l.held = append(l.held, heldShard{shard: i, state: state, known: true, load: shardLoad{work: time.Duration(w)}})
	}
	for _, i := range active {
		add(i, stateAdmitted)
	}
	for _, i := range draining {
		add(i, stateDraining)
	}
	return l
}

// TestSimLoad runs seeds of the whole-ring simulation with balance by
// load (TestSimRing's faults), and checks, besides the simulation's own
// checks, that moves by load were made, and that the ring ends within the
// band (with the noise's margin) or no worse than by count.
func TestSimLoad(t *testing.T) {
	seeds := uint64(20) // about 5 s under -race; SHARDING_LOAD_SEEDS for more
	if n, err := strconv.ParseUint(os.Getenv("SHARDING_LOAD_SEEDS"), 10, 64); err == nil && n > 0 {
		seeds = n
	}
	moved := map[string]int{}
	var worst float64
	for seed := range seeds {
		s := newSim(seed + 1000)
		s.balance, s.prefetched = BalanceLoad, true
		loads := simLoads(seed)
		s.report = func(rp *simReplica) memberLoad { return s.loadReport(rp, loads) }
		if v := s.run(simRingMinutes); v != "" {
			t.Fatalf("seed %d: %s\nfaults:\n%s", seed+1000, v, join(s.trace))
		}
		for c, n := range s.moved {
			moved[c] += n
		}
		// The ring at the end: the loads of the live members.
		per := map[string]time.Duration{}
		var total, heaviest time.Duration
		for i, l := range loads {
			total += l
			heaviest = max(heaviest, l)
			if rec, ok := s.store.recs[simShardName(simShards, i)]; ok && rec.p.s.holder != "" {
				per[rec.p.s.holder] += l
			}
		}
		n := 0
		for _, id := range s.ids() {
			if rp := s.reps[id]; !rp.dead && !rp.leaving && rp.led.alive {
				n++
			}
		}
		top := time.Duration(0)
		for _, l := range per {
			top = max(top, l)
		}
		ratio := float64(top) / float64(max(total/time.Duration(max(n, 1)), heaviest))
		worst = max(worst, ratio)
		if ratio > loadBand*1.1 {
			t.Errorf("seed %d: most loaded %.2f × max(mean, heaviest) at the end (%d live members, loads %v)", seed+1000, ratio, n, per)
		}
	}
	if moved[causeLoad]+moved[causeJoin] == 0 {
		t.Errorf("no move by load in %d seeds: %v", seeds, moved)
	}
	t.Logf("FIGURES %d seeds: moves begun by cause %v; most loaded at the end, at worst %.2f × max(mean, heaviest)", seeds, moved, worst)
}

// TestSimLoadShare checks the share budget (loadShareMax) on the whole
// ring: 3 replicas started together on a calm ring, balancing the Zipf
// loads of simLoads by load, the shards reported with 25 objects (the
// first four) or 150 (the others), so that the budget, 70 objects a
// window, admits two moves of small shards and no other two. Every shard
// Lease that comes to name a replica after another held or released it
// (a move, not a first acquisition) is recorded at the simulation's
// time; no span shorter than loadWindow may hold two or more moves that
// carry more (the window's first move is always admitted). The span
// checked is loadWindow less 4% of the run: the replicas' clocks drift
// apart by up to 2 × simDrift, and the budget reads the writers' clocks.
func TestSimLoadShare(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(simGC))
	const run = 4 * time.Minute
	objects := func(i int) int {
		if i < 4 {
			return 25
		}
		return 150
	}
	total := 0
	for i := range simShards {
		total += objects(i)
	}
	limit := int(loadShareMax * float64(total))
	span := loadWindow - time.Duration(4*simDrift*float64(run))
	type move struct {
		at    time.Time
		shard int
	}
	var all int
	for seed := range uint64(6) {
		s := newSim(seed)
		s.calm, s.replay, s.together = true, true, true
		s.balance, s.prefetched = BalanceLoad, true
		loads := simLoads(seed)
		s.report = func(rp *simReplica) memberLoad {
			l := s.loadReport(rp, loads)
			for k, h := range l.held {
				l.held[k].objects = objects(h.shard)
			}
			return l
		}
		var moves []move
		last := map[int]string{} // each shard Lease's holder as last written
		seen := 0
		s.hook = func(simEvent) {
			for ; seen < len(s.store.log); seen++ {
				c := s.store.log[seen]
				if c.deleted || c.p.shard < 0 || c.p.count != simShards {
					continue
				}
				was, ok := last[c.p.shard]
				if ok && c.p.s.holder != "" && c.p.s.holder != was {
					moves = append(moves, move{s.now, c.p.shard})
				}
				last[c.p.shard] = c.p.s.holder
			}
		}
		if v := s.run(run); v != "" {
			t.Fatalf("seed %d: %s\nfaults:\n%s", seed, v, join(s.trace))
		}
		all += len(moves)
		var desc []string
		for _, m := range moves {
			desc = append(desc, fmt.Sprintf("+%v shard %d (%d objects)", m.at.Sub(t0).Round(time.Second), m.shard, objects(m.shard)))
		}
		for k, m := range moves {
			n, sum := 0, 0
			for _, o := range moves[:k+1] {
				if m.at.Sub(o.at) < span {
					n, sum = n+1, sum+objects(o.shard)
				}
			}
			if n > 1 && sum > limit {
				t.Errorf("seed %d: %d moves of %d objects within %v up to +%v, over the share budget of %d objects a window; moves %v",
					seed, n, sum, span, m.at.Sub(t0).Round(time.Second), limit, desc)
				break
			}
		}
		t.Logf("seed %d: moves %v", seed, desc)
	}
	if all < 6 {
		t.Errorf("%d moves in all the runs: too few to check the budget", all)
	}
}

// offsets returns ts as offsets from t0, rounded to the second.
func offsets(ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for k, at := range ts {
		out[k] = at.Sub(t0).Round(time.Second)
	}
	return out
}
