package crsharding

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/fakeleases"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
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
		buildInformer(sh)
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

// TestStartSaysTheInformerIsMissing: a controller whose manager's cache
// was not built with CacheOptions makes its queue but never the sharded
// informer. Start logs that once, at default verbosity, informerWait after
// the queue, naming the fix, and goes on waiting: an informer built later
// still lets the replica join. Mutants: no log line; a line at every
// period of the wait; a line before the wait is over; Start returning
// at the log instead of waiting.
func TestStartSaysTheInformerIsMissing(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	klog.SetLogger(funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, prefix+args)
	}, funcr.Options{}))
	defer klog.ClearLogger()
	said := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, l := range lines {
			if strings.Contains(l, "no sharded informer") {
				out = append(out, l)
			}
		}
		return out
	}
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

		time.Sleep(time.Hour) // no controller yet: a replica not elected waits quietly
		synctest.Wait()
		require.Empty(t, said(), "logged before the controller made its queue")

		q := sh.NewQueue("cms", nil)
		defer q.ShutDown()
		time.Sleep(informerWait - time.Second)
		synctest.Wait()
		require.Empty(t, said(), "logged before informerWait")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		require.Len(t, said(), 1, "the missing informer, once informerWait has passed")
		require.Contains(t, said()[0], "CacheOptions", "the line names the fix")
		require.Contains(t, said()[0], `"ring"="cms"`, "the line names the ring")

		time.Sleep(time.Hour)
		synctest.Wait()
		require.Len(t, said(), 1, "the missing informer is said once")
		select {
		case err := <-done:
			t.Fatalf("Start returned (%v) before its context ended", err)
		default:
		}

		// Built late, the informer still lets the replica join.
		buildInformer(sh)
		time.Sleep(time.Minute)
		l, err := cs.CoordinationV1().Leases("ring").List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		require.NotEmpty(t, l.Items, "no Lease written once the informer was built")

		cancel()
		require.NoError(t, <-done)
	})
}

// buildInformer builds the sharded ConfigMap informer, as the manager's
// cache does when the controller's source asks for it, over an empty fake
// clientset.
func buildInformer(sh *Sharding) {
	objs := fake.NewClientset()
	sh.NewInformer(&toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return objs.CoreV1().ConfigMaps("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return objs.CoreV1().ConfigMaps("").Watch(ctx, o)
		},
	}, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
}
