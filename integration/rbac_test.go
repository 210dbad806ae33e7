package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/crsharding/examples/sharded/configmaps"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The manifests under test, read from the repository at run time, so that
// the files users apply are what is tested.
const (
	deploymentsManifests = "../sharding/examples/deployments/deploy"
	configMapsManifests  = "../interop/crsharding/examples/sharded/deploy"
)

// The ring's timing in TestRBAC: short, as in the other sharding tests, with
// the room between RenewDeadline and LeaseDuration a loaded machine needs.
const (
	rbacLeaseDuration = 3 * time.Second
	rbacRenewDeadline = 2 * time.Second
	rbacRetryPeriod   = 250 * time.Millisecond
	rbacGracePeriod   = 500 * time.Millisecond
	rbacShards        = 16
	rbacDeployments   = 32
	// rbacFailBound is how long a replica refused a verb may take to stop
	// with an error: the verb is first needed within LeaseDuration + a
	// period of the start (a fence, after a kill, is due LeaseDuration
	// after the victim's last renewal), then refused for LeaseDuration,
	// then the replica leaves (at most GracePeriod + RenewDeadline), plus
	// room for a loaded machine.
	rbacFailBound = 3*rbacLeaseDuration + rbacGracePeriod + rbacRenewDeadline + 3*time.Second
	// rbacSettle is how long replicas with the verbs they need may take to
	// hold every shard: on a 2-core machine shared with other builds, the
	// server's Lease writes took up to seconds (and some timed out).
	rbacSettle = 90 * time.Second
)

