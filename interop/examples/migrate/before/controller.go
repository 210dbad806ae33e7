package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// HashAnnotation holds the hash of a ConfigMap's data as of its last sync.
const HashAnnotation = "migrate.example.com/data-hash"

// Controller stamps ConfigMaps with the hash of their data.
type Controller struct {
	client  kubernetes.Interface
	factory informers.SharedInformerFactory
	lister  corelisters.ConfigMapLister
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]

	// OnSync, if set, is called after each sync with its key and error.
	OnSync func(key string, err error)
}

// New returns a controller of the ConfigMaps that client serves.
func New(client kubernetes.Interface) *Controller {
	factory := informers.NewSharedInformerFactory(client, 0)
	cms := factory.Core().V1().ConfigMaps()
	c := &Controller{
		client:  client,
		factory: factory,
		lister:  cms.Lister(),
		synced:  cms.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "configmaps"},
		),
	}
	_, err := cms.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: c.enqueue,
	})
	if err != nil {
		panic(err) // only if the informer had already stopped
	}
	return c
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	c.queue.Add(key)
}

// Run starts the informer and the workers, and returns once ctx has ended,
// the syncs in flight have finished and the informer has stopped. It
// returns the number of keys still queued then: a level-triggered
// controller leaves them to its successor, whose informer lists every
// ConfigMap again.
func (c *Controller) Run(ctx context.Context, workers int) (left int, err error) {
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		c.queue.ShutDown()
		return 0, fmt.Errorf("controller: caches did not sync: %w", ctx.Err())
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { c.worker(ctx) })
	}
	<-ctx.Done()
	// Let the syncs in flight finish before the process exits.
	c.queue.ShutDownWithDrain()
	wg.Wait()
	return c.queue.Len(), nil
}

// worker takes keys until ctx ends (or the queue shuts down).
func (c *Controller) worker(ctx context.Context) {
	for ctx.Err() == nil {
		key, quit := c.queue.Get()
		if quit {
			return
		}
		err := c.sync(ctx, key)
		if err != nil {
			c.queue.AddRateLimited(key)
		} else {
			c.queue.Forget(key)
		}
		if c.OnSync != nil {
			c.OnSync(key, err)
		}
		c.queue.Done(key)
	}
}

// sync stamps the ConfigMap key names with the hash of its data, unless it
// already carries it.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // a key we could never sync: drop it
	}
	cm, err := c.lister.ConfigMaps(ns).Get(name)
	if err != nil {
		return nil // deleted since: nothing to do
	}
	want := Hash(cm)
	if cm.Annotations[HashAnnotation] == want {
		return nil
	}
	cm = cm.DeepCopy()
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[HashAnnotation] = want
	_, err = c.client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

// Hash is the hash of cm's data that sync writes.
func Hash(cm *corev1.ConfigMap) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
		fmt.Fprintf(h, "%q=%q;", k, cm.Data[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
