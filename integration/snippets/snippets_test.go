// Package snippets_test compiles the Go code of the repository's
// documentation, so that a snippet a reader copies builds as printed.
//
// What is compiled (found by walking the repository, so that a new module,
// README or package is covered without a list to update):
//
//   - every ```go fenced block of every Markdown file;
//   - every code block (the indented lines) of every package doc comment
//     that is Go. A doc comment's blocks carry no language, so a block that
//     does not parse as Go and is a shell command line (its lines start
//     with go, cd, kubectl, ... or #) or a table (lines of three or more
//     columns apart by two spaces or more) is taken as such and skipped;
//     any other block is Go and must compile.
//
// Example functions are not extracted: they are test code, compiled and run
// by each module's own go test.
//
// How a block is compiled. Each block becomes a package of its own in a
// temporary module, built with a go.work that uses every module of the
// repository (found by their go.mod), so the build sees the repository's
// code and the dependency versions its modules already require: nothing is
// fetched that the modules' own builds do not fetch. Then:
//
//   - import declarations anywhere in the block (lines starting with
//     import) are moved to the top of the file;
//   - a block that starts with a package clause, or whose remaining lines
//     are declarations (func, type, var, const), is compiled as a file;
//     a block of imports alone checks that each path resolves;
//   - any other block is a list of statements, compiled as the body of a
//     function; a block that is a single expression (a composite literal)
//     is compiled as `_ = expr`. The function returns an error if the block
//     has a `return` with a value.
//
// Names a block uses without declaring them are supplied, so that a snippet
// shows only what matters:
//
//   - packages, by the import names in importNames. This is the one naming
//     convention of every snippet: ours is always workqueue, client-go's
//     util/workqueue always clientworkqueue (as in the repository's own
//     code), the Prometheus and OpenTelemetry adapters wqprom and wqotel. A
//     block may import explicitly (so a reader sees where a package comes
//     from), but a path of importNames must then have its name there, and a
//     name there cannot stand for another path. cache is not in importNames
//     on purpose: client-go's tools/cache and controller-runtime's pkg/cache
//     both go by it, so a block that uses it imports it.
//   - variables, by givens: ctx, q, client, podName and the others, each
//     with the type a snippet expects, as parameters of the function.
//
// A block that is deliberately not compilable (rare: prefer making it a
// whole unit) is marked as a fragment, with a reason, and skipped: in
// Markdown by an HTML comment on the line before the fence,
//
//	<!-- fragment: why it cannot compile -->
//
// and in a doc comment by a first line `// fragment: why`.
//
// Each block is compiled under //line directives that name its Markdown or
// Go file and line, so a failure names the file:line of the snippet in the
// repository, not of the generated code.
package snippets_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
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

// rootModule is the module path of the repository's root.
const rootModule = "github.com/go-coalesce/workqueue"

// importNames is the snippets' import naming convention: the package a name
// stands for when a block uses it without importing it.
var importNames = map[string]string{
	// This repository.
	"workqueue":   rootModule,
	"debug":       rootModule + "/debug",
	"wqprom":      rootModule + "/prometheus",
	"wqotel":      rootModule + "/otel",
	"sharding":    rootModule + "/sharding",
	"ringpage":    rootModule + "/sharding/ringpage",
	"crpriority":  rootModule + "/interop/crpriority",
	"crsharding":  rootModule + "/interop/crsharding",
	"hostmetrics": rootModule + "/interop/hostmetrics",
	"crmetrics":   rootModule + "/interop/hostmetrics/crmetrics",
	"kubemetrics": rootModule + "/interop/hostmetrics/kubemetrics",

	// client-go, apimachinery and the API types.
	"clientworkqueue": "k8s.io/client-go/util/workqueue",
	"kubernetes":      "k8s.io/client-go/kubernetes",
	"rest":            "k8s.io/client-go/rest",
	"appslisters":     "k8s.io/client-go/listers/apps/v1",
	"fields":          "k8s.io/apimachinery/pkg/fields",
	"apierrors":       "k8s.io/apimachinery/pkg/api/errors",
	"metav1":          "k8s.io/apimachinery/pkg/apis/meta/v1",
	"appsv1":          "k8s.io/api/apps/v1",
	"corev1":          "k8s.io/api/core/v1",

	// controller-runtime.
	"ctrl":       "sigs.k8s.io/controller-runtime",
	"controller": "sigs.k8s.io/controller-runtime/pkg/controller",
	"reconcile":  "sigs.k8s.io/controller-runtime/pkg/reconcile",

	// Metrics.
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"otel":       "go.opentelemetry.io/otel",

	// The standard library.
	"context": "context",
	"errors":  "errors",
	"fmt":     "fmt",
	"http":    "net/http",
	"os":      "os",
	"slog":    "log/slog",
	"sync":    "sync",
	"time":    "time",
}

