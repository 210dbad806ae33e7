// Package shardcache is the sharded cache of package sharding: an informer
// that holds only the objects of the shards its replica holds, fed by
// client-go's own cache.Reflector.
//
// # Shape
//
// One store (a cache.Indexer, indexed by shard) per informer, fed by
// Reflectors that each fill part of the held shards ("feeds"):
//
//   - Where the server filters (server mode), one Reflector per held shard,
//     its ListerWatcher adding the shard's KEP-5866 ShardSelector. Gaining
//     a shard starts its Reflector, releasing one stops it: the other
//     shards' Reflectors are never touched, so shards that did not move are
//     not listed again, and a move costs the server one paged list of the
//     moved shard's objects.
//   - Where it does not (client mode: the ShardedListAndWatch gate is off,
//     or the server is older), one Reflector for the whole resource that
//     keeps only the held shards' objects. Gaining shards restarts it, once
//     per SetShards however many were gained (the gained shards' objects
//     were dropped, and a server that ignores the selector can give them no
//     other way); releasing one only drops its objects.
//
// The Reflector brings what a hand-written loop lacked: it lists by pages,
// follows bookmarks, relists on 410 Gone and backs off on failures. Each
// list is a paged, consistent read (listwatch.go says why pages and not a
// watch-list stream): a move in client mode costs the server pages from
// its watch cache, not a LIST of every object built in its memory.
//
// # What the Reflector does not offer, and the code it forces
//
//   - Filtering before accumulation (listwatch.go): each Reflector's
//     ListerWatcher drops the objects of shards it does not fill from every
//     LIST page and every watch event, so the pager's accumulated list
//     never holds another shard's object. The same filter is the client-side
//     filter of both modes: a server that stops honouring the selector (or
//     a proxy that drops it) never puts a foreign object in the store.
//   - A store confined to its shards (store.go): several Reflectors feed one
//     indexer, so each writes through a cache.ReflectorStore that applies
//     only its own shards' changes and, on Replace, computes the adds,
//     updates and deletes as an informer would, for its shards only: a
//     shard's relist never touches another shard's objects.
//   - Mode detection (mode.go): a LIST of at most one object tells whether
//     the server echoes ListMeta.ShardInfo; a sharded LIST without it
//     switches the informer to client mode.
//
// # Guarantees
//
// A shard is synced once the first list of the feed that fills it is in
// the store (Synced); the replica admits a shard's keys only then. A
// released shard's objects leave the store without Delete events: a
// handler that saw a Delete would act on the object's absence, while the
// object still exists. HasSynced is monotonic, as client-go's: true once
// the held shards were first synced, and it stays true when shards move,
// since controller-runtime's cache makes every read wait for it; per-shard
// admission is the replica's job, through Synced.
package shardcache

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Gauge is a metric the cache sets. A prometheus.Gauge satisfies it.
type Gauge interface{ Set(float64) }

// Config is what the cache needs of its replica: the ring's shape, and
// callbacks. Every func may be nil, except ShardOf and Selector.
type Config struct {
	// ListerWatcher lists and watches the resource; Object is an object of
	// its type; Indexers are added to the store's shard index.
	ListerWatcher cache.ListerWatcher
	Object        runtime.Object
	Indexers      cache.Indexers
	// Shards is the number of shards; ShardOf returns an object's shard
	// (false without metadata); Selector returns the KEP-5866 selector of
	// the given shards ("" for none).
	Shards   int
	ShardOf  func(obj any) (int, bool)
	Selector func(shards []int) string
	// Ring names the ring in logs.
	Ring string
	// Running is called with true when Run starts, and false when it ends:
	// the replica admits a shard's keys only once every running informer
	// has synced it.
	Running func(inf *Informer, running bool)
	// Synced is called when shards become synced (to poke the replica).
	Synced func()
	// Failed is called after every failed request (verb "list" or
	// "watch", resource the plural resource name), Succeeded after every
	// successful one.
	Failed    func(verb, resource string, err error)
	Succeeded func(verb, resource string)
	// ServerFiltering is set to 1 in server mode, 0 in client mode;
	// Objects to the number of objects in the store.
	ServerFiltering, Objects Gauge
	// Listed, if not nil, is called as each list starts (its first
	// page is sent), with the resource and the list's cause (metrics.go).
	Listed func(resource, cause string)
}

// ShardIndex indexes the store by shard (the decimal shard number).
const ShardIndex = "sharding.go-coalesce.io/shard"

// Informer is the sharded informer of one resource. It implements
// cache.SharedIndexInformer.
//
// Handlers are called synchronously, in the order of the changes, by the
// goroutine that applied the change, with the informer's lock held: they
// must be cheap (enqueue a key) and must not call the informer's
// AddEventHandler, RemoveEventHandler or Run. They may read its store.
type Informer struct {
	cfg      Config
	lw       cache.ListerWatcherWithContext
	name     string // the resource's Go type, for logs and errors
	resource string // the plural resource name, for Failed and Succeeded

	// indexer holds the objects of the shards the informer fills or has
	// filled; it has its own lock, so handlers may read it.
	indexer cache.Indexer

	mu sync.Mutex // protects the fields below, and orders store changes with handler calls
	// handlers are called for every change, in registration order.
	handlers  []*registration
	transform cache.TransformFunc
	errFn     cache.WatchErrorHandlerWithContext
	// target are the shards the replica holds (being filled or synced);
	// synced are those whose first list is in the store.
	target, synced []bool
	// everSynced latches HasSynced (see the package comment).
	everSynced bool
	// feeds are the running Reflectors (feeds.go): by shard in server
	// mode, one under key allShards in client mode.
	feeds   map[int]*feed
	server  bool // server mode
	decided bool // the probe has answered: the mode is known
	ctx     context.Context
	wg      sync.WaitGroup // the Reflectors and the probe
	running bool           // Run has been called
	stopped bool           // Run has returned
	lastRV  string
	// foreign counts objects handed to a store that it did not keep
	// because of their shard (tests: the ListerWatcher filters first).
	foreign int
	// objects is the number of objects in the indexer, kept by
	// addObject and deleteObject (store.go): the indexer has no cheap
	// length, and ListKeys allocates every key, O(n) per event.
	objects int
}

