package crsharding

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/fakeleases"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStartWaitsForTheController: a Sharding started by the manager joins
// the ring only once its controller has made its queue (NewQueue), so a
// replica whose controller never starts (a manager with leader election,
// not elected) holds no shard that nothing would reconcile. Mutant: Start
// running the replica at once: it holds every shard before NewQueue.
func TestStartWaitsForTheController(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := fakeleases.New().Clientset("r0")
		sh, err := New(Config{Ring: sharding.Config{
			Client: cs, Namespace: "ring", Name: "cms", Identity: "r0",
			Object: &corev1.ConfigMap{}, Shards: 4,
		}})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- sh.Start(ctx) }()

		time.Sleep(time.Minute) // many periods of the ring
		require.Empty(t, sh.Replica().Shards(), "shards held before the controller made its queue")
		l, err := cs.CoordinationV1().Leases("ring").List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		require.Empty(t, l.Items, "Leases written before the controller made its queue")

		q := sh.NewQueue("cms", nil)
		defer q.ShutDown()
		time.Sleep(time.Minute)
		// Shards() stays empty here: no sharded informer was built (the
		// manager's cache would build it), so no shard is synced. The
		// Leases say the replica joined and took the ring's shards.
		l, err = cs.CoordinationV1().Leases("ring").List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		held := 0
		for _, lease := range l.Items {
			if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == "r0" {
				held++
			}
		}
		require.Equal(t, 1+4, held, "Leases held by the only replica (membership and 4 shards), once its controller runs")

		cancel()
		require.NoError(t, <-done)
	})
}