// givens are the variables a snippet may use without declaring them, with
// their types (written with importNames' names). A block that declares one
// itself uses its own.
var givens = map[string]string{
	"ctx":                 "context.Context",
	"drainCtx":            "context.Context",
	"cancelWorkers":       "context.CancelFunc",
	"q":                   "*workqueue.RateLimitingQueue[string]",
	"queue":               "*workqueue.RateLimitingQueue[string]",
	"rl":                  "workqueue.RateLimiter[string]",
	"syncDeployment":      "func(ctx context.Context, key string) error",
	"reconcileDeployment": "func(ctx context.Context, d *appsv1.Deployment) error",
	"workers":             "int",
	"wg":                  "*sync.WaitGroup",
	"mux":                 "*http.ServeMux",
	"client":              "kubernetes.Interface",
	"podName":             "string",
	"replica":             "*sharding.Replica",
	"restConfig":          "*rest.Config",
	"mgr":                 "ctrl.Manager",
	"reconciler":          "reconcile.Reconciler",
}

// A snippet is one code block of the documentation.
type snippet struct {
	file     string // slash-separated, relative to the repository's root
	line     int    // line of the block's first code line in file
	code     string // the block, its indentation in the file removed
	fragment string // why it is not compiled, if it is marked as a fragment
}

func (s snippet) String() string { return fmt.Sprintf("%s:%d", s.file, s.line) }

// TestSnippets compiles every Go block of the documentation (see the
// package doc) and fails with each block that does not build or vet,
// named by file:line.
func TestSnippets(t *testing.T) {
	root := repoRoot(t)
	snippets := collect(t, root)
	if len(snippets) == 0 {
		t.Fatal("snippets: no Go block found in the repository's docs")
	}
	var compiled []snippet
	for _, s := range snippets {
		if s.fragment != "" {
			t.Logf("%s: fragment, not compiled: %s", s, s.fragment)
			continue
		}
		compiled = append(compiled, s)
	}
	t.Logf("%d Go blocks, %d compiled, %d fragments", len(snippets), len(compiled), len(snippets)-len(compiled))
	if failures := build(t, root, modules(t, root), compiled); len(failures) > 0 {
		t.Errorf("snippets: %d of %d Go blocks of the docs do not compile (conventions at the top of integration/snippets/snippets_test.go):\n\n%s",
			len(failures), len(compiled), strings.Join(failures, "\n\n"))
	}
}

// repoRoot is the directory of the root module's go.mod, above this test's
// directory.
func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(b) == rootModule {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("snippets: no go.mod of %s above the test's directory", rootModule)
		}
		dir = parent
	}
}

func modulePath(gomod []byte) string {
	for _, l := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// skipDir reports whether walking the repository skips dir: hidden
// directories (.git, .ci's own tools), testdata and vendor.
func skipDir(root, dir string, d fs.DirEntry) bool {
	name := d.Name()
	return dir != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor")
}

// modules are the directories of the repository's go.mod files.
func modules(t *testing.T, root string) []string {
	var mods []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDir(root, p, d) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				mods = append(mods, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return mods
}

// collect finds every Go block of the repository's Markdown files and
// package doc comments, in file order.
func collect(t *testing.T, root string) []snippet {
	var out []snippet
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDir(root, p, d) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case strings.HasSuffix(p, ".md"):
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out = append(out, markdownBlocks(rel, string(b))...)
		case strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go"):
			ss, err := docBlocks(rel, p)
			if err != nil {
				return err
			}
			out = append(out, ss...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	fenceRE    = regexp.MustCompile("^( {0,3})(```+|~~~+)[ \t]*([^ \t`]*)")
	fragmentRE = regexp.MustCompile(`^\s*<!--\s*fragment:\s*(.*?)\s*-->\s*$`)
)

// markdownBlocks returns the ```go blocks of a Markdown file. A block whose
// fence follows the line <!-- fragment: reason --> is a fragment.
func markdownBlocks(file, text string) []snippet {
	var out []snippet
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, fence, lang := m[1], m[2], m[3]
		start := i + 1
		j := start
		for j < len(lines) && !(strings.HasPrefix(strings.TrimLeft(lines[j], " "), fence) &&
			strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(lines[j]), fence[:1])) == "") {
			j++
		}
		if lang == "go" {
			var code []string
			for _, l := range lines[start:j] {
				code = append(code, strings.TrimPrefix(l, indent))
			}
			s := snippet{file: file, line: start + 1, code: strings.Join(code, "\n")}
			if i > 0 {
				if f := fragmentRE.FindStringSubmatch(lines[i-1]); f != nil {
					s.fragment = f[1]
				}
			}
			out = append(out, s)
		}
		i = j
	}
	return out
}

