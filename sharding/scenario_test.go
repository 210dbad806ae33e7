package sharding_test

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue/sharding/fakeleases"
)

// sizes are the rings every scenario runs on: with SHARDING_SCALE=1 all
// six; otherwise three of them, which still cover each replica count and
// each shard count, so that CI's run stays short (the other three take
// about as long again under -race, and find what these find).
var sizes = scenarioSizes()

func scenarioSizes() []struct{ replicas, shards int } {
	all := []struct{ replicas, shards int }{
		{3, 16}, {3, 256}, {5, 16}, {5, 256}, {20, 16}, {20, 256},
	}
	if os.Getenv("SHARDING_SCALE") != "" {
		return all
	}
	return []struct{ replicas, shards int }{all[0], all[3], all[4]}
}

const objects = 2000

// TestStartTogether starts every replica at once.
func TestStartTogether(t *testing.T) {
	for _, sz := range sizes {
		t.Run(fmt.Sprintf("N=%d/S=%d", sz.replicas, sz.shards), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rg := newRing(t, sz.shards, objects)
				defer rg.stopAll()
				heap0 := heapInUse()
				for range sz.replicas {
					rg.start(false)
				}
				settle := rg.waitBalanced(leaseDuration + 4*retryPeriod)
				// Replicas started together see each other before they
				// take shards, so each shard is dealt out once.
				if a := rg.acquired(); a != sz.shards {
					t.Errorf("invariant 3: %d shard acquisitions while %d replicas started together, want one per shard (%d)", a, sz.replicas, sz.shards)
				}
				took := rg.quiet()
				wps := rg.writesPerSecond()
				spread := checkJitter(t, rg)
				rg.update(200)
				took2 := rg.quiet()
				rg.checkExclusive()
				perReplica := (heapInUse() - heap0) / uint64(sz.replicas)
				t.Logf("FIGURES start: balanced after %v; quiet ring: %.2f Lease writes/s (%d replicas / RetryPeriod %v = %.2f), last renewals spread over %v; 200 updates reconciled in %v (last after quiet start %v); %d runs; heap per replica %d KiB (sharded cache of %d/%d objects, queue, sharding state)",
					settle, wps, sz.replicas, retryPeriod, float64(sz.replicas)/retryPeriod.Seconds(), spread, took2, took, rg.tr.Runs(), perReplica>>10, objects, sz.replicas)
			})
		})
	}
}

// checkJitter checks the loop's period in a quiet ring started at once:
// every replica renews between RetryPeriod and 1.1×RetryPeriod after its
// previous renewal, and the replicas no longer renew in lockstep. It
// returns the spread of their last renewals.
func checkJitter(t *testing.T, rg *ring) time.Duration {
	var first, last time.Time
	for _, id := range rg.ids() {
		at := rg.renewedAt(id)
		for i := max(1, len(at)-10); i < len(at); i++ {
			if d := at[i].Sub(at[i-1]); d < retryPeriod || d > maxPeriod {
				t.Errorf("%s renewed %v after its previous renewal, want %v to %v", id, d, retryPeriod, maxPeriod)
				break
			}
		}
		if len(at) == 0 {
			continue
		}
		if l := at[len(at)-1]; first.IsZero() || l.Before(first) {
			first = l
		}
		if l := at[len(at)-1]; l.After(last) {
			last = l
		}
	}
	if len(rg.ids()) > 1 && !last.After(first) {
		t.Errorf("replicas started together still renew at the same instant (%v)", last.Format("15:04:05.000"))
	}
	return last.Sub(first)
}

// forSizes runs f for each ring size in a synctest bubble.
func forSizes(t *testing.T, f func(t *testing.T, n, s int)) {
	for _, sz := range sizes {
		t.Run(fmt.Sprintf("N=%d/S=%d", sz.replicas, sz.shards), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { f(t, sz.replicas, sz.shards) })
		})
	}
}

