package sharding_test

import (
	"context"
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
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestNewValidates checks that New rejects what would break the ring and
// fills in the defaults otherwise, and that each error names the field at
// fault.
func TestNewValidates(t *testing.T) {
	cs := fakeleases.New().Clientset("a")
	q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
	ok := func() sharding.Config {
		return sharding.Config{Client: cs, Namespace: "ns", Name: "ring", Identity: "a", Object: &appsv1.Deployment{}, ListerWatcher: appsLW(fake.NewSimpleClientset(), objectsNS, false), Queue: q}
	}
	if _, err := sharding.New(ok()); err != nil {
		t.Fatalf("New with the required fields: %v", err)
	}
	min := ok()
	min.RetryPeriod = sharding.MinRetryPeriod
	if _, err := sharding.New(min); err != nil {
		t.Fatalf("New with RetryPeriod = MinRetryPeriod: %v", err)
	}
	for name, tc := range map[string]struct {
		edit func(*sharding.Config)
		want string
	}{
		"no client":           {func(c *sharding.Config) { c.Client = nil }, "Config.Client is required"},
		"no namespace":        {func(c *sharding.Config) { c.Namespace = "" }, "Config.Namespace is required"},
		"bad namespace":       {func(c *sharding.Config) { c.Namespace = "Not_A_Namespace" }, "Config.Namespace \"Not_A_Namespace\""},
		"no name":             {func(c *sharding.Config) { c.Name = "" }, "Config.Name is required"},
		"bad name":            {func(c *sharding.Config) { c.Name = "a/b" }, "Config.Name \"a/b\" is not a label value"},
		"no object":           {func(c *sharding.Config) { c.Object = nil }, "Config.Object is required"},
		"no queue":            {func(c *sharding.Config) { c.Queue = nil }, "Config.Queue is required"},
		"sharded with by uid": {func(c *sharding.Config) { c.ShardedWith = []runtime.Object{&appsv1.ReplicaSet{}} }, "Config.ShardedWith needs Field = FieldNamespace"},
		"sharded with itself": {func(c *sharding.Config) {
			c.Field = sharding.FieldNamespace
			c.ShardedWith = []runtime.Object{&appsv1.ReplicaSet{}, &appsv1.Deployment{}}
		}, "Config.ShardedWith[1] is Config.Object's type"},
		"sharded with nil": {func(c *sharding.Config) {
			c.Field = sharding.FieldNamespace
			c.ShardedWith = []runtime.Object{nil}
		}, "Config.ShardedWith[0] is nil"},
		"no identity":          {func(c *sharding.Config) { c.Identity = "" }, "Config.Identity is required"},
		"bad identity":         {func(c *sharding.Config) { c.Identity = "A_b" }, "Config.Identity \"A_b\" (with Config.Name \"ring\") makes no Lease name"},
		"shards not a power":   {func(c *sharding.Config) { c.Shards = 12 }, "Config.Shards is 12, need a power of two"},
		"too many shards":      {func(c *sharding.Config) { c.Shards = 1 << 17 }, "Config.Shards is 131072, need a power of two"},
		"unknown field":        {func(c *sharding.Config) { c.Field = "metadata.name" }, "Config.Field \"metadata.name\""},
		"renew ≥ lease":        {func(c *sharding.Config) { c.RenewDeadline = 20 * time.Second }, "Config.RenewDeadline (20s) must be below Config.LeaseDuration (15s)"},
		"retry ≥ renew":        {func(c *sharding.Config) { c.RetryPeriod = 10 * time.Second }, "Config.RetryPeriod (10s) must be below Config.RenewDeadline (10s)"},
		"negative retry":       {func(c *sharding.Config) { c.RetryPeriod = -time.Second }, "Config.RetryPeriod is -1s, need at least MinRetryPeriod (200ms)"},
		"retry of 1ns":         {func(c *sharding.Config) { c.RetryPeriod = time.Nanosecond }, "Config.RetryPeriod is 1ns, need at least MinRetryPeriod (200ms)"},
		"retry just under min": {func(c *sharding.Config) { c.RetryPeriod = sharding.MinRetryPeriod - 1 }, "Config.RetryPeriod is 199.999999ms"},
		"typed-nil queue": {func(c *sharding.Config) { c.Queue = (*workqueue.RateLimitingQueue[string])(nil) },
			"Config.Queue is required: it holds a nil *workqueue.RateLimitingQueue[string]"},
		"typed-nil object":         {func(c *sharding.Config) { c.Object = (*appsv1.Deployment)(nil) }, "Config.Object is required: it holds a nil *v1.Deployment"},
		"typed-nil client":         {func(c *sharding.Config) { c.Client = (*fake.Clientset)(nil) }, "Config.Client is required: it holds a nil *fake.Clientset"},
		"typed-nil lister watcher": {func(c *sharding.Config) { c.ListerWatcher = (*cache.ListWatch)(nil) }, "Config.ListerWatcher is required: it holds a nil *cache.ListWatch"},
		"typed-nil gauge":          {func(c *sharding.Config) { c.Metrics.Shards = (*lastGauge)(nil) }, "Config.Metrics.Shards holds a nil *sharding_test.lastGauge"},
		"typed-nil sharded with": {func(c *sharding.Config) {
			c.Field = sharding.FieldNamespace
			c.ShardedWith = []runtime.Object{(*appsv1.ReplicaSet)(nil)}
		}, "Config.ShardedWith[0] is nil"},
		"negative grace":       {func(c *sharding.Config) { c.GracePeriod = -1 }, "Config.GracePeriod is -1ns"},
		"negative handoff":     {func(c *sharding.Config) { c.HandoffTimeout = -1 }, "Config.HandoffTimeout is -1ns"},
		"lease under defaults": {func(c *sharding.Config) { c.LeaseDuration = 5 * time.Second }, "Config.RenewDeadline (10s) must be below Config.LeaseDuration (5s)"},
		"busy above one":       {func(c *sharding.Config) { c.TargetBusy = 1.5 }, "Config.TargetBusy is 1.5, need it in (0, 1]"},
		"busy negative":        {func(c *sharding.Config) { c.TargetBusy = -0.1 }, "Config.TargetBusy is -0.1"},
		"oldest negative":      {func(c *sharding.Config) { c.TargetOldest = -1 }, "Config.TargetOldest is -1ns"},
	} {
		c := ok()
		tc.edit(&c)
		_, err := sharding.New(c)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "sharding: ") {
			t.Errorf("%s: New returned %v, want an error mentioning %q", name, err, tc.want)
		}
	}
}

