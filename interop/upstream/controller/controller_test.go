// Package controller runs controller-runtime's own controller tests
// (pkg/internal/controller) with our queues swapped in, and with its own
// for comparison. It has only this test file: the upstream tests run in
// their own package, built from a stand-in of controller-runtime's module
// in a temporary folder (see harness). ../controllerruntime/README.md has
// the edits, the skipped specs and the results.
package controller

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

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
	goBin   string
	modRoot string // interop, where go test runs
	modFile string // the copy of interop/go.mod with the replace
	pkgDir  string // the real pkg/internal/controller in the copy
	test    []byte // upstream controller_test.go, as it is
}

func newHarness(t *testing.T) *harness {
	h := &harness{goBin: goTool(t)}
	var err error
	if h.modRoot, err = filepath.Abs("../.."); err != nil {
		t.Fatalf("controller: %v", err)
	}
	if _, err := os.Stat(filepath.Join(h.modRoot, "go.mod")); err != nil {
		t.Fatalf("controller: interop module root not found: %v", err)
	}
	src := strings.TrimSpace(h.goCmd(t, "list", "-m", "-f", "{{.Dir}}", crModule))
	if src == "" {
		t.Fatalf("controller: no module directory for %s", crModule)
	}

	tmp := t.TempDir()
	mod := filepath.Join(tmp, "controller-runtime")
	rel := filepath.Join("pkg", "internal", "controller")
	mirror(t, src, mod, strings.Split(rel, string(filepath.Separator)))
	h.pkgDir = filepath.Join(mod, rel)
	upstreamDir := filepath.Join(src, rel)

	// The package's own files, copied: the build must see them in the
	// replaced module's directory. controller.go and metrics/ as they are.
	copyFile(t, filepath.Join(upstreamDir, "controller.go"), filepath.Join(h.pkgDir, "controller.go"))
	if err := os.Symlink(filepath.Join(upstreamDir, "metrics"), filepath.Join(h.pkgDir, "metrics")); err != nil {
		t.Fatalf("controller: %v", err)
	}
	if h.test, err = os.ReadFile(filepath.Join(upstreamDir, "controller_test.go")); err != nil {
		t.Fatalf("controller: %v", err)
	}
	suite, err := os.ReadFile(filepath.Join(upstreamDir, "controller_suite_test.go"))
	if err != nil {
		t.Fatalf("controller: %v", err)
	}
	writeFile(t, filepath.Join(h.pkgDir, "controller_suite_test.go"), suiteFile(t, suite))

	goMod, err := os.ReadFile(filepath.Join(h.modRoot, "go.mod"))
	if err != nil {
		t.Fatalf("controller: %v", err)
	}
	goSum, err := os.ReadFile(filepath.Join(h.modRoot, "go.sum"))
	if err != nil {
		t.Fatalf("controller: %v", err)
	}
	h.modFile = filepath.Join(tmp, "go.mod")
	goMod = fmt.Appendf(goMod, "\nreplace %s => %s\n", crModule, mod)
	writeFile(t, h.modFile, goMod)
	writeFile(t, filepath.Join(tmp, "go.sum"), goSum) // -modfile reads the .sum beside it
	return h
}

// oursTest is the upstream controller_test.go with our queues: the import
// of controller-runtime's priorityqueue becomes our alias of it (backed by
// crpriority; its names are controller-runtime's types, so controller.go
// takes what it returns), and the three client-go NewTyped calls become the
// client-go alias's (backed by the core). client-go's interfaces stay
// client-go's: controller.go's signatures name them.
func (h *harness) oursTest(t *testing.T) []byte {
	s := string(h.test)
	for _, r := range []struct {
		old, new string
		n        int // occurrences upstream; another number means the file changed
	}{
		{
			`"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"`,
			`"github.com/go-coalesce/workqueue/interop/upstream/controllerruntime/priorityqueue"` + "\n\t" +
				`ourworkqueue "github.com/go-coalesce/workqueue/interop/upstream/clientgo/workqueue"`,
			1,
		},
		{`workqueue.NewTyped[`, `ourworkqueue.NewTyped[`, 3},
	} {
		if n := strings.Count(s, r.old); n != r.n {
			t.Fatalf("controller: upstream controller_test.go has %d of %q, want %d: redo the rewrite", n, r.old, r.n)
		}
		s = strings.ReplaceAll(s, r.old, r.new)
	}
	return []byte(s)
}

