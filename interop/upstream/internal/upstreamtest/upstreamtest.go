// Package upstreamtest is the machinery the upstream suites share: it
// reads another project's test files from the Go module cache (at the
// version interop/go.mod requires), applies our edits to them in code, puts
// them where the go command builds them (an overlay of a package of ours,
// or a stand-in module in a temporary folder), runs go test there, and
// reads the counts back. No upstream file is ever copied into the
// repository; the edited copies live in the test's temporary folder.
//
// Every function takes the test and fails it on an error: it is for the
// tests of ../../ only.
package upstreamtest

import (
	"bytes"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Go runs the go command of the toolchain running the test, in the
// interop module.
type Go struct {
	Bin     string // the go command
	ModRoot string // interop: where go runs
}

// NewGo finds the go command and the interop module from the test's
// package folder, which is depth folders below interop.
func NewGo(t testing.TB, depth int) *Go {
	t.Helper()
	g := &Go{Bin: goTool(t)}
	root, err := filepath.Abs(filepath.Join(strings.Repeat(".."+string(filepath.Separator), depth)))
	if err != nil {
		t.Fatalf("upstreamtest: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("upstreamtest: interop module root not found: %v", err)
	}
	g.ModRoot = root
	return g
}

// goTool is the go command of the toolchain running the test.
func goTool(t testing.TB) string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("upstreamtest: no go command: %v", err)
	}
	return p
}

// Run runs the go command with args and returns its combined output. It
// stops the command a minute before the test's own deadline, so that the
// output of a hung run is still reported.
func (g *Go) Run(t testing.TB, args ...string) ([]byte, error) {
	ctx := context.Background()
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline.Add(-time.Minute))
			defer cancel()
		}
	}
	cmd := exec.CommandContext(ctx, g.Bin, args...)
	cmd.Dir = g.ModRoot
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// Output is Run that fails the test if the command fails.
func (g *Go) Output(t testing.TB, args ...string) string {
	t.Helper()
	out, err := g.Run(t, args...)
	if err != nil {
		t.Fatalf("upstreamtest: go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ModuleDir is the module cache's folder of module, at the version the
// interop module requires.
func (g *Go) ModuleDir(t testing.TB, module string) string {
	t.Helper()
	dir := strings.TrimSpace(g.Output(t, "list", "-m", "-f", "{{.Dir}}", module))
	if dir == "" {
		t.Fatalf("upstreamtest: no module directory for %s (go mod download %s)", module, module)
	}
	return dir
}

// Edit replaces N occurrences of Old by New; a file with another number
// of them is not the one the edit was written against, and fails the test.
type Edit struct {
	Old, New string
	N        int
}

// Apply applies edits to src, in order; name is the file's, for messages.
func Apply(t testing.TB, name string, src []byte, edits ...Edit) []byte {
	t.Helper()
	s := string(src)
	for _, e := range edits {
		if n := strings.Count(s, e.Old); n != e.N {
			t.Fatalf("upstreamtest: upstream %s has %d of %q, want %d: redo the edit", name, n, e.Old, e.N)
		}
		s = strings.ReplaceAll(s, e.Old, e.New)
	}
	return []byte(s)
}

// DropFuncs removes the top-level functions named funcs (with their doc
// comments) from the Go file src, so that ours can take their place.
func DropFuncs(t testing.TB, name string, src []byte, funcs ...string) []byte {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
	if err != nil {
		t.Fatalf("upstreamtest: %v", err)
	}
	type span struct{ from, to int }
	var cut []span
	for _, fn := range funcs {
		found := false
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == fn {
				from := fd.Pos()
				if fd.Doc != nil {
					from = fd.Doc.Pos()
				}
				cut = append(cut, span{fset.Position(from).Offset, fset.Position(fd.End()).Offset})
				found = true
			}
		}
		if !found {
			t.Fatalf("upstreamtest: upstream %s has no func %s: redo the edit", name, fn)
		}
	}
	sort.Slice(cut, func(i, j int) bool { return cut[i].from > cut[j].from })
	out := append([]byte(nil), src...)
	for _, c := range cut {
		out = append(out[:c.from], out[c.to:]...)
	}
	return out
}

// TestFuncs returns the names of the test functions (func TestX(t
// *testing.T)) declared in the Go file src.
func TestFuncs(t testing.TB, name string, src []byte) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("upstreamtest: %v", err)
	}
	var names []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Recv != nil || !strings.HasPrefix(fd.Name.Name, "Test") || fd.Name.Name == "TestMain" {
			continue
		}
		names = append(names, fd.Name.Name)
	}
	return names
}