// TestRunWithoutInformer: a replica with an untyped nil ListerWatcher is
// accepted by New (NewInformer may build its informer later, as
// controller-runtime's cache does), but Run refuses at once, naming the
// field, if no informer was built by then, and writes no Lease; it may be
// called again once NewInformer has built it. Mutant: Run without the
// check waits for shards that never sync and returns nil when ctx ends.
func TestRunWithoutInformer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		leases := fakeleases.New()
		cs := leases.Clientset("a")
		q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
		r, err := sharding.New(sharding.Config{Client: cs, Namespace: "ns", Name: "ring", Identity: "a", Object: &appsv1.Deployment{}, Queue: q})
		if err != nil {
			t.Fatalf("New with a nil ListerWatcher (NewInformer may come later): %v", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		start := time.Now()
		err = r.Run(ctx)
		if err == nil || !strings.Contains(err.Error(), "Config.ListerWatcher is nil") || !strings.Contains(err.Error(), "NewInformer") {
			t.Fatalf("Run with no ListerWatcher and no informer returned %v, want an error naming Config.ListerWatcher and NewInformer", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("Run refused after %v, want at once", d)
		}
		if l, err := cs.CoordinationV1().Leases("ns").List(t.Context(), metav1.ListOptions{}); err != nil || len(l.Items) > 0 {
			t.Errorf("Leases after the refused Run: %v (%v), want none", l, err)
		}

		// Once NewInformer built it, Run runs: it joins the ring.
		r.NewInformer(appsLW(fake.NewSimpleClientset(), objectsNS, false), &appsv1.Deployment{}, 0, nil)
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		time.Sleep(10 * time.Second)
		l, err := cs.CoordinationV1().Leases("ns").List(t.Context(), metav1.ListOptions{})
		if err != nil || len(l.Items) == 0 {
			t.Errorf("Leases after Run with an informer from NewInformer: %v (%v), want the replica's", l, err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run with an informer from NewInformer: %v", err)
		}
	})
}
