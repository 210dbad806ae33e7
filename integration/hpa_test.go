package integration

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	workqueue "github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/controller/podautoscaler"
	metricsclient "k8s.io/kubernetes/pkg/controller/podautoscaler/metrics"
)

// The autoscaling scenario's ring and load. A replica runs hpaWorkers
// keys at once, each for hpaService: at TargetBusy (0.75) it takes 1.5
// keys a second. hpaBase asks for 3 replicas of 16 shards
// (⌈16 / ⌊16 × 180 s / 420 s⌋⌉), three times hpaBase for 8; its work is
// 14 % from either edge (2 below 360 s, 4 above 480 s), so that the
// minute's Poisson noise (±7 %) does not ask for 2 or 4.
const (
	hpaShards    = 16
	hpaWorkers   = 4
	hpaService   = 2 * time.Second
	hpaBase      = 3.5 // keys a second
	hpaStart     = 3   // the Deployment's replicas at the start
	hpaOldest    = 10 * time.Second
	hpaTimeScale = 5 // the HPA's periods and windows are hpa.yaml's over this
)

// TestAutoscaleHPA runs Kubernetes' own HorizontalPodAutoscaler controller
// (k8s.io/kubernetes/pkg/controller/podautoscaler, from the module cache)
// against the real API server, on the example's HPA (hpa.yaml, its
// periods and windows divided by hpaTimeScale so that the run takes
// minutes), scaling a Deployment through its scale subresource. The
// External metric sharding_desired_replicas is answered from the
// replicas' DesiredReplicas gauges, their max, as prometheus-adapter's
// rule in docs/autoscale.md answers it from a scrape. The test plays the
// Deployment controller: it starts and gracefully stops in-process
// sharding replicas to match spec.replicas and writes the Deployment's
// status. Keys (new ConfigMaps) arrive at hpaBase a second, three times
// that for a while, then hpaBase again; the ring must scale up, bring
// its backlog back under TargetOldest, and scale back down to where it
// started, with no key lost and none run on two replicas at once.
//
// Opt-in (SHARDING_AUTOSCALE=1, and -timeout 20m): it takes 8 to 12
// minutes.
func TestAutoscaleHPA(t *testing.T) {
	if os.Getenv("SHARDING_AUTOSCALE") == "" {
		t.Skip("set SHARDING_AUTOSCALE=1 to run the autoscaling scenario with Kubernetes' HPA controller (8 to 12 minutes; -timeout 20m)")
	}
	ctx := t.Context()
	cfg := server.restConfig()
	admin, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ns := createNamespace(t, admin, "hpa")
	a := &autoscaled{t: t, ctx: ctx, admin: admin, ns: ns, track: newTracker(), replicas: map[string]*hpaReplica{}, moves: map[string]*atomic.Int64{}}
	t.Cleanup(func() {
		a.stopAll()
		a.check()
	})

	// The Deployment the HPA scales: nothing runs its pods but this test.
	sel := map[string]string{"app": "hpa-ring"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "deployments", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptrTo(int32(hpaStart)),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
			},
		},
	}
	_, err = admin.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
	require.NoError(t, err)

	// The test's Deployment controller, and the keys' arrival.
	var bg sync.WaitGroup
	bgCtx, stopBG := context.WithCancel(ctx)
	defer func() { stopBG(); bg.Wait() }()
	a.reconcileDeployment() // the start count, before keys arrive
	bg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-bgCtx.Done():
				return
			case <-tick.C:
				a.reconcileDeployment()
			}
		}
	})
	var rate atomic.Uint64 // keys a second, float64 bits
	rate.Store(math.Float64bits(hpaBase))
	var created atomic.Int64
	arrivals, stopArrivals := context.WithCancel(bgCtx)
	bg.Go(func() {
		cms := admin.CoreV1().ConfigMaps(ns)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		last, owed := time.Now(), 0.0
		for {
			select {
			case <-arrivals.Done():
				return
			case now := <-tick.C:
				owed += now.Sub(last).Seconds() * math.Float64frombits(rate.Load())
				last = now
			}
			for ; owed >= 1; owed-- {
				n := created.Load()
				if _, err := cms.Create(ctx, configMap(ns, fmt.Sprintf("obj-%d", n), "v0"), metav1.CreateOptions{}); err != nil {
					if ctx.Err() == nil {
						a.track.fail("arrival: %v", err)
					}
					continue
				}
				created.Add(1)
			}
		}
	})

	// Warm-up: the signal's work is measured over a minute; an HPA made
	// before that would read a ring that seems idle.
	a.sleep(time.Minute)

	// Kubernetes' HPA controller, on the example's HPA.
	hpa := exampleHPA(t, ns)
	_, err = admin.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, hpa, metav1.CreateOptions{})
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(admin.Discovery()))
	scales, err := scale.NewForConfig(cfg, mapper, dynamic.LegacyAPIPathResolverFunc, scale.NewDiscoveryScaleKindResolver(admin.Discovery()))
	require.NoError(t, err)
	factory := informers.NewSharedInformerFactoryWithOptions(admin, 0, informers.WithNamespace(ns))
	hpaCtx, stopHPA := context.WithCancel(ctx)
	var hpaRun sync.WaitGroup
	defer func() { stopHPA(); hpaRun.Wait(); factory.Shutdown() }()
	resync := 15 * time.Second / hpaTimeScale
	ctrl := podautoscaler.NewHorizontalController(hpaCtx, admin.CoreV1(), scales, admin.AutoscalingV2(), mapper,
		externalMetrics{a}, factory.Autoscaling().V2().HorizontalPodAutoscalers(), factory.Core().V1().Pods(),
		resync, 5*time.Minute/hpaTimeScale, 0.1, 30*time.Second, 30*time.Second)
	factory.Start(hpaCtx.Done())
	hpaRun.Go(func() { ctrl.Run(hpaCtx, 1) })

	a.mark(time.Now(), false)
	a.sleep(30 * time.Second)

	// The step: three times the rate, then back.
	step := time.Now()
	a.mark(step, true)
	rate.Store(math.Float64bits(3 * hpaBase))
	a.sleep(150 * time.Second)
	drop := time.Now()
	rate.Store(math.Float64bits(hpaBase))
	deadline := drop.Add(4 * time.Minute)
	for a.wanted() > hpaStart || a.live() > hpaStart {
		if time.Now().After(deadline) {
			t.Errorf("the ring is not back at %d replicas 4 minutes after the drop: %d", hpaStart, a.wanted())
			break
		}
		a.sleep(time.Second)
	}
	a.logReplicas()
	end := time.Now()
	stopArrivals()
	if got, err := admin.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, hpa.Name, metav1.GetOptions{}); err == nil {
		var conds []string
		for _, c := range got.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
		}
		t.Logf("the HPA's status: current %d, desired %d; %s", got.Status.CurrentReplicas, got.Status.DesiredReplicas, strings.Join(conds, "; "))
	}

	// Every key reconciled once all arrived. The HPA is stopped first:
	// the ring is back where it started, and a further scale-down (its
	// minReplicas is 2) would only start another hand-over. The last
	// leave's catch-up (a run owed to every object of the shards it
	// gave up: about 150 keys of 2 s on 4 workers per taker) takes over a
	// minute, and a key that waited on the leaver is run within it.
	stopHPA()
	hpaRun.Wait()
	n := int(created.Load())
	var missing []string
	if !assert.Eventually(t, func() bool {
		missing = a.track.notReconciled(ns, n, "v0")
		return len(missing) == 0
	}, 4*time.Minute, 100*time.Millisecond, "keys lost") {
		t.Errorf("keys never reconciled: %d of %d, the first %v", len(missing), n, missing[:min(len(missing), 5)])
		a.explain(missing[:min(len(missing), 5)])
	}
	t.Logf("every key reconciled %v after the ring was back at %d replicas", time.Since(end).Round(time.Second), hpaStart)
	stopBG()
	bg.Wait()
	a.figures(step, drop, end, n)
}

