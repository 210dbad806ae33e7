package sharding_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestScaleRequests simulates the scaling sheet's ring, 100 replicas and
// 1,024 shards, in simulated time over the fake clientset, and reports the
// Lease requests per second by verb: in a quiet ring, and in the windows
// of a join and of a graceful leave (RetryPeriod 2 s, the default timing).
// It checks the bounds a quiet ring must keep (no LIST, at most one write
// per replica per RetryPeriod) and that the join and the leave settle.
//
// It takes about a minute with -race, so it runs only with
// SHARDING_SCALE=1 (or -run naming it and -v, as the README's command).
func TestScaleRequests(t *testing.T) {
	if os.Getenv("SHARDING_SCALE") == "" {
		t.Skip("set SHARDING_SCALE=1 to simulate 100 replicas × 1,024 shards")
	}
	synctest.Test(t, func(t *testing.T) {
		const n, shards, window = 100, 1024, 10 * retryPeriod
		rg := newRing(t, shards, 1000)
		defer rg.stopAll()
		for range n {
			rg.start(false)
		}
		settle := rg.waitBalanced(leaseDuration + 10*retryPeriod)
		start := rg.leases.TotalRequests()
		time.Sleep(3 * retryPeriod)

		measure := func(what string, d time.Duration, during func()) map[string]int64 {
			before := rg.leases.TotalRequests()
			end := time.Now().Add(d)
			if during != nil {
				during()
			}
			time.Sleep(time.Until(end))
			after := rg.leases.TotalRequests()
			delta := map[string]int64{}
			var parts []string
			for _, v := range []string{"list", "watch", "get", "create", "update", "delete"} {
				delta[v] = after[v] - before[v]
				parts = append(parts, fmt.Sprintf("%s %.2f/s", strings.ToUpper(v), float64(delta[v])/d.Seconds()))
			}
			t.Logf("FIGURES scale N=%d S=%d, %s over %v: %s", len(rg.ids()), shards, what, d, strings.Join(parts, ", "))
			return delta
		}

		quiet := measure("quiet ring", window, nil)
		if quiet["list"] > 0 {
			t.Errorf("invariant 4: a quiet ring of %d replicas made %d LISTs in %v", n, quiet["list"], window)
		}
		writes := quiet["create"] + quiet["update"] + quiet["delete"]
		if limit := int64(n) * int64(window/retryPeriod); writes > limit {
			t.Errorf("invariant 4: %d Lease writes in %v by %d replicas, limit %d", writes, window, n, limit)
		}
		t.Logf("FIGURES scale: balanced %v after %d replicas started together; requests during the start: %v", settle, n, start)

		var joinSettle time.Duration
		measure("join of a 101st replica", window, func() {
			rg.start(false)
			joinSettle = rg.waitBalanced(window)
		})
		time.Sleep(3 * retryPeriod)
		var leaveSettle time.Duration
		measure("graceful leave of one replica", window, func() {
			begin := time.Now()
			rg.stop(rg.ids()[n/2])
			rg.waitBalanced(window)
			leaveSettle = time.Since(begin)
		})
		rg.checkExclusive()
		t.Logf("FIGURES scale: join balanced after %v, leave balanced after %v", joinSettle, leaveSettle)
	})
}
