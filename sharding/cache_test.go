package sharding_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/fakeleases"
	"github.com/go-coalesce/workqueue/sharding/fakeshards"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// nsObjects makes a fake clientset with perNS Deployments and perNS
// ReplicaSets in each of namespaces ns-0 … ns-(n−1), for tests that shard
// by namespace.
func nsObjects(t *testing.T, n, perNS int) *fake.Clientset {
	objs := fake.NewSimpleClientset() //nolint:staticcheck // the field-managed fake costs a REST mapper per write
	ctx := context.Background()
	for i := range n {
		ns := fmt.Sprintf("ns-%d", i)
		for j := range perNS {
			meta := metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("d-%d", j), UID: types.UID(fmt.Sprintf("%s-d-%d", ns, j))}
			if _, err := objs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: meta}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			meta.UID += "-rs"
			if _, err := objs.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: meta}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return objs
}

// TestSyncBeforeAdmit holds back the LIST of one shard in one sharded
// informer (the primary one, or one built by NewInformer for a type of
// ShardedWith) of a replica that holds every shard. A controller enqueues
// every key, as one that maps secondary events to owner keys does. No key
// of the held-back shard may reach the reconciler, nor be owned, while its
// LIST is held back, though the replica holds the shard's Lease; once the
// LIST is let through, the shard's keys are admitted and reconciled with
// their objects in the cache.
//
// Sharding by namespace makes a key's shard follow from the key alone:
// the case where admitting at Lease acquisition would hand the reconciler
// a key whose object is not in its cache yet.
func TestSyncBeforeAdmit(t *testing.T) {
	for _, which := range []string{"primary", "secondary"} {
		t.Run(which, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testSyncBeforeAdmit(t, which == "secondary") })
		})
	}
}