// exampleHPA is the example's HPA (hpa.yaml) in ns, its behaviour's
// periods and windows divided by hpaTimeScale.
func exampleHPA(t *testing.T, ns string) *autoscalingv2.HorizontalPodAutoscaler {
	var found *autoscalingv2.HorizontalPodAutoscaler
	for _, o := range readManifests(t, autoscaleManifests) {
		if o.GetKind() != "HorizontalPodAutoscaler" {
			continue
		}
		found = &autoscalingv2.HorizontalPodAutoscaler{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, found))
	}
	require.NotNil(t, found, "no HorizontalPodAutoscaler in %s", autoscaleManifests)
	found.Namespace = ns
	b := found.Spec.Behavior
	require.NotNil(t, b, "hpa.yaml has no behavior")
	for _, r := range []*autoscalingv2.HPAScalingRules{b.ScaleUp, b.ScaleDown} {
		require.NotNil(t, r.StabilizationWindowSeconds)
		r.StabilizationWindowSeconds = ptrTo(*r.StabilizationWindowSeconds / hpaTimeScale)
		for i := range r.Policies {
			r.Policies[i].PeriodSeconds /= hpaTimeScale
		}
	}
	return found
}

func ptrTo[T any](v T) *T { return &v }

// autoscaled is the ring the HPA scales, and the test's Deployment
// controller of it.
type autoscaled struct {
	t     *testing.T
	ctx   context.Context
	admin kubernetes.Interface
	ns    string
	track *tracker

	mu       sync.Mutex             // protects the fields below
	replicas map[string]*hpaReplica // started and not stopped
	stopped  []*hpaReplica
	next     int
	want     int
	moves    map[string]*atomic.Int64 // by cause, across replicas
	leaves   sync.WaitGroup
	origin   time.Time // the HPA's creation, then the step
	stepped  bool
	events   []string // the Deployment's changes once the HPA runs
	samples  []hpaSample
}

