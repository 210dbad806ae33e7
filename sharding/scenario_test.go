package sharding_test

import (
	"fmt"
	"testing"
	"testing/synctest"
)

var sizes = []struct{ replicas, shards int }{
	{3, 16}, {3, 256}, {5, 16}, {5, 256}, {20, 16}, {20, 256},
}

const objects = 2000

// TestStartTogether starts every replica at once.
func TestStartTogether(t *testing.T) {
	for _, sz := range sizes {
		t.Run(fmt.Sprintf("N=%d/S=%d", sz.replicas, sz.shards), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rg := newRing(t, sz.shards, objects)
				defer rg.stopAll()
				for range sz.replicas {
					rg.start(false)
				}
				settle := rg.waitBalanced(leaseDuration + 4*retryPeriod)
				took := rg.quiet()
				wps := rg.writesPerSecond()
				rg.update(200)
				took2 := rg.quiet()
				rg.checkExclusive()
				t.Logf("balanced after %v; all reconciled %v after start; quiet ring: %.2f Lease writes/s; 200 updates reconciled in %v; %d runs",
					settle, took, wps, took2, rg.tr.runs)
			})
		})
	}
}