// New builds the sharded informer of cfg's resource.
func New(cfg Config) *Informer {
	inf := &Informer{
		cfg:      cfg,
		lw:       cache.ToListerWatcherWithContext(cfg.ListerWatcher),
		name:     reflect.TypeOf(cfg.Object).String(),
		resource: resourceOf(cfg.Object),
		target:   make([]bool, cfg.Shards),
		synced:   make([]bool, cfg.Shards),
		feeds:    make(map[int]*feed),
	}
	all := cache.Indexers{ShardIndex: func(obj any) ([]string, error) {
		s, ok := cfg.ShardOf(obj)
		if !ok {
			return nil, nil
		}
		return []string{strconv.Itoa(s)}, nil
	}}
	for k, f := range cfg.Indexers {
		all[k] = f
	}
	inf.indexer = cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, all)
	return inf
}

// Run fills the store with the held shards until stopCh is closed.
func (inf *Informer) Run(stopCh <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	inf.RunWithContext(ctx)
}

// RunWithContext fills the store with the held shards until ctx ends. It
// first asks the server, with one LIST of at most one object, whether it
// honours ListOptions.ShardSelector, and logs the mode it chose.
func (inf *Informer) RunWithContext(ctx context.Context) {
	inf.mu.Lock()
	if inf.running {
		// Run once; a second caller waits like the first (a cache
		// that gets this informer twice treats Run's return as a stop).
		inf.mu.Unlock()
		<-ctx.Done()
		return
	}
	inf.running = true
	inf.ctx = ctx
	inf.mu.Unlock()

	if inf.cfg.Running != nil {
		inf.cfg.Running(inf, true)
		defer inf.cfg.Running(inf, false)
	}
	inf.wg.Go(func() { inf.probe(ctx) })
	<-ctx.Done()
	inf.mu.Lock()
	for k, f := range inf.feeds {
		f.cancel()
		delete(inf.feeds, k)
	}
	inf.mu.Unlock()
	inf.wg.Wait()
	inf.mu.Lock()
	inf.stopped = true
	inf.mu.Unlock()
}

// SetShards makes the informer follow held, the shards the replica fills
// (those it holds, and those it keeps warm or fills ahead of a move):
// it drops the objects of the shards no longer held, without events, and
// starts filling the new ones (in client mode, with one restart of the
// one Reflector however many shards were gained).
func (inf *Informer) SetShards(held []int) {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	want := make([]bool, len(inf.target))
	for _, s := range held {
		want[s] = true
	}
	if slices.Equal(want, inf.target) {
		return
	}
	var dropped []int
	for s := range want {
		if inf.target[s] && !want[s] {
			dropped = append(dropped, s)
		}
	}
	inf.target = want
	f := inf.feeds[allShards]
	for _, s := range dropped {
		inf.synced[s] = false
		if f != nil {
			f.covers[s] = false // its objects are dropped from now on: a gain lists again
		}
		for _, obj := range inf.byShard(s) {
			inf.deleteObject(obj)
		}
	}
	if inf.running && !inf.stopped && inf.decided {
		inf.follow()
	}
	inf.setObjects()
}

// Synced reports whether shard s is synced: held, and the first list of
// the feed that fills it is in the store.
func (inf *Informer) Synced(s int) bool {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	return inf.synced[s]
}

// ByShard returns the stored objects of shard s.
func (inf *Informer) ByShard(s int) []any { return inf.byShard(s) }

func (inf *Informer) byShard(s int) []any {
	objs, _ := inf.indexer.ByIndex(ShardIndex, strconv.Itoa(s))
	return objs
}

// ServerFilters reports whether the server filters by shard (server
// mode); false in client mode, and until the first LIST has answered.
func (inf *Informer) ServerFilters() bool {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	return inf.server
}

// setObjects updates the Objects gauge. Gauges are documented as cheap
// and safe for concurrent use, so it may be called under inf.mu.
func (inf *Informer) setObjects() {
	if inf.cfg.Objects != nil {
		inf.cfg.Objects.Set(float64(inf.objects))
	}
}

// latch makes HasSynced true for good once the held shards are synced
// while running. inf.mu must be held.
func (inf *Informer) latch() {
	if inf.everSynced || !inf.running {
		return
	}
	for s, want := range inf.target {
		if want && !inf.synced[s] {
			return
		}
	}
	inf.everSynced = true
}

// DebugState describes the informer, for test failures.
func (inf *Informer) DebugState() string {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	var feeds []int
	for s := range inf.feeds {
		feeds = append(feeds, s)
	}
	slices.Sort(feeds)
	held := func(b []bool) []int {
		var out []int
		for i, v := range b {
			if v {
				out = append(out, i)
			}
		}
		return out
	}
	mode := map[bool]string{false: "client", true: "server"}[inf.server]
	return fmt.Sprintf("mode %s decided %v target %v synced %v feeds %v objects %d",
		mode, inf.decided, held(inf.target), held(inf.synced), feeds, len(inf.indexer.ListKeys()))
}

// logger returns the informer's logger for ctx.
func (inf *Informer) logger(ctx context.Context) klog.Logger {
	return klog.FromContext(ctx).WithValues("resource", inf.name, "ring", inf.cfg.Ring)
}