type hpaReplica struct {
	id      string
	r       *sharding.Replica
	q       *workqueue.RateLimitingQueue[string]
	desired *recordingGauge
	oldest  *recordingGauge
	leaving bool
	cancel  context.CancelFunc
	done    sync.WaitGroup
	runErr  atomic.Pointer[error]
}

type hpaSample struct {
	at      time.Duration // since the step, or the HPA's creation before it
	stepped bool
	want    int // spec.replicas
	live    int // replicas not leaving
	desired int // the max of the replicas' DesiredReplicas
	oldest  time.Duration
}

// mark sets the origin of the times recorded: the HPA's creation, then
// the step.
func (a *autoscaled) mark(origin time.Time, step bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.origin, a.stepped = origin, step
}

// sleep waits d, sampling the ring every second.
func (a *autoscaled) sleep(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		select {
		case <-a.ctx.Done():
			return
		case <-time.After(min(time.Second, time.Until(end))):
		}
		a.sample()
	}
}

func (a *autoscaled) sample() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.origin.IsZero() {
		return
	}
	s := hpaSample{at: time.Since(a.origin), want: a.want, stepped: a.stepped}
	for _, rep := range a.replicas {
		if !rep.leaving {
			s.live++
		}
		s.desired = max(s.desired, int(gaugeNow(rep.desired)))
		s.oldest = max(s.oldest, time.Duration(gaugeNow(rep.oldest)*float64(time.Second)))
	}
	a.samples = append(a.samples, s)
}

// logReplicas logs each replica's shards and the oldest ready age it
// exports.
func (a *autoscaled) logReplicas() {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, id := range slices.Sorted(maps.Keys(a.replicas)) {
		rep := a.replicas[id]
		out = append(out, fmt.Sprintf("%s %v oldest %.1fs desired %v", id, rep.r.Shards(), gaugeNow(rep.oldest), gaugeNow(rep.desired)))
	}
	a.t.Logf("replicas: %s", strings.Join(out, "; "))
}

