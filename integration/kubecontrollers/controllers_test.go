// Package kubecontrollers runs the unit tests of the Kubernetes controllers
// that hand a clock to their work queues (the Job controller's two queues,
// through TypedRateLimitingQueueConfig.Clock; the disruption controller's
// three, through TypedDelayingQueueConfig.Clock) with our queue in place of
// client-go's. Their tests step a k8s.io/utils fake clock through those
// queues, so they show what Config.Clock is for: each controller's tests
// run three times, on client-go's queue (the baseline), on ours given the
// clock through interop/kubeclock, and on ours without it.
//
// With the clock, the queues get it as ourClock(clock): kubeclock.New(clock)
// (the one-line migration) wrapped to count the timers the queue arms on
// the fake clock and those that fire, which a file of ours, added to the
// controller's package for the run, prints after its tests.
//
// Nothing of Kubernetes is copied: the controller's source is read from
// the module cache at the version integration/go.mod requires, its queue
// constructors are rewritten in code (edits that fail the test if the text
// they replace has changed), and it is built from a stand-in of the
// k8s.io/kubernetes module in a temporary folder (links to the module
// cache, but along the controller's folder) that a copy of go.mod, given
// to go test with -modfile, puts in its place.
//
// The builds are long (k8s.io/kubernetes's controller packages, cold), so
// the test runs only with KUBE_CONTROLLER_TESTS=1; README.md gives the
// figures.
package kubecontrollers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const kubeModule = "k8s.io/kubernetes"

// edit replaces n occurrences of old by new; a file with another number of
// them is not the one the edit was written against.
type edit struct {
	old, new string
	n        int
}

// controller is one controller package whose queue constructors are
// rewritten; edits returns the edits that put ours in, with the clock
// given to them or not.
type controller struct {
	pkg   string // inside k8s.io/kubernetes
	name  string // its Go package name
	file  string // the file that builds the queues
	edits func(withClock bool) []edit
	// steps: its tests step the fake clock past a delay of its queues,
	// so with the clock at least one of our timers must fire.
	steps bool
}

// clockField is the Config field that hands the controller's clock to our
// queue: kubeclock.New(clock), counted (see clockFile).
func clockField(withClock bool) string {
	if withClock {
		return ", Clock: ourClock(clock)"
	}
	return ""
}

// imports adds the core to the file's imports.
func imports() edit {
	return edit{"import (\n", "import (\n\tourworkqueue \"github.com/go-coalesce/workqueue\"\n", 1}
}

// clockFile is the test file of ours added to the controller's package
// (named pkg) when its queues get the clock: ourClock is kubeclock.New
// counting the timers armed and fired, and TestMain prints the counts
// after the tests (neither package has a TestMain of its own).
func clockFile(pkg string) []byte {
	return []byte("package " + pkg + `

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	ourworkqueue "github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/kubeclock"
	"k8s.io/utils/clock"
)

var ourClockArmed, ourClockFired atomic.Int64

func ourClock(c clock.Clock) ourworkqueue.Clock {
	k := kubeclock.New(c)
	if k == nil {
		return nil
	}
	return countingClock{k}
}

type countingClock struct{ ourworkqueue.Clock }

func (c countingClock) AfterFunc(d time.Duration, f func()) ourworkqueue.Timer {
	ourClockArmed.Add(1)
	return c.Clock.AfterFunc(d, func() { ourClockFired.Add(1); f() })
}

func TestMain(m *testing.M) {
	code := m.Run()
	fmt.Printf("ourclock: armed %d fired %d\n", ourClockArmed.Load(), ourClockFired.Load())
	os.Exit(code)
}
`)
}

// clockFileName is where clockFile goes in the stand-in's package folder.
const clockFileName = "zz_ourclock_test.go"

var clockRE = regexp.MustCompile(`ourclock: armed (\d+) fired (\d+)`)

