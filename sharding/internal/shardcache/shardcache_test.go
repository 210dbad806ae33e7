package shardcache_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/fakeshards"
	"github.com/go-coalesce/workqueue/sharding/internal/shardcache"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

const shards = 4

func shardOfNS(ns string) int { return sharding.ShardOf(sharding.Hash(ns), shards) }

func shardOf(obj any) (int, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return 0, false
	}
	return shardOfNS(cm.Namespace), true
}

func selector(s int) string {
	return sharding.Selector(sharding.FieldNamespace, shards, []int{s}).String()
}

// fixture is one sharded informer of ConfigMaps (two per namespace, 32
// namespaces, eight in each shard) on a fakeshards server.
type fixture struct {
	lw     *fakeshards.ListerWatcher
	inf    *shardcache.Informer
	counts *counts
	// perShard is the number of objects of each shard.
	perShard [shards]int
}

func newFixture(t *testing.T, honour bool, wrap func(*fakeshards.ListerWatcher) cache.ListerWatcher) *fixture {
	objs := fake.NewSimpleClientset() //nolint:staticcheck // the field-managed fake costs a REST mapper per write
	fx := &fixture{counts: &counts{}}
	// Eight namespaces per shard. (FNV-1a's top bits hardly depend on a
	// name's last bytes: ns-0 … ns-31 are all in one shard of four.)
	var per [shards]int
	for i := 0; slices.Min(per[:]) < 8; i++ {
		ns := fmt.Sprintf("%d-ns", i)
		if per[shardOfNS(ns)] == 8 {
			continue
		}
		per[shardOfNS(ns)]++
		for j := range 2 {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%d", j)}}
			if _, err := objs.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			fx.perShard[shardOfNS(ns)]++
		}
	}
	fx.lw = fakeshards.New(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return objs.CoreV1().ConfigMaps("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return objs.CoreV1().ConfigMaps("").Watch(ctx, o)
		},
	}, honour)
	var lw cache.ListerWatcher = fx.lw
	if wrap != nil {
		lw = wrap(fx.lw)
	}
	fx.inf = shardcache.New(shardcache.Config{
		ListerWatcher: lw, Object: &corev1.ConfigMap{}, Shards: shards, ShardOf: shardOf,
		Selector: func(held []int) string {
			if len(held) == 0 {
				return ""
			}
			return sharding.Selector(sharding.FieldNamespace, shards, held).String()
		},
	})
	if _, err := fx.inf.AddEventHandler(fx.counts); err != nil {
		t.Fatal(err)
	}
	return fx
}

// run runs the informer until the test ends.
func (fx *fixture) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { fx.inf.Run(ctx.Done()); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		fx.lw.Close()
	})
}

// cached returns the number of cached objects by shard.
func (fx *fixture) cached() [shards]int {
	var n [shards]int
	for _, obj := range fx.inf.GetStore().List() {
		s, _ := shardOf(obj)
		n[s]++
	}
	return n
}

// counts counts a handler's events by shard.
type counts struct {
	mu                  sync.Mutex
	adds, updates, dels [shards]int
}

func (c *counts) OnAdd(obj any, _ bool) {
	s, _ := shardOf(obj)
	c.mu.Lock()
	c.adds[s]++
	c.mu.Unlock()
}

func (c *counts) OnUpdate(_, obj any) {
	s, _ := shardOf(obj)
	c.mu.Lock()
	c.updates[s]++
	c.mu.Unlock()
}

func (c *counts) OnDelete(obj any) {
	s, _ := shardOf(obj)
	c.mu.Lock()
	c.dels[s]++
	c.mu.Unlock()
}

func (c *counts) snapshot() (adds, updates, dels [shards]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.adds, c.updates, c.dels
}

