// Command deployments runs one Deployment "controller" on three replicas
// in one process, sharded through Leases on a fake clientset: it prints
// which replica holds which shards and how many Deployments each caches,
// kills one replica (no release), and shows its shards taken over and
// every Deployment converged. Each replica caches only its shards'
// Deployments: fakeshards answers KEP-5866's shard selector in front of
// the fake clientset as kube-apiserver does with the ShardedListAndWatch
// gate on.
//
//	cd sharding && go run ./examples/deployments
//	cd sharding && go run ./examples/deployments -client-filter
//
// -listen serves, while the story runs and then until interrupted, the ring
// page (/debug/ring, package ringpage: every shard's holder and state, and
// where a key stands) and the queues' debug page (/debug/workqueue, package
// debug), and prints their URL:
//
//	cd sharding && go run ./examples/deployments -listen 127.0.0.1:8080
//
// -client-filter makes the fake server ignore the shard selector, as a
// kube-apiserver without the gate (before 1.36, or with the alpha gate
// off) does: each replica then lists and watches every Deployment and
// keeps its shards' on the client, and the story prints "filtered by the
// client" where it printed "server". The outcome is the same; what
// differs is what crosses the wire.
//
// The Lease timings are short (LeaseDuration 1s) so that the story takes
// a few seconds; a real controller keeps the leader-election defaults.
//
// With -cluster it runs instead one replica against a real cluster, with
// the default timings: it caches the Deployments of -namespace whose
// shards it holds and logs each one it "reconciles" (it writes nothing),
// and serves /metrics, /readyz, /healthz and the two pages on -listen. deploy/ holds the manifests
// of three such replicas and their least-privilege RBAC (see "Deploy" in
// sharding/README.md). There the API server decides who filters:
// -client-filter does not apply, and the replica logs which it found.
//
//	go run ./examples/deployments -cluster -namespace demo -identity r0 -listen 127.0.0.1:8080
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/fakeleases"
	"github.com/go-coalesce/workqueue/sharding/fakeshards"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

const (
	deployments = 300
	shards      = 16
	namespace   = "default"
)

var replicaNames = []string{"replica-a", "replica-b", "replica-c"}

// The victim is killed: it stops without releasing, as a crashed pod.
const victim = "replica-b"

// timing is short so that the story takes seconds; see the package doc.
var timing = sharding.Config{
	LeaseDuration: time.Second,
	RenewDeadline: 600 * time.Millisecond,
	RetryPeriod:   200 * time.Millisecond,
	GracePeriod:   200 * time.Millisecond,
}

