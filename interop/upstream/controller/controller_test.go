// Package controller runs controller-runtime's own controller tests
// (pkg/internal/controller) with our queues swapped in, and with its own
// for comparison. It has only this test file: the upstream tests run in
// their own package, built from a stand-in of controller-runtime's module
// in a temporary folder (see harness). ../controllerruntime/README.md has
// the edits, the skipped specs and the results.
package controller

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-coalesce/workqueue/interop/upstream/internal/upstreamtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// upstreamPkg is the package whose tests run here, inside module crModule.
const (
	crModule    = "sigs.k8s.io/controller-runtime"
	upstreamPkg = crModule + "/pkg/internal/controller"
)

// skippedSpecs are the upstream specs the replacement suite file skips,
// keyed by Ginkgo's full text, with the reason; the test checks that
// Ginkgo skipped exactly this many, so that a spec renamed upstream shows
// (it would run, and an envtest one fail on no server).
//
// All but one need a real API server (envtest starts a kube-apiserver
// binary); none of those is about the queue: they build an informer cache
// or a manager on the server. The other races with the controller, on any
// queue (it failed once, on ours, in our first five runs, under -race on a
// loaded machine): the fake reconciler reports the request before it
// returns the error, and the spec then reads the requests the controller
// added rate-limited, which the controller does only after Reconcile
// returns. Its twin under "should update prometheus metrics" runs the same
// error-then-success sequence without that read, and runs here.
var skippedSpecs = map[string]string{
	"controller Start should error when cache sync timeout occurs":                                                                    "envtest: builds an informer cache on its rest.Config",
	"controller Start should not error when controller Start context is cancelled during Sources WaitForSync":                         "envtest: builds an informer cache on its rest.Config",
	"controller Start should not call Reconcile until all event handlers have processed initial objects":                              "envtest: creates 20 Pods through its API server and watches them",
	"controller Warmup should error when cache sync timeout occurs":                                                                   "envtest: builds an informer cache on its rest.Config",
	"controller Warmup should not error when controller Warmup context is cancelled during Sources WaitForSync":                       "envtest: builds an informer cache on its rest.Config",
	"controller Warmup should be called before leader election runnables if warmup is enabled":                                        "envtest: starts its own for a manager",
	"controller Warmup should not leak goroutines when manager is stopped with warmup runnable and with leader election enabled":      "envtest: starts its own for a manager, then stops it",
	"controller Warmup should not leak goroutines when manager is stopped with warmup runnable and without leader election enabled":   "envtest: starts its own for a manager, then stops it",
	"controller Processing queue items from a Controller should requeue a Request if there is an error and continue processing items": "races with the controller on any queue: reads AddedRatelimited before the controller has called AddRateLimited",
}

// TestUpstreamControllerSuite runs controller-runtime's own controller tests
// (controller_test.go of pkg/internal/controller, at the version
// interop/go.mod requires) twice: with our queues (crpriority through the
// priorityqueue alias, the core through the client-go workqueue alias) and
// with controller-runtime's and client-go's own, and requires both to pass
// with the same counts. ../controllerruntime/README.md says how and why.
func TestUpstreamControllerSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("controller: builds controller-runtime and runs its controller suite twice (about 50 s)")
	}
	h := newHarness(t)

	// Controller-runtime's run first: it shows the harness itself (module
	// copy, suite file, skips) works before ours is judged.
	theirs := h.run(t, "controller-runtime", h.test)
	ours := h.run(t, "crpriority", h.oursTest(t))

	theirs.Flaked, ours.Flaked = 0, 0 // timing, not the queue: see flakeAttempts
	if theirs != ours {
		t.Errorf("controller: counts differ: crpriority %+v, controller-runtime %+v", ours, theirs)
	}
}

// harness is a module directory that stands in for controller-runtime:
// -modfile points at a copy of interop/go.mod with a replace of
// controller-runtime by it. Only pkg/internal/controller is a real folder,
// holding copies of the upstream files with the edits below; everything
// else is a symbolic link into the module cache.
//
// Why not go test -overlay, which would leave the module alone: the go
// command refuses an overlay that replaces a file under GOMODCACHE.
//
// Both runs use the one directory, so controller-runtime's packages (which
// the build cache keys by directory) compile once per test, not per run.
type harness struct {
	g       *upstreamtest.Go
	modFile string // the copy of interop/go.mod with the replace
	pkgDir  string // the real pkg/internal/controller in the copy
	test    []byte // upstream controller_test.go, as it is
}

func newHarness(t *testing.T) *harness {
	h := &harness{g: upstreamtest.NewGo(t, 2)}
	src := h.g.ModuleDir(t, crModule)

	tmp := t.TempDir()
	mod := filepath.Join(tmp, "controller-runtime")
	rel := filepath.Join("pkg", "internal", "controller")
	upstreamtest.Mirror(t, src, mod, strings.Split(rel, string(filepath.Separator)))
	h.pkgDir = filepath.Join(mod, rel)
	upstreamDir := filepath.Join(src, rel)

	// The package's own files, copied: the build must see them in the
	// replaced module's directory. controller.go and metrics/ as they are.
	upstreamtest.CopyFile(t, filepath.Join(upstreamDir, "controller.go"), filepath.Join(h.pkgDir, "controller.go"))
	if err := os.Symlink(filepath.Join(upstreamDir, "metrics"), filepath.Join(h.pkgDir, "metrics")); err != nil {
		t.Fatalf("controller: %v", err)
	}
	h.test = upstreamtest.ReadFile(t, filepath.Join(upstreamDir, "controller_test.go"))
	suite := upstreamtest.ReadFile(t, filepath.Join(upstreamDir, "controller_suite_test.go"))
	upstreamtest.WriteFile(t, filepath.Join(h.pkgDir, "controller_suite_test.go"), suiteFile(t, suite))

	goMod := upstreamtest.ReadFile(t, filepath.Join(h.g.ModRoot, "go.mod"))
	h.modFile = filepath.Join(tmp, "go.mod")
	goMod = fmt.Appendf(goMod, "\nreplace %s => %s\n", crModule, mod)
	upstreamtest.WriteFile(t, h.modFile, goMod)
	// -modfile reads the .sum beside it.
	upstreamtest.CopyFile(t, filepath.Join(h.g.ModRoot, "go.sum"), filepath.Join(tmp, "go.sum"))
	return h
}

