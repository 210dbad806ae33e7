package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	workqueue "github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// TestShardedCache runs two replicas whose caches are built through
// Config.ListerWatcher on the real server, and checks that each caches
// exactly the ConfigMaps of the shards it admits, together all of them,
// and that the mode it chose is the server's: FilterServer if a sharded
// LIST comes back with ListMeta.ShardInfo (the ShardedListAndWatch gate
// on), FilterClient otherwise. Then one replica leaves and the other
// caches everything. With the gate on and off, and with the replicas'
// clients speaking JSON and protobuf (as kube-controller-manager's do for
// built-in types: the watch-list stream, its bookmarks and the sharded
// LIST's ShardInfo decode differently).
func TestShardedCache(t *testing.T) {
	for _, gate := range []bool{true, false} {
		for _, contentType := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
			name := fmt.Sprintf("gate=%v/%s", map[bool]string{true: "on", false: "off"}[gate], contentType[strings.LastIndex(contentType, "/")+1:])
			t.Run(name, func(t *testing.T) {
				if !gate {
					withoutShardedListAndWatch(t)
				}
				testShardedCache(t, contentType)
			})
		}
	}
}

func testShardedCache(t *testing.T, contentType string) {
	const shards, objects = 8, 200
	client, err := kubernetes.NewForConfig(server.restConfig())
	require.NoError(t, err)
	cfg := server.restConfig()
	cfg.ContentType = contentType
	replicaClient, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ns := createNamespace(t, client, "cache")
	for i := range objects {
		_, err := client.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("obj-%d", i)},
			Data:       map[string]string{"value": "0"},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	// What the server does with a shard selector.
	probe, err := client.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{
		ShardSelector: sharding.Selector(sharding.FieldUID, shards, []int{0}).String(),
	})
	require.NoError(t, err)
	want := sharding.FilterClient
	if probe.ShardInfo != nil {
		want = sharding.FilterServer
	}
	shardOf := map[string]int{}
	all, err := client.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	for _, cm := range all.Items {
		shardOf[ns+"/"+cm.Name] = sharding.ShardOf(sharding.Hash(string(cm.UID)), shards)
	}

	type rep struct {
		r      *sharding.Replica
		cancel context.CancelFunc
		done   sync.WaitGroup
	}
	start := func(id string) *rep {
		q := workqueue.NewRateLimitingQueue(workqueue.NewItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Second))
		r, err := sharding.New(sharding.Config{
			Client: replicaClient, Namespace: ns, Name: "cache", Identity: id, Shards: shards,
			Object:        &corev1.ConfigMap{},
			ListerWatcher: cache.NewListWatchFromClient(replicaClient.CoreV1().RESTClient(), "configmaps", ns, fields.Everything()),
			Queue:         q,
			LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond, GracePeriod: time.Second,
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
		p := &rep{r: r, cancel: cancel}
		p.done.Go(func() { _ = r.Run(ctx) })
		p.done.Go(func() { _ = workqueue.Run(ctx, q, 2, r.Handler(func(context.Context, string) error { return nil })) })
		return p
	}
	stop := func(p *rep) {
		p.cancel()
		p.done.Wait()
	}
	// cached checks p's cache against the shards it admits.
	cached := func(p *rep) (held []int, n int, ok bool) {
		held = p.r.Shards()
		keys := p.r.Informer().GetStore().ListKeys()
		want := 0
		for _, s := range shardOf {
			if slices.Contains(held, s) {
				want++
			}
		}
		for _, k := range keys {
			if !slices.Contains(held, shardOf[k]) {
				return held, len(keys), false
			}
		}
		return held, len(keys), len(keys) == want
	}

	a, b := start("a"), start("b")
	defer stop(a)
	require.Eventually(t, func() bool {
		ha, na, oka := cached(a)
		hb, nb, okb := cached(b)
		return oka && okb && len(ha)+len(hb) == shards && na+nb == objects
	}, 30*time.Second, 100*time.Millisecond, "two replicas, each caching exactly its shards' ConfigMaps")
	require.Equal(t, want.String(), a.r.Filtering().String(), "the mode the replica chose")
	require.Equal(t, want.String(), b.r.Filtering().String(), "the mode the replica chose")
	ha, na, _ := cached(a)
	hb, nb, _ := cached(b)
	t.Logf("FIGURES sharded cache on the real server (filtered by the %s): a holds %v and caches %d ConfigMaps, b holds %v and caches %d, of %d",
		want, ha, na, hb, nb, objects)

	stop(b)
	require.Eventually(t, func() bool {
		h, n, ok := cached(a)
		return ok && len(h) == shards && n == objects
	}, 30*time.Second, 100*time.Millisecond, "the remaining replica caches every ConfigMap")
}