func main() {
	clientFilter, cluster, o := defineFlags(flag.CommandLine)
	klog.InitFlags(nil)
	flag.Parse()
	if *cluster {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if o.identity == "" {
			o.identity, _ = os.Hostname()
		}
		if err := runCluster(ctx, *o); err != nil {
			klog.ErrorS(err, "deployments: the replica stopped")
			klog.Flush()
			os.Exit(1)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	so := StoryOptions{ServerFilter: !*clientFilter}
	if o.listen != "" {
		stop, err := servePages(o.listen, &so)
		if err != nil {
			fmt.Fprintln(os.Stderr, "deployments:", err)
			os.Exit(1)
		}
		defer stop()
	}
	res, err := Story(ctx, os.Stdout, so)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deployments:", err)
		os.Exit(1)
	}
	if !res.Converged {
		os.Exit(1)
	}
}

// defineFlags defines the command's flags on fs.
func defineFlags(fs *flag.FlagSet) (clientFilter, cluster *bool, o *clusterOptions) {
	clientFilter = fs.Bool("client-filter", false, "serve the shard selector as a server without the ShardedListAndWatch gate: ignore it (not with -cluster)")
	cluster = fs.Bool("cluster", false, "run one replica against the cluster ($KUBECONFIG, ~/.kube/config or in-cluster) instead of the story")
	o = &clusterOptions{}
	fs.StringVar(&o.namespace, "namespace", envOr("POD_NAMESPACE", "default"), "with -cluster: namespace of the ring's Leases and of the Deployments")
	fs.StringVar(&o.identity, "identity", os.Getenv("POD_NAME"), "with -cluster: this replica's name in the ring, unique among live replicas (default $POD_NAME)")
	fs.StringVar(&o.ring, "ring", "deployments", "with -cluster: the ring's name, the same on every replica")
	fs.IntVar(&o.shards, "shards", shards, "with -cluster: shards of the ring (a power of two); a rollout that changes it changes the ring's count online (sharding/docs/operate.md)")
	fs.StringVar(&o.listen, "listen", "", "address to serve the ring page (/debug/ring) and the queues' debug page (/debug/workqueue) on, "+
		"e.g. 127.0.0.1:8080 (where only operators reach it); the story prints their URL and serves them until interrupted; "+
		"with -cluster also /metrics, /readyz and /healthz (empty: none)")
	return clientFilter, cluster, o
}

// Result is what the story observed, for its test.
type Result struct {
	Before, After map[string][]int // replica → shards held, before and after the kill
	Takeover      time.Duration    // from the kill until every shard was held again
	Renewed       time.Duration    // from the victim's last renewal of its membership Lease until the kill
	Converged     bool             // every Deployment's observedGeneration is its generation
	Overlaps      int              // keys run by two replicas at once
	Syncs         int              // handler runs that updated a status
	Cached        map[string]int   // replica → Deployments in its cache, before the kill
	Filtering     string           // who filtered by shard: "server" or "client"
}

// StoryOptions configure Story.
type StoryOptions struct {
	// ServerFilter says whether the (fake) server honours the shard
	// selector.
	ServerFilter bool
	// Pages, if not nil, gets the ring page and the queues' debug page
	// (mountPages) once the replicas run, and URL, its address, is
	// printed with them.
	Pages *http.ServeMux
	URL   string
	// Hold, if not nil, is called once the story is told, before the
	// surviving replicas stop: they keep running (and the pages show
	// them) until it returns.
	Hold func()
}

// replica is one replica of the controller: an informer, a queue, workers
// and a sharding.Replica, all stopped by cancel.
type replica struct {
	name   string
	shard  *sharding.Replica
	queue  *workqueue.RateLimitingQueue[string]
	get    func(key string) (any, bool, error) // the informer's store
	lw     *fakeshards.ListerWatcher
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Story runs the example and writes its timeline to w.
func Story(ctx context.Context, w io.Writer, o StoryOptions) (Result, error) {
	var res Result
	// The fake clientset's watches are channels that panic when they hold
	// DefaultChanSize (100) events, which the replicas' first status
	// updates can reach before a watch's reader is scheduled on a busy
	// machine. A fake's limit, not the replicas': make it roomier.
	watch.DefaultChanSize = 10000
	objs := fake.NewSimpleClientset() //nolint:staticcheck // the field-managed fake costs a REST mapper per write
	// The replicas' ListerWatchers: clients of one fake API server that
	// answers the shard selector (or ignores it, with -client-filter).
	deploymentsServer := fakeshards.NewServer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return objs.AppsV1().Deployments(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return objs.AppsV1().Deployments(namespace).Watch(ctx, o)
		},
	}, o.ServerFilter)
	defer deploymentsServer.Close()
	for i := range deployments {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: fmt.Sprintf("web-%03d", i), Generation: 1,
			UID: types.UID(fmt.Sprintf("4f9a%04d-8c1e-4b7a-9d2f-%012x", i, i*7919)),
		}}
		if _, err := objs.AppsV1().Deployments(namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return res, err
		}
	}
	leases := fakeleases.New()
	fmt.Fprintf(w, "%d Deployments, %d shards, replicas %s\n", deployments, shards, strings.Join(replicaNames, ", "))

	// running tracks which replica runs which key, to show that no key
	// is ever run by two replicas at once.
	var mu sync.Mutex
	running := map[string]string{}
	overlaps, syncs := 0, 0

	start := func(name string) (*replica, error) {
		// Not ctx's: the replicas outlive the story's deadline while
		// Hold keeps them; they stop when Story returns.
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		lw := deploymentsServer.Client()
		q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
		cfg := timing
		cfg.Client = leases.Clientset(name)
		cfg.Namespace, cfg.Name, cfg.Identity = "kube-system", "deployments", name
		cfg.Shards = shards
		cfg.Object, cfg.ListerWatcher, cfg.Queue = &appsv1.Deployment{}, lw, q
		cfg.SkipRelease = name == victim
		s, err := sharding.New(cfg)
		if err != nil {
			cancel()
			return nil, err
		}
		inf := s.Informer() // holds only the Deployments of s's shards
		rp := &replica{name: name, shard: s, queue: q, get: inf.GetStore().GetByKey, lw: lw, cancel: cancel}
		reconcile := func(ctx context.Context, key string) error {
			mu.Lock()
			if other, ok := running[key]; ok {
				overlaps++
				fmt.Fprintf(w, "OVERLAP: %s runs %s while %s does\n", name, key, other)
			}
			running[key] = name
			mu.Unlock()
			defer func() {
				mu.Lock()
				delete(running, key)
				mu.Unlock()
			}()
			return syncDeployment(ctx, objs, inf.GetStore().GetByKey, key, func() {
				mu.Lock()
				syncs++
				mu.Unlock()
			})
		}
		rp.wg.Go(func() { _ = s.Run(rctx) })
		rp.wg.Go(func() { _ = workqueue.Run(rctx, q, 4, s.Handler(reconcile)) })
		return rp, nil
	}
	replicas := map[string]*replica{}
	defer func() {
		for _, rp := range replicas {
			rp.cancel()
			rp.wg.Wait()
			rp.lw.Close()
		}
	}()
	for _, name := range replicaNames {
		rp, err := start(name)
		if err != nil {
			return res, err
		}
		replicas[name] = rp
	}
	if o.Pages != nil {
		mountPages(o.Pages, replicas)
		fmt.Fprintf(w, "the ring: %s/debug/ring (as %s sees it; /debug/ring/<replica> as another does); the queues: %s/debug/workqueue\n",
			o.URL, replicaNames[0], o.URL)
	}

	holding := func() map[string][]int {
		out := map[string][]int{}
		for name, rp := range replicas {
			out[name] = rp.shard.Shards()
		}
		return out
	}
	covered := func() bool {
		n := 0
		for _, s := range holding() {
			n += len(s)
		}
		return n == shards
	}
	if err := waitFor(ctx, covered); err != nil {
		return res, fmt.Errorf("shards never all held: %w", err)
	}
	if err := waitFor(ctx, func() bool { return converged(ctx, objs, 1) }); err != nil {
		return res, fmt.Errorf("never converged: %w", err)
	}
	res.Before = holding()
	res.Cached = map[string]int{}
	for name, rp := range replicas {
		res.Cached[name] = len(rp.shard.Informer().GetStore().ListKeys())
		res.Filtering = rp.shard.Filtering().String()
	}
	printHolding(w, res.Before, replicas)
	fmt.Fprintf(w, "all %d Deployments converged at generation 1\n", deployments)

	killed := time.Now()
	fmt.Fprintf(w, "\nkill %s (no release: its Leases are left to expire)\n", victim)
	replicas[victim].cancel()
	replicas[victim].wg.Wait()
	replicas[victim].lw.Close()
	delete(replicas, victim)
	renewed, err := lastRenewal(ctx, leases.Clientset("story"), victim)
	if err != nil {
		return res, err
	}
	res.Renewed = killed.Sub(renewed)

	for i := range deployments {
		name := fmt.Sprintf("web-%03d", i)
		if err := bump(ctx, objs, name); err != nil {
			return res, err
		}
		if i%25 == 24 {
			// The fake's watch channels hold 100 events and panic when
			// full: let every informer catch up before going on.
			if err := waitFor(ctx, func() bool { return seen(replicas, name, 2) }); err != nil {
				return res, err
			}
		}
	}
	fmt.Fprintf(w, "every Deployment updated to generation 2\n")
	if err := waitFor(ctx, covered); err != nil {
		return res, fmt.Errorf("shards never taken over: %w", err)
	}
	res.Takeover = time.Since(killed)
	res.After = holding()
	// The others count LeaseDuration from the last renewal they saw, not
	// from the kill, which came up to a period later: so the takeover,
	// after the kill, can take less than LeaseDuration.
	fmt.Fprintf(w, "%s's shards taken over %v after its last renewal, %v after the kill: the others wait LeaseDuration (%v) "+
		"from the last renewal they saw (%v before the kill), then take and list the shards within 2 periods (RetryPeriod %v + 10%%)\n",
		victim, (res.Renewed + res.Takeover).Round(10*time.Millisecond), res.Takeover.Round(10*time.Millisecond),
		timing.LeaseDuration, res.Renewed.Round(10*time.Millisecond), timing.RetryPeriod)
	printHolding(w, res.After, replicas)
	if err := waitFor(ctx, func() bool { return converged(ctx, objs, 2) }); err != nil {
		return res, fmt.Errorf("never converged after the kill: %w", err)
	}
	res.Converged = true
	fmt.Fprintf(w, "all %d Deployments converged at generation 2\n", deployments)
	if o.Hold != nil {
		fmt.Fprintf(w, "the other replicas keep running, and the pages show them, until interrupted (Ctrl-C)\n")
		o.Hold()
	}
	// Stop the replicas before reading the counters: a worker counts its
	// sync just after the write that made the list converge.
	for name, rp := range replicas {
		rp.cancel()
		rp.wg.Wait()
		rp.lw.Close()
		delete(replicas, name)
	}
	mu.Lock()
	res.Overlaps, res.Syncs = overlaps, syncs
	mu.Unlock()
	if res.Overlaps == 0 {
		fmt.Fprintf(w, "no Deployment was ever synced by two replicas at once\n")
	}
	return res, nil
}

