package shardcache

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
)

// feed is one Reflector filling part of the held shards: one shard (server
// mode), or every held shard (shard allShards: client mode, and merged).
type feed struct {
	shard  int
	sel    string // the ShardSelector its requests carry; "" in client mode
	cancel context.CancelFunc
	// covers are the shards the one feed of client mode (and merged)
	// fills: those held when it started, less those released since (it
	// dropped their objects from then on). nil for a shard's feed.
	covers []bool
	// listed is set once its first list is in the store. inf.mu.
	listed bool
	// downgrade is set on the feed that downgrade started. inf.mu.
	downgrade bool
}

// feedStore is the cache.ReflectorStore of feed f: it applies f's changes
// to the shared indexer, for the shards f fills and the informer holds
// only, and calls the handlers. client-go's stores (a DeltaFIFO, or an
// informer's Indexer) replace the whole store on a relist; several
// Reflectors share this one, so each may replace only its own shards.
type feedStore struct {
	inf *Informer
	f   *feed
}

func (st *feedStore) Add(obj any) error    { st.inf.upsert(st.f, obj); return nil }
func (st *feedStore) Update(obj any) error { st.inf.upsert(st.f, obj); return nil }
func (st *feedStore) Delete(obj any) error { st.inf.remove(st.f, obj); return nil }
func (st *feedStore) Resync() error        { return nil } // no resync: see AddEventHandlerWithResyncPeriod

// Replace applies f's list: the objects of its shards are added or
// updated, those of its synced shards missing from the list are deleted
// (they were deleted while no watch ran), and its shards are synced.
func (st *feedStore) Replace(items []any, rv string) error {
	st.inf.replace(st.f, items, rv)
	return nil
}

// admit returns the (transformed) object, its shard and key if feed f
// keeps it. inf.mu must be held.
func (inf *Informer) admit(f *feed, item any) (any, int, string, bool) {
	s, ok := inf.cfg.ShardOf(item)
	if !ok || !inf.keeps(f, s) {
		if ok && inf.current(f) && !inf.target[s] {
			inf.foreign++
		}
		return nil, 0, "", false
	}
	obj := item
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

func (inf *Informer) upsert(f *feed, item any) {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	obj, _, key, ok := inf.admit(f, item)
	if !ok {
		return
	}
	inf.lastRV = resourceVersion(obj)
	old, exists, _ := inf.indexer.GetByKey(key)
	if exists {
		_ = inf.indexer.Update(obj)
		for _, h := range inf.handlers {
			h.h.OnUpdate(old, obj)
		}
		return
	}
	inf.addObject(obj)
	inf.setObjects()
	for _, h := range inf.handlers {
		h.h.OnAdd(obj, false)
	}
}

func (inf *Informer) remove(f *feed, item any) {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	obj, _, key, ok := inf.admit(f, item)
	if !ok {
		return
	}
	inf.lastRV = resourceVersion(obj)
	old, exists, _ := inf.indexer.GetByKey(key)
	if !exists {
		return
	}
	inf.deleteObject(old)
	inf.setObjects()
	for _, h := range inf.handlers {
		h.h.OnDelete(obj)
	}
}

func (inf *Informer) replace(f *feed, items []any, rv string) {
	inf.mu.Lock()
	if !inf.current(f) {
		inf.mu.Unlock()
		return
	}
	seen := make(map[string]bool, len(items))
	for _, item := range items {
		obj, s, key, ok := inf.admit(f, item)
		if !ok {
			continue
		}
		seen[key] = true
		old, exists, _ := inf.indexer.GetByKey(key)
		switch {
		case !exists:
			inf.addObject(obj)
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
		if !inf.keeps(f, s) {
			continue
		}
		for _, old := range inf.byShard(s) {
			key, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(old)
			if seen[key] {
				continue
			}
			inf.deleteObject(old)
			for _, h := range inf.handlers {
				h.h.OnDelete(cache.DeletedFinalStateUnknown{Key: key, Obj: old})
			}
		}
		newly = newly || !inf.synced[s]
		inf.synced[s] = true
	}
	inf.lastRV = rv
	first := !f.listed
	f.listed = true
	inf.latch()
	inf.setObjects()
	if first && f.covers != nil {
		// Shards gained while this list was in flight wait for it (see
		// follow): their list starts now.
		inf.follow()
	}
	inf.mu.Unlock()
	if newly && inf.cfg.Synced != nil {
		inf.cfg.Synced()
	}
}

// addObject adds obj, whose key the indexer does not hold, and
// deleteObject removes obj, which it holds; both keep inf.objects equal to
// the indexer's length. Every change of the indexer's keys goes through
// them. inf.mu must be held.
func (inf *Informer) addObject(obj any) {
	_ = inf.indexer.Add(obj)
	inf.objects++
}

func (inf *Informer) deleteObject(obj any) {
	_ = inf.indexer.Delete(obj)
	inf.objects--
}

func resourceVersion(obj any) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetResourceVersion()
}