// docBlocks returns the Go code blocks of a file's package doc comment. It
// reads the comment's lines as gofmt writes them (a code block's lines
// start with "//\t") and checks the count against go/doc/comment's parse,
// so that a block is never missed silently.
func docBlocks(rel, path string) ([]snippet, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil || f.Doc == nil {
		return nil, nil // not a Go file the build reads, or no package doc
	}
	var blocks []snippet
	var cur *snippet
	var blank []string // blank comment lines inside a block, kept if it goes on
	for _, c := range f.Doc.List {
		text := c.Text
		if !strings.HasPrefix(text, "//") {
			return nil, fmt.Errorf("snippets: %s: a /* */ package doc is not read; write it with //", rel)
		}
		text = strings.TrimPrefix(text, "//")
		switch {
		case strings.HasPrefix(text, "\t"):
			if cur == nil {
				blocks = append(blocks, snippet{file: rel, line: fset.Position(c.Pos()).Line})
				cur = &blocks[len(blocks)-1]
			} else {
				for _, b := range blank {
					cur.code += b + "\n"
				}
			}
			blank = nil
			cur.code += strings.TrimPrefix(text, "\t") + "\n"
		case strings.TrimSpace(text) == "" && cur != nil:
			blank = append(blank, "")
		default:
			cur, blank = nil, nil
		}
	}
	var p comment.Parser
	n := 0
	for _, b := range p.Parse(f.Doc.Text()).Content {
		if _, ok := b.(*comment.Code); ok {
			n++
		}
	}
	if n != len(blocks) {
		return nil, fmt.Errorf("snippets: %s: the package doc has %d code blocks, %d of them indented with a tab (run gofmt)", rel, n, len(blocks))
	}
	var out []snippet
	for _, b := range blocks {
		first, _, _ := strings.Cut(strings.TrimLeft(b.code, "\n"), "\n")
		if r, ok := strings.CutPrefix(strings.TrimSpace(first), "// fragment:"); ok {
			b.fragment = strings.TrimSpace(r)
		}
		if b.fragment == "" && !parsesAsGo(b.code) && (isShell(b.code) || isTable(b.code)) {
			continue // not Go
		}
		out = append(out, b)
	}
	return out, nil
}

// shellCommands start the lines of a doc comment's shell block.
var shellCommands = []string{"go", "cd", "kubectl", "bash", "git", "curl", "make"}

// isShell reports whether every line of a block is a shell command line or
// a shell comment.
func isShell(code string) bool {
	n := 0
	for _, l := range strings.Split(code, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		first, _, _ := strings.Cut(l, " ")
		if !slices.Contains(shellCommands, first) {
			return false
		}
		n++
	}
	return n > 0
}

// generatedRE matches the generated file of a block in the go command's
// messages, as it names it: relative to the temporary module.
var generatedRE = regexp.MustCompile(`^(?:\(generated\) )?(s\d{3})/snippet\.go`)

var columnGap = regexp.MustCompile(`\s{2,}`)

// isTable reports whether a block is a table: two or more lines, each of
// three or more columns apart by two spaces or more.
func isTable(code string) bool {
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(code), "\n") {
		if len(columnGap.Split(strings.TrimSpace(l), -1)) < 3 {
			return false
		}
		n++
	}
	return n >= 2
}

// parsesAsGo reports whether a block parses as a Go file or as statements.
func parsesAsGo(code string) bool {
	u, err := newUnit(snippet{code: code})
	return err == nil && u.parseErr == nil
}