// syncDeployment is the controller's reconcile: it sets the status's
// observedGeneration to the generation it read from its informer.
func syncDeployment(ctx context.Context, c kubernetes.Interface, get func(string) (any, bool, error), key string, synced func()) error {
	obj, ok, err := get(key)
	if err != nil || !ok {
		return err
	}
	d := obj.(*appsv1.Deployment)
	if d.Status.ObservedGeneration == d.Generation {
		return nil
	}
	d = d.DeepCopy()
	d.Status.ObservedGeneration = d.Generation
	if _, err := c.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		return err
	}
	synced()
	return nil
}

// bump raises a Deployment's generation, as a spec change does.
func bump(ctx context.Context, c kubernetes.Interface, name string) error {
	d, err := c.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	d.Generation++
	_, err = c.AppsV1().Deployments(namespace).Update(ctx, d, metav1.UpdateOptions{})
	return err
}

// converged reports whether every Deployment is at generation gen and
// its status says so.
func converged(ctx context.Context, c kubernetes.Interface, gen int64) bool {
	l, err := c.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != deployments {
		return false
	}
	for _, d := range l.Items {
		if d.Generation != gen || d.Status.ObservedGeneration != gen {
			return false
		}
	}
	return true
}

// seen reports whether every replica that caches Deployment name has it
// at generation gen.
func seen(replicas map[string]*replica, name string, gen int64) bool {
	for _, rp := range replicas {
		obj, ok, _ := rp.get(namespace + "/" + name)
		if ok && obj.(*appsv1.Deployment).Generation < gen {
			return false
		}
	}
	return true
}

func printHolding(w io.Writer, h map[string][]int, replicas map[string]*replica) {
	names := make([]string, 0, len(h))
	for n := range h {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		rp := replicas[n]
		fmt.Fprintf(w, "  %s holds %2d shards %v, caches %d Deployments (filtered by the %s)\n",
			n, len(h[n]), h[n], len(rp.shard.Informer().GetStore().ListKeys()), rp.shard.Filtering())
	}
}

// waitFor polls cond every 20ms until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
