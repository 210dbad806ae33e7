// Package configmaps is the controller of crsharding's examples/sharded: a
// controller-runtime ConfigMap controller sharded with crsharding. Its setup
// is here, apart from the command, so that integration/ runs the same code
// against a real API server with several managers in one process.
//
// The controller stamps every ConfigMap labelled LabelWatch=true with a
// digest of its data (AnnotationDigest) and the identity of the replica
// that reconciled it (AnnotationBy). A ConfigMap whose digest is current is
// left alone, so the controller converges; after a change of data only the
// replica holding the object's shard writes it.
package configmaps

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"slices"

	"github.com/go-coalesce/workqueue/interop/crsharding"
	"github.com/go-coalesce/workqueue/sharding"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The label that selects the ConfigMaps the controller watches, and the
// annotations it writes.
const (
	LabelWatch       = "sharded.example.go-coalesce.io/watch"
	AnnotationDigest = "sharded.example.go-coalesce.io/digest"
	AnnotationBy     = "sharded.example.go-coalesce.io/by"
)

// Options configures one replica of the controller.
type Options struct {
	// Namespace holds the ConfigMaps the controller watches and the
	// ring's Leases.
	Namespace string
	// Identity names this replica in the ring (a pod name).
	Identity string
	// Ring is the ring's configuration; Client, Namespace, Identity,
	// Object and Field are filled in, the rest (Name, Shards, timings) is
	// taken as given. A zero Name means "configmaps", a zero Workers
	// the controller's (Options.Workers).
	Ring sharding.Config
	// Manager is the manager's configuration; its Cache is given the
	// sharded informer, the namespace and the label selector.
	Manager manager.Options
	// Workers is the controller's MaxConcurrentReconciles; zero means 4.
	Workers int
	// Wrap, if not nil, wraps the reconciler inside the sharding wrapper
	// (tests use it to watch every run).
	Wrap func(reconcile.Reconciler) reconcile.Reconciler
}

// New builds the manager of one replica: the ring's runnable, the sharded
// cache of ConfigMaps and the controller on the sharded queue. Start the
// manager to run it.
func New(cfg *rest.Config, o Options) (manager.Manager, *crsharding.Sharding, error) {
	if o.Namespace == "" || o.Identity == "" {
		return nil, nil, errors.New("configmaps: Options needs Namespace and Identity")
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	ring := o.Ring
	ring.Client = clientset // for the ring's Leases
	ring.Namespace = o.Namespace
	ring.Identity = o.Identity
	ring.Object = &corev1.ConfigMap{}
	ring.Field = sharding.FieldUID
	if ring.Workers == 0 { // published with the load: the ring's busy fraction
		ring.Workers = cmp.Or(o.Workers, 4)
	}
	if ring.Name == "" {
		ring.Name = "configmaps"
	}
	sh, err := crsharding.New(crsharding.Config{Ring: ring})
	if err != nil {
		return nil, nil, err
	}

	mo := o.Manager
	// Every replica runs the controller: the manager's leader election
	// would start it on one only (see crsharding's package doc, Shutdown).
	mo.LeaderElection = false
	mo.Cache = sh.CacheOptions(mo.Cache) // ConfigMaps: only the held shards
	mo.Cache.DefaultNamespaces = map[string]cache.Config{o.Namespace: {}}
	mo.Cache.DefaultLabelSelector = labels.SelectorFromSet(labels.Set{LabelWatch: "true"})
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		return nil, nil, err
	}
	if err := mgr.Add(sh); err != nil { // the ring, on every replica
		return nil, nil, err
	}
	// /readyz (with Manager.HealthProbeBindAddress set) fails until the
	// replica has filled its share of the ring once (its shards held and
	// in its cache), after its session lapsed, and while the API server
	// refuses it a request it needs (sharding.Replica.Ready).
	if err := mgr.AddReadyzCheck("sharding", sh.Replica().Ready); err != nil {
		return nil, nil, err
	}
	var r reconcile.Reconciler = &reconciler{client: mgr.GetClient(), identity: o.Identity}
	if o.Wrap != nil {
		r = o.Wrap(r)
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("configmaps").
		For(&corev1.ConfigMap{}).
		WithOptions(sh.ControllerOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(o.Workers, 4)})).
		Complete(sh.Reconciler(r))
	if err != nil {
		return nil, nil, err
	}
	return mgr, sh, nil
}

// reconciler stamps a ConfigMap with its data's digest and the replica's
// identity, unless the digest is current.
type reconciler struct {
	client   client.Client
	identity string
}

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var cm corev1.ConfigMap
	if err := r.client.Get(ctx, req.NamespacedName, &cm); err != nil {
		// Deleted: nothing to clean up. (Sharding.Reconciler runs this
		// only for a key whose shard the replica holds and has synced,
		// so NotFound means the object is gone, not that it is cached
		// elsewhere.)
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	digest := Digest(cm.Data)
	if cm.Annotations[AnnotationDigest] == digest {
		return reconcile.Result{}, nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": cm.ResourceVersion, // a stale read fails (409) and is retried
		"annotations":     map[string]string{AnnotationDigest: digest, AnnotationBy: r.identity},
	}})
	if err != nil {
		return reconcile.Result{}, err
	}
	// A Conflict (the cache was behind) is an error: the request is
	// retried after the limiter's delay, by then from a newer cache.
	err = r.client.Patch(ctx, &cm, client.RawPatch(types.MergePatchType, patch))
	return reconcile.Result{}, client.IgnoreNotFound(err)
}

// Digest is the digest the controller stamps for data: the first 16 hex
// digits of the SHA-256 of its sorted key=value lines.
func Digest(data map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		h.Write([]byte(k + "=" + data[k] + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
