package sharding

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// This file is the sharded cache: an informer that holds only the objects
// of the shards its replica holds.
//
// # Shape
//
// One store (a cache.Indexer, indexed by shard) per informer, fed by
// list+watch loops that each cover part of the held shards:
//
//   - Where the server filters (FilterServer), one loop per held shard,
//     listing and watching that shard's KEP-5866 range. Gaining a shard
//     starts its loop, releasing one stops it: the other shards' loops are
//     never touched, so shards that did not move are not listed again, and
//     a move costs the server one LIST of the moved shard's objects.
//   - Where it does not (FilterClient: the gate is off, or the server is
//     older), one loop that lists and watches everything and keeps only
//     the held shards' objects. Gaining a shard restarts it (one full
//     LIST: the objects of the gained shard were dropped, and a server that
//     ignores the selector can give them no other way); releasing one only
//     drops its objects.
//
// The alternatives, measured in TestCacheShapes: one watch per replica
// with the held ranges merged in one selector has to be restarted, and so
// re-list every held shard, at every move; the per-shard loops keep S/N
// watches open per replica (S in all on the server, each event evaluated
// against each watch of the resource by the watch cache) and re-list only
// what moved.
//
// Every object is also filtered on the client, in both modes: a hash per
// object is cheap, and a server that stops honouring the selector (or a
// proxy that drops it) never puts a foreign object in the store.
//
// Each loop marks its shards synced once its first LIST is in the store;
// the replica admits a shard's keys only once every running sharded
// informer has synced it (see Replica.sync). A released shard's objects
// leave the store without Delete events: a handler that saw a Delete would
// act on the object's absence, while the object still exists.

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
}

func setGauge(g Gauge, v float64) {
	if g != nil {
		g.Set(v)
	}
}

// shardIndex indexes every sharded informer's store by shard (the
// decimal shard number).
const shardIndex = "sharding.go-coalesce.io/shard"

// Informer retry delays after a failed LIST or watch.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// informer is the sharded informer of one resource. It implements
// cache.SharedIndexInformer.
//
// Handlers are called synchronously, in the order of the changes, by the
// goroutine that applied the change, with the informer's lock held: they
// must be cheap (enqueue a key) and must not call the informer's
// AddEventHandler, RemoveEventHandler or Run. They may read its store.
type informer struct {
	r       *Replica
	lw      cache.ListerWatcherWithContext
	name    string // the resource's Go type, for logs and errors
	primary bool   // Config.Object's informer: its mode is Replica.Filtering

	// indexer holds the objects of the shards the informer fills or has
	// filled; it has its own lock, so handlers may read it.
	indexer cache.Indexer

	mu sync.Mutex // protects the fields below, and orders store changes with handler calls
	// handlers are called for every change, in registration order.
	handlers  []*registration
	transform cache.TransformFunc
	// target are the shards the replica holds (being filled or synced);
	// synced are those whose first LIST is in the store.
	target, synced []bool
	// loops are the running list+watch loops: by shard in server mode,
	// one under key clientLoop in client mode.
	loops   map[int]*loop
	mode    Filtering
	decided bool // the probe has answered: mode is known
	ctx     context.Context
	wg      sync.WaitGroup // the loops and the probe
	running bool           // Run has been called
	stopped bool           // Run has returned
	lastRV  string
	errFn   cache.WatchErrorHandlerWithContext
	// merged (tests only, to measure the alternative): with the server
	// filtering, one loop for every held shard, its ranges merged into
	// one selector, restarted whenever the held shards change.
	merged bool
}

// clientLoop keys the one loop of client mode in informer.loops.
const clientLoop = -1

// loop is one list+watch loop: of one shard's range (server mode) or of
// everything (client mode).
type loop struct {
	shard  int // or clientLoop
	cancel context.CancelFunc
	// sel is the selector of the merged loop (tests only), and target
	// the shards it was started for.
	sel    string
	target []bool
}

// registration is a handler as registered. The objects already in the
// store are replayed to it as AddEventHandler registers it, so it has
// synced when the informer has.
type registration struct {
	inf *informer
	h   cache.ResourceEventHandler
}

func (g *registration) HasSynced() bool { return g.inf.HasSynced() }

