package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
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
	listen    string // address of /metrics, /readyz and /healthz; empty: none
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
		srv = &http.Server{Handler: g.handler(r), ReadHeaderTimeout: 10 * time.Second}
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
// metrics library (a controller passes prometheus.Gauges instead).
type gauges struct {
	names  []string
	values map[string]*gauge
}

type gauge struct{ bits atomic.Uint64 }

func (g *gauge) Set(v float64)  { g.bits.Store(math.Float64bits(v)) }
func (g *gauge) value() float64 { return math.Float64frombits(g.bits.Load()) }

func newGauges() *gauges {
	g := &gauges{values: map[string]*gauge{}}
	for _, name := range []string{"sharding_shards", "sharding_objects", "sharding_server_filtering", "sharding_forbidden"} {
		g.names = append(g.names, name)
		g.values[name] = &gauge{}
	}
	return g
}

func (g *gauges) metrics() sharding.Metrics {
	return sharding.Metrics{
		Shards:          g.values["sharding_shards"],
		Objects:         g.values["sharding_objects"],
		ServerFiltering: g.values["sharding_server_filtering"],
		Forbidden:       g.values["sharding_forbidden"],
	}
}

// handler serves /metrics, /readyz (Replica.Ready: not ready before the
// replica has joined, after its session lapsed, and while the API server
// refuses it a request it needs) and /healthz (ok while the process
// serves: a lapse or a refused request is readiness's to report, and
// restarting the container would only make it list its shards again).
func (g *gauges) handler(r *sharding.Replica) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		for _, name := range g.names {
			fmt.Fprintf(w, "# TYPE %s gauge\n%s %g\n", name, name, g.values[name].value())
		}
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		if err := r.Ready(req); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}