// TestRBAC is issue #32's proof that the example's least-privilege RBAC
// (sharding/examples/deployments/deploy/10-rbac.yaml) is enough, and that each
// of its verbs is needed, both ways on a server that enforces RBAC
// (main_test.go starts it with --authorization-mode=RBAC):
//
//   - The manifests of both sharded examples pass a server-side dry-run
//     apply, and their RBAC objects are applied for real, from the files.
//   - Three replicas authenticated as the example's ServiceAccount (a
//     token from the TokenRequest API, as a pod gets) hold every shard
//     between them, each caches exactly its shards' Deployments, and a
//     change reaches the holder's cache and handler; with the server's
//     ShardedListAndWatch gate on (the server filters) and off (the
//     client does).
//   - For each verb of the Role, a ServiceAccount bound to the Role without
//     that verb runs the scenario that needs it (a join, a renewal, a
//     container restart that finds its old Lease, a fence of a killed
//     replica, the ring's and the cache's list and watch). The replica
//     must stop within rbacFailBound with an error that is Forbidden and
//     names the verb and resource, after logging it at default verbosity,
//     setting Metrics.Forbidden and failing Ready: never run on, looking
//     healthy. (list on leases is the exception: see rbacVerb.works.)
//
// The verb cases of one gate mode run in parallel, each with its own
// ServiceAccount and ring in the manifests' namespace.
func TestRBAC(t *testing.T) {
	admin, err := kubernetes.NewForConfig(server.restConfig())
	require.NoError(t, err)
	ap := newApplier(t)

	objs := readManifests(t, deploymentsManifests)
	crObjs := readManifests(t, configMapsManifests)
	t.Run("manifests", func(t *testing.T) {
		for _, set := range [][]*unstructured.Unstructured{objs, crObjs} {
			// The namespace for real (nothing namespaced can be
			// dry-run without it), then everything dry-run.
			for _, o := range set {
				if o.GetKind() == "Namespace" {
					ap.apply(t, o, false)
				}
			}
			for _, o := range set {
				ap.apply(t, o, true)
			}
		}
	})
	rbac := rbacObjects(t, objs)
	for _, o := range rbacObjectsOf(crObjs) {
		ap.apply(t, o, false)
	}
	for _, o := range []*unstructured.Unstructured{rbac.sa, rbac.role, rbac.binding} {
		ap.apply(t, o, false)
	}
	ns := rbac.sa.GetNamespace()
	requireEnforced(t, admin, ns, rbac.sa.GetName())

	for i := range rbacDeployments {
		_, err := admin.AppsV1().Deployments(ns).Create(t.Context(), deploymentObject(ns, fmt.Sprintf("web-%02d", i)), metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
	logs := captureLogs(t)
	// Rings and ServiceAccounts are named after the run, so that -count
	// runs on the one server never meet the Leases of an earlier one.
	run := rbacRuns.Add(1)

	t.Run("controller-runtime", func(t *testing.T) {
		crRBAC := rbacObjects(t, crObjs)
		checkControllerRuntime(t, admin, saConfig(t, admin, crRBAC.sa.GetNamespace(), crRBAC.sa.GetName()), crRBAC.sa.GetNamespace(), run)
	})

	for _, mode := range []string{"server", "client"} {
		t.Run("filter="+mode, func(t *testing.T) {
			if mode == "client" {
				withoutShardedListAndWatch(t)
			}
			t.Run("all verbs", func(t *testing.T) {
				cfg := saConfig(t, admin, ns, rbac.sa.GetName())
				checkWorks(t, admin, cfg, ns, fmt.Sprintf("all-%s-%d", mode, run), mode, 3)
			})
			t.Run("verbs", func(t *testing.T) {
				for _, c := range rbac.verbs() {
					t.Run("without "+c.verb+" "+c.resource, func(t *testing.T) {
						t.Parallel()
						name := fmt.Sprintf("no-%s-%s-%s-%d", c.verb, c.resource, mode, run)
						for _, o := range rbac.without(name, c) {
							ap.apply(t, o, false)
						}
						cfg := saConfig(t, admin, ns, name)
						if c.works() {
							checkWorksOrFailsClearly(t, cfg, ns, name, c)
							return
						}
						checkFails(t, cfg, ns, name, c, logs)
					})
				}
			})
		})
	}
}

// rbacRuns counts the runs of TestRBAC in this process.
var rbacRuns atomic.Int32

// rbacVerb is one verb of one rule of the Role.
type rbacVerb struct {
	group, resource, verb string
}

// works says whether a replica without the verb may keep working. Only
// list on leases: client-go's Reflector reads the ring by a streaming
// watch list (a WATCH with sendInitialEvents, client-go's WatchListClient,
// on by default) where the server supports it, as kube-apiserver 1.37
// does, and sends no LIST then; but when a watch list fails (seen under
// heavy load) the Reflector falls back to a LIST, and the replica then
// stops, as it must, with "cannot list leases". Either outcome is right
// (checkWorksOrFailsClearly); what must never happen is a replica that
// runs on holding nothing. The Role keeps list for that fallback and for
// servers that do not stream.
func (c rbacVerb) works() bool {
	return c.resource == "leases" && c.verb == "list"
}

// scenario says what a replica must do to need the verb.
func (c rbacVerb) scenario() string {
	switch {
	case c.resource == "leases" && c.verb == "get":
		// Read back only after a write answered 409: a Lease left by
		// an earlier run of the same identity.
		return "restart"
	case c.resource == "leases" && c.verb == "delete":
		// A fence (and a graceful leave).
		return "kill"
	}
	return "start"
}

// rbacSet is the example's ServiceAccount, Role and RoleBinding.
type rbacSet struct {
	sa, role, binding *unstructured.Unstructured
}

func rbacObjectsOf(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding":
			out = append(out, o)
		}
	}
	return out
}

func rbacObjects(t *testing.T, objs []*unstructured.Unstructured) rbacSet {
	t.Helper()
	var s rbacSet
	for _, o := range rbacObjectsOf(objs) {
		switch o.GetKind() {
		case "ServiceAccount":
			s.sa = o
		case "Role":
			s.role = o
		case "RoleBinding":
			s.binding = o
		}
	}
	require.NotNil(t, s.sa, "no ServiceAccount in the manifests")
	require.NotNil(t, s.role, "no Role in the manifests")
	require.NotNil(t, s.binding, "no RoleBinding in the manifests")
	return s
}

