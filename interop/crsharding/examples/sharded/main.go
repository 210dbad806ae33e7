// Command sharded runs one replica of a controller-runtime ConfigMap
// controller sharded with crsharding (package configmaps beside this file):
// start it several times, with different identities, against one cluster,
// and each replica caches and reconciles only the ConfigMaps of the shards
// it holds. Stop one (Ctrl-C) and the others take its shards at their next
// period; start another and it takes its share.
//
//	go run ./examples/sharded -kubeconfig ~/.kube/config -namespace demo -identity r0
//	go run ./examples/sharded -kubeconfig ~/.kube/config -namespace demo -identity r1
//	kubectl -n demo create configmap c1 --from-literal=k=v
//	kubectl -n demo label configmap c1 sharded.example.go-coalesce.io/watch=true
//	kubectl -n demo get configmaps -o custom-columns=NAME:.metadata.name,BY:'.metadata.annotations.sharded\.example\.go-coalesce\.io/by'
//
// It needs, in the namespace: get, list, watch and patch on configmaps, and
// get, list, watch, create, update and delete on coordination.k8s.io
// leases. On a kube-apiserver with the ShardedListAndWatch feature gate
// (1.36+, alpha) each replica lists and watches only its shards' ranges;
// elsewhere it watches the namespace's labelled ConfigMaps and keeps only
// its shards' (it logs which). integration/ runs this controller against a
// real API server (TestControllerRuntimeSharding).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/go-coalesce/workqueue/interop/crsharding/examples/sharded/configmaps"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/ringpage"
	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sharded:", err)
		os.Exit(1)
	}
}

func run() error {
	host, _ := os.Hostname()
	namespace := flag.String("namespace", "default", "namespace of the ConfigMaps and of the ring's Leases")
	identity := flag.String("identity", envOr("POD_NAME", host), "this replica's name in the ring (unique among live replicas)")
	shards := flag.Int("shards", 16, "shards of the ring (a power of two); a rollout that changes it changes the ring's count online (sharding/docs/operate.md)")
	metricsAddr := flag.String("metrics-bind-address", "0", `address of /metrics and the ring page /debug/ring, e.g. 127.0.0.1:8080 ("0": none; deploy/ sets :8080)`)
	probeAddr := flag.String("health-probe-bind-address", "", "address of /readyz and /healthz (empty: none; deploy/ sets :8081)")
	flag.Parse()
	ctrl.SetLogger(zap.New())

	// controller-runtime's own -kubeconfig flag, then $KUBECONFIG, the
	// in-cluster config, ~/.kube/config: as any controller-runtime binary.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	mgr, sh, err := configmaps.New(cfg, configmaps.Options{
		Namespace: *namespace,
		Identity:  *identity,
		Ring: sharding.Config{
			Shards:   *shards,
			Metrics:  ringMetrics(),
			OnChange: func(held []int) { fmt.Printf("%s holds shards %v\n", *identity, held) },
		},
		Manager: ctrl.Options{
			Metrics:                metricsserver.Options{BindAddress: *metricsAddr},
			HealthProbeBindAddress: *probeAddr,
		},
	})
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	// The ring page, beside /metrics: who holds each shard, and where a
	// key stands (/debug/ring?key=namespace/name).
	if err := mgr.AddMetricsServerExtraHandler("/debug/ring", ringpage.New(sh.Replica(), ringpage.Options{})); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return mgr.Start(ctx)
}

// ringMetrics registers the ring's gauges with controller-runtime's
// registry, so that /metrics serves them beside the controller's
// workqueue_* and controller_runtime_* series: sharding_forbidden is the
// one to alert on (1 while the API server refuses the replica a request it
// needs; see sharding/docs/operate.md, "RBAC").
func ringMetrics() sharding.Metrics {
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		ctrlmetrics.Registry.MustRegister(g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		ctrlmetrics.Registry.MustRegister(c)
		return c
	}
	vec := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		ctrlmetrics.Registry.MustRegister(c)
		return c
	}
	lapses := vec("sharding_lapses_total", "Sessions of the replica that ended other than by a leave, by cause (deadline, fenced).", "cause")
	lists := vec("sharding_lists_total", "Lists the replica started, by resource and cause (initial, gain, relist, downgrade).", "resource", "cause")
	moves := vec("sharding_moves_total", "Planned moves of shards away from the replica, by cause (join, leave, count, load).", "cause")
	perShard := shardGauges{
		admitted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sharding_shard_admitted",
			Help: "Per shard this replica holds (and only those): 1 while its keys run, 0 while its cache fills or it is given up."}, []string{"shard"}),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sharding_shard_objects",
			Help: "Per shard this replica holds: its objects in the replica's cache."}, []string{"shard"}),
	}
	ctrlmetrics.Registry.MustRegister(perShard.admitted, perShard.objects)
	return sharding.Metrics{
		ServerFiltering: gauge("sharding_server_filtering", "1 while the API server filters the sharded list and watch by shard, 0 while the replica filters them."),
		Shards:          gauge("sharding_shards", "Shards whose keys the replica admits."),
		Objects:         gauge("sharding_objects", "Objects in the replica's sharded cache."),
		Forbidden:       gauge("sharding_forbidden", "1 while the API server refuses (403) a request the replica needs."),
		Gained:          counter("sharding_gained_total", "Shards the replica acquired."),
		Released:        counter("sharding_released_total", "Shards the replica released after draining them."),
		Fences:          counter("sharding_fences_total", "Members the replica fenced (their Lease unchanged for LeaseDuration)."),
		Lapses:          func(cause string) sharding.Counter { return lapses.WithLabelValues(cause) },
		Lists:           func(resource, cause string) sharding.Counter { return lists.WithLabelValues(resource, cause) },
		Moves:           func(cause string) sharding.Counter { return moves.WithLabelValues(cause) },
		PerShard:        perShard,
	}
}

// shardGauges is sharding.ShardMetrics on two gauge vectors labelled by
// shard: a replica exports the shards it holds only, so the ring has one
// series per shard whatever its replicas.
type shardGauges struct{ admitted, objects *prometheus.GaugeVec }

func (g shardGauges) SetShard(shard int, admitted bool, objects int) {
	s := strconv.Itoa(shard)
	a := 0.0
	if admitted {
		a = 1
	}
	g.admitted.WithLabelValues(s).Set(a)
	g.objects.WithLabelValues(s).Set(float64(objects))
}

func (g shardGauges) DeleteShard(shard int) {
	s := strconv.Itoa(shard)
	g.admitted.DeleteLabelValues(s)
	g.objects.DeleteLabelValues(s)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
