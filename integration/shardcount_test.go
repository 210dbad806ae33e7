package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	workqueue "github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// TestShardCountRefused runs, on the real API server, replicas of one
// ring configured with 16 and 32 shards: one after the other (the ring's
// count is the first replica's; the newcomer's Run returns the refusal,
// and the first stays ready), and two started at once (exactly one
// creates the ring's Lease; the other refuses). Each refusal wraps
// sharding.ErrRingMismatch and names both counts.
func TestShardCountRefused(t *testing.T) {
	admin, err := kubernetes.NewForConfig(server.restConfig())
	require.NoError(t, err)
	ns := createNamespace(t, admin, "shardcount")
	type rep struct {
		r      *sharding.Replica
		shards int
		err    chan error
	}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(t.Context())
	defer func() {
		cancel()
		wg.Wait()
	}()
	start := func(ring, id string, shards int) *rep {
		cs, err := kubernetes.NewForConfig(server.restConfig())
		require.NoError(t, err)
		cms := cs.CoreV1().ConfigMaps(ns)
		r, err := sharding.New(sharding.Config{
			Client: cs, Namespace: ns, Name: ring, Identity: id, Shards: shards,
			Object: &corev1.ConfigMap{},
			ListerWatcher: &cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return cms.List(ctx, o)
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return cms.Watch(ctx, o)
				},
			},
			Queue:         workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]()),
			LeaseDuration: ringLeaseDuration, RenewDeadline: ringRenewDeadline, RetryPeriod: ringRetryPeriod, GracePeriod: ringGracePeriod,
		})
		require.NoError(t, err)
		p := &rep{r: r, shards: shards, err: make(chan error, 1)}
		wg.Go(func() { p.err <- r.Run(ctx) })
		return p
	}
	refused := func(p *rep, theirs int) {
		t.Helper()
		select {
		case err := <-p.err:
			require.ErrorIs(t, err, sharding.ErrRingMismatch)
			require.Contains(t, err.Error(), fmt.Sprintf("Config.Shards %d", p.shards))
			require.Contains(t, err.Error(), fmt.Sprintf("Shards %d,", theirs))
			require.ErrorIs(t, p.r.Ready(nil), sharding.ErrRingMismatch)
		case <-time.After(10 * time.Second):
			t.Fatalf("a replica of %d shards in a ring of %d did not refuse within 10 s", p.shards, theirs)
		}
	}
	ready := func(p *rep) {
		t.Helper()
		require.Eventually(t, func() bool { return p.r.Ready(nil) == nil }, 10*time.Second, 50*time.Millisecond,
			"a replica of the ring's count (%d) not ready", p.shards)
	}

	for _, counts := range [][2]int{{16, 32}, {32, 16}} {
		ring := fmt.Sprintf("after-%d-%d", counts[0], counts[1])
		first := start(ring, "a", counts[0])
		ready(first)
		refused(start(ring, "b", counts[1]), counts[0])
		require.NoError(t, first.r.Ready(nil), "the first replica after the newcomer refused")
	}

	a, b := start("together", "a", 16), start("together", "b", 32)
	var refusal error
	select {
	case refusal = <-a.err:
		a.err <- refusal
		refused(a, 32)
		ready(b)
	case refusal = <-b.err:
		b.err <- refusal
		refused(b, 16)
		ready(a)
	case <-time.After(10 * time.Second):
		t.Fatal("neither of two replicas started at once with 16 and 32 shards refused within 10 s")
	}
	t.Logf("started together: %v", refusal)
}