func gaugeNow(g *recordingGauge) float64 { return math.Float64frombits(g.now.Load()) }

func (a *autoscaled) wanted() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.want
}

func (a *autoscaled) live() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, rep := range a.replicas {
		if !rep.leaving {
			n++
		}
	}
	return n
}

// reconcileDeployment is the test's Deployment controller: it starts or
// gracefully stops replicas to match spec.replicas, the newest leaving
// first, and writes status.replicas and readyReplicas (the replicas not
// leaving).
func (a *autoscaled) reconcileDeployment() {
	deps := a.admin.AppsV1().Deployments(a.ns)
	dep, err := deps.Get(a.ctx, "deployments", metav1.GetOptions{})
	if err != nil {
		if a.ctx.Err() == nil {
			a.track.fail("get Deployment: %v", err)
		}
		return
	}
	want := int(*dep.Spec.Replicas)
	a.mu.Lock()
	if want != a.want && !a.origin.IsZero() {
		when := "before the step"
		if a.stepped {
			when = fmt.Sprintf("at %v", time.Since(a.origin).Round(time.Second))
		}
		a.events = append(a.events, fmt.Sprintf("%d %s", want, when))
	}
	a.want = want
	var live []*hpaReplica
	for _, rep := range a.replicas {
		if !rep.leaving {
			live = append(live, rep)
		}
	}
	slices.SortFunc(live, func(x, y *hpaReplica) int { return strings.Compare(x.id, y.id) })
	for len(live) < want {
		rep, err := a.startLocked()
		if err != nil {
			a.track.fail("start a replica: %v", err)
			break
		}
		live = append(live, rep)
	}
	for len(live) > want {
		rep := live[len(live)-1]
		live = live[:len(live)-1]
		rep.leaving = true
		a.leaves.Go(func() {
			rep.stop()
			a.mu.Lock()
			defer a.mu.Unlock()
			delete(a.replicas, rep.id)
			a.stopped = append(a.stopped, rep)
		})
	}
	a.mu.Unlock()
	n := int32(len(live))
	if dep.Status.Replicas == n && dep.Status.ReadyReplicas == n && dep.Status.ObservedGeneration == dep.Generation {
		return
	}
	dep.Status.Replicas, dep.Status.ReadyReplicas, dep.Status.AvailableReplicas, dep.Status.UpdatedReplicas = n, n, n, n
	dep.Status.ObservedGeneration = dep.Generation
	if _, err := deps.UpdateStatus(a.ctx, dep, metav1.UpdateOptions{}); err != nil && a.ctx.Err() == nil {
		a.t.Logf("status of the Deployment (retried): %v", err)
	}
}

// startLocked starts a replica (ids in start order: r00, r01, …).
func (a *autoscaled) startLocked() (*hpaReplica, error) {
	id := fmt.Sprintf("r%02d", a.next)
	a.next++
	client, err := kubernetes.NewForConfig(server.restConfig())
	if err != nil {
		return nil, err
	}
	rep := &hpaReplica{id: id, desired: &recordingGauge{}, oldest: &recordingGauge{}}
	q := workqueue.NewRateLimitingQueue(workqueue.NewItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Second))
	r, err := sharding.New(sharding.Config{
		Client:        client,
		Namespace:     a.ns,
		Name:          "hpa",
		Identity:      id,
		Object:        &corev1.ConfigMap{},
		ListerWatcher: cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "configmaps", a.ns, fields.Everything()),
		Queue:         q,
		Shards:        hpaShards,
		LeaseDuration: 8 * time.Second,
		RenewDeadline: 4 * time.Second,
		RetryPeriod:   500 * time.Millisecond,
		GracePeriod:   hpaService + time.Second,
		Workers:       hpaWorkers,
		TargetOldest:  hpaOldest,
		Metrics: sharding.Metrics{
			DesiredReplicas: rep.desired,
			RingOldestReady: rep.oldest,
			Moves:           a.movesOf,
		},
	})
	if err != nil {
		return nil, err
	}
	rep.r, rep.q = r, q
	lister := corelisters.NewConfigMapLister(r.Informer().GetIndexer())
	ctx, cancel := context.WithCancel(context.WithoutCancel(a.ctx))
	rep.cancel = cancel
	rep.done.Go(func() {
		if err := r.Run(ctx); err != nil {
			rep.runErr.Store(&err)
		}
	})
	handle := func(ctx context.Context, key string) error {
		a.track.Enter(id, key, shardOf(r, hpaShards, key))
		defer a.track.Exit(id, key)
		ns, name, _ := strings.Cut(key, "/")
		cm, err := lister.ConfigMaps(ns).Get(name)
		if err != nil {
			return nil
		}
		select {
		case <-time.After(hpaService):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		a.track.reconciled(key, cm.Data["value"])
		return nil
	}
	rep.done.Go(func() { _ = workqueue.Run(ctx, q, hpaWorkers, r.Handler(handle)) })
	a.replicas[id] = rep
	return rep, nil
}

