package sharding

import (
	"context"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/go-coalesce/workqueue/sharding/internal/shardcache"
)

// The sharded cache is package internal/shardcache (its package comment
// describes its shape and guarantees): informers that hold only the
// objects of the shards the replica holds, fed by client-go's Reflector.
// It knows shards and ListerWatchers, not Leases or the Replica; this file
// is the seam: newInformer hands it the ring's shape and the replica's
// callbacks, and the replica's loop calls SetShards, Synced and ByShard
// (exec.go).

// informer is the sharded informer of one resource.
type informer = shardcache.Informer

// Filtering says who filters the sharded list and watch by shard.
type Filtering int32

const (
	// FilterClient: the server ignored ListOptions.ShardSelector (its
	// ShardedListAndWatch gate is off, or it is older than 1.36); the
	// replica watches every object and keeps those of its shards. It is
	// also the value before the first LIST has answered.
	FilterClient Filtering = iota
	// FilterServer: the server echoed the selector in ListMeta.ShardInfo;
	// the replica lists and watches only its shards' ranges.
	FilterServer
)

func (f Filtering) String() string {
	if f == FilterServer {
		return "server"
	}
	return "client"
}

// newInformer builds a sharded informer of obj's type on lw for r; the
// primary one (Config.Object's) sets the ServerFiltering and Objects
// gauges.
func newInformer(r *Replica, lw cache.ListerWatcher, obj runtime.Object, indexers cache.Indexers, primary bool) *informer {
	cfg := shardcache.Config{
		ListerWatcher: lw,
		Object:        obj,
		Indexers:      indexers,
		Shards:        r.shards,
		ShardOf:       r.ShardOfObject,
		Selector: func(shards []int) string {
			if len(shards) == 0 {
				return ""
			}
			return Selector(r.field, r.shards, shards).String()
		},
		Ring: r.cfg.Name,
		Running: func(inf *informer, running bool) {
			if running {
				r.addInformer(inf)
			} else {
				r.removeInformer(inf)
			}
		},
		Synced: r.poke,
		// Every list and watch of the cache reports to the permission
		// tracker (forbidden.go): a forbidden list or watch of the
		// sharded resource ends Run as a forbidden Lease request does.
		Failed:    r.refused,
		Succeeded: r.granted,
		Listed:    r.listed,
	}
	if primary {
		// Typed nil gauges must stay untyped nils for the cache.
		if g := r.cfg.Metrics.ServerFiltering; g != nil {
			cfg.ServerFiltering = g
		}
		if g := r.cfg.Metrics.Objects; g != nil {
			cfg.Objects = g
		}
	}
	return shardcache.New(cfg)
}

// informerMissing returns the error Run returns when a replica of cfg
// has no primary informer to run or to wait for: Config.ListerWatcher is
// nil and NewInformer has not built one (primary is nil). New cannot
// tell, as NewInformer may still be called after it (controller-runtime's
// cache builds its informers when a controller starts); Run can, and
// refuses at once rather than wait for shards that would never sync.
func informerMissing(cfg Config, primary *informer) error {
	if cfg.ListerWatcher != nil || primary != nil {
		return nil
	}
	return fmt.Errorf("sharding: Config.ListerWatcher is nil and no informer of Config.Object's type (%T) was built "+
		"through NewInformer before Run: set Config.ListerWatcher, or build the informer first", cfg.Object)
}

// filtering converts the cache's mode.
func filtering(inf *informer) Filtering {
	if inf.ServerFilters() {
		return FilterServer
	}
	return FilterClient
}

// notRun is the primary informer as NewInformer gives it when Run runs
// it: the caller's Run waits for the end of its stop channel without
// running it again.
type notRun struct{ *informer }

func (n notRun) Run(stopCh <-chan struct{})         { <-stopCh }
func (n notRun) RunWithContext(ctx context.Context) { <-ctx.Done() }

// sameType reports whether a and b are objects of one resource type: the
// same Go type and, for unstructured objects, the same kind.
func sameType(a, b runtime.Object) bool {
	if a == nil || b == nil || reflect.TypeOf(a) != reflect.TypeOf(b) {
		return false
	}
	return a.GetObjectKind().GroupVersionKind() == b.GetObjectKind().GroupVersionKind() ||
		a.GetObjectKind().GroupVersionKind().Empty() || b.GetObjectKind().GroupVersionKind().Empty()
}
