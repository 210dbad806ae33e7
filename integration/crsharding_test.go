package integration

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-coalesce/workqueue/interop/crsharding"
	"github.com/go-coalesce/workqueue/interop/crsharding/examples/sharded/configmaps"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The controller-runtime ring: the sharding ring's timing, 16 shards and
// fewer objects (each manager starts its own cache and controller).
const (
	crShards  = 16
	crObjects = 64
	crWork    = 5 * time.Second        // each reconcile, after the example's, unless cancelled: longer than a shard takes to move
	crRequeue = 100 * time.Millisecond // then the key comes back
)

// TestControllerRuntimeSharding runs examples/sharded's ConfigMap
// controller (package configmaps: a controller-runtime manager per replica,
// with crsharding's sharded cache, queue and reconciler wrapper) as three
// managers against the real API server over 16 shards, while the
// ConfigMaps keep changing. Then one manager stops (gracefully: it drains
// and releases) and another joins. After each change the ring settles.
//
// Every reconcile is checked as it starts:
//   - no other manager is reconciling the same key (the tracker);
//   - the manager holds the object's shard now;
//   - the object is in the manager's cache, unless it is gone from the
//     server too: a key whose object exists on the server but is absent
//     from the cache would make a controller act on absence.
//
// While shards move, every reconcile also works 5 s and requeues itself
// 100 ms later, with a worker per object, so that nearly every key is in
// flight or waiting when its shard moves. At the end every ConfigMap is
// changed once more, and each must carry the digest of its final data.
// (Not necessarily written by the manager holding its shard at the end: on
// a loaded machine a session can lapse and its shards move after the
// write. Who may write is checked at every run, above.)
func TestControllerRuntimeSharding(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	admin, err := kubernetes.NewForConfig(server.restConfig())
	require.NoError(t, err)
	g := &crRing{
		t:        t,
		ctx:      t.Context(),
		admin:    admin,
		track:    newTracker(),
		stopCh:   make(chan struct{}),
		managers: map[string]*crManager{},
	}
	g.ns = createNamespace(t, admin, "crsharding")
	require.NoError(t, forEachObject(func(i int) error {
		cm := configMap(g.ns, fmt.Sprintf("obj-%d", i), "v0")
		cm.Labels = map[string]string{configmaps.LabelWatch: "true"}
		_, err := admin.CoreV1().ConfigMaps(g.ns).Create(g.ctx, cm, metav1.CreateOptions{})
		return err
	}))
	t.Cleanup(func() {
		g.stopAll()
		g.check()
	})
	g.churn.Go(g.keepChanging)

	start := time.Now()
	for _, id := range []string{"m0", "m1", "m2"} {
		g.start(id)
	}
	g.settle()
	t.Logf("FIGURES: 3 managers settled %v after the first start", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	g.busy.Store(true)
	g.stop("m1")
	g.start("m3")
	g.settle()
	g.busy.Store(false)
	t.Logf("FIGURES: settled %v after m1 stopped and m3 started; filtering on the %s",
		time.Since(start).Round(time.Millisecond), g.managers["m0"].sh.Replica().Filtering())
	g.finish()
}

type crRing struct {
	t      *testing.T
	ctx    context.Context
	ns     string
	admin  kubernetes.Interface
	track  *tracker
	stopCh chan struct{} // closed to stop the churn
	churn  sync.WaitGroup

	busy     atomic.Bool           // reconciles work and requeue (while shards move)
	managers map[string]*crManager // the running ones
	stopped  []*crManager

	mu     sync.Mutex   // protects the fields below
	all    []*crManager // every manager started, for the reconcilers' checks
	absent []string     // keys handed to a reconciler while missing from its cache but on the server
}

// crManager is one replica: a manager of its own, as a separate process.
type crManager struct {
	id     string
	sh     *crsharding.Sharding
	cancel context.CancelFunc
	done   chan struct{}
	err    error // mgr.Start's, once done is closed
}

func (g *crRing) start(id string) {
	g.t.Helper()
	m := &crManager{id: id, done: make(chan struct{})}
	var cached client.Reader
	mgr, sh, err := configmaps.New(server.restConfig(), configmaps.Options{
		Namespace: g.ns,
		Identity:  id,
		Workers:   crObjects,
		Ring: sharding.Config{
			Name:          "crsharding",
			Shards:        crShards,
			LeaseDuration: ringLeaseDuration,
			RenewDeadline: ringRenewDeadline,
			RetryPeriod:   ringRetryPeriod,
			GracePeriod:   ringGracePeriod,
			OnChange: func(held []int) {
				g.t.Logf("%s: %s holds %v", time.Now().Format("15:04:05.000"), id, held)
			},
		},
		Manager: ctrl.Options{
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			// Several managers of one controller in one process: a
			// deployment has one per process.
			Controller: config.Controller{SkipNameValidation: new(true)},
		},
		Wrap: func(inner reconcile.Reconciler) reconcile.Reconciler {
			return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
				key := crsharding.Key(req)
				g.track.Enter(id, key, shardOf(m.sh.Replica(), crShards, key))
				defer g.track.Exit(id, key)
				g.checkRun(ctx, m, cached, req)
				res, err := inner.Reconcile(ctx, req)
				if !g.busy.Load() {
					return res, err
				}
				// While shards move, work a while, then come back soon:
				// with a worker per object, nearly every key is in
				// flight or waiting when its shard moves.
				select {
				case <-time.After(crWork):
				case <-ctx.Done():
					return res, context.Cause(ctx)
				}
				if err == nil && res.IsZero() {
					res.RequeueAfter = crRequeue
				}
				return res, err
			})
		},
	})
	require.NoError(g.t, err)
	m.sh = sh
	cached = mgr.GetCache()
	ctx, cancel := context.WithCancel(context.WithoutCancel(g.ctx))
	m.cancel = cancel
	go func() {
		defer close(m.done)
		m.err = mgr.Start(ctx)
	}()
	g.managers[id] = m
	g.mu.Lock()
	g.all = append(g.all, m)
	g.mu.Unlock()
}