// Overlay writes files (a path in a folder of the interop module, to its
// contents) under dir, with the go command's overlay description of them,
// and returns the -overlay flag that builds them there. The go command
// takes an overlay of files in the main module, not of files in the module
// cache (Mirror is for those).
func Overlay(t testing.TB, dir string, files map[string][]byte) string {
	t.Helper()
	replace := map[string]string{}
	for path, b := range files {
		name := filepath.Join(dir, strings.ReplaceAll(strings.TrimPrefix(path, string(filepath.Separator)), string(filepath.Separator), "_"))
		WriteFile(t, name, b)
		replace[path] = name
	}
	b, err := json.Marshal(struct{ Replace map[string]string }{replace})
	if err != nil {
		t.Fatalf("upstreamtest: %v", err)
	}
	name := filepath.Join(dir, "overlay.json")
	WriteFile(t, name, b)
	return "-overlay=" + name
}

// Mirror makes dst a copy of the folder src made of symbolic links,
// except along path (relative folder names), where it makes real folders,
// whose other entries are links too, and copies go.mod; the last folder of
// path is left empty.
func Mirror(t testing.TB, src, dst string, path []string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatalf("upstreamtest: %v", err)
	}
	if len(path) == 0 {
		return
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatalf("upstreamtest: %v", err)
	}
	for _, e := range entries {
		switch e.Name() {
		case path[0]:
			Mirror(t, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), path[1:])
		case "go.mod":
			// The stand-in's go.mod is a real file, like the package's.
			CopyFile(t, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()))
		default:
			if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				t.Fatalf("upstreamtest: %v", err)
			}
		}
	}
}

// Tests is what go test -json reported for one package: each test's
// last action (pass, fail or skip; subtests by their full name), and the
// package's output.
type Tests struct {
	Action map[string]string
	Output []byte
}

// Count returns how many tests ended with action.
func (r *Tests) Count(action string) int {
	n := 0
	for _, a := range r.Action {
		if a == action {
			n++
		}
	}
	return n
}

// Names returns the tests that ended with action, sorted.
func (r *Tests) Names(action string) []string {
	var names []string
	for name, a := range r.Action {
		if a == action {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// ParseJSON reads go test -json output into one Tests per package. Lines
// that are not events (build errors) are kept as the output of package "".
func ParseJSON(out []byte) map[string]*Tests {
	pkgs := map[string]*Tests{}
	get := func(pkg string) *Tests {
		if pkgs[pkg] == nil {
			pkgs[pkg] = &Tests{Action: map[string]string{}}
		}
		return pkgs[pkg]
	}
	for _, line := range bytes.Split(out, []byte("\n")) {
		var ev struct{ Action, Package, Test, Output string }
		if len(line) == 0 {
			continue
		}
		if json.Unmarshal(line, &ev) != nil {
			r := get("")
			r.Output = append(append(r.Output, line...), '\n')
			continue
		}
		r := get(ev.Package)
		switch {
		case ev.Action == "output":
			r.Output = append(r.Output, ev.Output...)
		case ev.Test != "" && (ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip"):
			r.Action[ev.Test] = ev.Action
		}
	}
	return pkgs
}

// Ginkgo is Ginkgo's summary of one suite. Flaked counts specs that
// passed on a second attempt (-ginkgo.flake-attempts); they are among
// Passed.
type Ginkgo struct {
	Ran, Total, Passed, Failed, Flaked, Pending, Skipped int
}

var ginkgoRE = regexp.MustCompile(`Ran (\d+) of (\d+) Specs in [0-9.]+ seconds\n(?:SUCCESS|FAIL)! -- (\d+) Passed \| (\d+) Failed \| (?:(\d+) Flaked \| )?(\d+) Pending \| (\d+) Skipped`)

// ansiRE matches the terminal colour codes Ginkgo writes unless told not to.
var ansiRE = regexp.MustCompile("\x1b\\[[0-9;]*m")

// ParseGinkgo finds Ginkgo's summary in a suite's output, coloured or not.
func ParseGinkgo(out []byte) (Ginkgo, bool) {
	m := ginkgoRE.FindSubmatch(ansiRE.ReplaceAll(out, nil))
	if m == nil {
		return Ginkgo{}, false
	}
	var n [7]int
	for i := range n {
		n[i], _ = strconv.Atoi(string(m[i+1])) // an absent Flaked is 0
	}
	return Ginkgo{Ran: n[0], Total: n[1], Passed: n[2], Failed: n[3], Flaked: n[4], Pending: n[5], Skipped: n[6]}, true
}

// Tail is the last lines of b.
func Tail(b []byte, lines int) string {
	s := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(s) > lines {
		s = s[len(s)-lines:]
	}
	return strings.Join(s, "\n")
}

// ReadFile reads a file, failing the test on an error.
func ReadFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatalf("upstreamtest: %v", err)
	}
	return b
}

// CopyFile copies src to dst.
func CopyFile(t testing.TB, src, dst string) {
	t.Helper()
	WriteFile(t, dst, ReadFile(t, src))
}

// WriteFile writes b to name, making its folder.
func WriteFile(t testing.TB, name string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatalf("upstreamtest: %v", err)
	}
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatalf("upstreamtest: %v", err)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