// importSpec is an import of a block, or one added for a name it uses.
type importSpec struct {
	name, path string
	line       int // in the snippet's file; 0 for an import added by name
}

// effectiveName is the name an import binds: its explicit name, or the
// last element of its path (the package's name for every path a snippet
// imports without a name; "k8s.io/api/core/v1" binds v1, which
// checkImports refuses for want of corev1).
func (i importSpec) effectiveName() string {
	if i.name != "" {
		return i.name
	}
	return path.Base(i.path)
}

// A unit is a snippet ready to compile.
type unit struct {
	s        snippet
	imports  []importSpec
	body     []string // the block's lines, its imports blanked out
	file     bool     // a file, not statements
	parseErr error    // the block's syntax error, reported by the compiler
}

var (
	importLineRE  = regexp.MustCompile(`^import\s+(?:([\w.]+)\s+)?("[^"]*")\s*(//.*)?$`)
	importGroupRE = regexp.MustCompile(`^import\s*\(\s*$`)
	importSpecRE  = regexp.MustCompile(`^\s*(?:([\w.]+)\s+)?("[^"]*")\s*(//.*)?$`)
)

// newUnit takes the imports out of a block and parses what is left, as a
// file or as statements. An error is a broken convention, not a syntax
// error (which the compiler reports with the block's line).
func newUnit(s snippet) (*unit, error) {
	u := &unit{s: s}
	lines := strings.Split(s.code, "\n")
	if strings.HasPrefix(strings.TrimSpace(firstLine(s.code)), "package ") {
		u.file = true
		u.body = lines
		_, u.parseErr = parser.ParseFile(token.NewFileSet(), "", s.code, parser.SkipObjectResolution)
		return u, nil
	}
	inGroup := false
	for i, l := range lines {
		var m []string
		switch {
		case inGroup && strings.TrimSpace(l) == ")":
			inGroup = false
		case inGroup:
			if strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "//") {
				break
			}
			if m = importSpecRE.FindStringSubmatch(l); m == nil {
				return nil, fmt.Errorf("%s:%d: cannot read this import", s.file, s.line+i)
			}
		case importGroupRE.MatchString(l):
			inGroup = true
		default:
			if m = importLineRE.FindStringSubmatch(l); m == nil {
				continue
			}
		}
		if m != nil {
			p, err := strconv.Unquote(m[2])
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %v", s.file, s.line+i, err)
			}
			u.imports = append(u.imports, importSpec{name: m[1], path: p, line: s.line + i})
		}
		lines[i] = ""
	}
	u.body = lines
	rest := strings.Join(lines, "\n")
	if _, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+rest, parser.SkipObjectResolution); err == nil {
		u.file = true
		return u, nil
	}
	_, u.parseErr = parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _() {\n"+rest+"\n}\n", parser.SkipObjectResolution)
	return u, nil
}

func firstLine(code string) string {
	for _, l := range strings.Split(code, "\n") {
		if strings.TrimSpace(l) != "" {
			return l
		}
	}
	return ""
}

// checkImports enforces importNames on a block's own imports.
func (u *unit) checkImports() error {
	for _, im := range u.imports {
		name := im.effectiveName()
		if name == "_" || name == "." {
			continue
		}
		for n, p := range importNames {
			if p == im.path && n != name {
				return fmt.Errorf("%s:%d: imports %q as %s; the snippets name it %s", u.s.file, im.line, im.path, name, n)
			}
			if n == name && p != im.path {
				return fmt.Errorf("%s:%d: imports %q as %s; in the snippets %s is %q", u.s.file, im.line, im.path, name, n, p)
			}
		}
	}
	return nil
}