// checkRun records a run of req on m that breaks a rule: the object is
// missing from m's cache while the server has it, or another manager holds
// the object's shard while this run is in flight. (Not "m holds it": m may
// have started draining it since the run began; the shard is released only
// once the run has returned, so no other manager can hold it meanwhile.)
func (g *crRing) checkRun(ctx context.Context, m *crManager, cached client.Reader, req reconcile.Request) {
	var cm corev1.ConfigMap
	err := cached.Get(ctx, req.NamespacedName, &cm)
	if apierrors.IsNotFound(err) {
		if _, err := g.admin.CoreV1().ConfigMaps(req.Namespace).Get(ctx, req.Name, metav1.GetOptions{}); err == nil {
			g.mu.Lock()
			g.absent = append(g.absent, fmt.Sprintf("%s: %s got %s, absent from its cache but on the server", time.Now().Format("15:04:05.000"), m.id, req))
			g.mu.Unlock()
		}
		return
	}
	if err != nil {
		return // the run's context ended
	}
	s := sharding.ShardOf(sharding.Hash(string(cm.UID)), crShards)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, other := range g.all {
		if other != m && slices.Contains(other.sh.Replica().Shards(), s) {
			g.track.fail("%s reconciles %s of shard %d, held by %s", m.id, crsharding.Key(req), s, other.id)
		}
	}
}

func (g *crRing) stop(id string) {
	m := g.managers[id]
	delete(g.managers, id)
	g.stopped = append(g.stopped, m)
	m.cancel()
	<-m.done
}

func (g *crRing) stopAll() {
	for _, id := range slices.Sorted(maps.Keys(g.managers)) {
		g.stop(id)
	}
	select {
	case <-g.stopCh:
	default:
		close(g.stopCh)
	}
	g.churn.Wait()
}