// TestHasSyncedMonotonic: once the held shards are synced, HasSynced
// stays true while a gained shard is being listed (controller-runtime's
// cache makes every read wait for it), and the gained shard is not
// Synced until its own list is in.
func TestHasSyncedMonotonic(t *testing.T) {
	for _, honour := range []bool{true, false} {
		t.Run(map[bool]string{true: "server", false: "client"}[honour], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fx := newFixture(t, honour, nil)
				fx.inf.SetShards([]int{0})
				fx.run(t)
				time.Sleep(time.Second)
				if !fx.inf.HasSynced() || !fx.inf.Synced(0) {
					t.Fatalf("HasSynced %v, Synced(0) %v after the first list; want true", fx.inf.HasSynced(), fx.inf.Synced(0))
				}
				sel := selector(1)
				if !honour {
					sel = ""
				}
				release := fx.lw.Hold(sel)
				fx.inf.SetShards([]int{0, 1})
				time.Sleep(5 * time.Second)
				if !fx.inf.HasSynced() {
					t.Errorf("HasSynced false while shard 1 is being listed: a move stalls the reads of shard 0")
				}
				if fx.inf.Synced(1) {
					t.Errorf("shard 1 Synced before its list was let through")
				}
				release()
				time.Sleep(5 * time.Second)
				if !fx.inf.Synced(1) || !fx.inf.HasSynced() {
					t.Errorf("after the list: Synced(1) %v, HasSynced %v; want true", fx.inf.Synced(1), fx.inf.HasSynced())
				}
				if got := fx.cached(); got[0] != fx.perShard[0] || got[1] != fx.perShard[1] || got[2]+got[3] > 0 {
					t.Errorf("cached by shard %v, want shards 0 and 1 of %v", got, fx.perShard)
				}
			})
		})
	}
}

// listOpts records the options of every LIST but the probe (Limit 1),
// and whether a watch asked for a watch-list stream.
type listOpts struct {
	*fakeshards.ListerWatcher
	mu       sync.Mutex
	lists    []metav1.ListOptions
	streamed bool
}

func (l *listOpts) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if opts.Limit != 1 {
		l.mu.Lock()
		l.lists = append(l.lists, opts)
		l.mu.Unlock()
	}
	return l.ListerWatcher.ListWithContext(ctx, opts)
}

func (l *listOpts) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil {
		l.mu.Lock()
		l.streamed = true
		l.mu.Unlock()
	}
	return l.ListerWatcher.WatchWithContext(ctx, opts)
}

// TestClientFilterGain: with the server ignoring the selector, a gain of
// three shards in one SetShards restarts the one Reflector once (one more
// list of everything), and neither the first list nor that one hands the
// Reflector's store an object of a shard not held: the ListerWatcher drops
// them from every page and event first. Every list is paged (Limit 500)
// and a consistent read (resourceVersion ""): with "0", the Reflector's
// default, the API server's watch cache ignores the Limit and sends every
// object in one response. No watch asks for a watch-list stream.
func TestClientFilterGain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec *listOpts
		fx := newFixture(t, false, func(lw *fakeshards.ListerWatcher) cache.ListerWatcher {
			rec = &listOpts{ListerWatcher: lw}
			return rec
		})
		fx.inf.SetShards([]int{2})
		fx.run(t)
		time.Sleep(time.Second)
		if got := fx.cached(); got[2] != fx.perShard[2] || got[0]+got[1]+got[3] > 0 {
			t.Fatalf("cached by shard %v, want shard 2 of %v", got, fx.perShard)
		}
		fx.inf.SetShards([]int{0, 1, 2, 3})
		time.Sleep(5 * time.Second)
		if got := fx.cached(); got != fx.perShard {
			t.Errorf("cached by shard %v, want %v", got, fx.perShard)
		}
		for s := range shards {
			if !fx.inf.Synced(s) {
				t.Errorf("shard %d not synced", s)
			}
		}
		if n := fx.lw.Lists(""); n != 2 {
			t.Errorf("%d lists of everything; want 2: the first, and one for the three shards gained at once", n)
		}
		if n := shardcache.Foreign(fx.inf); n > 0 {
			t.Errorf("the Reflector handed the store %d objects of shards not held", n)
		}
		if _, _, dels := fx.counts.snapshot(); dels != [shards]int{} {
			t.Errorf("Delete events %v, though nothing was deleted", dels)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.streamed {
			t.Errorf("a watch asked for a watch-list stream; want paged lists")
		}
		if len(rec.lists) == 0 {
			t.Fatal("no LIST seen")
		}
		for _, o := range rec.lists {
			if o.Limit != 500 || (o.Continue == "" && o.ResourceVersion != "") {
				t.Errorf("LIST with Limit %d, resourceVersion %q, continue %q; want pages of 500 from a consistent read", o.Limit, o.ResourceVersion, o.Continue)
			}
		}
	})
}

