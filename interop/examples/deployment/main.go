// Command deployment is the story the work queue exists for: a Deployment
// controller, written the client-go way, running against the fake clientset.
//
// Shared informers watch Deployments and ReplicaSets. Every event becomes a
// namespace/name key in the queue (a ReplicaSet event becomes the key of the
// Deployment that owns it), and four workers, started with workqueue.Run,
// sync one Deployment per key: read it from the lister, create or scale its
// ReplicaSet to spec.replicas, and report status.observedGeneration and
// status.replicas. A burst of spec updates arrives while the workers are
// busy; the queue coalesces the events, so far fewer syncs run than events
// arrive, and never two syncs of one Deployment at once.
//
//	go run ./examples/deployment
//
// With -debug-addr, the example also serves the work queue's debug page
// (github.com/go-coalesce/workqueue/debug) and pprof on that address, and
// after the story it keeps the controller running under a steady load until
// interrupted: slow syncs, periodic requeues, spec updates and one
// Deployment whose sync always fails, so that the page has something to
// show:
//
//	go run ./examples/deployment -debug-addr 127.0.0.1:8080
//	# then open http://127.0.0.1:8080/debug/workqueue
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/debug"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	appslisters "k8s.io/client-go/listers/apps/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

func main() {
	debugAddr := flag.String("debug-addr", "",
		"serve the work queue debug page and pprof on this address (for example 127.0.0.1:8080), "+
			"and keep the controller running under load after the story until interrupted")
	flag.Parse()
	var (
		ctx    context.Context
		cancel context.CancelFunc
		opts   Options
	)
	if *debugAddr == "" {
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	} else {
		ctx, cancel = signal.NotifyContext(context.Background(), os.Interrupt)
		opts = Options{DebugAddr: *debugAddr, Live: true, OnServe: func(url string) {
			fmt.Printf("debug page: %s/debug/workqueue (JSON: ?format=json; pprof: %s/debug/pprof/)\n", url, url)
		}}
	}
	defer cancel()
	res, err := StoryWithOptions(ctx, os.Stdout, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deployment:", err)
		os.Exit(1)
	}
	if !res.Converged() {
		os.Exit(1)
	}
}

// The story's parameters.
const (
	namespace     = "default"
	workers       = 4
	finalReplicas = 5
)

// deployments are the names the story creates; each goes from 1 replica to
// finalReplicas in a burst of updates.
var deployments = []string{"web", "api"}

// Result is what the story observed, for the test to check.
type Result struct {
	Events      int64 // informer events handled (Deployments and ReplicaSets)
	Syncs       int64 // calls of the sync handler
	Overlaps    int64 // syncs that started while another sync of the same key ran
	Retries     int64 // syncs that failed and were retried
	Deployments []*appsv1.Deployment
	ReplicaSets []*appsv1.ReplicaSet
}

// Converged reports whether every Deployment has its ReplicaSet at
// finalReplicas and a status that reflects its latest generation.
func (r Result) Converged() bool {
	if len(r.Deployments) != len(deployments) || len(r.ReplicaSets) != len(deployments) {
		return false
	}
	for i, d := range r.Deployments {
		rs := r.ReplicaSets[i]
		if *d.Spec.Replicas != finalReplicas || d.Status.ObservedGeneration != d.Generation ||
			d.Status.Replicas != finalReplicas || rs == nil || *rs.Spec.Replicas != finalReplicas {
			return false
		}
	}
	return true
}

// controller is the Deployment controller: listers, a client, the queue.
type controller struct {
	client   kubernetes.Interface
	dLister  appslisters.DeploymentLister
	rsLister appslisters.ReplicaSetLister
	queue    *workqueue.RateLimitingQueue[string]

	events, syncs, overlaps, retries atomic.Int64

	mu       sync.Mutex // protects inFlight
	inFlight map[string]bool

	log func(format string, args ...any)

	// live is set for the load that follows the story with -debug-addr:
	// syncs take a while, scaled Deployments are checked again later, and
	// the Deployment named "broken" never syncs.
	live atomic.Bool
}