// keepChanging changes the data of a random ConfigMap every 10 ms.
func (g *crRing) keepChanging() {
	cms := g.admin.CoreV1().ConfigMaps(g.ns)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for v := 1; ; v++ {
		select {
		case <-g.stopCh:
			return
		case <-tick.C:
		}
		cm, err := cms.Get(g.ctx, fmt.Sprintf("obj-%d", rand.IntN(crObjects)), metav1.GetOptions{})
		if err == nil {
			cm.Data["value"] = fmt.Sprintf("v%d", v)
			_, err = cms.Update(g.ctx, cm, metav1.UpdateOptions{})
		}
		if err != nil && !apierrors.IsConflict(err) && g.ctx.Err() == nil {
			g.track.fail("churn: %v", err) // a Conflict is the controller's patch in between
		}
	}
}

// holders maps each shard to the managers holding it.
func (g *crRing) holders() [][]string {
	h := make([][]string, crShards)
	for id, m := range g.managers {
		for _, s := range m.sh.Replica().Shards() {
			h[s] = append(h[s], id)
		}
	}
	return h
}

// settle waits until every shard is held by exactly one running manager
// and none holds more than its fair share.
func (g *crRing) settle() {
	g.t.Helper()
	fair := (crShards + len(g.managers) - 1) / len(g.managers)
	g.waitUntil("the ring settled", 50*time.Millisecond, func() string {
		for s, ids := range g.holders() {
			if len(ids) != 1 {
				return fmt.Sprintf("shard %d held by %v", s, ids)
			}
		}
		for id, m := range g.managers {
			if n := len(m.sh.Replica().Shards()); n > fair {
				return fmt.Sprintf("%s holds %d shards, fair share %d", id, n, fair)
			}
		}
		return ""
	})
}

// waitUntil polls cond every tick until it returns "", for at most
// settleTimeout, and fails the test with its last answer otherwise.
func (g *crRing) waitUntil(what string, tick time.Duration, cond func() string) {
	g.t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for {
		last := cond()
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("not %s in %v: %s", what, settleTimeout, last)
		}
		select {
		case <-g.ctx.Done():
			g.t.Fatalf("test ended before %s: %s", what, last)
		case <-time.After(tick):
		}
	}
}

