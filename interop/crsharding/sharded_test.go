package crsharding

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/exclusion"
	"github.com/go-coalesce/workqueue/sharding/fakeleases"
	"github.com/go-coalesce/workqueue/sharding/fakeshards"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// The simulated ring: leader election's proportions, scaled down.
const (
	simShards  = 8
	simObjects = 64
	simNS      = "default"
	simWork    = time.Second            // one reconcile, unless cancelled: longer than a period
	simRequeue = 100 * time.Millisecond // RequeueAfter of every run
)

// TestShardedControllers runs, in simulated time over the fake clientset
// (with fakeleases' Lease store), three replicas of a controller-runtime
// controller wired as the package doc says: the informer built by
// Sharding.NewInformer, the queue by Sharding.NewQueue, the reconciler
// wrapped by Sharding.Reconciler; controller-runtime's own controller and
// EnqueueRequestForObject handler. Every object is changed; then, while
// objects keep changing and every key requeues itself 100 ms after each
// run of a second,
// a replica leaves gracefully and another joins; every object is changed
// again.
//
// Every reconcile checks, as it starts: no other replica runs the key or
// a key of the same shard (sharding/exclusion's Tracker); no other replica holds the object's shard; the object is in
// this replica's sharded cache (it is never deleted). After each change
// of the objects each one must be reconciled at its new value by the
// replica that holds its shard.
//
// Mutants: Reconciler calling r directly (not through Replica.Handler) and
// the queue admitting every key: reconciles of keys whose shard another
// replica holds, absent from the cache; Reconciler alone bypassing Handler:
// the shard is released while its runs go on, and the newcomer runs the
// same keys (overlaps).
func TestShardedControllers(t *testing.T) {
	for _, mode := range []sharding.Filtering{sharding.FilterServer, sharding.FilterClient} {
		t.Run("filter="+mode.String(), func(t *testing.T) { testShardedControllers(t, mode) })
	}
}

func testShardedControllers(t *testing.T, mode sharding.Filtering) {
	synctest.Test(t, func(t *testing.T) {
		h := newSimRing(t, mode)
		for _, id := range []string{"r0", "r1", "r2"} {
			h.start(id)
		}
		h.balanced()
		h.mu.Lock()
		for id, rep := range h.replicas {
			require.Equal(t, mode, rep.sh.Replica().Filtering(), "%s's mode", id)
		}
		h.mu.Unlock()
		h.changeAll("v1")
		stopChurn := h.churn()
		h.stop("r1")
		h.start("r3")
		h.balanced()
		stopChurn()
		h.changeAll("v2")
		h.stopAll()
		h.check()
	})
}

// TestPredicatesHold: a change that the controller's predicates drop is
// not reconciled on a sharded controller either; the replica enqueues only
// a gained shard's keys, and controller-runtime's source the events.
func TestPredicatesHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newSimRing(t, sharding.FilterServer)
		h.preds = []predicate.Predicate{predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}}
		h.once = true
		h.start("r0")
		h.balanced()
		time.Sleep(10 * simWork)
		synctest.Wait()
		before := h.runs.Runs()
		require.Positive(t, before, "the gained shards' keys are reconciled")
		cms := h.objs.CoreV1().ConfigMaps(simNS)
		l, err := cms.List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		for _, cm := range l.Items {
			cm.Data["value"] = "dropped"
			_, err := cms.Update(t.Context(), &cm, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		time.Sleep(10 * simWork)
		synctest.Wait()
		after := h.runs.Runs()
		require.Equal(t, before, after, "updates that the predicate drops were reconciled %d times", after-before)
		h.stopAll()
	})
}

type simRing struct {
	t       *testing.T
	mode    sharding.Filtering    // the fake server's: it honours ShardSelector or ignores it
	preds   []predicate.Predicate // the controllers' predicates on their source
	once    bool                  // reconcile returns no RequeueAfter
	errs    bool                  // reconcile returns an error (a rate-limited requeue), not RequeueAfter
	workers int                   // the controllers' MaxConcurrentReconciles (0: simObjects)
	objs    *fake.Clientset
	server  *fakeshards.Server // in front of objs: the API server, as the replicas see it
	leases  *fakeleases.Store

	mu       sync.Mutex // protects the fields below
	replicas map[string]*simReplica
	runs     exclusion.Tracker // every reconcile enters and exits it
	last     map[string]string // key → "value by replica" of its last reconcile
	bad      []string          // broken rules, as they happened
}

type simReplica struct {
	id     string
	sh     *Sharding
	inf    toolscache.SharedIndexInformer
	stopSh context.CancelFunc // the ring's loop
	stopCt context.CancelFunc // the controller and the informer
	shDone chan error
	wg     sync.WaitGroup
}

