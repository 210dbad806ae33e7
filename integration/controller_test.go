package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	workqueue "github.com/go-coalesce/workqueue"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// TestQueueDrivesController runs a small controller on the core queue,
// fed by real informers watching the real API server: for every ConfigMap
// in-N it keeps a ConfigMap out-N holding the same data, and deletes out-N
// when in-N goes. Four workers, a handler that fails the first attempt of
// every key (so every key goes through AddRateLimited and is retried), and
// inputs created, updated, tampered with and deleted while it runs.
//
// It asserts that the controller converges (every output equals its input,
// no output is left without an input), that no key is ever handled by two
// workers at once, and that every injected failure was retried.
func TestQueueDrivesController(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	client, err := kubernetes.NewForConfig(server.restConfig())
	require.NoError(t, err)
	ns := createNamespace(t, client, "queue-controller")
	cms := client.CoreV1().ConfigMaps(ns)

	const n = 30
	for i := range n {
		_, err := cms.Create(ctx, configMap(ns, fmt.Sprintf("in-%d", i), "v0"), metav1.CreateOptions{})
		require.NoError(t, err)
	}

	q := workqueue.NewRateLimitingQueue(workqueue.NewItemExponentialFailureRateLimiter[string](5*time.Millisecond, 100*time.Millisecond))
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	informer := factory.Core().V1().ConfigMaps()
	var events atomic.Int64
	enqueue := func(obj any) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return
		}
		// An output's events wake its input's key: the input owns it.
		ns, name, _ := strings.Cut(key, "/")
		if rest, ok := strings.CutPrefix(name, "out-"); ok {
			name = "in-" + rest
		}
		events.Add(1)
		q.Add(ns + "/" + name)
	}
	_, err = informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	require.NoError(t, err)
	lister := informer.Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	require.True(t, cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced))

	var (
		inFlight   sync.Map // key -> *atomic.Int32: handlers of that key now running
		overlaps   atomic.Int64
		runs       atomic.Int64
		firstTried sync.Map // key -> struct{}: the key has failed once
		injected   atomic.Int64
		unexpected atomic.Pointer[error]
	)
	handle := func(ctx context.Context, key string) error {
		c, _ := inFlight.LoadOrStore(key, new(atomic.Int32))
		if c.(*atomic.Int32).Add(1) != 1 {
			overlaps.Add(1)
		}
		defer c.(*atomic.Int32).Add(-1)
		runs.Add(1)
		if _, failed := firstTried.LoadOrStore(key, struct{}{}); !failed {
			injected.Add(1)
			return errors.New("injected first failure")
		}
		return reconcileCopy(ctx, client, lister, key)
	}
	runDone := make(chan error, 1)
	go func() {
		runDone <- workqueue.Run(ctx, q, 4, handle, workqueue.RunConfig[string]{
			OnError: func(key string, err error, retry bool) {
				// A reconcile still running when the test cancels (an
				// event of the controller's own last write woke it) fails
				// with the cancellation: the test's doing, not the queue's.
				if ctx.Err() != nil && errors.Is(err, context.Canceled) {
					return
				}
				if err.Error() != "injected first failure" && !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) {
					unexpected.CompareAndSwap(nil, &err)
				}
			},
		})
	}()

	// While the controller works: update every input twice, tamper with
	// some outputs once they exist, delete a few inputs.
	for round := 1; round <= 2; round++ {
		for i := range n {
			cm, err := cms.Get(ctx, fmt.Sprintf("in-%d", i), metav1.GetOptions{})
			require.NoError(t, err)
			cm.Data["value"] = fmt.Sprintf("v%d", round)
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
	}
	for i := 0; i < n; i += 3 {
		require.NoError(t, cms.Delete(ctx, fmt.Sprintf("in-%d", i), metav1.DeleteOptions{}))
	}
	require.Eventually(t, func() bool {
		_, err := cms.Get(ctx, "out-1", metav1.GetOptions{})
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "out-1 never appeared")
	for _, i := range []int{1, 2, 4} {
		cm, err := cms.Get(ctx, fmt.Sprintf("out-%d", i), metav1.GetOptions{})
		if err != nil {
			continue // not created yet: nothing to tamper with
		}
		cm.Data["value"] = "tampered"
		_, _ = cms.Update(ctx, cm, metav1.UpdateOptions{}) // a conflict with the controller is fine
	}

	// Converged: out-N exists with in-N's value exactly when in-N exists.
	// Real time: the API server is real, so the test can only poll it.
	var diff string
	require.Eventually(t, func() bool {
		diff = compareCopies(ctx, cms, n)
		return diff == ""
	}, 60*time.Second, 50*time.Millisecond, "the controller did not converge: %s", func() string { return diff })

	cancel()
	require.NoError(t, <-runDone)
	require.True(t, q.ShuttingDown(), "Run leaves the queue shut down")
	if p := unexpected.Load(); p != nil {
		t.Fatalf("handler error other than the injected ones and API races: %v", *p)
	}
	require.Zero(t, overlaps.Load(), "a key was handled by two workers at once")
	require.EqualValues(t, n, injected.Load(), "every key failed once and was retried")
	t.Logf("%d events, %d handler runs (%d injected failures) for %d keys", events.Load(), runs.Load(), injected.Load(), n)
}

// reconcileCopy makes out-N match in-N for the key ns/in-N: a copy of its
// data if in-N exists, no out-N otherwise. It reads in-N from the informer's
// cache and writes through the API server, as controllers do.
func reconcileCopy(ctx context.Context, client kubernetes.Interface, lister listersv1.ConfigMapLister, key string) error {
	ns, name, _ := strings.Cut(key, "/")
	outName := "out-" + strings.TrimPrefix(name, "in-")
	cms := client.CoreV1().ConfigMaps(ns)
	in, err := lister.ConfigMaps(ns).Get(name)
	if apierrors.IsNotFound(err) {
		err := cms.Delete(ctx, outName, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	out, err := lister.ConfigMaps(ns).Get(outName)
	if apierrors.IsNotFound(err) {
		_, err := cms.Create(ctx, configMap(ns, outName, in.Data["value"]), metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if out.Data["value"] == in.Data["value"] {
		return nil
	}
	out = out.DeepCopy()
	out.Data["value"] = in.Data["value"]
	_, err = cms.Update(ctx, out, metav1.UpdateOptions{})
	return err
}

// compareCopies lists the namespace from the API server (not a cache) and
// describes the first difference from the converged state, or returns "".
func compareCopies(ctx context.Context, cms interface {
	List(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error)
}, n int) string {
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	values := map[string]string{}
	for _, cm := range list.Items {
		values[cm.Name] = cm.Data["value"]
	}
	for i := range n {
		in, inOK := values[fmt.Sprintf("in-%d", i)]
		out, outOK := values[fmt.Sprintf("out-%d", i)]
		switch {
		case inOK && !outOK:
			return fmt.Sprintf("out-%d missing", i)
		case !inOK && outOK:
			return fmt.Sprintf("out-%d left after in-%d was deleted", i, i)
		case inOK && in != out:
			return fmt.Sprintf("out-%d = %q, in-%d = %q", i, out, i, in)
		}
	}
	return ""
}

func configMap(ns, name, value string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data:       map[string]string{"value": value},
	}
}

// createNamespace creates a namespace named after prefix and the test, so
// that tests sharing the API server never see each other's objects. It is
// not deleted: without kube-controller-manager nothing would empty it, and
// the server goes away with the test binary.
func createNamespace(t *testing.T, client kubernetes.Interface, prefix string) string {
	t.Helper()
	ns, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return ns.Name
}