// TestJoinOneByOne adds replicas one at a time while objects change, and
// checks that each join moves at most ⌈S/N⌉ + 1 shards (invariant 3).
func TestJoinOneByOne(t *testing.T) {
	forSizes(t, func(t *testing.T, n, s int) {
		rg := newRing(t, s, objects)
		defer rg.stopAll()
		rg.start(false)
		rg.waitBalanced(leaseDuration)
		maxAcq, maxSettle := 0, time.Duration(0)
		var moves []string
		for k := 2; k <= n; k++ {
			before, acq := rg.owner(), rg.acquired()
			start := time.Now()
			rg.start(false)
			go rg.churn(3 * retryPeriod)
			rg.waitBalanced(leaseDuration + gracePeriod + 4*retryPeriod)
			maxSettle = max(maxSettle, time.Since(start))
			m, a := moved(before, rg.owner()), rg.acquired()-acq
			if limit := ceilDiv(s, k) + 1; m > limit || a > limit {
				t.Errorf("invariant 3: join of replica %d moved %d shards (%d acquisitions), limit %d", k, m, a, limit)
			}
			maxAcq = max(maxAcq, a)
			moves = append(moves, fmt.Sprintf("%d/%d", m, ceilDiv(s, k)+1))
			time.Sleep(3 * retryPeriod) // let churn end
		}
		took := rg.quiet()
		rg.checkExclusive()
		t.Logf("FIGURES join: shards moved by joins 2..N (moved/limit ⌈S/N⌉+1): %v; acquisitions per join max %d; balanced at most %v after a join; quiet: all reconciled after %v",
			moves, maxAcq, maxSettle, took)
	})
}

// TestGracefulLeave stops replicas gracefully one after the other: their
// shards are handed over without waiting for a Lease to expire.
func TestGracefulLeave(t *testing.T) {
	forSizes(t, func(t *testing.T, n, s int) {
		rg := newRing(t, s, objects)
		defer rg.stopAll()
		for range n {
			rg.start(false)
		}
		rg.waitBalanced(leaseDuration)
		leaves := min(n-1, 3)
		maxMoved, maxTake := 0, time.Duration(0)
		for range leaves {
			before := rg.owner()
			ids := rg.ids()
			victim := ids[rg.rng.IntN(len(ids))]
			go rg.churn(2 * retryPeriod)
			rg.stop(victim)
			take := rg.waitCovered(leaseDuration)
			rg.waitBalanced(leaseDuration)
			m := moved(before, rg.owner())
			if limit := ceilDiv(s, len(ids)) + 1; m > limit {
				t.Errorf("invariant 3: leave moved %d shards, limit %d", m, limit)
			}
			maxMoved, maxTake = max(maxMoved, m), max(maxTake, take)
			time.Sleep(2 * retryPeriod)
		}
		took := rg.quiet()
		rg.checkExclusive()
		t.Logf("FIGURES leave: shards moved per graceful leave max %d; all shards held again at most %v after the leave began (bound RetryPeriod + drain); quiet: all reconciled after %v",
			maxMoved, maxTake, took)
	})
}

// TestKill kills replicas (no release): the others take their shards once
// the membership Lease has not changed for LeaseDuration.
func TestKill(t *testing.T) {
	forSizes(t, func(t *testing.T, n, s int) {
		rg := newRing(t, s, objects)
		defer rg.stopAll()
		var victims []string
		for i := range n {
			id := rg.start(i < 2 && n > 2) // the first two can be killed
			if i < 2 && n > 2 {
				victims = append(victims, id)
			}
		}
		rg.waitBalanced(leaseDuration)
		time.Sleep(5 * retryPeriod)
		var takes []time.Duration
		for _, victim := range victims {
			go rg.churn(2 * retryPeriod)
			rg.stop(victim)
			take := rg.waitCovered(leaseDuration + 3*retryPeriod)
			if bound := leaseDuration + 2*maxPeriod; take > bound {
				t.Errorf("invariant 2: a killed replica's shards were taken over after %v, bound %v", take, bound)
			}
			takes = append(takes, take)
			rg.waitBalanced(leaseDuration)
		}
		took := rg.quiet()
		rg.checkExclusive()
		t.Logf("FIGURES kill: takeover %v (bound LeaseDuration+2×1.1×RetryPeriod = %v); quiet: all reconciled after %v",
			takes, leaseDuration+2*maxPeriod, took)
	})
}