func (s rbacSet) typedRole() *rbacv1.Role {
	var role rbacv1.Role
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(s.role.Object, &role); err != nil {
		panic(err)
	}
	return &role
}

// verbs lists every verb of every rule of the Role.
func (s rbacSet) verbs() []rbacVerb {
	var out []rbacVerb
	for _, rule := range s.typedRole().Rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					out = append(out, rbacVerb{g, res, v})
				}
			}
		}
	}
	return out
}

// without returns the ServiceAccount, Role and RoleBinding of the
// manifests renamed to name, the Role without verb c.
func (s rbacSet) without(name string, c rbacVerb) []*unstructured.Unstructured {
	role := s.typedRole()
	var rules []rbacv1.PolicyRule
	for _, rule := range role.Rules {
		if slices.Contains(rule.APIGroups, c.group) && slices.Contains(rule.Resources, c.resource) {
			// Split the rule so that only this group and resource lose
			// the verb.
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					r := *rule.DeepCopy()
					r.APIGroups, r.Resources = []string{g}, []string{res}
					if g == c.group && res == c.resource {
						r.Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == c.verb })
					}
					if len(r.Verbs) > 0 {
						rules = append(rules, r)
					}
				}
			}
			continue
		}
		rules = append(rules, rule)
	}
	role.Rules = rules
	role.Name = name
	roleObj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(role)
	if err != nil {
		panic(err)
	}
	newRole := &unstructured.Unstructured{Object: roleObj}
	newRole.SetAPIVersion(s.role.GetAPIVersion())
	newRole.SetKind(s.role.GetKind())
	unstructured.RemoveNestedField(newRole.Object, "metadata", "creationTimestamp")

	sa := s.sa.DeepCopy()
	sa.SetName(name)
	binding := s.binding.DeepCopy()
	binding.SetName(name)
	_ = unstructured.SetNestedField(binding.Object, name, "roleRef", "name")
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	for _, sub := range subjects {
		sub.(map[string]any)["name"] = name
	}
	_ = unstructured.SetNestedSlice(binding.Object, subjects, "subjects")
	return []*unstructured.Unstructured{sa, newRole, binding}
}

// readManifests reads every object of every .yaml file in dir, in the
// order of the files' names.
func readManifests(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no manifests in %s", dir)
	slices.Sort(files) // as kubectl applies a folder: 00-namespace.yaml first
	var out []*unstructured.Unstructured
	for _, f := range files {
		r, err := os.Open(f)
		require.NoError(t, err)
		dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
		for {
			var m map[string]any
			err := dec.Decode(&m)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, f)
			if len(m) == 0 {
				continue
			}
			out = append(out, &unstructured.Unstructured{Object: m})
		}
		require.NoError(t, r.Close())
	}
	return out
}

// applier applies objects by server-side apply, as kubectl apply
// --server-side does.
type applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func newApplier(t *testing.T) *applier {
	cfg := server.restConfig()
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	disc, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc.Discovery()))}
}

func (a *applier) apply(t *testing.T, o *unstructured.Unstructured, dryRun bool) {
	t.Helper()
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	require.NoError(t, err, "%s %s", gvk, o.GetName())
	opts := metav1.ApplyOptions{FieldManager: "integration-rbac", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = a.dyn.Resource(m.Resource).Namespace(o.GetNamespace())
	}
	_, err = ri.Apply(t.Context(), o.GetName(), o, opts)
	require.NoError(t, err, "apply (dry run %v) %s %s/%s", dryRun, gvk.Kind, o.GetNamespace(), o.GetName())
}

