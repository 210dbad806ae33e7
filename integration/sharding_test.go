package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	workqueue "github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/exclusion"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Timing of the rings below. Real time, since the API server is real:
// short enough that each scenario takes seconds, with room between
// RenewDeadline and LeaseDuration for a loaded CI machine (-race, two cores
// shared with other builds) to cancel and return a handler in time.
const (
	ringShards        = 16
	ringLeaseDuration = 4 * time.Second
	ringRenewDeadline = 2 * time.Second
	ringRetryPeriod   = 250 * time.Millisecond
	ringGracePeriod   = time.Second
	ringObjects       = 120
	ringWorkers       = 3
	workTime          = 10 * time.Millisecond // one handler run, unless cancelled
	settleTimeout     = 30 * time.Second      // for the ring to rebalance after a change
)

// TestShardingExclusion runs a ring of 3 and of 5 replicas of one controller
// against the real API server while objects keep changing, and moves shards
// in every way the ring knows: replicas join one by one, one leaves
// gracefully (drains and releases), one more joins, one is killed (stops
// without releasing anything, as a crashed process: the others must wait for
// its Lease to expire and fence it). After each change the test waits until
// every shard is held by exactly one live replica and the live replicas hold
// about as many each.
//
// Invariant 1 is checked at every handler entry and exit: no key's handler
// ever runs on two replicas at once. At the end every object is changed
// once more, and every object must be reconciled at its last version.
func TestShardingExclusion(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("replicas=%d", n), func(t *testing.T) {
			ring := newRing(t, "exclusion")
			for i := range n {
				ring.join(fmt.Sprintf("r%d", i), i == 1) // r1 will be killed
				ring.settle()
			}
			ring.leave("r0")
			ring.settle()
			ring.join(fmt.Sprintf("r%d", n), false)
			ring.settle()
			ring.leave("r1") // SkipRelease: a crash
			ring.settle()
			ring.finish()
		})
	}
}

// TestShardingCutOff runs a ring of 3 and of 5 replicas and cuts one
// replica off from the API server for its Leases, while its informer still
// receives events: the dangerous case, where a replica that missed that it
// lost its shards would keep running their keys. Every Lease request it
// sends fails for a while, then it heals; then another replica's Lease
// requests reach the server but their responses are lost for a while (the
// replica cannot know whether its writes happened); then a third one's
// successful writes go unanswered while its failed writes and its reads
// are answered (issue #14: it learns its Lease's resourceVersion back, so
// its blind writes keep landing). During each fault the others must settle
// without the faulty replica, every shard held once, and it must hold
// none; after each heal the whole ring must settle.
func TestShardingCutOff(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("replicas=%d", n), func(t *testing.T) {
			ring := newRing(t, "cutoff")
			for i := range n {
				ring.join(fmt.Sprintf("r%d", i), false)
			}
			ring.settle()

			var took []string
			for _, fault := range []struct {
				id   string
				mode int32
			}{{"r0", linkCut}, {"r1", linkLoseResponses}, {"r2", linkLoseApplied}} {
				rep := ring.replicas[fault.id]
				rep.link.set(fault.mode)
				took = append(took, fmt.Sprintf("%s %s: %v", fault.id, linkModes[fault.mode], ring.settleWithout(fault.id).Round(time.Millisecond)))
				require.Empty(t, rep.r.Shards(), "%s still holds shards during its fault", fault.id)
				rep.link.set(linkUp)
				ring.settle()
			}
			t.Logf("FIGURES the others settled without the faulty replica after (LeaseDuration %v): %s", ringLeaseDuration, strings.Join(took, "; "))
			ring.finish()
		})
	}
}

// ringSpec is what differs between the rings of the tests: shards,
// objects, workers, how long a handler works and the timing.
type ringSpec struct {
	shards, objects, workers int
	work                     time.Duration // one handler run, unless cancelled
	leaseDuration            time.Duration
	renewDeadline            time.Duration
	retryPeriod              time.Duration
	gracePeriod              time.Duration
}

// defaultRing is the ring of TestShardingExclusion and TestShardingCutOff.
var defaultRing = ringSpec{
	shards: ringShards, objects: ringObjects, workers: ringWorkers, work: workTime,
	leaseDuration: ringLeaseDuration, renewDeadline: ringRenewDeadline,
	retryPeriod: ringRetryPeriod, gracePeriod: ringGracePeriod,
}