// failWatchOnce fails the next resumed watch with a 500, as a server
// that restarts does: the Reflector lists again, from the resourceVersion
// it had.
type failWatchOnce struct {
	*listOpts
	armed atomic.Bool
}

func (f *failWatchOnce) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if f.armed.CompareAndSwap(true, false) {
		return nil, apierrors.NewInternalError(errors.New("the server restarts"))
	}
	return f.listOpts.WatchWithContext(ctx, opts)
}

// TestRelistIsPaged: a relist after a failed watch, from a
// resourceVersion, is paged too (the Reflector lists such a relist
// unpaged unless told a page size: every object of the resource in one
// response, in client mode).
func TestRelistIsPaged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec *failWatchOnce
		fx := newFixture(t, false, func(lw *fakeshards.ListerWatcher) cache.ListerWatcher {
			rec = &failWatchOnce{listOpts: &listOpts{ListerWatcher: lw}}
			return rec
		})
		fx.inf.SetShards([]int{0, 1})
		fx.run(t)
		time.Sleep(time.Second)
		rec.mu.Lock()
		before := len(rec.lists)
		rec.mu.Unlock()
		rec.armed.Store(true)
		fx.lw.EndWatches()
		time.Sleep(10 * time.Second) // the Reflector's backoff
		if rec.armed.Load() {
			t.Fatal("no watch resumed")
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		relists := rec.lists[before:]
		if len(relists) == 0 {
			t.Fatal("no relist after the failed watch")
		}
		for _, o := range relists {
			if o.Limit != 500 {
				t.Errorf("relist with Limit %d, resourceVersion %q; want pages of 500", o.Limit, o.ResourceVersion)
			}
		}
		if got := fx.cached(); got[0] != fx.perShard[0] || got[1] != fx.perShard[1] || got[2]+got[3] > 0 {
			t.Errorf("cached by shard %v, want shards 0 and 1 of %v", got, fx.perShard)
		}
	})
}

// TestClientGainsWaitForListInFlight: with the server ignoring the
// selector, shards gained (and one released) while the first list of
// everything is in flight do not restart it; they are listed once it is
// in, by one more list. Restarting at each gain threw the list away each
// time, and at 100,000 objects, where a list takes tens of seconds and a
// settling ring gains shards more often, no list ever finished.
func TestClientGainsWaitForListInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, false, nil)
		release := fx.lw.Hold("")
		fx.inf.SetShards([]int{0})
		fx.run(t)
		time.Sleep(time.Second)
		fx.inf.SetShards([]int{0, 1})
		time.Sleep(time.Second)
		fx.inf.SetShards([]int{0, 1, 2})
		time.Sleep(time.Second)
		fx.inf.SetShards([]int{0, 2})
		time.Sleep(time.Second)
		if n := fx.lw.Lists(""); n != 1 {
			t.Errorf("%d lists of everything started while the first was in flight; want 1: gains wait for it", n)
		}
		release()
		time.Sleep(5 * time.Second)
		if n := fx.lw.Lists(""); n != 2 {
			t.Errorf("%d lists of everything; want 2: the first, and one for the shards gained during it", n)
		}
		for s := range shards {
			if want := s == 0 || s == 2; fx.inf.Synced(s) != want {
				t.Errorf("Synced(%d) %v, want %v", s, fx.inf.Synced(s), want)
			}
		}
		if got := fx.cached(); got[0] != fx.perShard[0] || got[2] != fx.perShard[2] || got[1]+got[3] > 0 {
			t.Errorf("cached by shard %v, want shards 0 and 2 of %v", got, fx.perShard)
		}
	})
}

