package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/debug"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/ringpage"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// clusterOptions configure one replica of the -cluster mode.
type clusterOptions struct {
	namespace string // the ring's Leases and the Deployments it shards
	identity  string // this replica's name in the ring
	ring      string // the ring's name, the same on every replica
	shards    int
	listen    string // address of /metrics, /readyz, /healthz and the pages; empty: none
}

// runCluster runs one replica of the Deployment "controller" against the
// cluster of the kubeconfig ($KUBECONFIG, ~/.kube/config) or, in a pod,
// the in-cluster configuration, with the Lease timings' defaults. Start
// it several times with different identities (deploy/20-deployment.yaml
// runs three pods): each replica caches and "reconciles" (logs) only the
// Deployments of the namespace whose shards it holds.
//
// It only reads Deployments, so it needs no more than the ring's RBAC
// (deploy/10-rbac.yaml): a controller that writes adds its own verbs. It
// returns Run's error: a replica the API server keeps refusing a request
// it needs stops with an error that names it, and the pod restarts
// visibly instead of looking healthy while holding nothing.
func runCluster(ctx context.Context, o clusterOptions) error {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	g := newGauges()
	q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
	r, err := sharding.New(sharding.Config{
		Client:    client,
		Namespace: o.namespace,
		Name:      o.ring,
		Identity:  o.identity,
		Shards:    o.shards,
		Object:    &appsv1.Deployment{},
		ListerWatcher: cache.NewListWatchFromClient(client.AppsV1().RESTClient(),
			"deployments", o.namespace, fields.Everything()),
		Queue:   q,
		Metrics: g.metrics(),
		OnChange: func(held []int) {
			klog.InfoS("holds shards", "identity", o.identity, "shards", held)
		},
	})
	if err != nil {
		return err
	}
	store := r.Informer().GetStore() // only the held shards' Deployments
	reconcile := func(_ context.Context, key string) error {
		obj, ok, err := store.GetByKey(key)
		switch {
		case err != nil:
			return err
		case !ok:
			klog.InfoS("gone", "deployment", key, "identity", o.identity)
		default:
			klog.InfoS("reconciled", "deployment", key, "generation", obj.(*appsv1.Deployment).Generation, "identity", o.identity)
		}
		return nil
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var srv *http.Server
	var wg sync.WaitGroup
	if o.listen != "" {
		l, err := net.Listen("tcp", o.listen)
		if err != nil {
			return err
		}
		srv = &http.Server{Handler: g.handler(r, q), ReadHeaderTimeout: 10 * time.Second}
		wg.Go(func() {
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				klog.ErrorS(err, "serving /metrics and /readyz")
			}
		})
	}
	var runErr error
	wg.Go(func() {
		runErr = r.Run(ctx)
		cancel() // Run returned on its own (an error): stop the workers too
	})
	_ = workqueue.Run(ctx, q, 4, r.Handler(reconcile))
	<-ctx.Done()
	if srv != nil {
		shut, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = srv.Shutdown(shut)
		done()
	}
	wg.Wait()
	return runErr
}

// gauges are the replica's sharding.Metrics, served in Prometheus' text
// format by handler: the example keeps the sharding module free of a
// metrics library (a controller passes prometheus.Gauges, Counters and
// vectors instead, as interop/crsharding/examples/sharded does).
type gauges struct {
	names  []string
	values map[string]*gauge

	mu sync.Mutex // protects the labelled series below
	// series are the counters with labels and the per-shard gauges, by
	// name and then by their rendered labels ({cause="gain"}).
	series map[string]map[string]*gauge
	kinds  map[string]string // name → "counter" or "gauge"
}

type gauge struct{ bits atomic.Uint64 }

func (g *gauge) Set(v float64)  { g.bits.Store(math.Float64bits(v)) }
func (g *gauge) value() float64 { return math.Float64frombits(g.bits.Load()) }

// Inc makes a gauge a counter. The example's replica increments each
// from one goroutine at a time, but a CAS keeps it right regardless.
func (g *gauge) Inc() {
	for {
		old := g.bits.Load()
		if g.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+1)) {
			return
		}
	}
}