// ring is one sharded controller on several replicas, all in this process,
// sharing the API server and a tracker.
type ring struct {
	t      *testing.T
	ctx    context.Context
	spec   ringSpec
	name   string
	ns     string
	admin  kubernetes.Interface
	track  *tracker
	stopCh chan struct{} // closed to stop the churn
	churn  sync.WaitGroup

	replicas map[string]*replica // the live ones
	stopped  []*replica          // left or killed
}

// replica is one member of a ring: its own clients, informer, queue and
// sharding.Replica, as a separate process would have.
type replica struct {
	id     string
	r      *sharding.Replica
	link   *link
	cancel context.CancelFunc
	done   sync.WaitGroup
	runErr atomic.Pointer[error] // sharding Run's error, if any
}

// newRing creates the ring's namespace and objects and starts changing
// them (one update every few milliseconds, on random objects) until finish.
func newRing(t *testing.T, name string) *ring { return newRingOf(t, name, defaultRing) }

// newRingOf is newRing for a ring of the given spec.
func newRingOf(t *testing.T, name string, spec ringSpec) *ring {
	admin, err := kubernetes.NewForConfig(server.restConfig())
	require.NoError(t, err)
	g := &ring{
		t:        t,
		ctx:      t.Context(),
		spec:     spec,
		name:     name,
		admin:    admin,
		track:    newTracker(),
		stopCh:   make(chan struct{}),
		replicas: map[string]*replica{},
	}
	g.ns = createNamespace(t, admin, name)
	for i := range spec.objects {
		_, err := admin.CoreV1().ConfigMaps(g.ns).Create(g.ctx, configMap(g.ns, fmt.Sprintf("obj-%d", i), "v0"), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	// Stop every replica at the end, even when the test fails half-way,
	// so that no goroutine outlives the test; then report what the
	// tracker saw, also when the test failed for another reason first.
	t.Cleanup(func() {
		g.stopAll()
		g.check()
	})
	g.churn.Go(g.keepChanging)
	return g
}

// keepChanging updates random objects until stopCh is closed. Conflicts
// with nobody are possible only with itself, so errors other than the test
// ending are recorded as failures of the ring.
func (g *ring) keepChanging() {
	cms := g.admin.CoreV1().ConfigMaps(g.ns)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for v := 1; ; v++ {
		select {
		case <-g.stopCh:
			return
		case <-tick.C:
		}
		name := fmt.Sprintf("obj-%d", rand.IntN(g.spec.objects))
		cm, err := cms.Get(g.ctx, name, metav1.GetOptions{})
		if err == nil {
			cm.Data["value"] = fmt.Sprintf("v%d", v)
			_, err = cms.Update(g.ctx, cm, metav1.UpdateOptions{})
		}
		if err != nil && g.ctx.Err() == nil {
			g.track.fail("churn: %v", err)
		}
	}
}

// join starts a replica. With crash, its Run skips the release when it is
// stopped, as a killed process would.
func (g *ring) join(id string, crash bool) { g.joinWith(id, crash, nil) }

// joinWith is join with wrap, if not nil, around the replica's Lease
// requests (outside its link).
func (g *ring) joinWith(id string, crash bool, wrap func(http.RoundTripper) http.RoundTripper) {
	g.t.Helper()
	t := g.t
	lnk := &link{}
	leaseConfig := server.restConfig()
	leaseConfig.WrapTransport = lnk.wrap
	if wrap != nil {
		leaseConfig.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return wrap(lnk.wrap(rt)) }
	}
	leaseClient, err := kubernetes.NewForConfig(leaseConfig)
	require.NoError(t, err)
	// The informer has a client of its own that is never cut: a replica
	// cut off from its Leases but still told of changes is the case that
	// could break exclusion.
	watchClient, err := kubernetes.NewForConfig(server.restConfig())
	require.NoError(t, err)

	q := workqueue.NewRateLimitingQueue(workqueue.NewItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Second))
	r, err := sharding.New(sharding.Config{
		Client:        leaseClient,
		Namespace:     g.ns,
		Name:          g.name,
		Identity:      id,
		Object:        &corev1.ConfigMap{},
		ListerWatcher: cache.NewListWatchFromClient(watchClient.CoreV1().RESTClient(), "configmaps", g.ns, fields.Everything()),
		Queue:         q,
		Shards:        g.spec.shards,
		LeaseDuration: g.spec.leaseDuration,
		RenewDeadline: g.spec.renewDeadline,
		RetryPeriod:   g.spec.retryPeriod,
		GracePeriod:   g.spec.gracePeriod,
		SkipRelease:   crash,
	})
	require.NoError(t, err)
	lister := corelisters.NewConfigMapLister(r.Informer().GetIndexer())

	ctx, cancel := context.WithCancel(context.WithoutCancel(g.ctx))
	rep := &replica{id: id, r: r, link: lnk, cancel: cancel}
	rep.done.Go(func() {
		if err := r.Run(ctx); err != nil {
			rep.runErr.Store(&err)
		}
	})
	handle := func(ctx context.Context, key string) error {
		g.track.Enter(id, key, shardOf(r, g.spec.shards, key))
		defer g.track.Exit(id, key)
		ns, name, _ := strings.Cut(key, "/")
		cm, err := lister.ConfigMaps(ns).Get(name)
		if err != nil {
			return nil // deleted: nothing to do (the test deletes nothing)
		}
		select {
		case <-time.After(g.spec.work):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		g.track.reconciled(key, cm.Data["value"])
		return nil
	}
	rep.done.Go(func() {
		_ = workqueue.Run(ctx, q, g.spec.workers, r.Handler(handle))
	})
	g.replicas[id] = rep
}

// leave stops a replica: gracefully, or as a crash if it joined so.
func (g *ring) leave(id string) {
	g.t.Helper()
	rep := g.replicas[id]
	delete(g.replicas, id)
	g.stopped = append(g.stopped, rep)
	rep.stop()
}

func (rep *replica) stop() {
	rep.cancel()
	rep.done.Wait()
}

// stopAll stops every replica still running, then the churn.
func (g *ring) stopAll() {
	for _, id := range slices.Sorted(maps.Keys(g.replicas)) {
		g.leave(id)
	}
	select {
	case <-g.stopCh:
	default:
		close(g.stopCh)
	}
	g.churn.Wait()
}

// settle waits until the live replicas share the shards: each held by
// exactly one of them, and none holding more than one shard above its fair
// share.
func (g *ring) settle() { g.settleWithout("") }

// settleWithout is settle over the live replicas other than except, which
// is cut off and must hold nothing. It returns how long it waited.
func (g *ring) settleWithout(except string) time.Duration {
	g.t.Helper()
	var last string
	start := time.Now()
	deadline := start.Add(settleTimeout)
	for {
		last = g.balance(except)
		if last == "" {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			dumpLeases(g.t, g.ctx, g.admin, g.ns)
			g.t.Fatalf("the ring did not settle in %v: %s", settleTimeout, last)
		}
		select {
		case <-g.ctx.Done():
			g.t.Fatalf("test ended while waiting for the ring: %s", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// dumpLeases logs the Leases of namespace ns, for a ring that did not
// settle.
func dumpLeases(t *testing.T, ctx context.Context, admin kubernetes.Interface, ns string) {
	l, err := admin.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing the Leases: %v", err)
		return
	}
	for _, le := range l.Items {
		var holder string
		if le.Spec.HolderIdentity != nil {
			holder = *le.Spec.HolderIdentity
		}
		t.Logf("Lease %s: resourceVersion %s, holder %q, session %q, acquired %v, renewed %v",
			le.Name, le.ResourceVersion, holder, le.Annotations[sharding.AnnotationSession], le.Spec.AcquireTime, le.Spec.RenewTime)
	}
}

// balance describes the first way the ring is not settled, or returns "".
func (g *ring) balance(except string) string {
	holder := make([]string, g.spec.shards)
	live := 0
	for id := range g.replicas {
		if id != except {
			live++
		}
	}
	fair := (g.spec.shards + live - 1) / live
	for id, rep := range g.replicas {
		held := rep.r.Shards()
		if id == except {
			if len(held) > 0 {
				return fmt.Sprintf("%s holds %v while cut off", id, held)
			}
			continue
		}
		if len(held) > fair {
			return fmt.Sprintf("%s holds %d shards, fair share %d", id, len(held), fair)
		}
		for _, s := range held {
			if holder[s] != "" {
				return fmt.Sprintf("shard %d held by %s and %s", s, holder[s], id)
			}
			holder[s] = id
		}
	}
	for s, h := range holder {
		if h == "" {
			return fmt.Sprintf("shard %d held by no one", s)
		}
	}
	return ""
}

// finish stops the churn, changes every object once more, waits until each
// is reconciled at that version, stops the replicas and checks the tracker.
func (g *ring) finish() {
	g.t.Helper()
	t := g.t
	close(g.stopCh)
	g.churn.Wait()
	cms := g.admin.CoreV1().ConfigMaps(g.ns)
	for i := range g.spec.objects {
		cm, err := cms.Get(g.ctx, fmt.Sprintf("obj-%d", i), metav1.GetOptions{})
		require.NoError(t, err)
		cm.Data["value"] = "final"
		_, err = cms.Update(g.ctx, cm, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	var missing []string
	require.Eventually(t, func() bool {
		missing = g.track.notReconciled(g.ns, g.spec.objects, "final")
		return len(missing) == 0
	}, settleTimeout, 50*time.Millisecond, "objects not reconciled at their last version: %v", func() []string { return missing })
	g.stopAll()
}

// check reports, once every replica has stopped, the errors of their Runs,
// the failures of the ring's background work, and every violation of
// invariant 1 the tracker recorded.
func (g *ring) check() {
	t := g.t
	for _, rep := range g.stopped {
		if p := rep.runErr.Load(); p != nil {
			t.Errorf("%s: sharding Run: %v", rep.id, *p)
		}
	}
	checkTracker(t, g.track)
}

// checkTracker fails t on each failure of a ring's background work and on
// every violation of invariant 1 that track recorded, and logs the runs.
func checkTracker(t *testing.T, track *tracker) {
	t.Helper()
	runs, violations, failures := track.report()
	t.Logf("%d handler runs", runs)
	for _, f := range failures {
		t.Errorf("the ring's background work failed: %s", f)
	}
	if len(violations) > 0 {
		t.Errorf("invariant 1: two replicas ran one key, or keys of overlapping hash ranges, at once, %d times; the first ones:\n%s",
			len(violations), strings.Join(violations[:min(len(violations), 10)], "\n"))
	}
}

// tracker checks invariant 1 at every handler entry and exit through the
// exclusion oracle it embeds (Enter, Exit), and records the value each key
// was last reconciled at and the failures of the ring's background work.
// Replicas' goroutines call it; the test asserts on what it recorded after
// they are stopped.
type tracker struct {
	exclusion.Tracker

	mu       sync.Mutex // protects the fields below
	failures []string
	last     map[string]string
}

func newTracker() *tracker {
	return &tracker{last: map[string]string{}}
}

// shardOf returns key's shard as replica r tells it, r's ring having
// shards shards, for the exclusion tracker: the zero Shard (checked by key
// only) if r cannot tell.
func shardOf(r *sharding.Replica, shards int, key string) exclusion.Shard {
	i, ok := r.ShardOfKey(key)
	if !ok {
		return exclusion.Shard{}
	}
	return exclusion.Shard{Index: i, Count: shards}
}

func (tr *tracker) reconciled(key, value string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.last[key] = value
}

func (tr *tracker) fail(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.failures = append(tr.failures, fmt.Sprintf(format, args...))
}

func (tr *tracker) notReconciled(ns string, n int, value string) []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var missing []string
	for i := range n {
		key := fmt.Sprintf("%s/obj-%d", ns, i)
		if tr.last[key] != value {
			missing = append(missing, key)
		}
	}
	return missing
}

func (tr *tracker) report() (runs int, violations, failures []string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.Runs(), tr.Violations(), slices.Clone(tr.failures)
}

// link is a replica's connection to the API server for its Leases, which
// the test can cut.
type link struct{ mode atomic.Int32 }

const (
	linkUp            = iota
	linkCut           // every Lease request fails before it is sent
	linkLoseResponses // Lease requests reach the server; their responses are lost
	linkLoseApplied   // the responses of successful Lease writes are lost; others arrive
)

var linkModes = []string{"up", "cut", "all responses lost", "responses of successful writes lost"}

func (l *link) set(mode int32) { l.mode.Store(mode) }

// errCut is what a cut link's requests fail with.
var errCut = errors.New("integration: link cut by the test")

// wrap is a rest.Config.WrapTransport: requests for Leases go through the
// link, others pass.
func (l *link) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if !strings.Contains(req.URL.Path, "/leases") {
			return rt.RoundTrip(req)
		}
		switch l.mode.Load() {
		case linkCut:
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, errCut
		case linkLoseResponses:
			resp, err := rt.RoundTrip(req)
			if err == nil {
				// A watch's body is a stream that ends only when the
				// watch does: drop it rather than read it to the end.
				if req.URL.Query().Get("watch") != "true" {
					_, _ = io.Copy(io.Discard, resp.Body)
				}
				resp.Body.Close()
			}
			return nil, errCut
		case linkLoseApplied:
			resp, err := rt.RoundTrip(req)
			if err == nil && req.Method != http.MethodGet && resp.StatusCode/100 == 2 {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return nil, errCut
			}
			return resp, err
		}
		return rt.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
