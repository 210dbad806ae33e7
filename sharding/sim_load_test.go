package sharding

import (
	"math"
	"math/rand/v2"
	"os"
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
// checks, that moves by load were made, that the ring ends within the
// band (with the noise's margin), and that its most loaded replica at the
// end is never above that of the same seed balanced by count (the same
// faults), but for the noise's margin.
func TestSimLoad(t *testing.T) {
	seeds := uint64(20) // about 8 s under -race; SHARDING_LOAD_SEEDS for more
	if n, err := strconv.ParseUint(os.Getenv("SHARDING_LOAD_SEEDS"), 10, 64); err == nil && n > 0 {
		seeds = n
	}
	moved := map[string]int{}
	var worst, worstCount float64
	worse := 0
	for seed := range seeds {
		loads := simLoads(seed)
		run := func(b Balance) (*sim, float64) {
			s := newSim(seed + 1000)
			s.balance, s.prefetched = b, true
			s.report = func(rp *simReplica) memberLoad { return s.loadReport(rp, loads) }
			if v := s.run(simRingMinutes); v != "" {
				t.Fatalf("seed %d, balance %d: %s\nfaults:\n%s", seed+1000, b, v, join(s.trace))
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
			if b == BalanceLoad && ratio > loadBand*1.1 {
				t.Errorf("seed %d: most loaded %.2f × max(mean, heaviest) at the end (%d live members, loads %v)", seed+1000, ratio, n, per)
			}
			return s, ratio
		}
		s, ratio := run(BalanceLoad)
		for c, n := range s.moved {
			moved[c] += n
		}
		_, count := run(BalanceCount)
		worst, worstCount = max(worst, ratio), max(worstCount, count)
		if ratio > count {
			worse++
		}
		if ratio > count*1.1 {
			t.Errorf("seed %d: most loaded at the end %.2f × max(mean, heaviest) by load, %.2f by count", seed+1000, ratio, count)
		}
	}
	if moved[causeLoad]+moved[causeJoin] == 0 {
		t.Errorf("no move by load in %d seeds: %v", seeds, moved)
	}
	t.Logf("FIGURES %d seeds: moves begun by cause %v; most loaded at the end, at worst %.2f × max(mean, heaviest) (by count %.2f); worse than by count in %d seeds", seeds, moved, worst, worstCount, worse)
}
