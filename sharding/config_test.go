package sharding_test

import (
	"strings"
	"testing"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/fakeleases"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// TestNewValidates checks that New rejects what would break the ring and
// fills in the defaults otherwise.
func TestNewValidates(t *testing.T) {
	cs := fakeleases.New().Clientset("a")
	q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
	ok := func() sharding.Config {
		return sharding.Config{Client: cs, Namespace: "ns", Name: "ring", Identity: "a", Object: &appsv1.Deployment{}, ListerWatcher: appsLW(fake.NewSimpleClientset(), objectsNS, false), Queue: q}
	}
	if _, err := sharding.New(ok()); err != nil {
		t.Fatalf("New with the required fields: %v", err)
	}
	for name, tc := range map[string]struct {
		edit func(*sharding.Config)
		want string
	}{
		"no client":           {func(c *sharding.Config) { c.Client = nil }, "needs Client"},
		"no object":           {func(c *sharding.Config) { c.Object = nil }, "needs Client, Object and Queue"},
		"sharded with by uid": {func(c *sharding.Config) { c.ShardedWith = []runtime.Object{&appsv1.ReplicaSet{}} }, "ShardedWith needs Field = FieldNamespace"},
		"sharded with itself": {func(c *sharding.Config) {
			c.Field = sharding.FieldNamespace
			c.ShardedWith = []runtime.Object{&appsv1.Deployment{}}
		}, "Config.Object's type"},
		"no identity":          {func(c *sharding.Config) { c.Identity = "" }, "needs Namespace, Name and Identity"},
		"bad identity":         {func(c *sharding.Config) { c.Identity = "A_b" }, "no Lease name"},
		"shards not a power":   {func(c *sharding.Config) { c.Shards = 12 }, "power of two"},
		"too many shards":      {func(c *sharding.Config) { c.Shards = 1 << 17 }, "power of two"},
		"unknown field":        {func(c *sharding.Config) { c.Field = "metadata.name" }, "Field"},
		"renew ≥ lease":        {func(c *sharding.Config) { c.RenewDeadline = 20 * time.Second }, "RenewDeadline"},
		"retry ≥ renew":        {func(c *sharding.Config) { c.RetryPeriod = 10 * time.Second }, "RetryPeriod"},
		"negative grace":       {func(c *sharding.Config) { c.GracePeriod = -1 }, "GracePeriod"},
		"lease under defaults": {func(c *sharding.Config) { c.LeaseDuration = 5 * time.Second }, "LeaseDuration"},
	} {
		c := ok()
		tc.edit(&c)
		_, err := sharding.New(c)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "sharding: ") {
			t.Errorf("%s: New returned %v, want an error mentioning %q", name, err, tc.want)
		}
	}
}
