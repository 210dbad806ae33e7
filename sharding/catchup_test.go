package sharding_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue/sharding"
)

// TestCatchUpDoesNotDelayEvents checks what a gained shard's catch-up
// (a run owed to each of its objects) costs the rest of the replica's
// work: an event that comes during the catch-up runs within about a
// run's time, not behind the whole catch-up, as it would in a FIFO queue
// that was given every gained key at once; the catch-up's keys count as
// ready but not in the oldest ready age (they wait for the move, not for
// capacity); and their runs are not counted as the shards' work (they
// measure the move, not the shards' load). One replica gains 4 shards of
// 160 objects at 4 workers and a second a run: 40 seconds of catch-up.
func TestCatchUpDoesNotDelayEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const run = time.Second
		rg := newRing(t, 4, 160)
		rg.cost = func(int) time.Duration { return run }
		defer rg.stopAll()
		id := rg.start(false)
		rg.waitBalanced(leaseDuration)
		rg.mu.Lock()
		r := rg.members[id].r
		rg.mu.Unlock()
		time.Sleep(3 * run)
		owed := sharding.Owed(r)
		var ready int
		var oldest time.Duration
		for _, s := range r.Status().Shards {
			ready += s.Ready
			oldest = max(oldest, s.Oldest)
		}
		if owed < 100 || ready < 100 || oldest != 0 {
			t.Errorf("3 runs into the catch-up: %d keys owed, %d ready, oldest ready %v; want over 100 owed and ready, oldest 0 (a catch-up waits for the move)", owed, ready, oldest)
		}

		key := objectsNS + "/" + rg.names[7]
		if !rg.bump(rg.names[7]) {
			return
		}
		wrote := time.Now()
		for {
			if behind, _ := rg.tr.behind(); !slices.Contains(behind, key) {
				break
			}
			if time.Since(wrote) > 30*run {
				t.Fatalf("the event of %s not reconciled %v after it came (%d keys still owed)", key, time.Since(wrote), sharding.Owed(r))
			}
			time.Sleep(run / 10)
		}
		if took := time.Since(wrote); took > 3*run {
			t.Errorf("the event of %s waited %v behind the catch-up; want within 3 runs", key, took)
		}

		// Once the catch-up is over, and reported, the shards' work is
		// the event's run alone.
		for sharding.Owed(r) > 0 {
			if time.Since(wrote) > 2*time.Minute {
				t.Fatalf("the catch-up not over 2 minutes after the event: %d keys owed", sharding.Owed(r))
			}
			time.Sleep(run)
		}
		time.Sleep(2 * retryPeriod)
		var work time.Duration
		for i, s := range r.Status().Shards {
			if !s.LoadKnown {
				t.Errorf("shard %d: load not known once the catch-up is over", i)
			}
			work += s.Work
		}
		if work > 3*run {
			t.Errorf("after the catch-up, the shards' work is %v; want the event's run alone (160 runs of catch-up are not the shards' load)", work)
		}
		if keys, _ := rg.tr.behind(); len(keys) > 0 {
			t.Errorf("keys never reconciled at their newest generation: %v", keys)
		}
	})
}
