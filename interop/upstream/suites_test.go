// Package upstream runs client-go's workqueue tests and controller-runtime's
// priority queue tests against our queues, from the module cache. It has
// only this test file: TestUpstreamQueueSuites reads the upstream test
// files at the versions interop/go.mod requires, applies our edits (below,
// each with its reason), adds them to our alias packages
// (clientgo/workqueue, controllerruntime/priorityqueue) with go test's
// -overlay, and runs those packages' tests there, on our queues and on
// upstream's own, checking the counts. clientgo/README.md and
// controllerruntime/README.md say what the aliases map and what the
// results are.
package upstream

import (
	"bytes"
	"encoding/json"
	"go/build"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-coalesce/workqueue/interop/upstream/internal/upstreamtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A suite is one upstream folder whose test files run in one package of ours.
type suite struct {
	pkg    string // our package, relative to interop
	module string // the upstream module
	folder string // the upstream folder in it
	files  []upstreamFile
	// skipTests are upstream test functions not run (go test -skip), on
	// either queue, with the reason.
	skipTests map[string]string
	// skipSpecs are upstream Ginkgo specs skipped, by leaf text, for the
	// backend named by the key, with the reason. The package's harness
	// skips them (it reads them from $UPSTREAM_SKIP_SPECS).
	skipSpecs map[string]map[string]string
}

// An upstreamFile is a test file of the upstream folder, with our edits.
type upstreamFile struct {
	name string
	edit func(t *testing.T, name string, src []byte) []byte // nil: as it is
}

// A backend is one run of every suite: the build tags that pick the
// queues behind the alias packages.
type backend struct {
	name string
	tags string
}

var (
	ours   = backend{"ours", "upstream"}
	theirs = backend{"upstream", "upstream,clientgo,crupstream"}
)

const interopPath = "github.com/go-coalesce/workqueue/interop/"

var suites = []suite{
	{
		// client-go's workqueue tests on the core (clientgo/README.md).
		pkg:    "upstream/clientgo/workqueue",
		module: "k8s.io/client-go",
		folder: "util/workqueue",
		files: []upstreamFile{
			{"queue_test.go", func(t *testing.T, name string, src []byte) []byte {
				// package workqueue_test: client-go's package becomes the alias.
				return upstreamtest.Apply(t, name, src, upstreamtest.Edit{
					Old: `"k8s.io/client-go/util/workqueue"`, New: `"` + interopPath + `upstream/clientgo/workqueue"`, N: 1,
				})
			}},
			{"delaying_queue_test.go", editDelayingQueueTest},
			{"default_rate_limiters_test.go", nil},
		},
	},
	{
		// controller-runtime's priority queue tests on crpriority
		// (controllerruntime/README.md).
		pkg:    "upstream/controllerruntime/priorityqueue",
		module: "sigs.k8s.io/controller-runtime",
		folder: "pkg/controller/priorityqueue",
		files: []upstreamFile{
			{"priorityqueue_test.go", func(t *testing.T, name string, src []byte) []byte {
				return upstreamtest.Apply(t, name, src,
					// newQueueWithTimeForwarder's function stepped the
					// queue's clock through the channel the test put in
					// place of its tick; the tests run in a synctest
					// bubble, whose clock both queues read, and sleeping
					// moves it.
					upstreamtest.Edit{Old: "tick <- now", New: "time.Sleep(d)", N: 1},
					// The check that the queue asked its tick for one
					// second: an internal timer that neither queue in the
					// wrapper calls.
					upstreamtest.Edit{Old: "g.Expect(tickSetup).To(BeClosed())", New: "_ = tickSetup", N: 1},
				)
			}},
			{"metrics_test.go", func(t *testing.T, name string, src []byte) []byte {
				// controller-runtime's internal package, which no other
				// module may import, becomes ours of the same two names.
				return upstreamtest.Apply(t, name, src, upstreamtest.Edit{
					Old: `"sigs.k8s.io/controller-runtime/pkg/internal/metrics"`,
					New: `"` + interopPath + `upstream/controllerruntime/internal/metrics"`, N: 1,
				})
			}},
			{"priorityqueue_suite_test.go", nil},
		},
		skipTests: map[string]string{
			"TestItemCloneCopiesAllFields": "tests controller-runtime's internal item.clone, which neither queue " +
				"uses here (the harness's item type only lets the file compile)",
			"TestItemCloneDoesNotShareMemoryWithOriginal": "likewise",
		},
		skipSpecs: map[string]map[string]string{
			ours.name: {
				"returns an item as soon as its unlocked": "a key added again while it is processing goes to the back of its " +
					"priority at Done in crpriority; controller-runtime orders it by when it was added again " +
					"(interop/README.md, TestDifferenceReAddOrder in interop/crpriority)",
			},
		},
	},
}

// editDelayingQueueTest lets client-go's delaying tests run in a
// testing/synctest bubble (clientgo/README.md, "Time"): each TestX becomes
// testX, which harness_test.go runs as TestX in a bubble; the fake clock
// becomes the bubble's clock; the two helpers that poll (one of them reads
// client-go's unexported delayingType) are dropped for harness_test.go's,
// which wait for the bubble; and the benchmark, which steps a fake clock
// and so needs a bubble that takes a *testing.T only, is dropped.
func editDelayingQueueTest(t *testing.T, name string, src []byte) []byte {
	src = upstreamtest.DropFuncs(t, name, src, "waitForAdded", "waitForWaitingQueueToFill", "BenchmarkDelayingQueue_AddAfter")
	edits := []upstreamtest.Edit{
		{Old: "testingclock.NewFakeClock(time.Now())", New: "newBubbleClock(t)", N: 4},
		{Old: "\ttestingclock \"k8s.io/utils/clock/testing\"\n", New: "", N: 1},
		{Old: "\t\"math/rand\"\n", New: "", N: 1}, // the benchmark's
	}
	for _, test := range bubbleTests {
		edits = append(edits, upstreamtest.Edit{Old: "func " + test + "(t *testing.T)", New: "func t" + test[1:] + "(t *testing.T)", N: 1})
	}
	return upstreamtest.Apply(t, name, src, edits...)
}

// bubbleTests are the delaying tests that harness_test.go runs in a bubble.
var bubbleTests = []string{"TestSimpleQueue", "TestDeduping", "TestAddTwoFireEarly", "TestCopyShifting"}

// TestUpstreamQueueSuites runs the suites on controller-runtime's and
// client-go's own queues, then on ours, and requires every upstream test
// and spec to pass on each but those skipped above, with our own tests of
// the alias packages: the counts are checked against the upstream files
// themselves (their Test functions and their specs), so a test or spec
// that an edit drops, or that stops running, fails it.
//
// UPSTREAM_NOSKIP=1 skips nothing and requires the skipped specs to fail
// on ours (the difference they stand for). UPSTREAM_DIR=dir keeps the
// edited files and the overlay in dir, to read or rerun by hand (the log
// gives the command).
func TestUpstreamQueueSuites(t *testing.T) {
	g := upstreamtest.NewGo(t, 1)
	dir := t.TempDir()
	if d := os.Getenv("UPSTREAM_DIR"); d != "" {
		dir = d
	}
	noSkip := os.Getenv("UPSTREAM_NOSKIP") != ""

	files := map[string][]byte{}
	upstreamTests := map[string][]string{} // by our package
	specs := map[string]int{}              // by our package
	ginkgoTests := map[string][]string{}   // the Test functions that call RunSpecs, by our package
	for _, s := range suites {
		src := filepath.Join(g.ModuleDir(t, s.module), filepath.FromSlash(s.folder))
		pkgDir := filepath.Join(g.ModRoot, filepath.FromSlash(s.pkg))
		for _, f := range s.files {
			if _, err := os.Stat(filepath.Join(pkgDir, f.name)); err == nil {
				t.Fatalf("upstream: %s has a file %s of its own: the upstream one is added at test time", s.pkg, f.name)
			}
			b := upstreamtest.ReadFile(t, filepath.Join(src, f.name))
			upstreamTests[s.pkg] = append(upstreamTests[s.pkg], upstreamtest.TestFuncs(t, f.name, b)...)
			specs[s.pkg] += itCount(b)
			if bytes.Contains(b, []byte("RunSpecs(")) {
				ginkgoTests[s.pkg] = append(ginkgoTests[s.pkg], upstreamtest.TestFuncs(t, f.name, b)...)
			}
			if f.edit != nil {
				b = f.edit(t, f.name, b)
			}
			files[filepath.Join(pkgDir, f.name)] = b
		}
	}
	overlay := upstreamtest.Overlay(t, dir, files)

	for _, b := range []backend{theirs, ours} {
		skipSpecs := map[string]string{}
		var skipTests []string
		for _, s := range suites {
			for name := range s.skipTests {
				skipTests = append(skipTests, regexp.QuoteMeta(name))
			}
			for name, reason := range s.skipSpecs[b.name] {
				skipSpecs[name] = reason
			}
		}
		sort.Strings(skipTests)
		if noSkip {
			skipTests, skipSpecs = nil, nil
		}
		specsEnv, err := json.Marshal(skipSpecs)
		if err != nil {
			t.Fatalf("upstream: %v", err)
		}
		args := []string{"test", "-race", "-count=1", "-json", "-vet=all", "-tags=" + b.tags, overlay}
		if len(skipTests) > 0 {
			args = append(args, "-skip=^("+strings.Join(skipTests, "|")+")$")
		}
		for _, s := range suites {
			args = append(args, "./"+s.pkg)
		}
		t.Setenv("UPSTREAM_SKIP_SPECS", string(specsEnv))
		start := time.Now()
		out, runErr := g.Run(t, args...)
		t.Logf("%s: UPSTREAM_SKIP_SPECS='%s' go %s: %v", b.name, specsEnv, strings.Join(args, " "), time.Since(start).Round(time.Second))
		results := upstreamtest.ParseJSON(out)

		wantErr := false
		for _, s := range suites {
			r := results[interopPath+s.pkg]
			if r == nil {
				t.Fatalf("upstream: %s: no tests ran in %s (%v); output ends:\n%s", b.name, s.pkg, runErr, upstreamtest.Tail(out, 60))
			}
			// Every upstream test function not skipped, and ours that this
			// backend builds, pass; nothing else runs (subtests apart).
			// Without skips, the specs skipped on this backend fail, and
			// with them the Test function that runs the suite.
			var want, wantFail []string
			for _, name := range upstreamTests[s.pkg] {
				if _, skip := s.skipTests[name]; !skip || noSkip {
					want = append(want, name)
				}
			}
			want = append(want, ownTests(t, g, s.pkg, b.tags)...)
			slices.Sort(want)
			want = slices.Compact(want) // the bubble wrappers have upstream's names
			nSpecs, skipped := specs[s.pkg], len(s.skipSpecs[b.name])
			wantGinkgo := upstreamtest.Ginkgo{Ran: nSpecs - skipped, Total: nSpecs, Passed: nSpecs - skipped, Skipped: skipped}
			if noSkip && skipped > 0 {
				wantGinkgo = upstreamtest.Ginkgo{Ran: nSpecs, Total: nSpecs, Passed: nSpecs - skipped, Failed: skipped}
				wantFail = ginkgoTests[s.pkg]
				want = slices.DeleteFunc(want, func(n string) bool { return slices.Contains(wantFail, n) })
				wantErr = true
			}
			if gk, ok := upstreamtest.ParseGinkgo(r.Output); ok || nSpecs > 0 {
				t.Logf("%s: %s: Ginkgo: %d passed, %d failed, %d pending, %d skipped of %d specs",
					b.name, s.pkg, gk.Passed, gk.Failed, gk.Pending, gk.Skipped, gk.Total)
				if gk != wantGinkgo {
					t.Errorf("upstream: %s: %s: Ginkgo counts %+v, want %+v (the upstream files have %d specs)",
						b.name, s.pkg, gk, wantGinkgo, nSpecs)
				}
			}
			got, failed := topLevel(r.Names("pass")), r.Names("fail")
			t.Logf("%s: %s: %d passed (with subtests), %d failed, %d skipped",
				b.name, s.pkg, r.Count("pass"), r.Count("fail"), r.Count("skip"))
			if !slices.Equal(got, want) || !slices.Equal(failed, wantFail) || r.Count("skip") > 0 {
				t.Errorf("upstream: %s: %s: passed %q, failed %q, skipped %q; want passed %q, failed %q; output ends:\n%s",
					b.name, s.pkg, got, failed, r.Names("skip"), want, wantFail, upstreamtest.Tail(r.Output, 60))
			}
		}
		if (runErr != nil) != wantErr {
			t.Errorf("upstream: %s: go test: %v; output ends:\n%s", b.name, runErr, upstreamtest.Tail(out, 60))
		}
	}
}

// ownTests are the test functions of our own files in pkg that tags build.
func ownTests(t *testing.T, g *upstreamtest.Go, pkg, tags string) []string {
	dir := filepath.Join(g.ModRoot, filepath.FromSlash(pkg))
	ctx := build.Default
	ctx.BuildTags = strings.Split(tags, ",")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("upstream: %v", err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		if ok, err := ctx.MatchFile(dir, e.Name()); err != nil || !ok {
			continue
		}
		names = append(names, upstreamtest.TestFuncs(t, e.Name(), upstreamtest.ReadFile(t, filepath.Join(dir, e.Name())))...)
	}
	return names
}

// topLevel drops subtests (a/b) from sorted names.
func topLevel(names []string) []string {
	return slices.DeleteFunc(names, func(n string) bool { return strings.Contains(n, "/") })
}

// itCount is the number of Ginkgo specs (It) a file declares.
func itCount(src []byte) int {
	return len(itRE.FindAll(src, -1))
}

var itRE = regexp.MustCompile(`\bIt\(`)