func newSimRing(t *testing.T, mode sharding.Filtering) *simRing {
	h := &simRing{
		t:        t,
		mode:     mode,
		objs:     fake.NewSimpleClientset(), //nolint:staticcheck // NewClientset's field manager is not needed here
		leases:   fakeleases.New(),
		replicas: map[string]*simReplica{},
		last:     map[string]string{},
	}
	// UIDs as random as the API server's (FNV-1a's top bits barely differ
	// for "uid-00" … "uid-63"), the same in every run.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range simObjects {
		uid := types.UID(fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64()))
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: simNS, Name: fmt.Sprintf("cm-%02d", i), UID: uid},
			Data:       map[string]string{"value": "v0"},
		}
		_, err := h.objs.CoreV1().ConfigMaps(simNS).Create(t.Context(), cm, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	cms := h.objs.CoreV1().ConfigMaps(simNS)
	h.server = fakeshards.NewServer(&toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cms.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cms.Watch(ctx, o)
		},
	}, mode == sharding.FilterServer)
	// Inside the bubble, before it ends; also when the test fails half-way.
	t.Cleanup(func() {
		h.stopAll()
		h.server.Close()
	})
	return h
}

func (h *simRing) start(id string) {
	t := h.t
	sh, err := New(Config{Ring: sharding.Config{
		Client:        h.leases.Clientset(id),
		Namespace:     "ring",
		Name:          "cms",
		Identity:      id,
		Object:        &corev1.ConfigMap{},
		Shards:        simShards,
		LeaseDuration: 3 * time.Second,
		RenewDeadline: 2 * time.Second,
		RetryPeriod:   500 * time.Millisecond,
		GracePeriod:   time.Second,
	}})
	require.NoError(t, err)
	inf := sh.NewInformer(h.server.Client(), &corev1.ConfigMap{}, 0, toolscache.Indexers{})
	rep := &simReplica{id: id, sh: sh, inf: inf, shDone: make(chan error, 1)}
	rec := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		return h.reconcile(ctx, rep, req)
	})
	c, err := controller.NewTypedUnmanaged("cms-"+id, sh.ControllerOptions(controller.Options{
		Reconciler:              sh.Reconciler(rec),
		MaxConcurrentReconciles: cmp.Or(h.workers, simObjects), // by default every key may be in flight at once
		SkipNameValidation:      ptr.To(true),
	}))
	require.NoError(t, err)
	require.NoError(t, c.Watch(&source.Informer{Informer: inf, Handler: &handler.EnqueueRequestForObject{}, Predicates: h.preds}))

	ctlCtx, stopCt := context.WithCancel(context.Background())
	shCtx, stopSh := context.WithCancel(context.Background())
	rep.stopCt, rep.stopSh = stopCt, stopSh
	rep.wg.Go(func() { inf.Run(ctlCtx.Done()) })
	rep.wg.Go(func() { _ = c.Start(ctlCtx) })
	go func() { rep.shDone <- sh.Start(shCtx) }()
	h.mu.Lock()
	h.replicas[id] = rep
	h.mu.Unlock()
}

// reconcile is every replica's reconciler: it checks the rules, works for
// simWork (unless cancelled) and records the value it saw.
func (h *simRing) reconcile(ctx context.Context, rep *simReplica, req reconcile.Request) (reconcile.Result, error) {
	key := Key(req)
	// The shard as the replica tells it; a key it cannot place is checked
	// by key only (and is absent from its cache, which fails below).
	var in exclusion.Shard
	if i, ok := rep.sh.Replica().ShardOfKey(key); ok {
		in = exclusion.Shard{Index: i, Count: simShards}
	}
	h.runs.Enter(rep.id, key, in)
	defer h.runs.Exit(rep.id, key)

	obj, ok, _ := rep.inf.GetStore().GetByKey(key)
	if !ok {
		h.fail("%s got %s, absent from its cache (objects are never deleted)", rep.id, key)
		return reconcile.Result{}, nil
	}
	cm := obj.(*corev1.ConfigMap)
	s := sharding.ShardOf(sharding.Hash(string(cm.UID)), simShards)
	h.mu.Lock()
	for id, other := range h.replicas {
		if other != rep && slices.Contains(other.sh.Replica().Shards(), s) {
			h.bad = append(h.bad, fmt.Sprintf("%s runs %s of shard %d, held by %s", rep.id, key, s, id))
		}
	}
	h.mu.Unlock()
	select {
	case <-time.After(simWork):
	case <-ctx.Done():
		return reconcile.Result{}, context.Cause(ctx)
	}
	h.mu.Lock()
	h.last[key] = cm.Data["value"] + " by " + rep.id
	h.mu.Unlock()
	// Every key comes back on its own soon: with enough workers, nearly
	// every key is in flight or waiting when its shard moves.
	if h.once {
		return reconcile.Result{}, nil
	}
	if h.errs {
		return reconcile.Result{}, errors.New("simulated failure")
	}
	return reconcile.Result{RequeueAfter: simRequeue}, nil
}

