package integration

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
)

// proofReplicas is N of the proof: 8 replicas share the 64 shards.
const proofReplicas = 8

// TestShardedCacheProofHeap measures what each replica of a balanced ring of
// 8 replicas, 64 shards, caches of the proof's data set (2,000 objects;
// 20,000 with SHARDING_SCALE=1), and its heap, each replica in a process of
// its own (see child_test.go), against one unsharded informer caching
// everything, also in its own process.
//
// With the gate on (filter=server), every replica must filter on the
// server and cache exactly the objects of the shards it holds, which at
// balance is at most 1.25 × O/N; the replicas' shards must be disjoint and
// cover the ring. With the gate off (filter=client), the fallback: every
// replica must say it filters on the client; it receives every object from
// its one full watch, and keeps only those of its shards, so the same
// checks hold of its cache (its heap shows what the full watch costs).
//
// The FIGURES line gives each replica's objects and heap: the live heap
// after two collections, minus the child's baseline (the same measure
// before it built anything: the test binary's own packages and the API
// server's code linked into it, about the same in every child).
func TestShardedCacheProofHeap(t *testing.T) {
	d := proofDataset(t)
	perShard := d.perShard()
	admin, err := kubernetes.NewForConfig(server.restConfig())
	require.NoError(t, err)
	// The unsharded informer's heap, measured beside the server-filtered
	// ring and used as the bar of both modes: a replica that keeps an
	// eighth of the objects must not hold the heap of all of them (the
	// client-filtered fallback once did, 8.9 MiB against 9.0, by keeping
	// pointers into each full LIST's array).
	var unshardedMiB float64
	for _, mode := range []string{"server", "client"} {
		t.Run("filter="+mode, func(t *testing.T) {
			if mode == "client" {
				withoutShardedListAndWatch(t)
			}
			ns := createNamespace(t, admin, "heap")
			var children []*child
			for i := range proofReplicas {
				children = append(children, startChild(t, childSpec{
					Role:          "replica",
					LabelSelector: d.selector(),
					Namespace:     ns,
					Ring:          "heap",
					Identity:      fmt.Sprintf("r%d", i),
					Shards:        proofShards,
					// Twice the in-process ring's periods: nine
					// processes under -race share the machine.
					LeaseDuration: 2 * proofLeaseDuration,
					RenewDeadline: 2 * proofRenewDeadline,
					RetryPeriod:   2 * proofRetryPeriod,
					GracePeriod:   proofGracePeriod,
					Share:         proofShards / proofReplicas,
				}))
			}
			if mode == "server" {
				children = append(children, startChild(t, childSpec{Role: "unsharded", LabelSelector: d.selector()}))
			}
			// Each child answers once it holds its share and has synced
			// it, each at its own moment, so a shard may still move
			// between two answers: measure all again until the answers
			// of one round agree (shards disjoint and covering the ring).
			var reports []childReport
			for round := 1; ; round++ {
				reports = measureAll(t, children)
				why := disjoint(reports)
				if why == "" {
					break
				}
				require.Less(t, round, 5, "the children's answers disagree after %d rounds: %s", round, why)
			}

			var figures []string
			holder := make([]string, proofShards)
			bound := 1.25 * float64(d.objects) / proofReplicas
			replicaMiB := map[string]float64{}
			for _, rep := range reports {
				mib := float64(rep.Heap-min(rep.Baseline, rep.Heap)) / (1 << 20)
				figures = append(figures, fmt.Sprintf("%s %d objects %.1f MiB", rep.Identity, rep.Objects, mib))
				if rep.Identity == "unsharded" {
					require.Equal(t, d.objects, rep.Objects, "the unsharded informer caches every object")
					unshardedMiB = mib
					continue
				}
				replicaMiB[rep.Identity] = mib
				require.Equal(t, mode, rep.Filtering, "%s: Filtering()", rep.Identity)
				want := 0
				for _, s := range rep.Shards {
					require.Empty(t, holder[s], "shard %d held by %s and %s", s, holder[s], rep.Identity)
					holder[s] = rep.Identity
					want += perShard[s]
				}
				require.Equal(t, want, rep.Objects, "%s caches exactly the objects of its shards %v", rep.Identity, rep.Shards)
				require.LessOrEqual(t, float64(rep.Objects), bound, "%s caches more than 1.25 × O/N", rep.Identity)
			}
			require.NotContains(t, holder, "", "every shard held by a replica")
			if unshardedMiB > 0 { // measured (not when only filter=client runs)
				for id, mib := range replicaMiB {
					require.Less(t, mib, unshardedMiB/2, "%s keeps an eighth of the objects in %.1f MiB, the unsharded informer all of them in %.1f MiB", id, mib, unshardedMiB)
				}
			}
			slices.Sort(figures)
			t.Logf("FIGURES %d replicas, %d shards, %d objects, filtering on the %s; heap after GC minus the child's baseline (%.1f MiB): %s",
				proofReplicas, proofShards, d.objects, mode, float64(reports[0].Baseline)/(1<<20), strings.Join(figures, "; "))
		})
	}
}

// measureAll asks every child to measure and returns their answers, in the
// order of children.
func measureAll(t *testing.T, children []*child) []childReport {
	t.Helper()
	reports := make([]childReport, len(children))
	errs := make([]error, len(children))
	var wg sync.WaitGroup
	for i, c := range children {
		wg.Go(func() { reports[i], errs[i] = c.measure() })
	}
	// A child that never balances would block its measure: kill them
	// all after a while, which ends every measure.
	timeout := time.AfterFunc(5*time.Minute, func() {
		for _, c := range children {
			_ = c.cmd.Process.Kill()
		}
	})
	wg.Wait()
	timeout.Stop()
	for i, err := range errs {
		require.NoError(t, err, "child %d: %s", i, children[i].stderr.String())
	}
	return reports
}

// disjoint describes how the replicas' answers disagree (a shard held by
// two, or by none), or returns "".
func disjoint(reports []childReport) string {
	holder := make([]string, proofShards)
	for _, rep := range reports {
		for _, s := range rep.Shards {
			if holder[s] != "" {
				return fmt.Sprintf("shard %d held by %s and %s", s, holder[s], rep.Identity)
			}
			holder[s] = rep.Identity
		}
	}
	for s, h := range holder {
		if h == "" {
			return fmt.Sprintf("shard %d held by no one", s)
		}
	}
	return ""
}