var controllers = []controller{
	{
		pkg:   "pkg/controller/job",
		name:  "job",
		file:  "job_controller.go",
		steps: true,
		edits: func(withClock bool) []edit {
			c := clockField(withClock)
			return []edit{
				imports(),
				{
					`workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[string](DefaultJobApiBackOff, MaxJobApiBackOff), workqueue.TypedRateLimitingQueueConfig[string]{Name: "job", Clock: clock})`,
					`ourworkqueue.NewRateLimitingQueueWithConfig(ourworkqueue.NewItemExponentialFailureRateLimiter[string](DefaultJobApiBackOff, MaxJobApiBackOff), ourworkqueue.Config[string]{Name: "job"` + c + `})`,
					1,
				},
				{
					`workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[orphanPodKey](DefaultJobApiBackOff, MaxJobApiBackOff), workqueue.TypedRateLimitingQueueConfig[orphanPodKey]{Name: "job_orphan_pod", Clock: clock})`,
					`ourworkqueue.NewRateLimitingQueueWithConfig(ourworkqueue.NewItemExponentialFailureRateLimiter[orphanPodKey](DefaultJobApiBackOff, MaxJobApiBackOff), ourworkqueue.Config[orphanPodKey]{Name: "job_orphan_pod"` + c + `})`,
					1,
				},
			}
		},
	},
	{
		pkg:  "pkg/controller/disruption",
		name: "disruption",
		file: "disruption.go",
		edits: func(withClock bool) []edit {
			c := clockField(withClock)
			// client-go's rate-limiting queue over a delaying queue that
			// has the clock; ours is one queue.
			rateLimited := func(name string) edit {
				return edit{
					"workqueue.NewTypedRateLimitingQueueWithConfig(\n" +
						"\t\t\tworkqueue.DefaultTypedControllerRateLimiter[string](),\n" +
						"\t\t\tworkqueue.TypedRateLimitingQueueConfig[string]{\n" +
						"\t\t\t\tDelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{\n" +
						"\t\t\t\t\tLogger: &logger,\n" +
						"\t\t\t\t\tClock:  clock,\n" +
						"\t\t\t\t\tName:   \"" + name + "\",\n" +
						"\t\t\t\t}),\n" +
						"\t\t\t},\n" +
						"\t\t)",
					"ourworkqueue.NewRateLimitingQueueWithConfig(ourworkqueue.DefaultControllerRateLimiter[string](), ourworkqueue.Config[string]{Name: \"" + name + "\"" + c + "})",
					1,
				}
			}
			return []edit{
				imports(),
				rateLimited("disruption"),
				rateLimited("stale_pod_disruption"),
				{
					"workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{\n" +
						"\t\t\tLogger: &logger,\n" +
						"\t\t\tClock:  clock,\n" +
						"\t\t\tName:   \"disruption_recheck\",\n" +
						"\t\t})",
					"ourworkqueue.NewWithConfig(ourworkqueue.Config[string]{Name: \"disruption_recheck\"" + c + "})",
					1,
				},
			}
		},
	},
}

// variants are the three runs of each controller's tests.
var variants = []struct {
	name      string
	ours      bool
	withClock bool
}{
	{"client-go", false, false},
	{"ours with clock", true, true},
	{"ours without clock", true, false},
}

// TestKubeControllersOnOurQueue runs each controller's unit tests in the
// three variants and requires: every test passes on client-go's queue;
// ours with the clock passes every one of them too, and, for the Job
// controller, the fake clock fired at least one of our timers (so the run
// did step it through our queue; the disruption controller's tests arm one
// and never step past it). Without the clock it reports the counts: these tests pass there
// too, since what they wait for through the queue is either already due
// or short enough (their backoffs are shortened to milliseconds) to come
// in real time while they poll.
func TestKubeControllersOnOurQueue(t *testing.T) {
	if os.Getenv("KUBE_CONTROLLER_TESTS") != "1" {
		t.Skip("kubecontrollers: builds Kubernetes controller packages and runs their tests three times; set KUBE_CONTROLLER_TESTS=1")
	}
	g := newGoCmd(t)
	src := g.moduleDir(t, kubeModule)
	standin := filepath.Join(t.TempDir(), "kubernetes")
	mirror(t, src, standin, nil)
	for _, c := range controllers {
		mirror(t, src, standin, strings.Split(c.pkg, "/"))
	}
	goMod := readFile(t, filepath.Join(g.modRoot, "go.mod"))
	goMod = fmt.Appendf(goMod, "\nreplace %s => %s\n", kubeModule, standin)
	modFile := filepath.Join(t.TempDir(), "go.mod")
	writeFile(t, modFile, goMod)
	writeFile(t, strings.TrimSuffix(modFile, ".mod")+".sum", readFile(t, filepath.Join(g.modRoot, "go.sum")))

	for _, c := range controllers {
		t.Run(c.pkg, func(t *testing.T) {
			orig := readFile(t, filepath.Join(src, c.pkg, c.file))
			target := filepath.Join(standin, c.pkg, c.file)
			results := map[string]*tests{}
			for _, v := range variants {
				b := orig
				if v.ours {
					b = apply(t, c.file, orig, c.edits(v.withClock)...)
				}
				if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
				writeFile(t, target, b)
				extra := filepath.Join(standin, c.pkg, clockFileName)
				if err := os.Remove(extra); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
				if v.withClock {
					writeFile(t, extra, clockFile(c.name))
				}
				start := time.Now()
				out, _ := g.run(t, "test", "-trimpath", "-count=1", "-json", "-modfile="+modFile, kubeModule+"/"+c.pkg)
				r := parseJSON(out, kubeModule+"/"+c.pkg)
				results[v.name] = r
				t.Logf("%s, %s: %d pass, %d fail, %d skip of %d top-level tests (build and run %s)",
					c.pkg, v.name, r.count("pass"), r.count("fail"), r.count("skip"), len(r.action), time.Since(start).Round(time.Second))
				if fails := r.names("fail"); len(fails) > 0 {
					t.Logf("%s, %s: failed: %s", c.pkg, v.name, strings.Join(fails, ", "))
				}
				if len(r.action) == 0 {
					t.Fatalf("%s, %s: no test ran:\n%s", c.pkg, v.name, tail(out, 40))
				}
				if v.withClock {
					m := clockRE.FindSubmatch(r.output)
					if m == nil {
						t.Fatalf("%s, %s: no count of our clock's timers in the output", c.pkg, v.name)
					}
					t.Logf("%s, %s: our queues armed %s timers on the fake clock; %s fired", c.pkg, v.name, m[1], m[2])
					if c.steps && string(m[2]) == "0" {
						t.Errorf("%s: no timer of ours fired on the fake clock: the tests did not step it through our queues", c.pkg)
					}
				}
			}
			base, clocked := results["client-go"], results["ours with clock"]
			if n := base.count("fail"); n > 0 {
				t.Fatalf("%s: %d tests fail on client-go's own queue: the harness, not ours", c.pkg, n)
			}
			for name, a := range base.action {
				if a == "pass" && clocked.action[name] != "pass" {
					t.Errorf("%s: %s passes on client-go's queue but ends %q on ours with the clock", c.pkg, name, clocked.action[name])
				}
			}
		})
	}
}