func (rep *hpaReplica) stop() {
	rep.cancel()
	rep.done.Wait()
}

// movesOf is Metrics.Moves, shared by the replicas.
func (a *autoscaled) movesOf(cause string) sharding.Counter {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.moves[cause]
	if !ok {
		c = &atomic.Int64{}
		a.moves[cause] = c
	}
	return counterFunc(func() { c.Add(1) })
}

type counterFunc func()

func (f counterFunc) Inc() { f() }

// stopAll stops the replicas still running, and waits for those leaving.
func (a *autoscaled) stopAll() {
	a.mu.Lock()
	reps := slices.Collect(maps.Values(a.replicas))
	a.mu.Unlock()
	for _, rep := range reps {
		rep.stop()
	}
	a.leaves.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, rep := range reps {
		if _, ok := a.replicas[rep.id]; ok {
			delete(a.replicas, rep.id)
			a.stopped = append(a.stopped, rep)
		}
	}
}

// check fails the test on a replica's Run error, a failure of the
// background work, or a key run on two replicas at once.
func (a *autoscaled) check() {
	t := a.t
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, rep := range a.stopped {
		if p := rep.runErr.Load(); p != nil {
			t.Errorf("%s: sharding Run: %v", rep.id, *p)
		}
	}
	checkTracker(t, a.track)
}

// figures logs the scenario's timeline and checks its outcome.
func (a *autoscaled) figures(step, drop, end time.Time, keys int) {
	t := a.t
	a.mu.Lock()
	defer a.mu.Unlock()
	dropAt := drop.Sub(step)
	var firstUp, peakAt, backUnder, firstDown time.Duration = -1, -1, -1, -1
	peak, over := 0, false
	var trace []string
	for i, s := range a.samples {
		if i%10 == 0 {
			trace = append(trace, fmt.Sprintf("%v %d/%d/%d %v", s.at.Round(time.Second), s.want, s.live, s.desired, s.oldest.Round(time.Second)))
		}
	}
	t.Logf("timeline (since the step, or the HPA's creation before it; spec.replicas/live/desired oldest): %s", strings.Join(trace, ", "))
	var after []hpaSample
	for _, s := range a.samples {
		if s.stepped {
			after = append(after, s)
		}
	}
	for _, s := range after {
		if s.want > hpaStart && firstUp < 0 {
			firstUp = s.at
		}
		if s.want > peak {
			peak, peakAt = s.want, s.at
		}
		if s.at > dropAt {
			// after the drop, only the leaves' spikes: counted below
		} else if s.oldest > hpaOldest {
			over, backUnder = true, -1
		} else if over && backUnder < 0 {
			backUnder = s.at
		}
		if s.at > dropAt && s.want < peak && firstDown < 0 {
			firstDown = s.at - dropAt
		}
	}
	var oldestMax, oldestAfterDrop time.Duration
	for _, s := range after {
		oldestMax = max(oldestMax, s.oldest)
		if s.at > dropAt {
			oldestAfterDrop = max(oldestAfterDrop, s.oldest)
		}
	}
	moves := map[string]int64{}
	for c, n := range a.moves {
		moves[c] = n.Load()
	}
	t.Logf("FIGURES HPA controller on the real server: %d keys; after the step: first scale-up %v, peak %d at %v; oldest ready %v at most, back under %v at %v (never over it: %v); after the drop: oldest ready %v at most, first scale-down %v, back at %d %v; moves %v; the Deployment: %s",
		keys, firstUp, peak, peakAt, oldestMax.Round(time.Second), hpaOldest, backUnder, !over, oldestAfterDrop.Round(time.Second), firstDown, hpaStart, end.Sub(drop).Round(time.Second), moves, strings.Join(a.events, ", "))
	assert.Greater(t, firstUp, time.Duration(0), "the HPA never scaled up after the step")
	assert.True(t, !over || backUnder >= 0 && backUnder < dropAt, "the backlog (oldest ready key) not back under %v before the drop, and under it until the drop", hpaOldest)
	assert.Greater(t, firstDown, time.Duration(0), "the HPA never scaled down after the drop")
}