func testSyncBeforeAdmit(t *testing.T, secondary bool) {
	const shards, namespaces, perNS = 4, 16, 4
	objs := nsObjects(t, namespaces, perNS)
	primaryLW := fakeshards.New(appsLW(objs, "", false), true)
	rsLW := fakeshards.New(appsLW(objs, "", true), true)
	defer primaryLW.Close()
	defer rsLW.Close()
	heldBack := sharding.ShardOf(sharding.Hash("ns-0"), shards)
	sel := sharding.Selector(sharding.FieldNamespace, shards, []int{heldBack}).String()
	release := primaryLW.Hold(sel)
	if secondary {
		release()
		release = rsLW.Hold(sel)
	}
	defer release()

	leases := fakeleases.New()
	q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
	r, err := sharding.New(sharding.Config{
		Client: leases.Clientset("r-0"), Namespace: "ring", Name: "ctl", Identity: "r-0",
		Shards: shards, Field: sharding.FieldNamespace,
		Object: &appsv1.Deployment{}, ListerWatcher: primaryLW,
		ShardedWith:   []runtime.Object{&appsv1.ReplicaSet{}},
		Queue:         q,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, GracePeriod: gracePeriod,
	})
	if err != nil {
		t.Fatal(err)
	}
	rsInf := r.NewInformer(rsLW, &appsv1.ReplicaSet{}, 0, nil)
	store := r.Informer().GetStore()

	var keys []string
	for i := range namespaces {
		for j := range perNS {
			keys = append(keys, fmt.Sprintf("ns-%d/d-%d", i, j))
		}
	}
	inHeldBack := func(key string) bool {
		ns, _, _ := cache.SplitMetaNamespaceKey(key)
		return sharding.ShardOf(sharding.Hash(ns), shards) == heldBack
	}

	var mu sync.Mutex
	var absent, ownedEarly []string
	reconciled := map[string]int{}
	handle := func(_ context.Context, key string) error {
		_, inCache, _ := store.GetByKey(key)
		_, rsInCache, _ := rsInf.GetStore().GetByKey(key) // its ReplicaSet has the same key
		mu.Lock()
		defer mu.Unlock()
		if !inCache || !rsInCache {
			absent = append(absent, fmt.Sprintf("%v: %s (Deployment cached %v, ReplicaSet cached %v)", time.Now().Format("15:04:05.000"), key, inCache, rsInCache))
		}
		reconciled[key]++
		return nil
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(ctx) })
	wg.Go(func() { rsInf.Run(ctx.Done()) })
	wg.Go(func() { _ = workqueue.Run(ctx, q, 4, r.Handler(handle)) })
	// The controller: every key, every 100ms, whatever the replica holds.
	wg.Go(func() {
		for ctx.Err() == nil {
			for _, k := range keys {
				q.Add(k)
				if inHeldBack(k) && r.Owns(k) {
					mu.Lock()
					ownedEarly = append(ownedEarly, k)
					mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	defer func() {
		cancel()
		wg.Wait()
	}()

	// The replica holds every Lease after its third tick; give it ten.
	time.Sleep(10 * retryPeriod)
	holder := map[string]int{}
	for _, l := range leases.Leases() {
		if l.Labels[sharding.LabelRole] == "shard" && l.Spec.HolderIdentity != nil {
			holder[*l.Spec.HolderIdentity]++
		}
	}
	if holder["r-0"] != shards {
		t.Fatalf("r-0 holds %d shard Leases, want all %d: %v", holder["r-0"], shards, holder)
	}
	want := slices.DeleteFunc([]int{0, 1, 2, 3}, func(s int) bool { return s == heldBack })
	if got := r.Shards(); !slices.Equal(got, want) {
		t.Errorf("while shard %d's LIST is held back, Shards() = %v, want %v", heldBack, got, want)
	}
	mu.Lock()
	early := 0
	for k, n := range reconciled {
		if inHeldBack(k) {
			early += n
		}
	}
	if early > 0 || len(ownedEarly) > 0 {
		t.Errorf("while shard %d's LIST is held back: %d runs of its keys, Owns true %d times (first: %v)", heldBack, early, len(ownedEarly), ownedEarly[:min(3, len(ownedEarly))])
	}
	mu.Unlock()

	release()
	time.Sleep(2 * retryPeriod)
	if got := r.Shards(); len(got) != shards {
		t.Errorf("after the LIST was let through, Shards() = %v, want all %d", got, shards)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		if reconciled[k] == 0 {
			t.Errorf("%s never reconciled", k)
		}
	}
	if len(absent) > 0 {
		t.Errorf("%d keys handed to the reconciler with their object absent from the cache, first: %v", len(absent), absent[:min(5, len(absent))])
	}
	if n := primaryLW.Lists(sel); n != 1 {
		t.Errorf("shard %d listed %d times by the primary informer, want 1", heldBack, n)
	}
}

// gauge is a Gauge that keeps its last value.
type gauge struct {
	mu sync.Mutex
	v  float64
}

func (g *gauge) Set(v float64) {
	g.mu.Lock()
	g.v = v
	g.mu.Unlock()
}

func (g *gauge) get() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.v
}

// handlerCounts counts the events a handler of a sharded informer gets.
type handlerCounts struct {
	mu                  sync.Mutex
	adds, updates, dels int
}

func (c *handlerCounts) OnAdd(any, bool) { c.mu.Lock(); c.adds++; c.mu.Unlock() }
func (c *handlerCounts) OnUpdate(_, _ any) {
	c.mu.Lock()
	c.updates++
	c.mu.Unlock()
}
func (c *handlerCounts) OnDelete(any) { c.mu.Lock(); c.dels++; c.mu.Unlock() }

// TestMoveCache checks the cache through a join: one replica holds every
// shard, a second joins and takes half. The giver's store then holds
// exactly the objects of the shards it kept, the released shards' objects
// left it without a Delete event (no object was deleted), and no shard
// that did not move was listed again: with the server filtering, each
// shard was listed once in all by the replica that holds it; with the
// client filtering, the giver lists nothing more and the taker lists
// everything once per gain. The gauges follow.
func TestMoveCache(t *testing.T) {
	for _, clientFilter := range []bool{false, true} {
		t.Run(map[bool]string{false: "server", true: "client"}[clientFilter], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testMoveCache(t, clientFilter) })
		})
	}
}