// goCmd runs the go command of the toolchain running the test, in the
// integration module.
type goCmd struct {
	bin, modRoot string
}

func newGoCmd(t *testing.T) *goCmd {
	bin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("go"); err != nil {
			t.Fatalf("kubecontrollers: no go command: %v", err)
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return &goCmd{bin: bin, modRoot: root}
}

// run runs the go command; it stops a minute before the test's deadline so
// that a hung run's output is still reported.
func (g *goCmd) run(t *testing.T, args ...string) ([]byte, error) {
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-time.Minute))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, g.bin, args...)
	cmd.Dir = g.modRoot
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

func (g *goCmd) moduleDir(t *testing.T, module string) string {
	out, err := g.run(t, "list", "-m", "-f", "{{.Dir}}", module)
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Fatalf("kubecontrollers: no module directory for %s (go mod download %s): %v\n%s", module, module, err, out)
	}
	return dir
}

// apply applies edits to src in order; name is the file's, for messages.
func apply(t *testing.T, name string, src []byte, edits ...edit) []byte {
	t.Helper()
	s := string(src)
	for _, e := range edits {
		if n := strings.Count(s, e.old); n != e.n {
			t.Fatalf("kubecontrollers: upstream %s has %d of %q, want %d: redo the edit", name, n, e.old, e.n)
		}
		s = strings.ReplaceAll(s, e.old, e.new)
	}
	return []byte(s)
}

// mirror makes dst a copy of the folder src made of symbolic links, except
// along path (relative folder names), where it makes real folders whose
// entries are links too, and copies go.mod (a replaced module's go.mod must
// be a file of its folder). Called again with another path, it turns the
// links along that path into folders in the same way.
func mirror(t *testing.T, src, dst string, path []string) {
	t.Helper()
	if fi, err := os.Lstat(dst); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if err := os.Remove(dst); err != nil {
			t.Fatal(err)
		}
	}
	fresh := false
	if _, err := os.Stat(dst); os.IsNotExist(err) {
		fresh = true
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if fresh {
		entries, err := os.ReadDir(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
			if e.Name() == "go.mod" {
				writeFile(t, to, readFile(t, from))
				continue
			}
			if err := os.Symlink(from, to); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(path) > 0 {
		mirror(t, filepath.Join(src, path[0]), filepath.Join(dst, path[0]), path[1:])
	}
}

// tests is what go test -json reported for one package: each top-level
// test's last action (pass, fail or skip), and the package's output.
type tests struct {
	action map[string]string
	output []byte
}

func (r *tests) count(action string) int {
	n := 0
	for _, a := range r.action {
		if a == action {
			n++
		}
	}
	return n
}

func (r *tests) names(action string) []string {
	var names []string
	for name, a := range r.action {
		if a == action {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// parseJSON reads the top-level tests of pkg from go test -json output.
func parseJSON(out []byte, pkg string) *tests {
	r := &tests{action: map[string]string{}}
	for _, line := range bytes.Split(out, []byte("\n")) {
		var ev struct{ Action, Package, Test, Output string }
		if json.Unmarshal(line, &ev) != nil || ev.Package != pkg {
			continue
		}
		if ev.Action == "output" {
			r.output = append(r.output, ev.Output...)
		}
		if ev.Test == "" || strings.Contains(ev.Test, "/") {
			continue
		}
		switch ev.Action {
		case "pass", "fail", "skip":
			r.action[ev.Test] = ev.Action
		}
	}
	return r
}

func tail(b []byte, lines int) string {
	s := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(s) > lines {
		s = s[len(s)-lines:]
	}
	return strings.Join(s, "\n")
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