func (g *registration) HasSyncedChecker() cache.DoneChecker { return g.inf.HasSyncedChecker() }

func newInformer(r *Replica, lw cache.ListerWatcher, obj runtime.Object, indexers cache.Indexers, primary bool) *informer {
	inf := &informer{
		r:       r,
		lw:      cache.ToListerWatcherWithContext(lw),
		name:    reflect.TypeOf(obj).String(),
		primary: primary,
		target:  make([]bool, r.shards),
		synced:  make([]bool, r.shards),
		loops:   make(map[int]*loop),
	}
	all := cache.Indexers{shardIndex: func(obj any) ([]string, error) {
		s, ok := r.ShardOfObject(obj)
		if !ok {
			return nil, nil
		}
		return []string{strconv.Itoa(s)}, nil
	}}
	for k, f := range indexers {
		all[k] = f
	}
	inf.indexer = cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, all)
	return inf
}

// Run fills the store with the held shards until stopCh is closed. It
// first asks the server, with one LIST of at most one object, whether it
// honours ListOptions.ShardSelector, and logs the mode it chose. While it
// runs, the replica admits a shard's keys only once this informer has
// synced the shard.
func (inf *informer) Run(stopCh <-chan struct{}) {
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

// RunWithContext is Run with a context.
func (inf *informer) RunWithContext(ctx context.Context) {
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

	inf.r.addInformer(inf)
	defer inf.r.removeInformer(inf)
	inf.wg.Go(func() { inf.probe(ctx) })
	<-ctx.Done()
	inf.mu.Lock()
	for k, l := range inf.loops {
		l.cancel()
		delete(inf.loops, k)
	}
	inf.mu.Unlock()
	inf.wg.Wait()
	inf.mu.Lock()
	inf.stopped = true
	inf.mu.Unlock()
}

// probe decides the mode: a LIST of at most one object with a selector
// that matches everything (one range, [0, 2^64)) tells whether the server
// echoes ShardInfo. It
// retries until it has an answer or ctx ends, then starts the loops of the
// shards held by then.
func (inf *informer) probe(ctx context.Context) {
	sel := Selector(inf.r.field, 1, []int{0}).String()
	backoff := minBackoff
	for {
		// A consistent read: resourceVersion "0" would be served from
		// the watch cache, which ignores the limit on some versions.
		list, err := inf.lw.ListWithContext(ctx, metav1.ListOptions{ShardSelector: sel, Limit: 1})
		if err == nil {
			mode := FilterClient
			if _, ok := shardInfoOf(list); ok {
				mode = FilterServer
			}
			inf.mu.Lock()
			inf.decided = true
			inf.mode = mode
			inf.follow()
			inf.mu.Unlock()
			inf.logMode(mode, "")
			return
		}
		inf.watchError(ctx, err)
		if !backOff(ctx, &backoff) {
			return
		}
	}
}

func (inf *informer) logMode(mode Filtering, why string) {
	if mode == FilterServer {
		klog.InfoS("sharding: the server filters by shard (ShardedListAndWatch): listing and watching each held shard's range", "resource", inf.name, "ring", inf.r.cfg.Name)
	} else {
		if why == "" {
			why = "the server ignores ListOptions.ShardSelector (feature gate ShardedListAndWatch off, or kube-apiserver older than 1.36)"
		}
		klog.InfoS("sharding: watching every object and filtering by shard on the client", "resource", inf.name, "ring", inf.r.cfg.Name, "reason", why)
	}
	if inf.primary {
		setGauge(inf.r.cfg.Metrics.ServerFiltering, map[Filtering]float64{FilterServer: 1, FilterClient: 0}[mode])
	}
}

// setShards makes the informer follow held, the shards the replica holds
// (sorted): it drops the objects of the shards no longer held, without
// events, and starts filling the new ones. Called by the replica's loop.
func (inf *informer) setShards(held []int) {
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
	for _, s := range dropped {
		inf.synced[s] = false
		for _, obj := range inf.byShard(s) {
			_ = inf.indexer.Delete(obj)
		}
	}
	if inf.running && !inf.stopped && inf.decided {
		inf.follow()
	}
	inf.setObjects()
}

// follow starts and stops loops to match target. inf.mu must be held.
func (inf *informer) follow() {
	if inf.ctx == nil || inf.ctx.Err() != nil {
		return
	}
	if inf.mode == FilterServer && !inf.merged {
		for s, l := range inf.loops {
			if s == clientLoop || !inf.target[s] {
				l.cancel()
				delete(inf.loops, s)
			}
		}
		for s, want := range inf.target {
			if _, ok := inf.loops[s]; want && !ok {
				inf.start(s)
			}
		}
		return
	}
	for s, l := range inf.loops {
		if s != clientLoop {
			l.cancel()
			delete(inf.loops, s)
		}
	}
	// Restart the full loop when a shard is not synced yet: its objects
	// were dropped (or never kept), and only a new LIST brings them.
	var need, any bool
	for s, want := range inf.target {
		any = any || want
		need = need || (want && !inf.synced[s])
	}
	l, ok := inf.loops[clientLoop]
	switch {
	case !any && ok:
		l.cancel()
		delete(inf.loops, clientLoop)
	case need, inf.merged && inf.mode == FilterServer && ok && !slices.Equal(l.target, inf.target):
		if ok {
			l.cancel()
		}
		inf.start(clientLoop)
	}
}

// start starts the loop of shard s (or clientLoop). inf.mu must be held.
func (inf *informer) start(s int) {
	ctx, cancel := context.WithCancel(inf.ctx)
	l := &loop{shard: s, cancel: cancel}
	if s == clientLoop && inf.merged && inf.mode == FilterServer {
		var held []int
		for i, want := range inf.target {
			if want {
				held = append(held, i)
			}
		}
		l.sel, l.target = Selector(inf.r.field, inf.r.shards, held).String(), slices.Clone(inf.target)
	}
	inf.loops[s] = l
	inf.wg.Go(func() { inf.listWatch(ctx, l) })
}

// current reports whether l is still the informer's loop for its shards.
// inf.mu must be held.
func (inf *informer) current(l *loop) bool { return inf.loops[l.shard] == l }

// keeps reports whether loop l may put an object of shard s in the store.
// inf.mu must be held.
func (inf *informer) keeps(l *loop, s int) bool {
	return inf.target[s] && (l.shard == clientLoop || l.shard == s)
}

// listWatch lists the loop's range, applies it, and watches from there,
// watching again from the last resourceVersion when a watch ends and
// listing again only when the server says that version is too old or a
// request fails.
func (inf *informer) listWatch(ctx context.Context, l *loop) {
	sel := l.sel
	if l.shard != clientLoop {
		sel = Selector(inf.r.field, inf.r.shards, []int{l.shard}).String()
	}
	backoff := minBackoff
	for ctx.Err() == nil {
		list, err := inf.lw.ListWithContext(ctx, metav1.ListOptions{ShardSelector: sel})
		if err != nil {
			inf.watchError(ctx, err)
			if !backOff(ctx, &backoff) {
				return
			}
			continue
		}
		if _, ok := shardInfoOf(list); sel != "" && !ok {
			inf.downgrade(l)
			return
		}
		rv, err := inf.replace(l, list)
		if err != nil {
			inf.watchError(ctx, err)
			if !sleepCtx(ctx, backoff) {
				return
			}
			continue
		}
		backoff = minBackoff
		for ctx.Err() == nil {
			var relist bool
			rv, relist = inf.watch(ctx, l, sel, rv, &backoff)
			if relist {
				break
			}
		}
	}
}

// watch watches from rv until the watch ends, and returns the last
// resourceVersion seen and whether the loop must list again: only when
// the server says rv is too old (or too new), since a LIST of a shard is
// what a move costs and a watch resumes without one. Other failures are
// retried after *backoff, which doubles up to maxBackoff and is reset by
// an event.
func (inf *informer) watch(ctx context.Context, l *loop, sel, rv string, backoff *time.Duration) (string, bool) {
	timeout := int64(300 + rand.IntN(300)) // as client-go: 5 to 10 minutes, so stuck watches end
	w, err := inf.lw.WatchWithContext(ctx, metav1.ListOptions{
		ShardSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout,
	})
	if err != nil {
		inf.watchError(ctx, err)
		if mustRelist(err) {
			return rv, true
		}
		backOff(ctx, backoff)
		return rv, false
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return rv, false
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, false
			}
			switch ev.Type {
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				inf.watchError(ctx, err)
				if mustRelist(err) {
					return rv, true
				}
				backOff(ctx, backoff)
				return rv, false
			case watch.Bookmark:
				if m, err := meta.Accessor(ev.Object); err == nil {
					rv = m.GetResourceVersion()
				}
			case watch.Added, watch.Modified, watch.Deleted:
				if next := inf.apply(l, ev.Type, ev.Object); next != "" {
					rv = next
				}
				*backoff = minBackoff
			}
		}
	}
}