// externalMetrics is the HPA controller's metrics client: it answers the
// External metric sharding_desired_replicas with the max of the
// replicas' DesiredReplicas gauges, as prometheus-adapter's rule
// (docs/autoscale.md) answers it from a scrape of the pods.
type externalMetrics struct{ a *autoscaled }

var _ metricsclient.MetricsClient = externalMetrics{}

func (m externalMetrics) GetExternalMetric(name, namespace string, _ labels.Selector) ([]int64, time.Time, error) {
	if name != "sharding_desired_replicas" || namespace != m.a.ns {
		return nil, time.Time{}, fmt.Errorf("no external metric %s in %s", name, namespace)
	}
	m.a.mu.Lock()
	defer m.a.mu.Unlock()
	v, ok := int64(0), false
	for _, rep := range m.a.replicas {
		if d := int64(gaugeNow(rep.desired)); d > 0 {
			v, ok = max(v, d), true
		}
	}
	if !ok {
		return nil, time.Time{}, fmt.Errorf("no series of %s yet", name)
	}
	// In milli-units, as the HPA's own External metrics client gives
	// them (Quantity.MilliValue): the HPA divides by the target's.
	return []int64{v * 1000}, time.Now(), nil
}

func (externalMetrics) GetResourceMetric(context.Context, corev1.ResourceName, string, labels.Selector, string) (metricsclient.PodMetricsInfo, time.Time, error) {
	return nil, time.Time{}, fmt.Errorf("no resource metrics")
}

func (externalMetrics) GetRawMetric(string, string, labels.Selector, labels.Selector) (metricsclient.PodMetricsInfo, time.Time, error) {
	return nil, time.Time{}, fmt.Errorf("no pod metrics")
}

func (externalMetrics) GetObjectMetric(string, string, *autoscalingv2.CrossVersionObjectReference, labels.Selector) (int64, time.Time, error) {
	return 0, time.Time{}, fmt.Errorf("no object metrics")
}

// explain logs, for each key, what every replica knows of it: whether it
// owns it, the key's shard and that shard's state and ready keys in the
// replica's status, and the key's state in its queue.
func (a *autoscaled) explain(keys []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, key := range keys {
		var parts []string
		for _, id := range slices.Sorted(maps.Keys(a.replicas)) {
			rep := a.replicas[id]
			s, ok := rep.r.ShardOfKey(key)
			part := fmt.Sprintf("%s: owns %v, shard %d (%v)", id, rep.r.Owns(key), s, ok)
			if ok {
				st := rep.r.Status()
				if s < len(st.Shards) {
					ss := st.Shards[s]
					part += fmt.Sprintf(" local %q holder %q ready %d", ss.Local, ss.Holder, ss.Ready)
				}
			}
			part += fmt.Sprintf(" queue %v", rep.q.State(key))
			parts = append(parts, part)
		}
		a.t.Logf("%s: %s", key, strings.Join(parts, "; "))
	}
}
