package crsharding

import (
	"context"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	clientworkqueue "k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

func req(ns, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

// owned is a stand-in for the replica's Owns and Admit: a set of keys that
// can change, and the keys Admit counted as ready, in order.
type owned struct {
	mu    sync.Mutex
	keys  map[string]bool
	ready []string
}

func ownedOf(keys ...string) *owned {
	o := &owned{keys: map[string]bool{}}
	for _, k := range keys {
		o.keys[k] = true
	}
	return o
}

func (o *owned) owns(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.keys[key]
}

func (o *owned) Owns(key string) bool { return o.owns(key) }

func (o *owned) Admit(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.keys[key] {
		o.ready = append(o.ready, key)
	}
	return o.keys[key]
}

// counted returns the keys Admit counted since the last call.
func (o *owned) counted() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.ready
	o.ready = nil
	return out
}

func (o *owned) set(key string, v bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.keys[key] = v
}

// drain takes every ready request out of q without blocking.
func drain(q *Queue) []string {
	var out []string
	for q.Len() > 0 {
		r, _ := q.Get()
		out = append(out, Key(r))
		q.Done(r)
	}
	sort.Strings(out)
	return out
}

func TestKey(t *testing.T) {
	require.Equal(t, "ns/a", Key(req("ns", "a")))
	require.Equal(t, "node-1", Key(req("", "node-1")), "a cluster-scoped key has no leading slash, as MetaNamespaceKeyFunc")
	for _, k := range []string{"ns/a", "node-1"} {
		r, ok := request(k)
		require.True(t, ok)
		require.Equal(t, k, Key(r))
	}
	_, ok := request("a/b/c")
	require.False(t, ok, "a key with two slashes names no object")
}

// TestQueueAdmitsOnlyOwnedKeys: every way controller-runtime adds a
// request (Add, AddAfter, AddRateLimited, AddWithOpts with several items)
// lets through the owned keys only, and a key refused while not owned is
// not remembered when it becomes owned (the replica enqueues it then).
// Mutant: admitting every key (owns ignored) fails each step.
func TestQueueAdmitsOnlyOwnedKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := ownedOf("ns/mine", "ns/mine2", "ns/mine3")
		q := newQueue(o, nil, workqueue.Config[reconcile.Request]{})
		defer q.ShutDown()

		q.Add(req("ns", "mine"))
		q.Add(req("ns", "theirs"))
		require.Equal(t, []string{"ns/mine"}, drain(q), "Add")

		q.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(5)},
			req("ns", "theirs"), req("ns", "mine"), req("ns", "theirs2"), req("ns", "mine2"))
		require.Equal(t, []string{"ns/mine", "ns/mine2"}, drain(q), "AddWithOpts with mixed items")

		items := []reconcile.Request{req("ns", "theirs"), req("ns", "mine")}
		q.AddWithOpts(priorityqueue.AddOpts{}, items...)
		require.Equal(t, []reconcile.Request{req("ns", "theirs"), req("ns", "mine")}, items,
			"the caller's slice is left as it was")
		require.Equal(t, []string{"ns/mine"}, drain(q))

		q.AddAfter(req("ns", "mine3"), time.Second)
		q.AddAfter(req("ns", "theirs"), time.Second)
		q.AddWithOpts(priorityqueue.AddOpts{After: time.Second}, req("ns", "theirs3"))
		q.AddRateLimited(req("ns", "mine"))
		q.AddRateLimited(req("ns", "theirs"))
		require.Equal(t, 0, q.NumRequeues(req("ns", "theirs")), "a refused AddRateLimited does not count a failure")
		time.Sleep(2 * time.Second) // simulated time: past every delay
		synctest.Wait()
		require.Equal(t, []string{"ns/mine", "ns/mine3"}, drain(q), "AddAfter and AddRateLimited")

		// Owning a key later does not bring back a refused add.
		q.Add(req("ns", "later"))
		o.set("ns/later", true)
		require.Empty(t, drain(q))
		q.Add(req("ns", "later"))
		require.Equal(t, []string{"ns/later"}, drain(q))

		// Remove drops a waiting key.
		q.Add(req("ns", "mine"))
		require.True(t, q.Remove(req("ns", "mine")))
		require.Empty(t, drain(q))
	})
}

// TestControllerReconcilesOnlyOwnedKeys runs a controller-runtime
// controller (no manager, no API server) whose NewQueue is the sharded
// queue, fed by a source that enqueues 40 requests, half of them owned:
// the reconciler sees exactly the owned ones. Mutant: admit all → it sees
// all 40.
func TestControllerReconcilesOnlyOwnedKeys(t *testing.T) {
	o := ownedOf()
	var all []reconcile.Request
	for i := range 40 {
		r := req("ns", string(rune('a'+i%26))+string(rune('a'+i/26)))
		all = append(all, r)
		if i%2 == 0 {
			o.set(Key(r), true)
		}
	}
	var (
		mu   sync.Mutex
		seen []string
		done = make(chan struct{})
	)
	rec := reconcile.Func(func(_ context.Context, r reconcile.Request) (reconcile.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, Key(r))
		if len(seen) == len(all)/2 {
			close(done) // every owned request is in
		}
		return reconcile.Result{}, nil
	})
	var made *Queue
	c, err := controller.NewTypedUnmanaged("sharded", controller.TypedOptions[reconcile.Request]{
		Reconciler:         rec,
		SkipNameValidation: ptr.To(true),
		NewQueue: func(name string, rl clientworkqueue.TypedRateLimiter[reconcile.Request]) clientworkqueue.TypedRateLimitingInterface[reconcile.Request] {
			made = newQueue(o, rl, workqueue.Config[reconcile.Request]{Name: name})
			return made
		},
	})
	require.NoError(t, err)
	require.NoError(t, c.Watch(source.TypedFunc[reconcile.Request](func(_ context.Context, q clientworkqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		for _, r := range all {
			q.Add(r)
		}
		return nil
	})))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Start(ctx) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the owned requests were not reconciled in 30s")
	}
	// Wait until the queue is empty and idle, so an unowned request
	// would have been handed out by now.
	require.Eventually(t, func() bool { return made.Len() == 0 && made.q.Stats().Processing == 0 }, 10*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-errc)

	var want []string
	for i, r := range all {
		if i%2 == 0 {
			want = append(want, Key(r))
		}
	}
	sort.Strings(want)
	mu.Lock()
	defer mu.Unlock()
	sort.Strings(seen)
	require.Equal(t, want, seen, "the reconciler got exactly the owned keys")
}