// replace applies the LIST of loop l: the objects of its held shards are
// added or updated, those of its synced shards missing from the list are
// deleted (they were deleted while no watch ran), and its shards are
// synced. It returns the list's resourceVersion.
func (inf *informer) replace(l *loop, list runtime.Object) (string, error) {
	items, err := meta.ExtractList(list)
	if err != nil {
		return "", fmt.Errorf("sharding: %s: reading a LIST: %w", inf.name, err)
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return "", fmt.Errorf("sharding: %s: reading a LIST: %w", inf.name, err)
	}
	inf.mu.Lock()
	if !inf.current(l) {
		inf.mu.Unlock()
		return lm.GetResourceVersion(), nil
	}
	// A typed LIST's items are one array, and ExtractList returns pointers
	// into it: keeping one object would keep every object of the LIST. When
	// the client filters (the fallback's full LIST), the kept objects are
	// copied out, so that the others are freed with the list; when every
	// item is kept (the server filtered), nothing is copied.
	partial := false
	for _, item := range items {
		if s, ok := inf.r.ShardOfObject(item); !ok || !inf.keeps(l, s) {
			partial = true
			break
		}
	}
	seen := make(map[string]bool, len(items))
	for _, item := range items {
		if partial {
			if s, ok := inf.r.ShardOfObject(item); !ok || !inf.keeps(l, s) {
				continue
			}
			item = item.DeepCopyObject()
		}
		obj, s, key, ok := inf.admit(l, item)
		if !ok {
			continue
		}
		seen[key] = true
		old, exists, _ := inf.indexer.GetByKey(key)
		switch {
		case !exists:
			_ = inf.indexer.Add(obj)
			for _, h := range inf.handlers {
				h.h.OnAdd(obj, !inf.synced[s])
			}
		case resourceVersion(old) == "" || resourceVersion(old) != resourceVersion(obj):
			_ = inf.indexer.Update(obj)
			for _, h := range inf.handlers {
				h.h.OnUpdate(old, obj)
			}
		}
	}
	var newly bool
	for s := range inf.target {
		if !inf.keeps(l, s) {
			continue
		}
		for _, old := range inf.byShard(s) {
			key, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(old)
			if seen[key] {
				continue
			}
			_ = inf.indexer.Delete(old)
			for _, h := range inf.handlers {
				h.h.OnDelete(cache.DeletedFinalStateUnknown{Key: key, Obj: old})
			}
		}
		newly = newly || !inf.synced[s]
		inf.synced[s] = true
	}
	inf.lastRV = lm.GetResourceVersion()
	inf.setObjects()
	inf.mu.Unlock()
	if newly {
		inf.r.poke()
	}
	return lm.GetResourceVersion(), nil
}