// logf logs a step of a sync, except in live mode, whose load would flood
// the timeline.
func (c *controller) logf(format string, args ...any) {
	if !c.live.Load() {
		c.log(format, args...)
	}
}

// liveSync is what a sync does in live mode before its real work: it
// takes a while, as against a busy API server, and fails for "broken".
func (c *controller) liveSync(ctx context.Context, key string) error {
	select {
	case <-time.After(time.Duration(100+rand.IntN(1400)) * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	if strings.HasSuffix(key, "/broken") {
		return errors.New("image registry unreachable")
	}
	return nil
}

// enqueueDeployment is the handler for Deployment events.
func (c *controller) enqueueDeployment(obj any) {
	c.events.Add(1)
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err == nil {
		c.queue.Add(key)
	}
}

// enqueueOwner is the handler for ReplicaSet events: it enqueues the
// Deployment that owns the ReplicaSet, if any.
func (c *controller) enqueueOwner(obj any) {
	c.events.Add(1)
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return
	}
	if ref := metav1.GetControllerOf(rs); ref != nil && ref.Kind == "Deployment" {
		c.queue.Add(rs.Namespace + "/" + ref.Name)
	}
}

// sync makes the world match one Deployment. It is the handle function of
// workqueue.Run: an error retries the key with backoff.
func (c *controller) sync(ctx context.Context, key string) (err error) {
	c.syncs.Add(1)
	c.mu.Lock()
	if c.inFlight[key] {
		c.overlaps.Add(1)
	}
	c.inFlight[key] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.inFlight, key)
		c.mu.Unlock()
	}()

	if c.live.Load() {
		if err := c.liveSync(ctx, key); err != nil {
			return err
		}
		defer func() {
			if err == nil {
				// Check again later that the scale held, as
				// controllers that wait for pods do: the key waits
				// for a deadline.
				err = workqueue.RequeueAfter(time.Duration(5+rand.IntN(25)) * time.Second)
			}
		}()
	}
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // a malformed key never gets better
	}
	d, err := c.dLister.Deployments(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil // deleted; its ReplicaSet is garbage-collected
	}
	if err != nil {
		return err
	}
	want := *d.Spec.Replicas

	// Create or scale the ReplicaSet.
	rsName := name + "-rs"
	rs, err := c.rsLister.ReplicaSets(ns).Get(rsName)
	switch {
	case apierrors.IsNotFound(err):
		rs = newReplicaSet(d, rsName)
		if _, err := c.client.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			return err // AlreadyExists when the lister lags: retried
		}
		c.logf("  sync %-12s gen %d: created ReplicaSet %s with %d replica(s)", key, d.Generation, rsName, want)
	case err != nil:
		return err
	case *rs.Spec.Replicas != want:
		rs = rs.DeepCopy()
		from := *rs.Spec.Replicas
		rs.Spec.Replicas = &want
		if _, err := c.client.AppsV1().ReplicaSets(ns).Update(ctx, rs, metav1.UpdateOptions{}); err != nil {
			return err
		}
		c.logf("  sync %-12s gen %d: scaled ReplicaSet %s from %d to %d", key, d.Generation, rsName, from, want)
	}

	// Report what was done for this generation.
	if d.Status.ObservedGeneration == d.Generation && d.Status.Replicas == want {
		return nil
	}
	d = d.DeepCopy() // never modify the informer's copy
	d.Status.ObservedGeneration = d.Generation
	d.Status.Replicas = want
	_, err = c.client.AppsV1().Deployments(ns).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	return err
}

func newReplicaSet(d *appsv1.Deployment, name string) *appsv1.ReplicaSet {
	replicas := *d.Spec.Replicas
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       d.Namespace,
			Labels:          d.Spec.Selector.MatchLabels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))},
		},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &replicas,
			Selector: d.Spec.Selector,
			Template: d.Spec.Template,
		},
	}
}

func newDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID("uid-" + name)},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "nginx:1.27"}}},
			},
		},
	}
}

// newAPIServer returns a fake clientset that keeps two rules of the real API
// server that the fake's object tracker does not: metadata.generation
// starts at 1 and goes up by one on every change of spec, and the status
// subresource changes only status while a plain update never changes it.
// Without them a status update from a worker could write back a stale spec.
// A mutex makes each read-modify-write atomic, as etcd's compare-and-swap
// would.
func newAPIServer() *fake.Clientset {
	client := fake.NewClientset()
	var mu sync.Mutex
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	client.PrependReactor("create", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.CreateAction).GetObject().(*appsv1.Deployment).DeepCopy()
		d.Generation = 1
		d.Status = appsv1.DeploymentStatus{}
		mu.Lock()
		defer mu.Unlock()
		if err := client.Tracker().Create(gvr, d, d.Namespace); err != nil {
			return true, nil, err
		}
		return true, d, nil
	})
	client.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ua := a.(k8stesting.UpdateAction)
		in := ua.GetObject().(*appsv1.Deployment)
		mu.Lock()
		defer mu.Unlock()
		obj, err := client.Tracker().Get(gvr, in.Namespace, in.Name)
		if err != nil {
			return true, nil, err
		}
		cur := obj.(*appsv1.Deployment)
		var next *appsv1.Deployment
		if ua.GetSubresource() == "status" {
			next = cur.DeepCopy()
			next.Status = in.Status
		} else {
			next = in.DeepCopy()
			next.Status = cur.Status
			next.Generation = cur.Generation
			if !equality.Semantic.DeepEqual(cur.Spec, in.Spec) {
				next.Generation++
			}
		}
		if err := client.Tracker().Update(gvr, next, next.Namespace); err != nil {
			return true, nil, err
		}
		return true, next, nil
	})
	return client
}

// Options are the story's optional parts.
type Options struct {
	// DebugAddr, if not empty, is where the work queue debug page
	// (/debug/workqueue) and pprof (/debug/pprof/) are served while the
	// story runs; "127.0.0.1:0" picks a free port.
	DebugAddr string
	// OnServe, if not nil, is called with the server's base URL
	// ("http://127.0.0.1:port") once it listens, before the story starts.
	OnServe func(url string)
	// Live keeps the controller running after the story, under load,
	// until ctx ends (see controller.live).
	Live bool
}

// nopMetrics turns the queue's metrics on without reporting them
// anywhere: a queue with metrics measures when each run started, which the
// debug page shows as the age of the keys being processed.
type nopMetrics struct{}

func (nopMetrics) NewQueueMetrics(string, func() workqueue.Stats) workqueue.QueueMetrics {
	return nopMetrics{}
}
func (nopMetrics) Added()               {}
func (nopMetrics) Retried()             {}
func (nopMetrics) Waited(time.Duration) {}
func (nopMetrics) Worked(time.Duration) {}
func (nopMetrics) ShutDown()            {}

// Story runs the whole story, printing its timeline to w, and returns what
// it observed. It stops everything it started before it returns.
func Story(ctx context.Context, w io.Writer) (Result, error) {
	return StoryWithOptions(ctx, w, Options{})
}

// serveDebug serves the debug page of q and pprof on addr until the
// returned function is called, which closes the server and waits for it.
func serveDebug(addr string, q *workqueue.RateLimitingQueue[string], onServe func(string)) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/debug/workqueue", debug.NewHandler(debug.Options{}, debug.Queue("deployments", q, nil)))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // returns http.ErrServerClosed on Close
	}()
	if onServe != nil {
		onServe("http://" + ln.Addr().String())
	}
	return func() {
		_ = srv.Close()
		<-done
	}, nil
}

