package main

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestStory runs the example in simulated time and checks what it prints:
// the shards spread 6/5/5, the victim's shards taken over by the two
// others within LeaseDuration + 2 periods (a period is at most
// 1.1×RetryPeriod with the loop's jitter), every Deployment converged,
// and no Deployment synced by two replicas at once.
func TestStory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var out bytes.Buffer
		res, err := Story(ctx, &out)
		t.Log("\n" + out.String())
		if err != nil {
			t.Fatal(err)
		}
		if !res.Converged {
			t.Error("not every Deployment converged")
		}
		if res.Overlaps != 0 {
			t.Errorf("%d keys synced by two replicas at once", res.Overlaps)
		}
		var before, after []int
		for _, name := range replicaNames {
			before = append(before, len(res.Before[name]))
		}
		for _, name := range replicaNames {
			if name != victim {
				after = append(after, len(res.After[name]))
			}
		}
		slices.Sort(before)
		if !slices.Equal(before, []int{5, 5, 6}) || !slices.Equal(after, []int{8, 8}) {
			t.Errorf("shards held: %v before the kill, %v after, want 5/5/6 and 8/8", before, after)
		}
		for _, s := range res.Before[victim] {
			if !slices.Contains(res.After[replicaNames[0]], s) && !slices.Contains(res.After[replicaNames[2]], s) {
				t.Errorf("shard %d of the victim was not taken over", s)
			}
		}
		period := timing.RetryPeriod + timing.RetryPeriod/10
		if bound := timing.LeaseDuration + 2*period; res.Takeover > bound || res.Takeover < timing.LeaseDuration-period {
			t.Errorf("takeover after %v, want between LeaseDuration − 1.1×RetryPeriod and %v", res.Takeover, bound)
		}
		if res.Syncs < deployments {
			t.Errorf("%d status updates, want at least one per Deployment at generation 2", res.Syncs)
		}
		for _, line := range []string{"converged at generation 2", "no Deployment was ever synced by two replicas at once", "taken over"} {
			if !bytes.Contains(out.Bytes(), []byte(line)) {
				t.Errorf("output lacks %q", line)
			}
		}
	})
}
