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
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-coalesce/workqueue"
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Story(ctx, os.Stdout)
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
func (c *controller) sync(ctx context.Context, key string) error {
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
		c.log("  sync %-12s gen %d: created ReplicaSet %s with %d replica(s)", key, d.Generation, rsName, want)
	case err != nil:
		return err
	case *rs.Spec.Replicas != want:
		rs = rs.DeepCopy()
		from := *rs.Spec.Replicas
		rs.Spec.Replicas = &want
		if _, err := c.client.AppsV1().ReplicaSets(ns).Update(ctx, rs, metav1.UpdateOptions{}); err != nil {
			return err
		}
		c.log("  sync %-12s gen %d: scaled ReplicaSet %s from %d to %d", key, d.Generation, rsName, from, want)
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

// Story runs the whole story, printing its timeline to w, and returns what
// it observed. It stops everything it started before it returns.
func Story(ctx context.Context, w io.Writer) (Result, error) {
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
		queue: workqueue.NewRateLimitingQueue(
			workqueue.NewItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second)),
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
				logf("  sync %-12s failed, retry=%v: %v", key, retry, err)
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
