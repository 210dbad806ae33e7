package shardcache

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/client-go/tools/cache"
)

// The rest is cache.SharedIndexInformer.

// registration is a handler as registered. The objects already in the
// store are replayed to it as AddEventHandler registers it, so it has
// synced when the informer has.
type registration struct {
	inf *Informer
	h   cache.ResourceEventHandler
}

func (g *registration) HasSynced() bool { return g.inf.HasSynced() }

func (g *registration) HasSyncedChecker() cache.DoneChecker { return g.inf.HasSyncedChecker() }

// AddEventHandler registers h; it is first given an Add for every object
// in the store (isInInitialList true), then every change, synchronously
// (see Informer).
func (inf *Informer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
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
func (inf *Informer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, _ time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return inf.AddEventHandler(h)
}

// AddEventHandlerWithOptions is AddEventHandler.
func (inf *Informer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, _ cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return inf.AddEventHandler(h)
}

// RemoveEventHandler unregisters a handler.
func (inf *Informer) RemoveEventHandler(reg cache.ResourceEventHandlerRegistration) error {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	inf.handlers = slices.DeleteFunc(inf.handlers, func(g *registration) bool { return g == reg })
	return nil
}

// GetStore returns the store: the objects of the shards held.
func (inf *Informer) GetStore() cache.Store { return inf.indexer }

// GetIndexer returns the store with its indexes.
func (inf *Informer) GetIndexer() cache.Indexer { return inf.indexer }

// AddIndexers adds indexes to the store.
func (inf *Informer) AddIndexers(indexers cache.Indexers) error {
	return inf.indexer.AddIndexers(indexers)
}

// GetController returns a Controller view of the informer.
func (inf *Informer) GetController() cache.Controller { return controller{inf} }

// HasSynced reports whether the informer runs and the shards held were
// synced once. It stays true while shards move, as client-go's informers'
// HasSynced stays true through relists: controller-runtime's cache makes
// every read wait for it, and a move must not stall the reads of the
// shards that did not move. Whether a shard's keys may run is Synced's.
func (inf *Informer) HasSynced() bool {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	inf.latch()
	return inf.everSynced
}

// HasSyncedChecker returns HasSynced as a cache.DoneChecker.
func (inf *Informer) HasSyncedChecker() cache.DoneChecker {
	return doneChecker{inf.HasSynced, inf.IsStopped, inf.name}
}

// LastSyncResourceVersion returns the resourceVersion of the last change
// applied, of any shard.
func (inf *Informer) LastSyncResourceVersion() string {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	return inf.lastRV
}

// SetWatchErrorHandler sets the function called when a LIST or watch
// fails (its Reflector argument is nil: see failed).
func (inf *Informer) SetWatchErrorHandler(h cache.WatchErrorHandler) error {
	return inf.SetWatchErrorHandlerWithContext(func(_ context.Context, r *cache.Reflector, err error) { h(r, err) })
}

// SetWatchErrorHandlerWithContext is SetWatchErrorHandler with a context.
func (inf *Informer) SetWatchErrorHandlerWithContext(h cache.WatchErrorHandlerWithContext) error {
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
func (inf *Informer) SetTransform(f cache.TransformFunc) error {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	if inf.running {
		return fmt.Errorf("sharding: %s: informer has already started", inf.name)
	}
	inf.transform = f
	return nil
}

// IsStopped reports whether Run has returned.
func (inf *Informer) IsStopped() bool {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	return inf.stopped
}

type controller struct{ inf *Informer }

func (c controller) Run(stopCh <-chan struct{})          { c.inf.Run(stopCh) }
func (c controller) RunWithContext(ctx context.Context)  { c.inf.RunWithContext(ctx) }
func (c controller) HasSynced() bool                     { return c.inf.HasSynced() }
func (c controller) HasSyncedChecker() cache.DoneChecker { return c.inf.HasSyncedChecker() }
func (c controller) LastSyncResourceVersion() string     { return c.inf.LastSyncResourceVersion() }

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