func newGauges() *gauges {
	g := &gauges{values: map[string]*gauge{}, series: map[string]map[string]*gauge{}, kinds: map[string]string{}}
	for _, name := range []string{"sharding_shards", "sharding_objects", "sharding_server_filtering", "sharding_forbidden",
		"sharding_gained_total", "sharding_released_total", "sharding_fences_total"} {
		g.names = append(g.names, name)
		g.values[name] = &gauge{}
	}
	return g
}

// labelled returns the series of name with the given label pairs.
func (g *gauges) labelled(kind, name string, kv ...string) *gauge {
	var b strings.Builder
	for i := 0; i < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", kv[i], kv[i+1])
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.series[name] == nil {
		g.series[name], g.kinds[name] = map[string]*gauge{}, kind
	}
	v := g.series[name][b.String()]
	if v == nil {
		v = &gauge{}
		g.series[name][b.String()] = v
	}
	return v
}

// SetShard and DeleteShard are sharding.ShardMetrics: one series per
// shard the replica holds, deleted when it no longer holds it.
func (g *gauges) SetShard(shard int, admitted bool, objects int) {
	a := 0.0
	if admitted {
		a = 1
	}
	g.labelled("gauge", "sharding_shard_admitted", "shard", strconv.Itoa(shard)).Set(a)
	g.labelled("gauge", "sharding_shard_objects", "shard", strconv.Itoa(shard)).Set(float64(objects))
}

func (g *gauges) DeleteShard(shard int) {
	key := fmt.Sprintf("shard=%q", strconv.Itoa(shard))
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.series["sharding_shard_admitted"], key)
	delete(g.series["sharding_shard_objects"], key)
}

func (g *gauges) metrics() sharding.Metrics {
	return sharding.Metrics{
		Shards:          g.values["sharding_shards"],
		Objects:         g.values["sharding_objects"],
		ServerFiltering: g.values["sharding_server_filtering"],
		Forbidden:       g.values["sharding_forbidden"],
		Gained:          g.values["sharding_gained_total"],
		Released:        g.values["sharding_released_total"],
		Fences:          g.values["sharding_fences_total"],
		Lapses: func(cause string) sharding.Counter {
			return g.labelled("counter", "sharding_lapses_total", "cause", cause)
		},
		Lists: func(resource, cause string) sharding.Counter {
			return g.labelled("counter", "sharding_lists_total", "resource", resource, "cause", cause)
		},
		Moves: func(cause string) sharding.Counter {
			return g.labelled("counter", "sharding_moves_total", "cause", cause)
		},
		PerShard: g,
	}
}

// write writes every series in Prometheus' text format.
func (g *gauges) write(w io.Writer) {
	for _, name := range g.names {
		kind := "gauge"
		if strings.HasSuffix(name, "_total") {
			kind = "counter"
		}
		fmt.Fprintf(w, "# TYPE %s %s\n%s %g\n", name, kind, name, g.values[name].value())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(g.series)) {
		fmt.Fprintf(w, "# TYPE %s %s\n", name, g.kinds[name])
		for _, labels := range slices.Sorted(maps.Keys(g.series[name])) {
			fmt.Fprintf(w, "%s{%s} %g\n", name, labels, g.series[name][labels].value())
		}
	}
}

// handler serves /metrics, /debug/ring (the ring page), /debug/workqueue (the
// queue's debug page), /readyz (Replica.Ready: not ready before the
// replica has joined, after its session lapsed, and while the API server
// refuses it a request it needs) and /healthz (ok while the process
// serves: a lapse or a refused request is readiness's to report, and
// restarting the container would only make it list its shards again).
func (g *gauges) handler(r *sharding.Replica, q *workqueue.RateLimitingQueue[string]) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		g.write(w)
	})
	// The ring page: who holds each shard, and where a key stands
	// (/debug/ring?key=namespace/name; ?format=json).
	mux.Handle("GET /debug/ring", ringpage.New(r, ringpage.Options{Queue: q}))
	mux.Handle("GET /debug/workqueue", debug.NewHandler(debug.Options{}, debug.Queue("deployments", q, nil)))
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		if err := r.Ready(req); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}