// StoryWithOptions is Story with its optional parts.
func StoryWithOptions(ctx context.Context, w io.Writer, opts Options) (Result, error) {
	start := time.Now()
	var logMu sync.Mutex
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(w, format+"\n", args...)
	}

	client := newAPIServer()
	factory := informers.NewSharedInformerFactory(client, 0)
	dInformer := factory.Apps().V1().Deployments()
	rsInformer := factory.Apps().V1().ReplicaSets()

	c := &controller{
		client:   client,
		dLister:  dInformer.Lister(),
		rsLister: rsInformer.Lister(),
		queue: workqueue.NewRateLimitingQueueWithConfig(
			workqueue.NewItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second),
			workqueue.Config[string]{Name: "deployments", Metrics: nopMetrics{}}),
		inFlight: map[string]bool{},
		log:      logf,
	}
	if _, err := dInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueDeployment,
		UpdateFunc: func(_, obj any) { c.enqueueDeployment(obj) },
		DeleteFunc: c.enqueueDeployment,
	}); err != nil {
		return Result{}, err
	}
	if _, err := rsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueOwner,
		UpdateFunc: func(_, obj any) { c.enqueueOwner(obj) },
		DeleteFunc: c.enqueueOwner,
	}); err != nil {
		return Result{}, err
	}

	// Informers first, then workers; everything stops, in reverse order,
	// before Story returns, so that no goroutine outlives it.
	informerCtx, stopInformers := context.WithCancel(ctx)
	factory.StartWithContext(informerCtx)
	defer factory.Shutdown() // waits for the informers' goroutines
	defer stopInformers()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return Result{}, fmt.Errorf("cache of %v did not sync", typ)
		}
	}

	workerCtx, stopWorkers := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() {
		runDone <- workqueue.Run(workerCtx, c.queue, workers, c.sync, workqueue.RunConfig[string]{
			OnError: func(key string, err error, retry bool) {
				c.retries.Add(1)
				c.logf("  sync %-12s failed, retry=%v: %v", key, retry, err)
			},
		})
	}()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		stopWorkers()
		return <-runDone
	}
	defer stop()

	if opts.DebugAddr != "" {
		stopServer, err := serveDebug(opts.DebugAddr, c.queue, opts.OnServe)
		if err != nil {
			return Result{}, err
		}
		defer stopServer()
	}

	deps := client.AppsV1().Deployments(namespace)
	logf("Deployment controller: %d workers, informers on the fake clientset", workers)
	for _, name := range deployments {
		if _, err := deps.Create(ctx, newDeployment(name, 1), metav1.CreateOptions{}); err != nil {
			return Result{}, err
		}
		logf("created Deployment %s/%s with replicas: 1", namespace, name)
	}
	if err := waitConverged(ctx, c, client, 1); err != nil {
		return Result{}, err
	}
	logf("converged at 1 replica: %d events, %d syncs so far", c.events.Load(), c.syncs.Load())

	// The burst: spec updates back to back, as fast as a client can send
	// them, while the workers are still syncing the previous ones.
	logf("burst: replicas 2, 3, 4, 5 for each Deployment, back to back")
	for replicas := int32(2); replicas <= finalReplicas; replicas++ {
		for _, name := range deployments {
			d, err := deps.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return Result{}, err
			}
			d.Spec.Replicas = &replicas
			if _, err := deps.Update(ctx, d, metav1.UpdateOptions{}); err != nil {
				return Result{}, err
			}
		}
	}
	if err := waitConverged(ctx, c, client, finalReplicas); err != nil {
		return Result{}, err
	}
	if opts.Live {
		if err := liveLoad(ctx, c, logf); err != nil {
			return Result{}, err
		}
	}
	if err := stop(); err != nil {
		return Result{}, err
	}

	res := Result{
		Events:   c.events.Load(),
		Syncs:    c.syncs.Load(),
		Overlaps: c.overlaps.Load(),
		Retries:  c.retries.Load(),
	}
	for _, name := range deployments {
		d, err := deps.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return res, err
		}
		rs, err := client.AppsV1().ReplicaSets(namespace).Get(ctx, name+"-rs", metav1.GetOptions{})
		if err != nil {
			return res, err
		}
		res.Deployments = append(res.Deployments, d)
		res.ReplicaSets = append(res.ReplicaSets, rs)
	}

	logf("converged in %v", time.Since(start).Round(time.Millisecond))
	logf("events: %d, syncs: %d (%.1f events per sync), failed syncs retried: %d",
		res.Events, res.Syncs, float64(res.Events)/float64(max(res.Syncs, 1)), res.Retries)
	if res.Overlaps == 0 {
		logf("no key was synced by two workers at once")
	} else {
		logf("VIOLATION: %d syncs overlapped another sync of the same key", res.Overlaps)
	}
	for i, d := range res.Deployments {
		logf("%s/%s: generation %d, spec.replicas %d, status.observedGeneration %d, status.replicas %d; ReplicaSet %s: replicas %d",
			d.Namespace, d.Name, d.Generation, *d.Spec.Replicas, d.Status.ObservedGeneration, d.Status.Replicas,
			res.ReplicaSets[i].Name, *res.ReplicaSets[i].Spec.Replicas)
	}
	if res.Converged() {
		logf("converged: every ReplicaSet at %d, every status at its generation", finalReplicas)
	} else {
		logf("NOT converged")
	}
	return res, nil
}