// render writes the unit as a Go file of package pkg, with //line
// directives that name the block's file (under root) and lines.
func (u *unit) render(root, pkg string) (string, error) {
	if err := u.checkImports(); err != nil {
		return "", err
	}
	abs := filepath.Join(root, filepath.FromSlash(u.s.file))
	var b strings.Builder
	if u.file && strings.HasPrefix(strings.TrimSpace(firstLine(u.s.code)), "package ") {
		fmt.Fprintf(&b, "//line %s:%d\n%s\n", abs, u.s.line, strings.Join(u.body, "\n"))
		return b.String(), nil
	}
	body := strings.Join(u.body, "\n")
	fmt.Fprintf(&b, "package %s\n\n", pkg)

	if u.file {
		f, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+body, 0)
		if err != nil {
			return "", err
		}
		imports := slices.Clone(u.imports)
		if len(f.Decls) == 0 {
			// Imports alone: each must resolve; nothing uses them.
			for i := range imports {
				imports[i].name = "_"
			}
		}
		imports = append(imports, u.implicit(f, nil)...)
		writeImports(&b, abs, imports)
		fmt.Fprintf(&b, "//line %s:%d\n%s\n", abs, u.s.line, body)
		return b.String(), nil
	}

	// Statements: the body of a function whose parameters are the givens
	// the block uses.
	src := "package p\nfunc _() {\n" + body + "\n}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, 0)
	if err != nil {
		// A syntax error: let the compiler report it at the block's line.
		writeImports(&b, abs, u.imports)
		fmt.Fprintf(&b, "func _() {\n//line %s:%d\n%s\n}\n", abs, u.s.line, body)
		return b.String(), nil
	}
	fn := f.Decls[0].(*ast.FuncDecl)
	var params []string
	imports := append(slices.Clone(u.imports), u.implicit(f, &params)...)
	results := ""
	if returnsValue(fn.Body) {
		results = " error"
	}
	if len(fn.Body.List) == 1 {
		if es, ok := fn.Body.List[0].(*ast.ExprStmt); ok {
			if _, call := ast.Unparen(es.X).(*ast.CallExpr); !call {
				// A single value, such as a composite literal.
				i := slices.IndexFunc(u.body, func(l string) bool { return strings.TrimSpace(l) != "" })
				lines := slices.Clone(u.body)
				lines[i] = "_ = " + lines[i]
				body = strings.Join(lines, "\n")
			}
		}
	}
	// The block's own variables may go unused (a snippet shows how to make
	// a value; the reader's code uses it), except err: a snippet checks the
	// errors it gets. They are used after the last statement, or just
	// before it on its line if it is a return, so no line moves.
	// A block that returns an error on the way (if err != nil { return
	// err }) and goes on returns nil at its end.
	var last ast.Stmt
	if n := len(fn.Body.List); n > 0 {
		last = fn.Body.List[n-1]
	}
	_, endsInReturn := last.(*ast.ReturnStmt)
	lines := strings.Split(body, "\n")
	if vars := topLevelVars(fn.Body); len(vars) > 0 {
		use := "_ = " + strings.Join(vars, "; _ = ")
		if endsInReturn {
			i := fset.Position(last.Pos()).Line - 3 // the body starts on line 3 of src
			lines[i] = leadingSpace(lines[i]) + use + "; " + strings.TrimLeft(lines[i], " \t")
		} else {
			lines = append(lines, use)
		}
	}
	if results != "" && !endsInReturn {
		lines = append(lines, "return nil")
	}
	body = strings.Join(lines, "\n")
	writeImports(&b, abs, imports)
	fmt.Fprintf(&b, "func _(%s)%s {\n//line %s:%d\n%s\n}\n", strings.Join(params, ", "), results, abs, u.s.line, body)
	return b.String(), nil
}

// topLevelVars returns the variables a function body declares outside its
// nested blocks, but err.
func topLevelVars(body *ast.BlockStmt) []string {
	var out []string
	add := func(id *ast.Ident) {
		if id.Name != "_" && id.Name != "err" && !slices.Contains(out, id.Name) {
			out = append(out, id.Name)
		}
	}
	for _, st := range body.List {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, e := range st.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						add(id)
					}
				}
			}
		case *ast.DeclStmt:
			if gd, ok := st.Decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
				for _, sp := range gd.Specs {
					for _, id := range sp.(*ast.ValueSpec).Names {
						add(id)
					}
				}
			}
		}
	}
	return out
}

func leadingSpace(l string) string { return l[:len(l)-len(strings.TrimLeft(l, " \t"))] }

