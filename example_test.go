package workqueue_test

import (
	"fmt"
	"sync"
	"time"

	"github.com/go-coalesce/workqueue"
)

// The basics: a key is queued once however often it is added, and a key
// added while it is processed runs once more after Done.
func ExampleNew() {
	q := workqueue.New[string]()
	q.Add("a")
	q.Add("b")
	q.Add("a") // already queued: no second copy, a keeps its place
	fmt.Println("ready:", q.Len())

	key, _ := q.Get()
	fmt.Println("got", key)
	q.Add("a") // changed while processing: not ready yet, due after Done
	fmt.Println("ready while a is processing:", q.Len())
	q.Done("a")
	fmt.Println("ready after Done:", q.Len())

	q.ShutDown() // no more adds; Get hands out what is left
	for {
		key, shutdown := q.Get()
		if shutdown {
			break
		}
		fmt.Println("got", key)
		q.Done(key)
	}
	// Output:
	// ready: 2
	// got a
	// ready while a is processing: 1
	// ready after Done: 2
	// got b
	// got a
}

// Deployment stands in for the API object an informer delivers.
type Deployment struct {
	Namespace, Name string
	Replicas        int
}

// The controller pattern of client-go's sample-controller: event handlers
// turn objects into "namespace/name" keys and add them; a worker takes a key,
// reads the latest state from the cache and syncs it. A burst of events for
// one Deployment coalesces into one sync that sees the latest state.
func Example_deploymentController() {
	q := workqueue.New[string]()

	// The informer's cache holds the latest object per key; the handler
	// counts events only to show the coalescing.
	var mu sync.Mutex
	cache := map[string]Deployment{}
	events := map[string]int{}
	onAddOrUpdate := func(d Deployment) {
		key := d.Namespace + "/" + d.Name // cache.MetaNamespaceKeyFunc
		mu.Lock()
		cache[key] = d
		events[key]++
		mu.Unlock()
		q.Add(key)
	}

	// A rollout: five updates of default/web, two of kube-system/coredns.
	for replicas := 1; replicas <= 5; replicas++ {
		onAddOrUpdate(Deployment{"default", "web", replicas})
	}
	onAddOrUpdate(Deployment{"kube-system", "coredns", 2})
	onAddOrUpdate(Deployment{"kube-system", "coredns", 3})

	syncDeployment := func(key string) {
		mu.Lock()
		d, n := cache[key], events[key]
		events[key] = 0
		mu.Unlock()
		fmt.Printf("%d events, 1 sync for %s: replicas=%d\n", n, key, d.Replicas)
	}

	processNextWorkItem := func() bool {
		key, shutdown := q.Get()
		if shutdown {
			return false
		}
		defer q.Done(key) // a key is never handed to two workers at once
		syncDeployment(key)
		return true
	}

	var worker sync.WaitGroup
	worker.Go(func() {
		for processNextWorkItem() {
		}
	})

	// Stop: no new keys, but every queued key is synced before returning.
	q.ShutDownWithDrain()
	worker.Wait()
	// Output:
	// 5 events, 1 sync for default/web: replicas=5
	// 2 events, 1 sync for kube-system/coredns: replicas=3
}

// Debounce: a burst of events on one key gives one run once the burst has
// been quiet for Quiet (and at the latest MaxWait after its first event),
// not one run per event that happens to land between two Gets. Remove
// cancels a pending run, here of an object that was deleted.
func ExampleDebounce() {
	q := workqueue.NewWithConfig(workqueue.Config[string]{
		Debounce: workqueue.Debounce{Quiet: 50 * time.Millisecond, MaxWait: time.Second},
	})
	start := time.Now()
	for range 10 {
		q.Add("default/web") // ten updates in a burst
	}
	q.Add("default/gone")
	s := q.Stats()
	fmt.Println("ready:", s.Ready, "waiting:", s.Waiting)

	fmt.Println("deleted, pending run cancelled:", q.Remove("default/gone"))

	key, _ := q.Get() // blocks until the burst has been quiet for 50ms
	fmt.Println("got", key, "after the quiet period:", time.Since(start) >= 50*time.Millisecond)
	q.Done(key)
	s = q.Stats()
	fmt.Println("left: ready", s.Ready, "waiting", s.Waiting)
	q.ShutDown()
	// Output:
	// ready: 0 waiting: 2
	// deleted, pending run cancelled: true
	// got default/web after the quiet period: true
	// left: ready 0 waiting 0
}