// liveLoad runs the load of live mode until ctx ends: 30 more Deployments
// and one that never syncs, slow syncs, and a few spec updates every
// second, so that keys are processing, waiting and ready at once.
func liveLoad(ctx context.Context, c *controller, logf func(string, ...any)) error {
	logf("live: slow syncs, periodic requeues, updates every second, and %s/broken failing; interrupt to stop", namespace)
	c.live.Store(true)
	deps := c.client.AppsV1().Deployments(namespace)
	names := []string{"broken"}
	for i := range 30 {
		names = append(names, fmt.Sprintf("shop-%02d", i))
	}
	for _, name := range names {
		if _, err := deps.Create(ctx, newDeployment(name, 1), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			logf("live: stopped")
			return nil
		case <-tick.C:
		}
		for range 2 {
			name := names[1+rand.IntN(len(names)-1)]
			d, err := deps.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue // ctx ended
			}
			replicas := 1 + rand.Int32N(finalReplicas)
			d.Spec.Replicas = &replicas
			_, _ = deps.Update(ctx, d, metav1.UpdateOptions{}) // a conflict just skips this update
		}
	}
}

// waitConverged waits until, in the API and in the informers' caches, every
// Deployment has spec.replicas == replicas and an up-to-date status, its
// ReplicaSet has that many replicas, and the queue is idle. It polls: the
// story watches the system from the outside, as a user would.
func waitConverged(ctx context.Context, c *controller, client kubernetes.Interface, replicas int32) error {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		if converged(ctx, c, client, replicas) {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("did not converge: " + ctx.Err().Error())
		case <-tick.C:
		}
	}
}

func converged(ctx context.Context, c *controller, client kubernetes.Interface, replicas int32) bool {
	if s := c.queue.Stats(); s.Ready+s.Processing+s.Waiting > 0 {
		return false
	}
	for _, name := range deployments {
		d, err := client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil || *d.Spec.Replicas != replicas || d.Status.ObservedGeneration != d.Generation || d.Status.Replicas != replicas {
			return false
		}
		cached, err := c.dLister.Deployments(namespace).Get(name)
		if err != nil || !equality.Semantic.DeepEqual(cached.Status, d.Status) || cached.Generation != d.Generation {
			return false // an event is still on its way to the queue
		}
		rs, err := c.rsLister.ReplicaSets(namespace).Get(name + "-rs")
		if err != nil || *rs.Spec.Replicas != replicas {
			return false
		}
	}
	return true
}
