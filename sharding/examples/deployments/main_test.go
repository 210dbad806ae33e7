package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
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
//
// With the server filtering, each replica caches only its shards'
// Deployments; with the fallback, the same, filtered on the client.
func TestStory(t *testing.T) {
	for _, server := range []bool{true, false} {
		t.Run(map[bool]string{true: "server", false: "client"}[server], func(t *testing.T) { testStory(t, server) })
	}
}

func testStory(t *testing.T, server bool) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var out bytes.Buffer
		res, err := Story(ctx, &out, StoryOptions{ServerFilter: server})
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
		// What the story prints: LeaseDuration counts from the victim's
		// last renewal, at most a period before the kill.
		if res.Renewed < 0 || res.Renewed > period {
			t.Errorf("the victim last renewed %v before the kill, want within a period (%v)", res.Renewed, period)
		}
		if since := res.Renewed + res.Takeover; since < timing.LeaseDuration || since > timing.LeaseDuration+2*period {
			t.Errorf("takeover %v after the last renewal, want LeaseDuration (%v) and at most 2 periods more", since, timing.LeaseDuration)
		}
		takeover := fmt.Sprintf("%s's shards taken over %v after its last renewal, %v after the kill: the others wait LeaseDuration (1s) from the last renewal they saw (%v before the kill)",
			victim, (res.Renewed + res.Takeover).Round(10*time.Millisecond), res.Takeover.Round(10*time.Millisecond), res.Renewed.Round(10*time.Millisecond))
		if !strings.Contains(out.String(), takeover) {
			t.Errorf("output lacks %q", takeover)
		}
		if want := map[bool]string{true: "server", false: "client"}[server]; res.Filtering != want {
			t.Errorf("filtered by the %s, want %s", res.Filtering, want)
		}
		total := 0
		for name, n := range res.Cached {
			total += n
			// 6 shards of 16 hold about 6/16 of 300 Deployments.
			if n > deployments/2 {
				t.Errorf("%s caches %d Deployments of %d, want only those of its shards", name, n, deployments)
			}
		}
		if total != deployments {
			t.Errorf("the replicas cache %d Deployments in all, want each of the %d once", total, deployments)
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