// TestCutOff makes a replica's Lease writes fail, then heals it: it stops
// its handlers within RenewDeadline, the others take its shards after
// LeaseDuration, and it rejoins with a new session.
func TestCutOff(t *testing.T) {
	forSizes(t, func(t *testing.T, n, s int) {
		rg := newRing(t, s, objects)
		defer rg.stopAll()
		for range n {
			rg.start(false)
		}
		rg.waitBalanced(leaseDuration)
		victim := rg.ids()[0]
		cut := time.Now()
		rg.leases.CutOff(victim, true)
		go rg.churn(leaseDuration)
		// The victim renewed at most RetryPeriod before the cut; it must
		// hold nothing once RenewDeadline has passed since.
		time.Sleep(renewDeadline + 50*time.Millisecond)
		rg.mu.Lock()
		held := rg.members[victim].r.Shards()
		rg.mu.Unlock()
		if len(held) > 0 {
			t.Errorf("invariant 1: cut-off replica still holds %v %v after the cut", held, time.Since(cut))
		}
		take := rg.waitCovered(leaseDuration + 2*retryPeriod)
		take += renewDeadline + 50*time.Millisecond
		time.Sleep(retryPeriod)
		rg.leases.CutOff(victim, false)
		rejoin := rg.waitBalanced(leaseDuration + 4*retryPeriod)
		took := rg.quiet()
		rg.checkExclusive()
		t.Logf("FIGURES cutoff: shards taken over %v after the cut; healed replica balanced in after %v; quiet: all reconciled after %v", take, rejoin, took)
	})
}

// TestFlapping runs a seeded random sequence of joins, graceful leaves,
// kills and cut-offs of various lengths while objects change, then checks
// invariants 2 and 3 after quiet, and invariant 1 throughout.
func TestFlapping(t *testing.T) {
	forSizes(t, func(t *testing.T, n, s int) {
		rg := newRing(t, s, objects)
		defer rg.stopAll()
		for i := range n {
			rg.start(i%2 == 1)
		}
		rg.waitBalanced(leaseDuration)
		var cut []string
		for step := 0; step < 12; step++ {
			ids := rg.ids()
			switch op := rg.rng.IntN(5); {
			case op == 0 || len(ids) < 2:
				rg.start(rg.rng.IntN(2) == 0)
			case op == 1:
				rg.stop(ids[rg.rng.IntN(len(ids))])
			case op == 2 || op == 3:
				id := ids[rg.rng.IntN(len(ids))]
				rg.leases.CutOff(id, true)
				cut = append(cut, id)
			default:
				for _, id := range cut {
					rg.leases.CutOff(id, false)
				}
				cut = nil
			}
			// Objects change during pauses around RenewDeadline and
			// LeaseDuration, so that some cut-offs heal before the
			// lease expires, some after.
			rg.churnEvery([]time.Duration{time.Second, renewDeadline - time.Second, renewDeadline + time.Second, leaseDuration + retryPeriod}[rg.rng.IntN(4)], 300*time.Millisecond)
		}
		rg.update(5)
		for _, id := range cut {
			rg.leases.CutOff(id, false)
		}
		took := rg.quiet() // from the last heal
		rg.checkExclusive()
		t.Logf("FIGURES flapping: %d replicas at the end; quiet: all reconciled after %v; %d runs", len(rg.ids()), took, rg.tr.Runs())
	})
}