// counts is Ginkgo's summary of one run. Flaked counts specs that
// passed on their second attempt (see flakeAttempts); they are among
// Passed.
type counts struct {
	Ran, Total, Passed, Failed, Flaked, Pending, Skipped int
}

var summaryRE = regexp.MustCompile(`Ran (\d+) of (\d+) Specs in [0-9.]+ seconds\n(?:SUCCESS|FAIL)! -- (\d+) Passed \| (\d+) Failed \| (?:(\d+) Flaked \| )?(\d+) Pending \| (\d+) Skipped`)

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
func (h *harness) run(t *testing.T, backend string, test []byte) counts {
	writeFile(t, filepath.Join(h.pkgDir, "controller_test.go"), test)
	start := time.Now()
	out, err := h.goTest(t, "test", "-race", "-count=1", "-v", "-modfile="+h.modFile, upstreamPkg,
		"-args", "-ginkgo.no-color", "-ginkgo.flake-attempts="+strconv.Itoa(flakeAttempts))
	m := summaryRE.FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("controller: %s: upstream controller suite failed (%v); output ends:\n%s", backend, err, tail(out, 60))
	}
	var n [7]int
	for i := range n {
		n[i], _ = strconv.Atoi(string(m[i+1])) // an absent Flaked is 0
	}
	c := counts{Ran: n[0], Total: n[1], Passed: n[2], Failed: n[3], Flaked: n[4], Pending: n[5], Skipped: n[6]}
	t.Logf("%s: %d passed (%d on a second attempt), %d failed, %d pending, %d skipped of %d specs, in %v",
		backend, c.Passed, c.Flaked, c.Failed, c.Pending, c.Skipped, c.Total, time.Since(start).Round(time.Second))
	if c.Flaked > 0 {
		t.Logf("%s: output ends:\n%s", backend, tail(out, 60))
	}
	if c.Failed != 0 || c.Skipped != len(skippedSpecs) || c.Passed == 0 ||
		c.Passed+c.Failed+c.Pending+c.Skipped != c.Total {
		t.Errorf("controller: %s: want every spec but %d skipped and upstream's pending passed, got %+v; output ends:\n%s",
			backend, len(skippedSpecs), c, tail(out, 60))
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

// mirror makes dst a copy of the directory src made of symbolic links,
// except along path (relative folder names), where it makes real folders,
// whose other entries are links too; the last folder of path is left empty.
func mirror(t *testing.T, src, dst string, path []string) {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatalf("controller: %v", err)
	}
	if len(path) == 0 {
		return
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatalf("controller: %v", err)
	}
	for _, e := range entries {
		switch e.Name() {
		case path[0]:
			mirror(t, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), path[1:])
		case "go.mod":
			// The replacement's go.mod, copied like the package's files.
			copyFile(t, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()))
		default:
			if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				t.Fatalf("controller: %v", err)
			}
		}
	}
}

// goTool is the go command of the toolchain running the test.
func goTool(t *testing.T) string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("controller: no go command: %v", err)
	}
	return p
}

func (h *harness) goCmd(t *testing.T, args ...string) string {
	out, err := h.goTest(t, args...)
	if err != nil {
		t.Fatalf("controller: go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// goTest runs the go command in the interop module, stopping it a minute
// before the test's own deadline so that its output is reported.
func (h *harness) goTest(t *testing.T, args ...string) ([]byte, error) {
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-time.Minute))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, h.goBin, args...)
	cmd.Dir = h.modRoot
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

func tail(b []byte, lines int) string {
	s := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(s) > lines {
		s = s[len(s)-lines:]
	}
	return strings.Join(s, "\n")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func copyFile(t *testing.T, src, dst string) {
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("controller: %v", err)
	}
	writeFile(t, dst, b)
}

func writeFile(t *testing.T, name string, b []byte) {
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatalf("controller: %v", err)
	}
}
