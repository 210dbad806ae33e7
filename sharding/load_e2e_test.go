package sharding_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue/sharding"
)

// TestBalanceByLoadEndToEnd runs a ring of real replicas whose shards
// cost very different handler time (shard s's runs take 1/(s+1) of the
// heaviest's), once by count and once by load: by load, the replicas
// measure and publish their shards' work, plan moves from it, and carry
// them out, so that the most loaded replica ends within the band of
// max(mean, heaviest shard), where by count it carries about twice that;
// no key runs on two replicas at once meanwhile.
func TestBalanceByLoadEndToEnd(t *testing.T) {
	for _, by := range []sharding.Balance{sharding.BalanceCount, sharding.BalanceLoad} {
		name := map[sharding.Balance]string{sharding.BalanceCount: "count", sharding.BalanceLoad: "load"}[by]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rg := newRing(t, 16, 320)
				defer rg.stopAll()
				rg.cost = func(s int) time.Duration { return 60 * time.Millisecond / time.Duration(s+1) }
				var mu sync.Mutex
				cs := map[string]*counters{}
				rg.config = func(id string, cfg *sharding.Config) {
					c := &counters{n: map[string]int{}, shards: map[int]string{}}
					mu.Lock()
					cs[id] = c
					mu.Unlock()
					cfg.Metrics = c.metrics()
					cfg.Balance = by
					cfg.Workers = workers
				}
				var ids []string
				for range 4 {
					ids = append(ids, rg.start(false))
				}
				rg.churnEvery(4*time.Minute, 50*time.Millisecond)
				rg.checkExclusive()
				st := rg.members[ids[0]].r.Status()
				worst, moves := time.Duration(0), 0
				for _, m := range st.Members {
					worst = max(worst, m.Load)
				}
				for _, c := range cs {
					n, _ := c.get()
					moves += n["moves/load"]
				}
				top := max(st.Balance.Mean, st.Balance.Heaviest)
				ratio := float64(worst) / float64(top)
				rg.t.Logf("FIGURES by %s: most loaded %v, mean %v, heaviest shard %v: %.2f × max(mean, heaviest); %d moves by load; balance %+v",
					name, worst.Round(time.Millisecond), st.Balance.Mean.Round(time.Millisecond), st.Balance.Heaviest.Round(time.Millisecond), ratio, moves, st.Balance)
				switch {
				case by == sharding.BalanceLoad && (st.Balance.By != "load" || ratio > 1.15*1.1):
					rg.t.Errorf("by load: most loaded %.2f × max(mean, heaviest) (%s), want ≤ 1.15 (and 10%% of noise)", ratio, st.Balance.By)
				case by == sharding.BalanceLoad && moves == 0:
					rg.t.Errorf("by load: no move counted by load")
				case by == sharding.BalanceCount && (st.Balance.By != "count" || moves != 0):
					rg.t.Errorf("by count: balance %q, %d moves by load", st.Balance.By, moves)
				}
			})
		})
	}
}