// apply applies one watch event of loop l and returns the object's
// resourceVersion.
func (inf *informer) apply(l *loop, t watch.EventType, item runtime.Object) string {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	rv := resourceVersion(item)
	if !inf.current(l) {
		return rv
	}
	obj, _, key, ok := inf.admit(l, item)
	if !ok {
		return rv
	}
	old, exists, _ := inf.indexer.GetByKey(key)
	switch {
	case t == watch.Deleted:
		if !exists {
			return rv
		}
		_ = inf.indexer.Delete(old)
		inf.setObjects()
		for _, h := range inf.handlers {
			h.h.OnDelete(obj)
		}
	case exists:
		_ = inf.indexer.Update(obj)
		for _, h := range inf.handlers {
			h.h.OnUpdate(old, obj)
		}
	default:
		_ = inf.indexer.Add(obj)
		inf.setObjects()
		for _, h := range inf.handlers {
			h.h.OnAdd(obj, false)
		}
	}
	inf.lastRV = rv // an update leaves the count, and the gauge, as they were
	return rv
}

// admit filters on the client: it returns the (transformed) object, its
// shard and key if loop l keeps it. inf.mu must be held.
func (inf *informer) admit(l *loop, item runtime.Object) (any, int, string, bool) {
	s, ok := inf.r.ShardOfObject(item)
	if !ok || !inf.keeps(l, s) {
		return nil, 0, "", false
	}
	var obj any = item
	if inf.transform != nil {
		t, err := inf.transform(item)
		if err != nil {
			return nil, 0, "", false
		}
		obj = t
	}
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return nil, 0, "", false
	}
	return obj, s, key, true
}