// churn changes a random object every 10 ms until the returned function
// is called.
func (h *simRing) churn() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		cms := h.objs.CoreV1().ConfigMaps(simNS)
		for v := 0; ; v++ {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			cm, err := cms.Get(context.Background(), fmt.Sprintf("cm-%02d", v*7%simObjects), metav1.GetOptions{})
			if err == nil {
				cm.Data["value"] = fmt.Sprintf("churn-%d", v)
				_, err = cms.Update(context.Background(), cm, metav1.UpdateOptions{})
			}
			if err != nil {
				h.fail("churn: %v", err)
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

func (h *simRing) fail(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bad = append(h.bad, fmt.Sprintf(format, args...))
}

// holder returns the replica holding shard s, or "".
func (h *simRing) holder(s int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, rep := range h.replicas {
		if slices.Contains(rep.sh.Replica().Shards(), s) {
			return id
		}
	}
	return ""
}

// waitFor waits, in simulated time, until cond returns "" (at most a
// minute), and fails with its last answer otherwise.
func (h *simRing) waitFor(what string, cond func() string) {
	h.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		last := cond()
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: not after a minute: %s", what, last)
		}
		time.Sleep(100 * time.Millisecond) // simulated time
	}
}

// balanced waits until every shard is held by exactly one replica, each
// holding ⌊S/N⌋ or ⌈S/N⌉.
func (h *simRing) balanced() {
	h.waitFor("balanced", func() string {
		h.mu.Lock()
		defer h.mu.Unlock()
		n := len(h.replicas)
		count := make([]int, simShards)
		for id, rep := range h.replicas {
			held := rep.sh.Replica().Shards()
			if len(held) < simShards/n || len(held) > (simShards+n-1)/n {
				return fmt.Sprintf("%s holds %v", id, held)
			}
			for _, s := range held {
				count[s]++
			}
		}
		for s, c := range count {
			if c != 1 {
				return fmt.Sprintf("shard %d held %d times", s, c)
			}
		}
		return ""
	})
}

// changeAll sets every object's value and waits until each is reconciled
// at it by the holder of its shard.
func (h *simRing) changeAll(value string) {
	cms := h.objs.CoreV1().ConfigMaps(simNS)
	l, err := cms.List(h.t.Context(), metav1.ListOptions{})
	require.NoError(h.t, err)
	for _, cm := range l.Items {
		cm.Data["value"] = value
		_, err := cms.Update(h.t.Context(), &cm, metav1.UpdateOptions{})
		require.NoError(h.t, err)
	}
	h.waitFor("every object reconciled at "+value+" by its holder", func() string {
		for _, cm := range l.Items {
			want := value + " by " + h.holder(sharding.ShardOf(sharding.Hash(string(cm.UID)), simShards))
			h.mu.Lock()
			got := h.last[simNS+"/"+cm.Name]
			h.mu.Unlock()
			if got != want {
				return fmt.Sprintf("%s: %q, want %q", cm.Name, got, want)
			}
		}
		return ""
	})
}

// stop stops a replica as a manager does: the ring's loop first (it
// drains and releases while the controller's workers still run), then the
// controller and the informer.
func (h *simRing) stop(id string) {
	h.mu.Lock()
	rep := h.replicas[id]
	delete(h.replicas, id)
	h.mu.Unlock()
	rep.stopSh()
	require.NoError(h.t, <-rep.shDone, "%s: the ring's loop", id)
	rep.stopCt()
	rep.wg.Wait()
}

func (h *simRing) stopAll() {
	h.mu.Lock()
	var ids []string
	for id := range h.replicas {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		h.stop(id)
	}
}

func (h *simRing) check() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.t.Logf("%d reconciles", h.runs.Runs())
	bad := append(h.runs.Violations(), h.bad...)
	if n := h.runs.InFlight(); n > 0 {
		bad = append(bad, fmt.Sprintf("%d reconciles still in flight once every replica stopped", n))
	}
	if len(bad) > 0 {
		h.t.Fatalf("%d broken rules; the first ones:\n%s", len(bad), strings.Join(bad[:min(len(bad), 10)], "\n"))
	}
}
