package sharding

import (
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
// (loop.go).

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

// Gauge is the one method of a metric the replica sets. A
// prometheus.Gauge satisfies it.
type Gauge interface{ Set(float64) }

// Metrics are the gauges a replica keeps up to date. Each may be nil.
// They are set outside the replica's locks, from the replica's loop and
// from the sharded informers' goroutines; Set must be safe for concurrent
// use and cheap.
type Metrics struct {
	// ServerFiltering is 1 while the server filters the primary
	// informer's list and watch by shard (FilterServer), 0 while the
	// replica filters on the client (FilterClient).
	ServerFiltering Gauge
	// Shards is the number of shards whose keys the replica admits.
	Shards Gauge
	// Objects is the number of objects in the primary sharded informer.
	Objects Gauge
	// Forbidden is 1 while the API server refuses (403) a kind of request
	// the replica needs, 0 otherwise (forbidden.go; see Replica.Ready). It
	// is set under the permission tracker's lock.
	Forbidden Gauge
	// Mismatch is 1 once the replica refuses its ring, whose Leases were
	// written with another Config.Shards or Config.Field (Run returns the
	// error, which wraps ErrRingMismatch), 0 otherwise (shardcount.go).
	Mismatch Gauge
	// WithoutUID counts the objects the primary informer added without a
	// metadata.uid while sharding by UID (Field = FieldUID): they all
	// hash alike, into one shard. The API server sets a UID on every
	// object; client-go's fake clientset does not (replica.go).
	WithoutUID Gauge
}

func setGauge(g Gauge, v float64) {
	if g != nil {
		g.Set(v)
	}
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

// filtering converts the cache's mode.
func filtering(inf *informer) Filtering {
	if inf.ServerFilters() {
		return FilterServer
	}
	return FilterClient
}