// saConfig returns a client configuration that authenticates as the
// ServiceAccount with a token from the TokenRequest API, as the kubelet
// mounts one into a pod.
func saConfig(t *testing.T, admin kubernetes.Interface, ns, sa string) *rest.Config {
	t.Helper()
	seconds := int64(3600)
	tok, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	base := server.restConfig()
	return &rest.Config{
		Host:            base.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: base.CAData, ServerName: base.ServerName},
		BearerToken:     tok.Status.Token,
		QPS:             base.QPS,
		Burst:           base.Burst,
	}
}

// requireEnforced checks that the server authenticates the
// ServiceAccount's token as the ServiceAccount and enforces RBAC on it: it
// may create Leases in ns, and may not list Secrets. Without this, a
// server that allowed everything would pass every verb case as "works".
func requireEnforced(t *testing.T, admin kubernetes.Interface, ns, sa string) {
	t.Helper()
	client, err := kubernetes.NewForConfig(saConfig(t, admin, ns, sa))
	require.NoError(t, err)
	who, err := client.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("system:serviceaccount:%s:%s", ns, sa), who.Status.UserInfo.Username)
	can := func(verb, group, resource string) bool {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(), &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: verb, Group: group, Resource: resource,
			}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		return r.Status.Allowed
	}
	require.True(t, can("create", "coordination.k8s.io", "leases"), "the Role does not allow creating Leases")
	require.False(t, can("list", "", "secrets"), "the server does not enforce RBAC: the ServiceAccount may list Secrets")
	_, err = client.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{})
	require.True(t, apierrors.IsForbidden(err), "listing Secrets as the ServiceAccount: %v", err)
}

func deploymentObject(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	zero := int32(0)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
			},
		},
	}
}

// rbacReplica is one replica of the example's controller, as
// examples/deployments runs it in -cluster mode, authenticated as a
// ServiceAccount.
type rbacReplica struct {
	id        string
	r         *sharding.Replica
	forbidden *recordingGauge // Metrics.Forbidden
	cancel    context.CancelFunc
	done      chan struct{} // closed when Run and the workers have returned
	started   time.Time
	stopped   time.Time // when Run returned
	err       error     // Run's

	mu      sync.Mutex
	handled map[string]string // key → resourceVersion of the object its last run read
	ready   []string          // distinct errors of Ready, in order
}

func startRBACReplica(t *testing.T, cfg *rest.Config, ns, ring, id string, skipRelease bool) *rbacReplica {
	t.Helper()
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	rep := &rbacReplica{id: id, forbidden: &recordingGauge{}, done: make(chan struct{}), handled: map[string]string{}}
	metrics := sharding.Metrics{Forbidden: rep.forbidden}
	q := workqueue.NewRateLimitingQueue(workqueue.NewItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Second))
	r, err := sharding.New(sharding.Config{
		Client:    client,
		Namespace: ns,
		Name:      ring,
		Identity:  id,
		Shards:    rbacShards,
		Object:    &appsv1.Deployment{},
		ListerWatcher: cache.NewListWatchFromClient(client.AppsV1().RESTClient(),
			"deployments", ns, fields.Everything()),
		Queue:         q,
		Metrics:       metrics,
		LeaseDuration: rbacLeaseDuration,
		RenewDeadline: rbacRenewDeadline,
		RetryPeriod:   rbacRetryPeriod,
		GracePeriod:   rbacGracePeriod,
		SkipRelease:   skipRelease,
	})
	require.NoError(t, err)
	rep.r = r
	store := r.Informer().GetStore()
	handle := func(_ context.Context, key string) error {
		obj, ok, err := store.GetByKey(key)
		if err != nil || !ok {
			return err
		}
		rep.mu.Lock()
		rep.handled[key] = obj.(*appsv1.Deployment).ResourceVersion
		rep.mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	rep.cancel = cancel
	rep.started = time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		rep.err = r.Run(ctx)
		rep.stopped = time.Now()
		cancel() // as examples/deployments does: a replica whose Run failed stops
	})
	wg.Go(func() { _ = workqueue.Run(ctx, q, 2, r.Handler(handle)) })
	wg.Go(func() { rep.pollReady(ctx) })
	go func() {
		wg.Wait()
		close(rep.done)
	}()
	t.Cleanup(rep.stop)
	return rep
}