func testMoveCache(t *testing.T, clientFilter bool) {
	const shards, objs = 16, 400
	rg := newRing(t, shards, objs)
	rg.clientFilter = clientFilter
	gauges := map[string]*[3]gauge{}
	rg.config = func(id string, cfg *sharding.Config) {
		g := new([3]gauge)
		gauges[id] = g
		cfg.Metrics = sharding.Metrics{ServerFiltering: &g[0], Shards: &g[1], Objects: &g[2]}
	}
	defer rg.stopAll()
	a := rg.start(false)
	rg.waitBalanced(leaseDuration)
	ma := rg.members[a]
	var counts handlerCounts
	if _, err := ma.r.Informer().AddEventHandler(&counts); err != nil {
		t.Fatal(err)
	}
	go rg.churn(4 * retryPeriod)
	b := rg.start(false)
	rg.waitBalanced(leaseDuration + 4*retryPeriod)
	time.Sleep(4 * retryPeriod)
	mb := rg.members[b]

	shardOf := rg.shardOfKeys()
	for _, m := range []*member{ma, mb} {
		held := m.r.Shards()
		keys := m.r.Informer().GetStore().ListKeys()
		checkCacheExact(t, m, shardOf)
		g := gauges[m.id]
		wantMode := map[bool]float64{false: 1, true: 0}[clientFilter]
		if g[0].get() != wantMode || int(g[1].get()) != len(held) || int(g[2].get()) != len(keys) {
			t.Errorf("%s's gauges: server filtering %v, shards %v, objects %v; want %v, %d, %d", m.id, g[0].get(), g[1].get(), g[2].get(), wantMode, len(held), len(keys))
		}
		if got := m.r.Filtering().String(); got != map[bool]string{false: "server", true: "client"}[clientFilter] {
			t.Errorf("%s filters on the %s", m.id, got)
		}
	}
	counts.mu.Lock()
	if counts.dels > 0 {
		t.Errorf("%s's handler got %d Delete events, though no object was deleted: released shards must leave the cache silently", a, counts.dels)
	}
	counts.mu.Unlock()

	started, open := ma.lw.Watches()
	startedB, openB := mb.lw.Watches()
	if clientFilter {
		if n := ma.lw.Lists(""); n != 1 {
			t.Errorf("%s listed everything %d times; want once: giving shards up lists nothing", a, n)
		}
		if n := mb.lw.Lists(""); n < 1 || n > 2 {
			t.Errorf("%s listed everything %d times; want once per gain", b, n)
		}
		t.Logf("FIGURES cache move, client filtering: giver %d full LIST, %d watches open (%d started); taker %d full LISTs of %d objects, %d watches open (%d started)",
			ma.lw.Lists(""), open, started, mb.lw.Lists(""), objs, openB, startedB)
		return
	}
	listed := 0
	for s := range shards {
		sel := sharding.Selector(sharding.FieldUID, shards, []int{s}).String()
		na, nb := ma.lw.Lists(sel), mb.lw.Lists(sel)
		listed += na + nb
		inA, inB := slices.Contains(ma.r.Shards(), s), slices.Contains(mb.r.Shards(), s)
		switch {
		case inA && (na != 1 || nb != 0):
			t.Errorf("shard %d, kept by %s, listed %d times by it and %d by %s; want once, by the first", s, a, na, nb, b)
		case inB && (na != 1 || nb != 1):
			t.Errorf("shard %d, moved to %s, listed %d times by %s and %d by %s; want once each", s, b, na, a, nb, b)
		}
	}
	if ma.lw.Lists("") > 0 || mb.lw.Lists("") > 0 {
		t.Errorf("unsharded LISTs with the server filtering: %d and %d", ma.lw.Lists(""), mb.lw.Lists(""))
	}
	if open != len(ma.r.Shards()) || openB != len(mb.r.Shards()) {
		t.Errorf("watches open: %d and %d; want one per held shard (%d, %d)", open, openB, len(ma.r.Shards()), len(mb.r.Shards()))
	}
	t.Logf("FIGURES cache move, server filtering: %d shard LISTs in all for %d shards and one move of %d; giver %d watches open (%d started), taker %d open (%d started)",
		listed, shards, len(mb.r.Shards()), open, started, openB, startedB)
}

// shardOfKeys returns every object's shard, from the server.
func (rg *ring) shardOfKeys() map[string]int {
	shardOf := map[string]int{}
	list, err := rg.objs.AppsV1().Deployments(objectsNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		rg.t.Fatal(err)
	}
	for _, d := range list.Items {
		shardOf[d.Namespace+"/"+d.Name] = sharding.ShardOf(sharding.Hash(string(d.UID)), rg.shards)
	}
	return shardOf
}