// finish stops the churn, changes every ConfigMap once more and waits until
// each carries its final digest, written by its shard's holder.
func (g *crRing) finish() {
	g.t.Helper()
	close(g.stopCh)
	g.churn.Wait()
	cms := g.admin.CoreV1().ConfigMaps(g.ns)
	start := time.Now()
	require.NoError(g.t, forEachObject(func(i int) error {
		return retryOnConflict(func() error {
			cm, err := cms.Get(g.ctx, fmt.Sprintf("obj-%d", i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			cm.Data["value"] = "final"
			_, err = cms.Update(g.ctx, cm, metav1.UpdateOptions{})
			return err
		})
	}))
	written := time.Now()
	g.t.Logf("FIGURES: %d ConfigMaps updated in %v", crObjects, written.Sub(start).Round(time.Millisecond))
	want := configmaps.Digest(map[string]string{"value": "final"})
	g.waitUntil("every ConfigMap reconciled at its final data by its holder", 100*time.Millisecond, func() string {
		l, err := cms.List(g.ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		for _, cm := range l.Items {
			if d := cm.Annotations[configmaps.AnnotationDigest]; d != want {
				return fmt.Sprintf("%s: digest %q, want %q", cm.Name, d, want)
			}
		}
		return ""
	})
	g.t.Logf("FIGURES: every ConfigMap reconciled %v after the last update", time.Since(written).Round(time.Millisecond))
	g.stopAll()
}

// check reports, after every manager has stopped, their errors, the
// tracker's failures and overlaps, and the runs on absent objects.
func (g *crRing) check() {
	t := g.t
	for _, m := range g.stopped {
		if m.err != nil {
			t.Errorf("%s: manager: %v", m.id, m.err)
		}
	}
	runs, violations, failures := g.track.report()
	t.Logf("%d reconciles", runs)
	for _, f := range failures {
		t.Errorf("%s", f)
	}
	if len(violations) > 0 {
		t.Errorf("two managers reconciled one key, or keys of overlapping hash ranges, at once, %d times; the first ones:\n%v", len(violations), violations[:min(len(violations), 10)])
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.absent) > 0 {
		t.Errorf("a key was handed to a reconciler while its object was absent from that manager's cache but on the server, %d times; the first ones:\n%v", len(g.absent), g.absent[:min(len(g.absent), 10)])
	}
}

// forEachObject calls f for each object index, 8 at a time (one after the
// other takes seconds on a loaded machine), and returns the first error.
func forEachObject(f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
		next  = make(chan int)
	)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errMu.Lock()
					first = cmp.Or(first, err)
					errMu.Unlock()
				}
			}
		})
	}
	for i := range crObjects {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// retryOnConflict calls f until it returns anything but a Conflict.
func retryOnConflict(f func() error) error {
	for {
		if err := f(); !apierrors.IsConflict(err) {
			return err
		}
	}
}

// TestControllerRuntimeShardingGracefulStop stops a manager of
// examples/sharded's controller while its reconciles are in flight, each
// working 500 ms, and checks the order crsharding's package doc promises
// (Shutdown): the Sharding stops first and drains while the controller
// still runs, so every run in flight finishes with its context not
// cancelled, and a shard's Lease is released only after its runs have
// returned. Each run reads its shard's Lease from the API server as it
// ends: it must still be held by the manager then. (Not every shard's: a
// leave releases each shard as soon as its own runs are over, so a shard
// without runs may be free while another's run ends.) After the stop,
// every shard Lease must be released.
//
// Mutants: ControllerOptions setting the controller's NeedLeaderElection
// to false (as it did): the controller is cancelled with the Sharding, and
// the runs in flight end at once with "context canceled"; drainStep
// (sharding/decide.go) releasing a draining shard with runs in flight:
// "run of …/obj-0: its shard's Lease was released before it ended".
func TestControllerRuntimeShardingGracefulStop(t *testing.T) {
	const (
		objects = 8
		work    = 500 * time.Millisecond
		ring    = "crsharding-stop"
		id      = "m0"
	)
	ctrl.SetLogger(logr.Discard())
	admin, err := kubernetes.NewForConfig(server.restConfig())
	require.NoError(t, err)
	ns := createNamespace(t, admin, "crsharding-stop")
	shardOf := map[string]int{} // key → shard (FieldUID, as configmaps.New)
	for i := range objects {
		cm := configMap(ns, fmt.Sprintf("obj-%d", i), "v0")
		cm.Labels = map[string]string{configmaps.LabelWatch: "true"}
		cm, err := admin.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{})
		require.NoError(t, err)
		shardOf[ns+"/"+cm.Name] = sharding.ShardOf(sharding.Hash(string(cm.UID)), crShards)
	}

	// heldBy reports, from the API server, whether every shard Lease of
	// the ring, or only those of the shards given, is held by want (""
	// if so, else which is not).
	leases := admin.CoordinationV1().Leases(ns)
	heldBy := func(want string, only ...int) string {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
		defer cancel()
		l, err := leases.List(ctx, metav1.ListOptions{LabelSelector: sharding.LabelRing + "=" + ring})
		if err != nil {
			return err.Error()
		}
		n := 0
		for _, lease := range l.Items {
			if lease.Labels[sharding.LabelRole] != "shard" {
				continue // a membership Lease, or the ring's
			}
			n++
			if len(only) > 0 && !slices.ContainsFunc(only, func(i int) bool { return lease.Name == fmt.Sprintf("%s-shard-%d-of-%d", ring, i, crShards) }) {
				continue
			}
			if h := ptr.Deref(lease.Spec.HolderIdentity, ""); h != want {
				return fmt.Sprintf("%s held by %q, want %q", lease.Name, h, want)
			}
		}
		if n != crShards {
			return fmt.Sprintf("%d shard Leases, want %d", n, crShards)
		}
		return ""
	}

	type run struct {
		key    string
		ctxErr error  // the run's ctx.Err() as it ended
		leases string // heldBy(id, its shard) as it ended
	}
	var (
		mu       sync.Mutex
		armed    bool // runs work and are recorded
		inflight int
		ended    []run
	)
	mgr, _, err := configmaps.New(server.restConfig(), configmaps.Options{
		Namespace: ns,
		Identity:  id,
		Workers:   objects,
		Ring: sharding.Config{
			Name:          ring,
			Shards:        crShards,
			LeaseDuration: ringLeaseDuration,
			RenewDeadline: ringRenewDeadline,
			RetryPeriod:   ringRetryPeriod,
			// Far above a run's 500 ms, on a loaded machine too: a run
			// that ends cancelled was cancelled by the stop, not by the
			// end of its grace.
			GracePeriod: 10 * time.Second,
		},
		Manager: ctrl.Options{
			Metrics:                 metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress:  "0",
			Controller:              config.Controller{SkipNameValidation: new(true)},
			GracefulShutdownTimeout: new(time.Minute),
		},
		Wrap: func(inner reconcile.Reconciler) reconcile.Reconciler {
			return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
				res, err := inner.Reconcile(ctx, req)
				mu.Lock()
				if !armed {
					mu.Unlock()
					return res, err
				}
				inflight++
				mu.Unlock()
				select {
				case <-time.After(work):
				case <-ctx.Done():
				}
				key := crsharding.Key(req)
				r := run{key: key, ctxErr: ctx.Err(), leases: heldBy(id, shardOf[key])}
				mu.Lock()
				inflight--
				ended = append(ended, r)
				mu.Unlock()
				return res, err
			})
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()

	// Once the manager holds every shard and has stamped every ConfigMap,
	// arm the runs and change every ConfigMap: the stop comes as soon as
	// runs are in flight.
	cms := admin.CoreV1().ConfigMaps(ns)
	wait := func(what string, cond func() string) {
		t.Helper()
		deadline := time.Now().Add(settleTimeout)
		for last := cond(); last != ""; last = cond() {
			if time.Now().After(deadline) {
				cancel()
				<-done
				t.Fatalf("not %s in %v: %s", what, settleTimeout, last)
			}
			select {
			case <-t.Context().Done():
				t.Fatalf("test ended before %s: %s", what, last)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	wait("every shard held", func() string { return heldBy(id) })
	wait("every ConfigMap stamped", func() string {
		l, err := cms.List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		for _, cm := range l.Items {
			if cm.Annotations[configmaps.AnnotationBy] != id {
				return cm.Name + " not stamped"
			}
		}
		return ""
	})
	mu.Lock()
	armed = true
	mu.Unlock()
	for i := range objects {
		require.NoError(t, retryOnConflict(func() error {
			cm, err := cms.Get(t.Context(), fmt.Sprintf("obj-%d", i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			cm.Data["value"] = "v1"
			_, err = cms.Update(t.Context(), cm, metav1.UpdateOptions{})
			return err
		}))
	}
	var atStop int
	wait("a run in flight", func() string {
		mu.Lock()
		defer mu.Unlock()
		if atStop = inflight; atStop == 0 {
			return "none yet"
		}
		return ""
	})
	stopped := time.Now()
	cancel()
	require.NoError(t, <-done)
	t.Logf("FIGURES: %d runs in flight at the stop; the manager stopped in %v", atStop, time.Since(stopped).Round(time.Millisecond))

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, ended, "no run ended")
	for _, r := range ended {
		require.NoError(t, r.ctxErr, "run of %s: its context was cancelled before it ended", r.key)
		require.Empty(t, r.leases, "run of %s: its shard's Lease was released before it ended", r.key)
	}
	require.Empty(t, heldBy(""), "after the stop, every shard Lease released")
}
