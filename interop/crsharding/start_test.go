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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	toolscache "k8s.io/client-go/tools/cache"
)

// TestStartWaitsForTheController: a Sharding started by the manager joins
// the ring only once its controller has made its queue (NewQueue), so a
// replica whose controller never starts (a manager with leader election,
// not elected) holds no shard that nothing would reconcile; and only once
// the cache has built the sharded informer (NewInformer), which the
// controller's source asks for after NewQueue, so that Run does not
// refuse for want of it. Mutants: Start running the replica at once: it
// holds every shard before NewQueue; Start not waiting for the informer:
// Run returns its error.
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
		l, err = cs.CoordinationV1().Leases("ring").List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		require.Empty(t, l.Items, "Leases written before the cache built the sharded informer")

		// The manager's cache builds it when the controller's source asks
		// (it is not run here: no shard syncs, so Shards() stays empty).
		// The Leases say the replica joined and took the ring's shards.
		objs := fake.NewClientset()
		sh.NewInformer(&toolscache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return objs.CoreV1().ConfigMaps("").List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return objs.CoreV1().ConfigMaps("").Watch(ctx, o)
			},
		}, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
		time.Sleep(time.Minute)
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