// checkCacheExact fails t unless m's informer caches exactly the objects
// of the shards m holds (shardOf: every object's shard).
func checkCacheExact(t *testing.T, m *member, shardOf map[string]int) {
	t.Helper()
	held := m.r.Shards()
	want := 0
	for _, s := range shardOf {
		if slices.Contains(held, s) {
			want++
		}
	}
	keys := m.r.Informer().GetStore().ListKeys()
	foreign := 0
	for _, k := range keys {
		if !slices.Contains(held, shardOf[k]) {
			foreign++
		}
	}
	if len(keys) != want || foreign > 0 {
		t.Errorf("%s holds shards %v and caches %d objects, %d of other shards; want the %d of its shards", m.id, held, len(keys), foreign, want)
		t.Logf("%s: %s", m.id, sharding.DebugState(m.r))
	}
}

// TestLapseKeepsShardsWarm: a replica whose renewals fail past
// RenewDeadline (as when an overloaded API server answers none in time)
// loses its session and every shard; healed, it joins again and takes
// them back. Its informer keeps filling them meanwhile, without admitting
// a key (keepWarm, decide.go): taking them back lists nothing, in both
// modes. Before, the lapse emptied the cache and the return listed every
// shard again (client mode: every object of the resource), which at
// 100,000 objects and 16 replicas overloaded the server into the next
// round of lapses.
//
// Then a second replica joins and the first is cut off past
// LeaseDuration: the second fences it and takes every shard, and the
// first, healed, no longer caches the shards it lost, since the view
// shows another member holding them (not only once the warm time ends).
func TestLapseKeepsShardsWarm(t *testing.T) {
	for _, clientFilter := range []bool{false, true} {
		t.Run(map[bool]string{false: "server", true: "client"}[clientFilter], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rg := newRing(t, 8, 200)
				rg.clientFilter = clientFilter
				defer rg.stopAll()
				a := rg.start(false)
				rg.waitBalanced(leaseDuration)
				time.Sleep(retryPeriod)
				ma := rg.members[a]
				shardOf := rg.shardOfKeys()
				ma.lw.Reset()

				rg.leases.CutOff(a, true)
				time.Sleep(renewDeadline + retryPeriod)
				if held := ma.r.Shards(); len(held) > 0 {
					t.Fatalf("%s still admits shards %v after RenewDeadline without a renewal", a, held)
				}
				for k := range shardOf {
					if ma.r.Owns(k) {
						t.Fatalf("%s owns %s while its session is over: a warm shard was admitted", a, k)
					}
				}
				rg.leases.CutOff(a, false)
				rg.waitBalanced(leaseDuration)
				time.Sleep(retryPeriod)
				if n := ma.lw.TotalLists(); n > 0 {
					t.Errorf("%s listed %d times to take back the shards its lapsed session held; want none: they stay warm", a, n)
				}
				checkCacheExact(t, ma, shardOf)

				b := rg.start(false)
				rg.waitBalanced(leaseDuration)
				rg.leases.CutOff(a, true)
				rg.waitTaken(a, 2*leaseDuration)
				rg.leases.CutOff(a, false)
				rg.waitBalanced(2 * leaseDuration)
				time.Sleep(retryPeriod)
				checkCacheExact(t, ma, shardOf)
				checkCacheExact(t, rg.members[b], shardOf)
			})
		})
	}
}

// TestServerStopsFiltering flips the server from honouring the shard
// selector to ignoring it (a rollback of the feature gate) under a ring of
// two replicas that chose server filtering. Their watches end and resume
// from their last resourceVersion, now unfiltered, while objects change:
// the client-side filter keeps every other shard's object out of their
// caches. Then one replica leaves: the other's LIST of a gained shard
// comes back without ShardInfo, so it switches to one full watch filtered
// on the client, and caches every object (it holds every shard).
func TestServerStopsFiltering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const shards, objs = 16, 400
		rg := newRing(t, shards, objs)
		defer rg.stopAll()
		a, b := rg.start(false), rg.start(false)
		rg.waitBalanced(leaseDuration)
		// client-go's Reflector takes a watch that ends within a second
		// of its start, without an event, for a failure and lists again;
		// an API server ends watches after their timeout (minutes).
		time.Sleep(2 * time.Second)
		ma, mb := rg.members[a], rg.members[b]
		for _, m := range []*member{ma, mb} {
			if f := m.r.Filtering(); f != sharding.FilterServer {
				t.Fatalf("%s filters on the %s before the flip", m.id, f)
			}
			m.lw.SetHonour(false)
			m.lw.EndWatches()
		}
		rg.churn(2 * retryPeriod)
		time.Sleep(retryPeriod)
		foreign := func(m *member) int {
			n := 0
			held := m.r.Shards()
			for _, obj := range m.r.Informer().GetStore().List() {
				s, _ := m.r.ShardOfObject(obj)
				if !slices.Contains(held, s) {
					n++
				}
			}
			return n
		}
		for _, m := range []*member{ma, mb} {
			if n := foreign(m); n > 0 {
				t.Errorf("%s caches %d objects of shards it does not hold after the server stopped filtering", m.id, n)
				t.Logf("%s: %s", m.id, sharding.DebugState(m.r))
			}
			if f := m.r.Filtering(); f != sharding.FilterServer {
				t.Errorf("%s filters on the %s before any LIST showed the change", m.id, f)
			}
		}
		rg.stop(b)
		rg.waitBalanced(leaseDuration)
		time.Sleep(2 * retryPeriod)
		if f := ma.r.Filtering(); f != sharding.FilterClient {
			t.Errorf("%s still filters on the %s after a LIST came back without ShardInfo", a, f)
		}
		if n, all := len(ma.r.Informer().GetStore().ListKeys()), len(rg.names); n != all || foreign(ma) > 0 {
			t.Errorf("%s holds every shard and caches %d objects (%d foreign), want all %d", a, n, foreign(ma), all)
			t.Logf("%s: %s", a, sharding.DebugState(ma.r))
		}
		if n := ma.lw.Lists(""); n != 1 {
			t.Errorf("%s made %d full LISTs after switching to client filtering, want 1 (the server never went away, so no watch of it may need a new LIST)", a, n)
		}
		rg.update(50)
		rg.quiet()
		rg.checkExclusive()
	})
}