// implicit returns the imports for the packages a block uses by the names
// of importNames and, for statements (params not nil), the givens it uses
// as parameters, with the imports of their types.
func (u *unit) implicit(f *ast.File, params *[]string) []importSpec {
	have := map[string]bool{}
	for _, im := range u.imports {
		have[im.effectiveName()] = true
	}
	var out []importSpec
	use := func(name string) {
		if p, ok := importNames[name]; ok && !have[name] {
			have[name] = true
			out = append(out, importSpec{name: name, path: p})
		}
	}
	// Package names are the unresolved identifiers used as X in X.Sel.
	unresolved := map[*ast.Ident]bool{}
	for _, id := range f.Unresolved {
		unresolved[id] = true
	}
	pkgNames := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && unresolved[id] {
				pkgNames[id.Name] = true
			}
		}
		return true
	})
	var names []string
	for id := range unresolved {
		if !slices.Contains(names, id.Name) {
			names = append(names, id.Name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		if typ, ok := givens[name]; ok && params != nil && !have[name] {
			*params = append(*params, name+" "+typ)
			t, err := parser.ParseExpr(typ)
			if err != nil {
				panic(fmt.Sprintf("snippets: given %s: %v", name, err))
			}
			ast.Inspect(t, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok {
						use(id.Name)
					}
				}
				return true
			})
			continue
		}
		if pkgNames[name] {
			use(name)
		}
	}
	return out
}

// returnsValue reports whether a function body returns a value (outside
// the function literals in it).
func returnsValue(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.ReturnStmt:
			if len(n.Results) > 0 {
				found = true
			}
		}
		return !found
	})
	return found
}

func writeImports(b *strings.Builder, abs string, imports []importSpec) {
	if len(imports) == 0 {
		return
	}
	b.WriteString("import (\n")
	for _, im := range imports {
		if im.line > 0 {
			fmt.Fprintf(b, "//line %s:%d\n", abs, im.line)
		}
		fmt.Fprintf(b, "\t%s %q\n", im.name, im.path)
	}
	b.WriteString(")\n\n")
}

// build compiles the snippets, each a package of a temporary module in a
// workspace of every module of the repository, and returns a message per
// snippet that fails: its file:line, then what the compiler or vet said.
func build(t *testing.T, root string, mods []string, snippets []snippet) []string {
	dir := t.TempDir()
	const module = "snippets.test"
	var failures []string
	pkgs := map[string]snippet{} // package path to its snippet
	for i, s := range snippets {
		pkg := fmt.Sprintf("s%03d", i)
		u, err := newUnit(s)
		var src string
		if err == nil {
			src, err = u.render(root, pkg)
		}
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", s, err))
			continue
		}
		if err := os.MkdirAll(filepath.Join(dir, pkg), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, pkg, "snippet.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		pkgs[module+"/"+pkg] = s
	}
	if len(pkgs) == 0 {
		return failures
	}
	goVersion := "1.26.0"
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "go "); ok {
				goVersion = strings.TrimSpace(v)
			}
		}
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", fmt.Sprintf("module %s\n\ngo %s\n", module, goVersion))
	work := fmt.Sprintf("go %s\n\nuse (\n\t.\n", goVersion)
	for _, m := range mods {
		work += fmt.Sprintf("\t%q\n", m)
	}
	write("go.work", work+")\n")

	// The go commands stop before the test's deadline, so that a timeout
	// (a cold build cache: the dependencies compile first) fails with a
	// message here and leaves no go command running.
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-time.Until(d)/20))
		defer cancel()
	}
	run := func(args ...string) (string, bool) {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.WaitDelay = 10 * time.Second
		cmd.Dir = dir
		// GOFLAGS is cleared: a -mod flag there is refused in workspace mode.
		cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"), "GOFLAGS=")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		t.Logf("go %s: %v", strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond))
		if ctx.Err() != nil {
			t.Fatalf("snippets: go %s did not finish before the test's deadline (rerun with a longer -timeout, as .ci/test does): %v\n%s", strings.Join(args, " "), ctx.Err(), out)
		}
		if err != nil {
			if _, ok := err.(*exec.ExitError); !ok {
				t.Fatalf("snippets: go %s: %v", strings.Join(args, " "), err)
			}
		}
		return string(out), err == nil
	}
	// -race, as .ci/test builds every module's tests: the dependencies
	// (client-go, controller-runtime, ...) are then in the build cache
	// already, where a plain build would compile them all once more.
	// Packages, not binaries: nothing is linked.
	out, ok := run("build", "-race", "./...")
	if ok {
		out, ok = run("vet", "-race", "./...")
	}
	if ok {
		return failures
	}
	// Sort the output into the snippets it is about, by the "# package"
	// lines go build and go vet write before each package's messages.
	byPkg := map[string][]string{}
	var order []string
	var other []string
	curPkg := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		if p, ok := strings.CutPrefix(l, "# "); ok {
			curPkg = p
			if _, seen := byPkg[p]; !seen {
				order = append(order, p)
				byPkg[p] = nil
			}
			continue
		}
		l = strings.ReplaceAll(l, root+string(filepath.Separator), "")
		if rel, err := filepath.Rel(dir, root); err == nil {
			l = strings.ReplaceAll(l, rel+string(filepath.Separator), "") // the go command's short form
		}
		l = strings.ReplaceAll(l, dir+string(filepath.Separator), "(generated) ")
		if _, ok := pkgs[curPkg]; ok {
			byPkg[curPkg] = append(byPkg[curPkg], "\t"+l)
		} else {
			// Outside a package's messages (such as an import no module
			// provides), a generated file is named by its block.
			if m := generatedRE.FindStringSubmatch(l); m != nil {
				if s, ok := pkgs[module+"/"+m[1]]; ok {
					l = fmt.Sprintf("%s (the block at %s): %s", m[0], s, strings.TrimPrefix(l, m[0]))
				}
			}
			other = append(other, "\t"+l)
		}
	}
	for _, p := range order {
		s, ok := pkgs[p]
		if !ok {
			other = append(other, byPkg[p]...)
			continue
		}
		failures = append(failures, fmt.Sprintf("%s: the Go block starting here does not compile:\n%s\n%s",
			s, strings.Join(byPkg[p], "\n"), indent(s.code)))
	}
	if len(other) > 0 || len(order) == 0 {
		failures = append(failures, "go build/vet of the snippets failed:\n"+strings.Join(other, "\n"))
	}
	return failures
}