// pollReady records every distinct error of Ready until ctx ends.
func (rep *rbacReplica) pollReady(ctx context.Context) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := rep.r.Ready(nil); err != nil {
			rep.mu.Lock()
			if !slices.Contains(rep.ready, err.Error()) && len(rep.ready) < 50 {
				rep.ready = append(rep.ready, err.Error())
			}
			rep.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (rep *rbacReplica) stop() {
	rep.cancel()
	<-rep.done
}

// readyNow returns Ready's answer now ("" if nil).
func (rep *rbacReplica) readyNow() string {
	if err := rep.r.Ready(nil); err != nil {
		return err.Error()
	}
	return ""
}

func (rep *rbacReplica) isDone() bool {
	select {
	case <-rep.done:
		return true
	default:
		return false
	}
}

// recordingGauge is a sharding.Gauge that remembers its highest value.
type recordingGauge struct{ now, max atomic.Uint64 }

func (g *recordingGauge) Set(v float64) {
	g.now.Store(math.Float64bits(v))
	for {
		old := g.max.Load()
		if v <= math.Float64frombits(old) || g.max.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}
func (g *recordingGauge) maxValue() float64 { return math.Float64frombits(g.max.Load()) }

// checkWorks runs n replicas as the ServiceAccount of cfg and checks that
// they hold every shard between them, that each caches exactly its shards'
// Deployments (with the filtering of mode), that a change of a Deployment
// reaches its holder's cache and handler, that none is refused anything,
// and that they leave cleanly.
func checkWorks(t *testing.T, admin kubernetes.Interface, cfg *rest.Config, ns, ring, mode string, n int) {
	var reps []*rbacReplica
	for i := range n {
		reps = append(reps, startRBACReplica(t, cfg, ns, ring, fmt.Sprintf("%s-%d", ring, i), false))
	}
	deadline := time.Now().Add(rbacSettle)
	byShard := map[int][]string{} // shard → keys of its Deployments on the server
	list, err := admin.AppsV1().Deployments(ns).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	for _, d := range list.Items {
		s := sharding.ShardOf(sharding.Hash(string(d.UID)), rbacShards)
		byShard[s] = append(byShard[s], d.Namespace+"/"+d.Name)
	}
	settled := func() string {
		held := 0
		for _, rep := range reps {
			if rep.isDone() {
				return fmt.Sprintf("%s stopped: %v", rep.id, rep.err)
			}
			shards := rep.r.Shards()
			held += len(shards)
			var want []string
			for _, s := range shards {
				want = append(want, byShard[s]...)
			}
			slices.Sort(want)
			got := rep.r.Informer().GetStore().ListKeys()
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Sprintf("%s holds shards %v and caches %d Deployments, want %d", rep.id, shards, len(got), len(want))
			}
			if f := rep.r.Filtering().String(); f != mode {
				return fmt.Sprintf("%s filters on the %s", rep.id, f)
			}
		}
		if held != rbacShards {
			return fmt.Sprintf("%d shards admitted in all", held)
		}
		return ""
	}
	waitFor(t, "every shard held and cached", deadline, settled)

	// A change reaches the holder's cache and handler.
	d, err := admin.AppsV1().Deployments(ns).Get(t.Context(), "web-00", metav1.GetOptions{})
	require.NoError(t, err)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"rbac-test/%s":"%d"}}}`, ring, time.Now().UnixNano())
	d, err = admin.AppsV1().Deployments(ns).Patch(t.Context(), d.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	key := ns + "/" + d.Name
	waitFor(t, "the change handled by the holder", time.Now().Add(10*time.Second), func() string {
		for _, rep := range reps {
			if !rep.r.Owns(key) {
				continue
			}
			rep.mu.Lock()
			rv := rep.handled[key]
			rep.mu.Unlock()
			if rv == d.ResourceVersion {
				return ""
			}
			return fmt.Sprintf("%s handled %s at resourceVersion %q, want %q", rep.id, key, rv, d.ResourceVersion)
		}
		return "no replica owns " + key
	})
	for _, rep := range reps {
		if got := rep.readyNow(); got != "" {
			t.Errorf("%s: Ready: %s", rep.id, got)
		}
		if rep.forbidden.maxValue() != 0 {
			t.Errorf("%s: Metrics.Forbidden was %v", rep.id, rep.forbidden.maxValue())
		}
	}
	for _, rep := range reps {
		rep.stop()
		if rep.err != nil {
			t.Errorf("%s: Run: %v", rep.id, rep.err)
		}
	}
}

// checkWorksOrFailsClearly runs one replica as the ServiceAccount of cfg,
// whose Role lacks verb c, and waits until either it holds every shard
// with nothing refused (the verb was not needed), or Run has returned a
// Forbidden error that names the verb and resource (it was, on a
// fallback path). Anything else within rbacSettle fails the test.
func checkWorksOrFailsClearly(t *testing.T, cfg *rest.Config, ns, name string, c rbacVerb) {
	rep := startRBACReplica(t, cfg, ns, name, name+"-0", false)
	want := "cannot " + c.verb + " " + c.resource
	waitFor(t, "the replica working, or stopped naming "+want, time.Now().Add(rbacSettle), func() string {
		if rep.isDone() {
			if apierrors.IsForbidden(rep.err) && strings.Contains(rep.err.Error(), want) {
				t.Logf("%s: the Reflector fell back to a LIST; Run: %v", rep.id, rep.err)
				return ""
			}
			return fmt.Sprintf("stopped: %v", rep.err)
		}
		if n := len(rep.r.Shards()); n != rbacShards {
			return fmt.Sprintf("%d shards admitted", n)
		}
		if got := rep.readyNow(); got != "" {
			return "Ready: " + got
		}
		return ""
	})
	rep.stop()
	if rep.err != nil && !apierrors.IsForbidden(rep.err) {
		t.Errorf("%s: Run: %v", rep.id, rep.err)
	}
}

// checkFails runs the scenario that needs verb c with the ServiceAccount
// of cfg, whose Role lacks it, and checks that the replica that needs it
// fails clearly within rbacFailBound. It logs one line for the table in
// the README whatever happens.
func checkFails(t *testing.T, cfg *rest.Config, ns, name string, c rbacVerb, logs *logCapture) {
	var rep *rbacReplica
	var t0 time.Time // from when the verb can be needed
	switch c.scenario() {
	case "start":
		rep = startRBACReplica(t, cfg, ns, name, name+"-0", false)
		t0 = rep.started
	case "restart":
		// A run that leaves its membership Lease behind (a crash), then
		// the same identity again, as a restarted container.
		first := startRBACReplica(t, cfg, ns, name, name+"-0", true)
		waitFor(t, "the first run joined", time.Now().Add(rbacSettle), func() string {
			if first.isDone() {
				return fmt.Sprintf("stopped: %v", first.err)
			}
			if len(first.r.Shards()) == rbacShards {
				return ""
			}
			return fmt.Sprintf("%d shards admitted", len(first.r.Shards()))
		})
		first.stop()
		rep = startRBACReplica(t, cfg, ns, name, name+"-0", false)
		t0 = rep.started
	case "kill":
		// Two replicas; the victim is killed (no release), the other
		// must fence it to take its shards.
		rep = startRBACReplica(t, cfg, ns, name, name+"-0", false)
		victim := startRBACReplica(t, cfg, ns, name, name+"-1", true)
		waitFor(t, "two replicas sharing the shards", time.Now().Add(rbacSettle), func() string {
			a, b := len(rep.r.Shards()), len(victim.r.Shards())
			if rep.isDone() || victim.isDone() {
				return fmt.Sprintf("stopped: %v / %v", rep.err, victim.err)
			}
			if a+b == rbacShards && a > 0 && b > 0 {
				return ""
			}
			return fmt.Sprintf("%d + %d shards admitted", a, b)
		})
		victim.stop()
		t0 = time.Now()
	}
	user := fmt.Sprintf("system:serviceaccount:%s:%s", ns, name)
	// The server's message, as klog quotes it in a key's value:
	// ... cannot create resource \"leases\" in API group ...
	refusal := fmt.Sprintf("cannot %s resource", c.verb)
	select {
	case <-rep.done:
	case <-time.After(time.Until(t0.Add(rbacFailBound))):
	}
	logged := logs.find(user, refusal, c.resource)
	rep.mu.Lock()
	readyErrs := slices.Clone(rep.ready)
	rep.mu.Unlock()
	readyNamed := slices.ContainsFunc(readyErrs, func(s string) bool { return strings.Contains(s, c.verb) && strings.Contains(s, c.resource) })
	if !rep.isDone() {
		shards := rep.r.Shards()
		ready := rep.readyNow()
		t.Logf("RESULT without %s %s: still running after %v: %d shards admitted, %d objects cached; Ready now %q; Metrics.Forbidden max %v; refusal logged: %v",
			c.verb, c.resource, rbacFailBound, len(shards), len(rep.r.Informer().GetStore().ListKeys()), ready, rep.forbidden.maxValue(), logged != "")
		t.Errorf("without %s on %s: the replica did not stop within %v (it holds %d shards)", c.verb, c.resource, rbacFailBound, len(shards))
		rep.stop()
		t.Logf("RESULT without %s %s: then cancelled, Run returned %v", c.verb, c.resource, rep.err)
		return
	}
	t.Logf("RESULT without %s %s: Run returned after %v: %v; Ready errors %q; Metrics.Forbidden max %v; logged: %s",
		c.verb, c.resource, rep.stopped.Sub(t0).Round(100*time.Millisecond), rep.err, readyErrs, rep.forbidden.maxValue(), logged)
	if rep.err == nil {
		t.Fatalf("without %s on %s: Run returned nil", c.verb, c.resource)
	}
	if !apierrors.IsForbidden(rep.err) {
		t.Errorf("without %s on %s: Run's error does not reach a Forbidden StatusError: %v", c.verb, c.resource, rep.err)
	}
	if msg := rep.err.Error(); !strings.Contains(msg, c.verb) || !strings.Contains(msg, c.resource) {
		t.Errorf("without %s on %s: Run's error does not name them: %v", c.verb, c.resource, rep.err)
	}
	if logged == "" {
		t.Errorf("without %s on %s: no log line at default verbosity names %s, %q and %s", c.verb, c.resource, user, refusal, c.resource)
	}
	if rep.forbidden.maxValue() != 1 {
		t.Errorf("without %s on %s: Metrics.Forbidden never 1", c.verb, c.resource)
	}
	if !readyNamed {
		t.Errorf("without %s on %s: Ready never named them: %q", c.verb, c.resource, readyErrs)
	}
}

// waitFor polls cond every 50 ms until it returns "", and fails the test
// with its last answer if deadline passes first.
func waitFor(t *testing.T, what string, deadline time.Time, cond func() string) {
	t.Helper()
	for {
		last := cond()
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s in time: %s", what, last)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("test ended before %s: %s", what, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logCapture keeps klog's lines while a test captures them. klog is the
// process's, and its verbosity the default (0): what a replica logs by
// default, and nothing more, is what lands here. The API server's lines
// are in it too: find looks for lines that name one ServiceAccount.
// main_test.go routes klog's output here (and nowhere else, unless
// -serverlogs) before the server starts: klog's output cannot be swapped
// safely while other goroutines log.
type logCapture struct {
	on    atomic.Bool
	mu    sync.Mutex
	lines []string
}

// klogLines is the process's klog output.
var klogLines = &logCapture{}

func (c *logCapture) Write(p []byte) (int, error) {
	if !c.on.Load() {
		return len(p), nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.lines) < 200000 {
		c.lines = append(c.lines, string(p))
	}
	return len(p), nil
}

// captureLogs keeps klog's lines until the end of the test.
func captureLogs(t *testing.T) *logCapture {
	klogLines.mu.Lock()
	klogLines.lines = nil
	klogLines.mu.Unlock()
	klogLines.on.Store(true)
	t.Cleanup(func() { klogLines.on.Store(false) })
	return klogLines
}

// find returns the first line that contains every one of parts, or "".
func (c *logCapture) find(parts ...string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.lines {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) }) {
			return l
		}
	}
	return ""
}

// checkControllerRuntime runs examples/sharded's controller (package
// configmaps) as two managers authenticated as the ServiceAccount of its
// manifests, and checks that a labelled ConfigMap gets its digest: the
// Role is enough for the ring, the sharded cache and the reconciler's
// patch.
func checkControllerRuntime(t *testing.T, admin kubernetes.Interface, cfg *rest.Config, ns string, run int32) {
	type crRun struct {
		cancel context.CancelFunc
		done   chan struct{}
		err    error
	}
	var runs []*crRun
	// The first manager serves its probes, as the manifests' Deployment
	// does: its /readyz (Replica.Ready, added by configmaps.New) must answer
	// ok once the ring works.
	probes := freeLoopbackAddr(t)
	for i := range 2 {
		probeAddr := "0"
		if i == 0 {
			probeAddr = probes
		}
		mgr, _, err := configmaps.New(cfg, configmaps.Options{
			Namespace: ns,
			Identity:  fmt.Sprintf("cr-%d-%d", run, i),
			Ring: sharding.Config{
				Shards:        rbacShards,
				LeaseDuration: rbacLeaseDuration,
				RenewDeadline: rbacRenewDeadline,
				RetryPeriod:   rbacRetryPeriod,
				GracePeriod:   rbacGracePeriod,
			},
			Manager: ctrl.Options{
				Metrics:                metricsserver.Options{BindAddress: "0"},
				HealthProbeBindAddress: probeAddr,
				Controller:             config.Controller{SkipNameValidation: new(true)},
			},
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
		run := &crRun{cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(run.done)
			run.err = mgr.Start(ctx)
		}()
		runs = append(runs, run)
	}
	defer func() {
		for _, run := range runs {
			run.cancel()
			<-run.done
			if run.err != nil {
				t.Errorf("manager: %v", run.err)
			}
		}
	}()
	cm := configMap(ns, "", "v1")
	cm.GenerateName = "rbac-"
	cm.Labels = map[string]string{configmaps.LabelWatch: "true"}
	cm, err := admin.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{})
	require.NoError(t, err)
	want := configmaps.Digest(cm.Data)
	waitFor(t, "the ConfigMap stamped", time.Now().Add(rbacSettle), func() string {
		got, err := admin.CoreV1().ConfigMaps(ns).Get(t.Context(), cm.Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if d := got.Annotations[configmaps.AnnotationDigest]; d != want {
			return fmt.Sprintf("digest %q, want %q", d, want)
		}
		return ""
	})
	waitFor(t, "the first manager's /readyz ok", time.Now().Add(rbacSettle), func() string {
		resp, err := http.Get("http://" + probes + "/readyz")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("%d %s", resp.StatusCode, body)
		}
		return ""
	})
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port that was free a
// moment ago, for a server that takes its address as a string and does not
// say which port it bound (controller-runtime's probes).
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