// downgrade switches to client mode after a loop's sharded LIST came back
// without ShardInfo: the server stopped honouring the selector.
func (inf *informer) downgrade(l *loop) {
	inf.mu.Lock()
	if !inf.current(l) || inf.mode == FilterClient {
		inf.mu.Unlock()
		return
	}
	inf.mode = FilterClient
	// Every held shard is listed again by the full loop; those already
	// synced keep their objects meanwhile (the LIST updates them).
	for k, o := range inf.loops {
		o.cancel()
		delete(inf.loops, k)
	}
	ctx := inf.ctx
	if ctx != nil && ctx.Err() == nil && slices.Contains(inf.target, true) {
		inf.start(clientLoop)
	}
	inf.mu.Unlock()
	inf.logMode(FilterClient, "a sharded LIST came back without ListMeta.ShardInfo: the server stopped honouring ListOptions.ShardSelector")
}

// byShard returns the stored objects of shard s.
func (inf *informer) byShard(s int) []any {
	objs, _ := inf.indexer.ByIndex(shardIndex, strconv.Itoa(s))
	return objs
}

// setObjects updates the Objects gauge of the primary informer. Gauges
// are documented as cheap and safe for concurrent use, so it may be called
// under inf.mu.
func (inf *informer) setObjects() {
	// ListKeys allocates every key: only when someone reads the gauge.
	if inf.primary && inf.r.cfg.Metrics.Objects != nil {
		setGauge(inf.r.cfg.Metrics.Objects, float64(len(inf.indexer.ListKeys())))
	}
}

// hasSynced reports whether shard s is synced.
func (inf *informer) hasSynced(s int) bool {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	return inf.synced[s]
}

// filtering returns the mode in force.
func (inf *informer) filtering() Filtering {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	return inf.mode
}

func (inf *informer) watchError(ctx context.Context, err error) {
	inf.mu.Lock()
	fn := inf.errFn
	inf.mu.Unlock()
	if fn != nil {
		fn(ctx, nil, err)
		return
	}
	if !errors.Is(err, context.Canceled) {
		klog.FromContext(ctx).V(2).Info("sharding: list or watch failed", "resource", inf.name, "err", err)
	}
}

// The rest is cache.SharedIndexInformer.

// AddEventHandler registers h; it is first given an Add for every object
// in the store (isInInitialList true), then every change, synchronously
// (see informer).
func (inf *informer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	if inf.stopped {
		return nil, fmt.Errorf("sharding: %s: handler added to a stopped informer", inf.name)
	}
	g := &registration{inf: inf, h: h}
	for _, obj := range inf.indexer.List() {
		h.OnAdd(obj, true)
	}
	inf.handlers = append(inf.handlers, g)
	return g, nil
}

// AddEventHandlerWithResyncPeriod is AddEventHandler: the sharded
// informer never resyncs (a gained shard's objects are enqueued by the
// replica instead).
func (inf *informer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, _ time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return inf.AddEventHandler(h)
}

// AddEventHandlerWithOptions is AddEventHandler.
func (inf *informer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, _ cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return inf.AddEventHandler(h)
}

// RemoveEventHandler unregisters a handler.
func (inf *informer) RemoveEventHandler(reg cache.ResourceEventHandlerRegistration) error {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	inf.handlers = slices.DeleteFunc(inf.handlers, func(g *registration) bool { return g == reg })
	return nil
}

// GetStore returns the store: the objects of the shards held.
func (inf *informer) GetStore() cache.Store { return inf.indexer }

// GetIndexer returns the store with its indexes.
func (inf *informer) GetIndexer() cache.Indexer { return inf.indexer }