// oursTest is the upstream controller_test.go with our queues: the import
// of controller-runtime's priorityqueue becomes our alias of it (backed by
// crpriority; its names are controller-runtime's types, so controller.go
// takes what it returns), and the three client-go NewTyped calls become the
// client-go alias's (backed by the core). client-go's interfaces stay
// client-go's: controller.go's signatures name them.
func (h *harness) oursTest(t *testing.T) []byte {
	return upstreamtest.Apply(t, "controller_test.go", h.test,
		upstreamtest.Edit{
			Old: `"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"`,
			New: `"github.com/go-coalesce/workqueue/interop/upstream/controllerruntime/priorityqueue"` + "\n\t" +
				`ourworkqueue "github.com/go-coalesce/workqueue/interop/upstream/clientgo/workqueue"`,
			N: 1,
		},
		upstreamtest.Edit{Old: `workqueue.NewTyped[`, New: `ourworkqueue.NewTyped[`, N: 3},
	)
}

// flakeAttempts lets Ginkgo run a failed spec once more. Several upstream
// specs hang on timing (a 1 ms cache sync timeout, 1 s Eventually
// windows), and on a loaded machine under -race one fails now and then
// with either queue (seen on controller-runtime's own: "should reset
// c.startWatches to nil after returning", whose source missed its 1 ms).
// A queue that is wrong fails a spec on both attempts: the mutants checked
// for this test did. Flaked specs are logged.
const flakeAttempts = 2

// run writes test as controller_test.go and runs the package's tests, and
// requires them to pass with every spec but the skipped ones and upstream's
// pending ones passed.
func (h *harness) run(t *testing.T, backend string, test []byte) upstreamtest.Ginkgo {
	upstreamtest.WriteFile(t, filepath.Join(h.pkgDir, "controller_test.go"), test)
	start := time.Now()
	out, err := h.g.Run(t, "test", "-race", "-count=1", "-v", "-modfile="+h.modFile, upstreamPkg,
		"-args", "-ginkgo.no-color", "-ginkgo.flake-attempts="+strconv.Itoa(flakeAttempts))
	c, ok := upstreamtest.ParseGinkgo(out)
	if err != nil || !ok {
		t.Fatalf("controller: %s: upstream controller suite failed (%v); output ends:\n%s", backend, err, upstreamtest.Tail(out, 60))
	}
	t.Logf("%s: %d passed (%d on a second attempt), %d failed, %d pending, %d skipped of %d specs, in %v",
		backend, c.Passed, c.Flaked, c.Failed, c.Pending, c.Skipped, c.Total, time.Since(start).Round(time.Second))
	if c.Flaked > 0 {
		t.Logf("%s: output ends:\n%s", backend, upstreamtest.Tail(out, 60))
	}
	if c.Failed != 0 || c.Skipped != len(skippedSpecs) || c.Passed == 0 ||
		c.Passed+c.Failed+c.Pending+c.Skipped != c.Total {
		t.Errorf("controller: %s: want every spec but %d skipped and upstream's pending passed, got %+v; output ends:\n%s",
			backend, len(skippedSpecs), c, upstreamtest.Tail(out, 60))
	}
	return c
}

// suiteFile is the upstream suite file with its envtest BeforeSuite and
// AfterSuite replaced: the replacement starts nothing and skips
// skippedSpecs, each with its reason. It keeps the upstream file's
// license header and declarations, which controller_test.go uses, and
// checks that the part it replaces is still what it was written against.
func suiteFile(t *testing.T, upstream []byte) []byte {
	s := string(upstream)
	i := strings.Index(s, "var _ = BeforeSuite(")
	if i < 0 || !strings.Contains(s[i:], "testenv.Start()") || !strings.Contains(s[i:], "var _ = AfterSuite(") {
		t.Fatalf("controller: upstream controller_suite_test.go changed: no envtest BeforeSuite/AfterSuite to replace")
	}
	names := make([]string, 0, len(skippedSpecs))
	for name := range skippedSpecs {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(s[:i])
	b.WriteString("// The upstream BeforeSuite started envtest; this one starts nothing,\n")
	b.WriteString("// and the specs that need it (and one racy spec) are skipped, each\n")
	b.WriteString("// with its reason.\n")
	b.WriteString("var _ = BeforeSuite(func() {\n\tlogf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))\n})\n\n")
	b.WriteString("var skippedSpecs = map[string]string{\n")
	for _, name := range names {
		fmt.Fprintf(&b, "\t%q: %q,\n", name, skippedSpecs[name])
	}
	b.WriteString("}\n\n")
	b.WriteString("var _ = BeforeEach(func() {\n")
	b.WriteString("\tif why, ok := skippedSpecs[CurrentSpecReport().FullText()]; ok {\n")
	b.WriteString("\t\tSkip(why)\n\t}\n})\n")
	return []byte(b.String())
}