// heapInUse returns the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestNoGoroutinePerShard checks the other half of invariant 4: a ring of
// 3 replicas runs as many goroutines with 1,024 shards as with 16, when
// the cache is one watch filtered on the client. Where the server filters,
// the cache runs one client-go Reflector per held shard (see
// internal/shardcache): four goroutines per held shard, the Reflector's
// loop and its resync loop, the filter of its watch (listwatch.go) and
// the fake's watch (a real client's watch decoder); the test bounds it.
func TestNoGoroutinePerShard(t *testing.T) {
	count := func(shards int, clientFilter bool) (n int) {
		synctest.Test(t, func(t *testing.T) {
			rg := newRing(t, shards, 100)
			rg.clientFilter = clientFilter
			defer rg.stopAll()
			for range 3 {
				rg.start(false)
			}
			rg.waitBalanced(leaseDuration)
			time.Sleep(retryPeriod / 2) // between ticks
			n = runtime.NumGoroutine()
		})
		return n
	}
	few, many := count(16, true), count(1024, true)
	if few != many {
		t.Errorf("%d goroutines with 16 shards, %d with 1024", few, many)
	}
	sFew, sMany := count(16, false), count(1024, false)
	perShard := float64(sMany-sFew) / float64(1024-16)
	if perShard > 4 {
		t.Errorf("server filtering: %d goroutines with 16 shards, %d with 1024: %.2f per held shard, want at most 4 (the Reflector's two, its watch's filter, the fake's watch)", sFew, sMany, perShard)
	}
	t.Logf("FIGURES goroutines: client filtering %d with 16 shards, %d with 1024; server filtering %d and %d, %.2f per held shard (its Reflector's two, its watch's filter and the fake's watch; 3 replicas, all goroutines of the process)",
		few, many, sFew, sMany, perShard)
}

// TestLostResponses makes a replica's Lease requests reach the store but
// lose their responses (issue #14): its writes take effect, yet it never
// learns that they did. With fakeleases.LoseAll every response is lost;
// with LoseApplied only those of the writes that took effect, so the
// replica still sees its conflicts and reads its Lease back, and its next
// blind write lands too. Either way it must hold nothing once
// RenewDeadline has passed since its last answered renewal, and the
// others must take all its shards within LeaseDuration + 3 periods of the
// fault (a period is at most 1.1×RetryPeriod with its jitter: its first
// blind renewal may land a period after the fault, the others see it
// within a period, and fence it within a period of LeaseDuration after
// that) and keep them while the fault lasts; healed, it rejoins and the
// ring balances again.
func TestLostResponses(t *testing.T) {
	for _, loss := range []struct {
		name string
		loss fakeleases.Loss
	}{{"all", fakeleases.LoseAll}, {"applied", fakeleases.LoseApplied}} {
		t.Run(loss.name, func(t *testing.T) {
			forSizes(t, func(t *testing.T, n, s int) {
				rg := newRing(t, s, objects)
				defer rg.stopAll()
				for range n {
					rg.start(false)
				}
				rg.waitBalanced(leaseDuration)
				victim := rg.ids()[1%n]
				rg.leases.LoseResponses(victim, loss.loss)
				go rg.churn(leaseDuration)
				time.Sleep(renewDeadline + 50*time.Millisecond)
				rg.mu.Lock()
				held := rg.members[victim].r.Shards()
				rg.mu.Unlock()
				if len(held) > 0 {
					t.Errorf("invariant 1: the replica that gets no answers still holds %v after RenewDeadline", held)
				}
				bound := leaseDuration + 3*maxPeriod
				take := rg.waitTaken(victim, bound) + renewDeadline + 50*time.Millisecond
				// The others keep the victim's share while the fault lasts.
				var gap time.Duration
				for range int(2 * leaseDuration / (100 * time.Millisecond)) {
					time.Sleep(100 * time.Millisecond)
					for _, ids := range rg.holders() {
						if len(ids) != 1 || ids[0] == victim {
							gap += 100 * time.Millisecond
							break
						}
					}
				}
				if gap > 0 {
					t.Errorf("invariant 2: during the fault, after the takeover, some shard had no single live holder for %v of %v", gap, 2*leaseDuration)
				}
				rg.leases.LoseResponses(victim, fakeleases.LoseNone)
				rejoin := rg.waitBalanced(leaseDuration + 4*retryPeriod)
				took := rg.quiet()
				rg.checkExclusive()
				t.Logf("FIGURES lost responses (%s): shards taken over %v after the fault (bound %v); healed replica balanced in after %v; quiet: all reconciled after %v",
					loss.name, take, bound, rejoin, took)
			})
		})
	}
}
