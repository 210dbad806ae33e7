package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/fakeleases"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestMetricsText checks the example's /metrics text: the counters, the
// labelled counters and the per-shard series, which go with their shard.
func TestMetricsText(t *testing.T) {
	g := newGauges()
	m := g.metrics()
	m.Gained.Inc()
	m.Gained.Inc()
	m.Lists("deployments", "gain").Inc()
	m.Lapses("deadline").Inc()
	m.PerShard.SetShard(3, true, 12)
	m.PerShard.SetShard(5, false, 0)
	m.PerShard.DeleteShard(5)
	var b strings.Builder
	g.write(&b)
	out := b.String()
	for _, want := range []string{
		"# TYPE sharding_gained_total counter\nsharding_gained_total 2\n",
		`sharding_lists_total{resource="deployments",cause="gain"} 1`,
		`sharding_lapses_total{cause="deadline"} 1`,
		"# TYPE sharding_shard_admitted gauge\n" + `sharding_shard_admitted{shard="3"} 1`,
		`sharding_shard_objects{shard="3"} 12`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, `shard="5"`) {
		t.Errorf("a released shard's series stayed:\n%s", out)
	}
}

// TestMetricsScrapeRing runs a replica with the example's gauges and
// scrapes its /metrics as Prometheus would: the ring's scaling signal is
// there, set by the replica's decisions (a lone replica with no work asks
// for one replica; the gauge's zero value would say none).
func TestMetricsScrapeRing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		g := newGauges()
		q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
		objs := fake.NewSimpleClientset() //nolint:staticcheck // as the story's: no REST mapper needed
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return objs.AppsV1().Deployments("default").List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return objs.AppsV1().Deployments("default").Watch(ctx, o)
			},
		}
		r, err := sharding.New(sharding.Config{Client: fakeleases.New().Clientset("a"), Namespace: "kube-system", Name: "deployments",
			Identity: "a", Shards: 4, Object: &appsv1.Deployment{}, ListerWatcher: lw, Queue: q, Metrics: g.metrics(), Workers: clusterWorkers})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() { done <- r.Run(ctx) }()
		time.Sleep(30 * time.Second) // simulated: the replica joins and decides
		rec := httptest.NewRecorder()
		g.handler(r, q).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		q.ShutDown()
		out := rec.Body.String()
		for _, want := range []string{
			"# TYPE sharding_desired_replicas gauge\nsharding_desired_replicas 1\n",
			"# TYPE sharding_ring_busy_ratio gauge\nsharding_ring_busy_ratio 0\n",
			"# TYPE sharding_ring_ready_keys gauge\nsharding_ring_ready_keys 0\n",
			"# TYPE sharding_ring_oldest_ready_seconds gauge\nsharding_ring_oldest_ready_seconds 0\n",
		} {
			if rec.Code != http.StatusOK || !strings.Contains(out, want) {
				t.Errorf("GET /metrics: %d, lacks %q:\n%s", rec.Code, want, out)
			}
		}
	})
}