// TestCacheShapes measures the two shapes the sharded cache takes through
// one join (4 replicas, 64 shards, 2,000 objects; the fifth replica takes
// its share while objects change): one list+watch per held shard (the
// server filtering) and one full watch filtered on the client. It counts,
// over every replica, the LISTs and the objects they returned, the
// watches started and open, and the watch events sent. The per-shard
// shape lists only the moved shards' objects.
func TestCacheShapes(t *testing.T) {
	const replicas, shards, objs, updates = 4, 64, 2000, 300
	type figures struct{ lists, listed, started, open, sent int }
	measure := func(t *testing.T, shape string) (f figures) {
		synctest.Test(t, func(t *testing.T) {
			rg := newRing(t, shards, objs)
			rg.clientFilter = shape == "client"
			defer rg.stopAll()
			for range replicas {
				rg.start(false)
			}
			rg.waitBalanced(leaseDuration)
			time.Sleep(2 * retryPeriod)
			for _, id := range rg.ids() {
				rg.members[id].lw.Reset()
			}
			before := rg.owner()
			rg.start(false)
			go rg.churnEvery(time.Duration(updates/3)*100*time.Millisecond, 100*time.Millisecond)
			rg.waitBalanced(leaseDuration + 4*retryPeriod)
			time.Sleep(time.Duration(updates/3)*100*time.Millisecond + retryPeriod)
			moved := moved(before, rg.owner())
			for _, id := range rg.ids() {
				lw := rg.members[id].lw
				f.lists += lw.TotalLists()
				f.listed += lw.Listed()
				st, op := lw.Watches()
				f.started += st
				f.open += op
				f.sent += lw.Sent()
			}
			t.Logf("FIGURES cache shape %s: a join moving %d of %d shards (%d objects each on average) over %d replicas, %d updates meanwhile: %d LISTs returning %d objects, %d watches started, %d open after, %d watch events sent",
				shape, moved, shards, objs/shards, replicas+1, updates, f.lists, f.listed, f.started, f.open, f.sent)
			rg.quiet()
			rg.checkExclusive()
		})
		return f
	}
	got := map[string]figures{}
	for _, shape := range []string{"per-shard", "client"} {
		t.Run(shape, func(t *testing.T) { got[shape] = measure(t, shape) })
	}
	ps, cl := got["per-shard"], got["client"]
	if !(ps.listed < cl.listed) {
		t.Errorf("objects listed through a join: per shard %d, client %d; want per shard the fewer", ps.listed, cl.listed)
	}
	if ps.open != shards || cl.open != replicas+1 {
		t.Errorf("watches open: per shard %d (want S=%d), client %d (want N=%d)", ps.open, shards, cl.open, replicas+1)
	}
	if !(cl.sent > 2*ps.sent) {
		t.Errorf("watch events sent: client %d, per shard %d; want the client filtering to get each change on every replica", cl.sent, ps.sent)
	}
}