// AddIndexers adds indexes to the store.
func (inf *informer) AddIndexers(indexers cache.Indexers) error {
	return inf.indexer.AddIndexers(indexers)
}

// GetController returns a Controller view of the informer.
func (inf *informer) GetController() cache.Controller { return informerController{inf} }

// HasSynced reports whether every shard the replica holds is synced.
func (inf *informer) HasSynced() bool {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	if !inf.running {
		return false
	}
	for s, want := range inf.target {
		if want && !inf.synced[s] {
			return false
		}
	}
	return true
}

// HasSyncedChecker returns HasSynced as a cache.DoneChecker.
func (inf *informer) HasSyncedChecker() cache.DoneChecker {
	return doneChecker{inf.HasSynced, inf.IsStopped, inf.name}
}

// LastSyncResourceVersion returns the resourceVersion of the last change
// applied, of any shard.
func (inf *informer) LastSyncResourceVersion() string {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	return inf.lastRV
}

// SetWatchErrorHandler sets the function called when a LIST or watch
// fails (its Reflector argument is nil: there is no reflector).
func (inf *informer) SetWatchErrorHandler(h cache.WatchErrorHandler) error {
	return inf.SetWatchErrorHandlerWithContext(func(_ context.Context, r *cache.Reflector, err error) { h(r, err) })
}

// SetWatchErrorHandlerWithContext is SetWatchErrorHandler with a context.
func (inf *informer) SetWatchErrorHandlerWithContext(h cache.WatchErrorHandlerWithContext) error {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	if inf.running {
		return fmt.Errorf("sharding: %s: informer has already started", inf.name)
	}
	inf.errFn = h
	return nil
}

// SetTransform sets a function applied to every object before it is
// stored. It must keep the metadata that the shard is computed from.
func (inf *informer) SetTransform(f cache.TransformFunc) error {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	if inf.running {
		return fmt.Errorf("sharding: %s: informer has already started", inf.name)
	}
	inf.transform = f
	return nil
}

// IsStopped reports whether Run has returned.
func (inf *informer) IsStopped() bool {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	return inf.stopped
}

type informerController struct{ inf *informer }

func (c informerController) Run(stopCh <-chan struct{})          { c.inf.Run(stopCh) }
func (c informerController) RunWithContext(ctx context.Context)  { c.inf.RunWithContext(ctx) }
func (c informerController) HasSynced() bool                     { return c.inf.HasSynced() }
func (c informerController) HasSyncedChecker() cache.DoneChecker { return c.inf.HasSyncedChecker() }
func (c informerController) LastSyncResourceVersion() string     { return c.inf.LastSyncResourceVersion() }

// doneChecker polls a HasSynced function; its channel closes once it
// returns true. The poll is every 100ms, as client-go's WaitForCacheSync;
// it ends without closing the channel once stopped returns true.
type doneChecker struct {
	synced, stopped func() bool
	name            string
}

func (d doneChecker) Name() string { return d.name }

func (d doneChecker) Done() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for !d.synced() {
			if d.stopped() {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		close(ch)
	}()
	return ch
}

// mustRelist reports whether a watch error means the resourceVersion it
// started from cannot be watched from: it is compacted away (410), or
// ahead of the server (after a restore).
func mustRelist(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)
}

// shardInfoOf returns the selector a LIST answer says it was filtered by.
func shardInfoOf(list runtime.Object) (string, bool) {
	if u, ok := list.(*unstructured.UnstructuredList); ok {
		sel, found, _ := unstructured.NestedString(u.Object, "metadata", "shardInfo", "selector")
		return sel, found
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return "", false
	}
	if s, ok := lm.(metav1.ShardedListInterface); ok && s.GetShardInfo() != nil {
		return s.GetShardInfo().Selector, true
	}
	return "", false
}

func resourceVersion(obj any) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetResourceVersion()
}

// backOff sleeps *b, or less if ctx ends, and doubles *b up to
// maxBackoff for the next failure; it reports whether ctx is live.
func backOff(ctx context.Context, b *time.Duration) bool {
	live := sleepCtx(ctx, *b)
	*b = min(2**b, maxBackoff)
	return live
}

// sleepCtx sleeps d, or less if ctx ends; it reports whether ctx is live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