// expireOnce answers the next resumed watch of one selector with 410
// Gone, as a server whose watch cache no longer has the version does: the
// Reflector of that shard lists it again.
type expireOnce struct {
	*fakeshards.ListerWatcher
	sel   string
	armed atomic.Bool
}

func (e *expireOnce) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.ShardSelector == e.sel && opts.SendInitialEvents == nil && e.armed.CompareAndSwap(true, false) {
		w := watch.NewFakeWithChanSize(1, false)
		w.Error(&apierrors.NewResourceExpired("too old resource version").ErrStatus)
		return w, nil
	}
	return e.ListerWatcher.WatchWithContext(ctx, opts)
}

// TestRelistOneShard: with the server filtering, a shard whose watch
// expires is listed again by its own Reflector, and its relist leaves
// the other shards' objects as they were: no event for them, none
// removed.
func TestRelistOneShard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var exp *expireOnce
		fx := newFixture(t, true, func(lw *fakeshards.ListerWatcher) cache.ListerWatcher {
			exp = &expireOnce{ListerWatcher: lw, sel: selector(1)}
			return exp
		})
		fx.inf.SetShards([]int{0, 1, 2, 3})
		fx.run(t)
		time.Sleep(2 * time.Second)
		if got := fx.cached(); got != fx.perShard {
			t.Fatalf("cached by shard %v, want %v", got, fx.perShard)
		}
		addsBefore, _, _ := fx.counts.snapshot()
		exp.armed.Store(true)
		fx.lw.EndWatches()
		time.Sleep(5 * time.Second)
		if exp.armed.Load() {
			t.Fatal("shard 1 never watched again")
		}
		for s := range shards {
			want := 1
			if s == 1 {
				want = 2
			}
			if n := fx.lw.Lists(selector(s)); n != want {
				t.Errorf("shard %d listed %d times, want %d", s, n, want)
			}
		}
		if got := fx.cached(); got != fx.perShard {
			t.Errorf("after shard 1's relist, cached by shard %v, want %v", got, fx.perShard)
		}
		adds, updates, dels := fx.counts.snapshot()
		if adds != addsBefore || updates != [shards]int{} || dels != [shards]int{} {
			t.Errorf("events through shard 1's relist: adds %v (before %v), updates %v, deletes %v; want none", adds, addsBefore, updates, dels)
		}
	})
}

// TestReleaseSilently: a released shard's objects leave the store without
// Delete events, and the others stay.
func TestReleaseSilently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx := newFixture(t, true, nil)
		fx.inf.SetShards([]int{0, 1, 2, 3})
		fx.run(t)
		time.Sleep(time.Second)
		fx.inf.SetShards([]int{0, 3})
		time.Sleep(time.Second)
		want := fx.perShard
		want[1], want[2] = 0, 0
		if got := fx.cached(); got != want || fx.inf.Synced(1) || fx.inf.Synced(2) {
			t.Errorf("cached by shard %v, want %v; Synced(1) %v, Synced(2) %v", got, want, fx.inf.Synced(1), fx.inf.Synced(2))
		}
		if _, _, dels := fx.counts.snapshot(); dels != [shards]int{} {
			t.Errorf("Delete events %v for released shards", dels)
		}
		if !fx.inf.HasSynced() {
			t.Error("HasSynced false after a release")
		}
	})
}