// TestNewInformerPrimary builds the primary informer the way
// controller-runtime does, through NewInformer (Config.ListerWatcher is
// nil), and starts it late, as a cache that starts its informers when a
// controller first watches: until it runs and has synced the held shards,
// the replica admits no key, though it holds every shard's Lease.
func TestNewInformerPrimary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const shards = 4
		objs := nsObjects(t, 8, 2)
		leases := fakeleases.New()
		q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
		r, err := sharding.New(sharding.Config{
			Client: leases.Clientset("r-0"), Namespace: "ring", Name: "ctl", Identity: "r-0",
			Shards: shards, Field: sharding.FieldNamespace, Object: &appsv1.Deployment{}, Queue: q,
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, GracePeriod: gracePeriod,
		})
		if err != nil {
			t.Fatal(err)
		}
		if r.Informer() != nil {
			t.Fatal("Informer() is not nil before NewInformer built it")
		}
		lw := fakeshards.New(appsLW(objs, "", false), true)
		defer lw.Close()
		inf := r.NewInformer(lw, &appsv1.Deployment{}, 0, nil)
		if r.Informer() != inf {
			t.Fatal("Informer() is not the informer NewInformer built for Config.Object's type")
		}
		if again := r.NewInformer(appsLW(objs, "", false), &appsv1.Deployment{}, 0, nil); again != inf {
			t.Error("a second NewInformer for Config.Object's type built another informer")
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer func() {
			cancel()
			wg.Wait()
		}()
		wg.Go(func() { _ = r.Run(ctx) })
		time.Sleep(10 * retryPeriod)
		if got := r.Shards(); len(got) > 0 || r.Owns("ns-0/d-0") {
			t.Errorf("before the primary informer runs: Shards() = %v, Owns = %v; want nothing admitted", got, r.Owns("ns-0/d-0"))
		}
		wg.Go(func() { inf.Run(ctx.Done()) })
		time.Sleep(2 * retryPeriod)
		if got := r.Shards(); len(got) != shards || !r.Owns("ns-0/d-0") {
			t.Errorf("once the primary informer runs: Shards() = %v, Owns = %v; want every shard admitted", got, r.Owns("ns-0/d-0"))
		}
		// No worker runs: every object is owed its catch-up run, and the
		// queue holds the first few (the rest are fed as runs begin).
		if n, o, l := len(inf.GetStore().ListKeys()), sharding.Owed(r), q.Len(); n != 16 || o != 16 || l != sharding.CatchUpWindow {
			t.Errorf("%d objects cached, %d keys owed a run and %d queued, want all 16 owed and %d queued", n, o, l, sharding.CatchUpWindow)
		}
	})
}

// logLines collects klog's output.
type logLines struct {
	mu  sync.Mutex
	buf []byte
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	return len(p), nil
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

// TestModeLogged checks that a replica says which mode it chose: a log
// line, Filtering(), and the ServerFiltering gauge.
func TestModeLogged(t *testing.T) {
	for _, honour := range []bool{true, false} {
		t.Run(map[bool]string{true: "server", false: "client"}[honour], func(t *testing.T) {
			var logs logLines
			klog.SetOutput(&logs)
			defer klog.SetOutput(io.Discard)
			synctest.Test(t, func(t *testing.T) {
				objs := nsObjects(t, 2, 2)
				lw := fakeshards.New(appsLW(objs, "", false), honour)
				defer lw.Close()
				var g gauge
				g.Set(-1)
				r, err := sharding.New(sharding.Config{
					Client: fakeleases.New().Clientset("r-0"), Namespace: "ring", Name: "ctl", Identity: "r-0",
					Object: &appsv1.Deployment{}, ListerWatcher: lw,
					Queue:   workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]()),
					Metrics: sharding.Metrics{ServerFiltering: &g},
				})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { _ = r.Run(ctx); close(done) }()
				time.Sleep(time.Second)
				cancel()
				<-done
				want, line, gv := sharding.FilterClient, "filtering by shard on the client", 0.0
				if honour {
					want, line, gv = sharding.FilterServer, "the server filters by shard", 1
				}
				if r.Filtering() != want || g.get() != gv {
					t.Errorf("Filtering() = %v, gauge %v; want %v, %v", r.Filtering(), g.get(), want, gv)
				}
				klog.Flush()
				if !strings.Contains(logs.String(), line) {
					t.Errorf("no log line %q in %q", line, logs.String())
				}
			})
		})
	}
}
