// Command migrate runs one small client-go controller twice, side by side:
// as written for client-go's workqueue (./before) and moved to this
// repository's queue (./after) by changing its import, its queue's type
// and its constructor (10 lines; MIGRATING.md shows the diff).
//
//	cd interop && go run ./examples/migrate
//
// Each run is the trial a newcomer made: the controller converges over
// ConfigMaps on a fake clientset; then every ConfigMap changes, and the
// context ends while the workers are busy and keys are still queued. The
// controller's workers stop on their context and its Run then calls
// ShutDownWithDrain, a common shape. On client-go that drain returns once
// the syncs in flight are done, leaving the queued keys to the next
// replica; the moved controller must return the same way, not hang.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	after "github.com/go-coalesce/workqueue/interop/examples/migrate/after"
	before "github.com/go-coalesce/workqueue/interop/examples/migrate/before"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	failed := false
	for _, v := range Variants {
		if _, err := Trial(ctx, v, 100, 30*time.Second, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "migrate: %s: %v\n", v.Name, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// A Controller is either copy of the example controller.
type Controller interface {
	Run(ctx context.Context, workers int) (left int, err error)
}

// A Variant makes one copy of the controller, with an OnSync hook.
type Variant struct {
	Name string
	New  func(client kubernetes.Interface, onSync func(key string, err error)) Controller
}

// Variants are the controller before and after the migration.
var Variants = []Variant{
	{"client-go", func(client kubernetes.Interface, onSync func(string, error)) Controller {
		c := before.New(client)
		c.OnSync = onSync
		return c
	}},
	{"go-coalesce", func(client kubernetes.Interface, onSync func(string, error)) Controller {
		c := after.New(client)
		c.OnSync = onSync
		return c
	}},
}

// Result is what a trial saw.
type Result struct {
	Converged bool // every ConfigMap carried its data's hash before the change
	Returned  bool // Run returned within the timeout after its context ended
	Left      int  // keys still queued when Run returned
}

const namespace = "default"

// Trial runs the controller v makes over n ConfigMaps and reports what
// happened to w. It waits for convergence, changes every ConfigMap, ends
// the controller's context while both of its workers are inside a sync,
// and waits up to timeout for Run to return. A Run that does not return is
// an error: the drain waits for keys that no worker will take. The
// controller is then left running, so the caller should exit.
func Trial(ctx context.Context, v Variant, n int, timeout time.Duration, w io.Writer) (Result, error) {
	const workers = 2
	objs := make([]runtime.Object, n)
	for i := range objs {
		objs[i] = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("cm-%03d", i)},
			Data:       map[string]string{"v": "1"},
		}
	}
	client := fake.NewClientset(objs...)

	// The hook: every sync pokes synced; once gate is armed, each sync
	// also reports on busy and waits for release, so that the test can
	// end the context while the workers are busy.
	synced := make(chan struct{}, 1)
	busy := make(chan struct{}, workers)
	release := make(chan struct{})
	var mu sync.Mutex
	gated := false
	onSync := func(string, error) {
		select {
		case synced <- struct{}{}:
		default:
		}
		mu.Lock()
		g := gated
		mu.Unlock()
		if g {
			busy <- struct{}{}
			<-release
		}
	}

	var res Result
	c := v.New(client, onSync)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	type ran struct {
		left int
		err  error
	}
	done := make(chan ran, 1)
	start := time.Now()
	go func() {
		left, err := c.Run(runCtx, workers)
		done <- ran{left, err}
	}()

	// Converge: wait for syncs until every ConfigMap has its hash.
	for !allHashed(ctx, client, n) {
		select {
		case <-synced:
		case r := <-done:
			return res, fmt.Errorf("Run returned before converging: %v", r.err)
		case <-ctx.Done():
			return res, fmt.Errorf("no convergence: %w", ctx.Err())
		}
	}
	res.Converged = true
	fmt.Fprintf(w, "%-11s converged over %d ConfigMaps in %v\n", v.Name, n, time.Since(start).Round(time.Millisecond))

	// The change: every ConfigMap's data changes, so every key is queued
	// again; the context ends while both workers are inside a sync.
	mu.Lock()
	gated = true
	mu.Unlock()
	for i := range n {
		cm := objs[i].(*corev1.ConfigMap).DeepCopy()
		cur, err := client.CoreV1().ConfigMaps(namespace).Get(ctx, cm.Name, metav1.GetOptions{})
		if err != nil {
			return res, err
		}
		cur.Data = map[string]string{"v": "2"}
		if _, err := client.CoreV1().ConfigMaps(namespace).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return res, err
		}
	}
	for range workers {
		select {
		case <-busy:
		case <-ctx.Done():
			return res, fmt.Errorf("workers did not take the changed keys: %w", ctx.Err())
		}
	}
	stop() // SIGTERM, with both workers busy and keys queued
	close(release)
	stopped := time.Now()
	fmt.Fprintf(w, "%-11s every ConfigMap changed; context ended with both workers inside a sync\n", v.Name)

	select {
	case r := <-done:
		res.Returned = true
		res.Left = r.left
		if r.err != nil {
			return res, r.err
		}
		fmt.Fprintf(w, "%-11s Run returned %v after its context ended; %d keys left queued for the next replica\n",
			v.Name, time.Since(stopped).Round(time.Millisecond), r.left)
		return res, nil
	case <-time.After(timeout):
		fmt.Fprintf(w, "%-11s Run has not returned %v after its context ended: ShutDownWithDrain waits for keys no worker will take\n", v.Name, timeout)
		return res, fmt.Errorf("Run did not return within %v after its context ended (the drain hangs)", timeout)
	}
}

// allHashed reports whether every one of the n ConfigMaps carries the hash
// of its current data.
func allHashed(ctx context.Context, client kubernetes.Interface, n int) bool {
	list, err := client.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != n {
		return false
	}
	for i := range list.Items {
		cm := &list.Items[i]
		if cm.Annotations[before.HashAnnotation] != before.Hash(cm) {
			return false
		}
	}
	return true
}
