package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// kedaModule is the KEDA release whose ScaledObject CRD the example's
// ScaledObject is validated against, read from the module cache (the go
// command fetches it from the module proxy, as any module): the newest
// release whose go.mod this repository's Go toolchain accepts.
const kedaModule = "github.com/kedacore/keda/v2@v2.20.2"

// autoscaleManifests are the example's autoscaler manifests, which
// deploymentsManifests (applied by TestRBAC) does not include.
const autoscaleManifests = deploymentsManifests + "/autoscale"

// TestAutoscaleManifests has the API server validate the example's
// autoscaler manifests (sharding/docs/autoscale.md): the HPA against
// autoscaling/v2, and the KEDA ScaledObject against KEDA's own CRD,
// installed from KEDA's module, both created with dry-run and strict
// field validation (an unknown field is an error, not a warning). A
// ScaledObject with a misspelt field is refused, so the CRD's schema is
// what judges.
func TestAutoscaleManifests(t *testing.T) {
	crd := kedaScaledObjectCRD(t)
	dyn, err := dynamic.NewForConfig(server.restConfig())
	require.NoError(t, err)
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	_, err = crds.Create(t.Context(), crd, metav1.CreateOptions{})
	require.NoError(t, err, "creating KEDA's ScaledObject CRD")
	t.Cleanup(func() { _ = crds.Delete(t.Context(), crd.GetName(), metav1.DeleteOptions{}) })
	require.Eventually(t, func() bool {
		got, err := crds.Get(t.Context(), crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "KEDA's ScaledObject CRD not established")

	// The namespace for real (TestRBAC applies it too), then the
	// manifests dry-run.
	ap := newApplier(t)
	for _, o := range readManifests(t, deploymentsManifests) {
		if o.GetKind() == "Namespace" {
			ap.apply(t, o, false)
		}
	}
	objs := readManifests(t, autoscaleManifests)
	kinds := map[string]bool{}
	create := func(o *unstructured.Unstructured) error {
		gvk := o.GroupVersionKind()
		m, err := ap.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return err
		}
		_, err = dyn.Resource(m.Resource).Namespace(o.GetNamespace()).Create(t.Context(), o,
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict})
		return err
	}
	for _, o := range objs {
		kinds[o.GetKind()] = true
		require.NoError(t, create(o), "dry-run create of %s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
	}
	require.Equal(t, map[string]bool{"HorizontalPodAutoscaler": true, "ScaledObject": true}, kinds, "the manifests in %s", autoscaleManifests)

	for _, o := range objs {
		if o.GetKind() != "ScaledObject" {
			continue
		}
		bad := o.DeepCopy()
		require.NoError(t, unstructured.SetNestedField(bad.Object, int64(15), "spec", "pollingIntervall"))
		require.Error(t, create(bad), "a ScaledObject with a misspelt field passed the server's validation")
		bad = o.DeepCopy()
		require.NoError(t, unstructured.SetNestedField(bad.Object, "often", "spec", "pollingInterval"))
		require.Error(t, create(bad), "a ScaledObject with a string for an integer passed the server's validation")
	}
}

// kedaScaledObjectCRD reads KEDA's ScaledObject CRD from kedaModule
// (config/crd/bases), downloading the module into the module cache if it
// is not there.
func kedaScaledObjectCRD(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "mod", "download", "-json", kedaModule)
	cmd.Dir = t.TempDir() // outside this module: its go.mod is not touched
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOTOOLCHAIN=local")
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); jerr != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s: %v %s %s (the module proxy must be reachable, as for any build)", kedaModule, err, mod.Error, out)
	}
	objs := readManifests(t, filepath.Join(mod.Dir, "config", "crd", "bases"))
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" && o.GetName() == "scaledobjects.keda.sh" {
			return o
		}
	}
	t.Fatalf("%s: no CRD scaledobjects.keda.sh in config/crd/bases", kedaModule)
	return nil
}
