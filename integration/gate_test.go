package integration

import (
	"fmt"
	"testing"

	"github.com/go-coalesce/workqueue/sharding"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
)

// withoutShardedListAndWatch switches the API server's ShardedListAndWatch
// gate off until the end of the test, so that the test sees what a server
// without KEP-5866 answers.
//
// The server of this binary starts with the gate on (main_test.go), and
// reads it on every request: the REST store parses ListOptions.ShardSelector
// only while it is on, and the storage and watch cache filter and answer
// ShardInfo only while it is on. Switching it off therefore makes every
// request from then on, lists and newly opened watches, behave as on a
// server without the gate; TestShardSelectorGate checks that it does. What
// it does not undo is the one thing the gate does at start: registering
// the watch cache's sharding metrics. Watches opened before the switch keep
// the filter they were opened with, so a test that uses this must open its
// own after it.
//
// featuregatetesting.SetFeatureGateDuringTest cannot be used: the gate was
// set at the server's start on TestMain's TB, and featuregatetesting takes
// a later change by a test named otherwise for a parallel override. Tests
// that call this must therefore not run in parallel with tests that use
// sharded lists.
func withoutShardedListAndWatch(t *testing.T) {
	t.Helper()
	setShardedListAndWatch(t, false)
	t.Cleanup(func() { setShardedListAndWatch(t, true) })
}

func setShardedListAndWatch(t *testing.T, on bool) {
	t.Helper()
	require.NoError(t, utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(features.ShardedListAndWatch): on}),
		"switching the API server's ShardedListAndWatch gate")
	require.Equal(t, on, utilfeature.DefaultFeatureGate.Enabled(features.ShardedListAndWatch))
}

// TestShardSelectorGate shows how the server answers a LIST and a WATCH
// that carry a ShardSelector with the ShardedListAndWatch gate on, off, and
// on again: with the gate on, only the objects of the selected range,
// counted here from their UIDs with sharding.Hash, and ListMeta.ShardInfo
// echoing the selector; with it off, every object and no ShardInfo. The
// sharded cache chooses between server and client filtering from exactly
// this ShardInfo. Lists are made both from etcd (a consistent read) and
// from the watch cache (resourceVersion "0").
func TestShardSelectorGate(t *testing.T) {
	admin, err := kubernetes.NewForConfig(server.restConfig())
	require.NoError(t, err)
	ns := createNamespace(t, admin, "gate")
	const objects, shards = 64, 4
	cms := admin.CoreV1().ConfigMaps(ns)
	inShard0 := map[string]bool{}
	for i := range objects {
		cm, err := cms.Create(t.Context(), configMap(ns, fmt.Sprintf("obj-%d", i), "v0"), metav1.CreateOptions{})
		require.NoError(t, err)
		if sharding.ShardOf(sharding.Hash(string(cm.UID)), shards) == 0 {
			inShard0[cm.Name] = true
		}
	}
	require.NotEmpty(t, inShard0)
	require.Less(t, len(inShard0), objects)
	selector := sharding.Selector(sharding.FieldUID, shards, []int{0}).String()

	check := func(t *testing.T, on bool) {
		want := objects
		if on {
			want = len(inShard0)
		}
		for _, rv := range []string{"", "0"} {
			list, err := cms.List(t.Context(), metav1.ListOptions{ShardSelector: selector, ResourceVersion: rv})
			require.NoError(t, err)
			if on {
				require.NotNil(t, list.ShardInfo, "resourceVersion %q: a sharded list answers ShardInfo", rv)
				require.Equal(t, selector, list.ShardInfo.Selector, "resourceVersion %q", rv)
				for _, cm := range list.Items {
					require.True(t, inShard0[cm.Name], "resourceVersion %q: %s is not in the selected range", rv, cm.Name)
				}
			} else {
				require.Nil(t, list.ShardInfo, "resourceVersion %q: a server without the gate answers no ShardInfo", rv)
			}
			require.Len(t, list.Items, want, "resourceVersion %q", rv)
		}

		// A watch from now on sees the changes of the selected range
		// only (gate on) or of every object (off).
		list, err := cms.List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		w, err := cms.Watch(t.Context(), metav1.ListOptions{ShardSelector: selector, ResourceVersion: list.ResourceVersion})
		require.NoError(t, err)
		defer w.Stop()
		for i := range objects {
			cm := list.Items[i].DeepCopy()
			cm.Data["value"] = fmt.Sprintf("%s-%v", t.Name(), on)
			_, err := cms.Update(t.Context(), cm, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		// One more change, in the range, marks the end of the stream.
		var last string
		for name := range inShard0 {
			last = name
			break
		}
		cm, err := cms.Get(t.Context(), last, metav1.GetOptions{})
		require.NoError(t, err)
		cm.Data["value"] = "end"
		_, err = cms.Update(t.Context(), cm, metav1.UpdateOptions{})
		require.NoError(t, err)
		seen := map[string]bool{}
		for ev := range w.ResultChan() {
			require.Equal(t, watch.Modified, ev.Type, "watch event %v", ev.Object)
			got := ev.Object.(*corev1.ConfigMap)
			if on {
				require.True(t, inShard0[got.Name], "the sharded watch sent %s, not in the selected range", got.Name)
			}
			seen[got.Name] = true
			if got.Data["value"] == "end" {
				break
			}
		}
		require.Len(t, seen, want, "objects whose change the watch sent")
	}
	t.Run("on", func(t *testing.T) { check(t, true) })
	t.Run("off", func(t *testing.T) {
		withoutShardedListAndWatch(t)
		check(t, false)
	})
	t.Run("on again", func(t *testing.T) { check(t, true) })
}