func indent(code string) string {
	var b bytes.Buffer
	for _, l := range strings.Split(strings.TrimRight(code, "\n"), "\n") {
		b.WriteString("\t| " + l + "\n")
	}
	return b.String()
}

// TestSnippetsCatchBrokenBlock runs the extraction and the build on a
// small repository of its own: a broken block in Markdown and in a package
// doc must each fail, named by its file:line; a good block, a fragment, a
// shell line and a table in a doc comment must not.
func TestSnippetsCatchBrokenBlock(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.test\n\ngo 1.26.0\n",
		"README.md": "# x\n\n```go\nfmt.Println(time.Second)\n```\n\n" + // good: line 4
			"<!-- fragment: shows a shape, not code -->\n```go\nthis is not Go\n```\n\n" + // fragment: line 9
			"```sh\ngo test ./...\n```\n\n" + // not Go
			"```go\nx := 1\nreturn x\n```\n\n" + // broken: line 17
			"```go\nimport wq \"github.com/go-coalesce/workqueue\"\n```\n", // against the naming convention: line 22
		"p/doc.go": "// Package p is a test.\n//\n//\tgo run ./cmd\n//\n" + // shell: line 3
			"// The metrics:\n//\n//\tname_one    gauge    what it is\n//\tname_two    counter  what it counts\n//\n" + // table: line 7
			"// Use:\n//\n//\tfmt.Println(nosuch)\npackage p\n", // broken: line 12
	}
	for name, text := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	snippets := collect(t, root)
	var got []string
	var compiled []snippet
	for _, s := range snippets {
		got = append(got, fmt.Sprintf("%s fragment=%q", s, s.fragment))
		if s.fragment == "" {
			compiled = append(compiled, s)
		}
	}
	want := []string{
		`README.md:4 fragment=""`,
		`README.md:9 fragment="shows a shape, not code"`,
		`README.md:17 fragment=""`,
		`README.md:22 fragment=""`,
		`p/doc.go:12 fragment=""`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("collect found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	failures := build(t, root, nil, compiled)
	wantFailures := [][2]string{ // the block's file:line, and what is said of it
		{"README.md:17: ", "README.md:18: cannot use x"},
		{"README.md:22: ", `imports "github.com/go-coalesce/workqueue" as wq; the snippets name it workqueue`},
		{"p/doc.go:12: ", "p/doc.go:12: undefined: nosuch"},
	}
	ok := len(failures) == len(wantFailures)
	for _, w := range wantFailures {
		ok = ok && slices.ContainsFunc(failures, func(f string) bool {
			return strings.HasPrefix(f, w[0]) && strings.Contains(f, w[1])
		})
	}
	if !ok {
		t.Fatalf("want the three broken blocks to fail, named by file:line; got %d failures:\n%s", len(failures), strings.Join(failures, "\n\n"))
	}
}
