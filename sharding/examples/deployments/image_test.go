package main

import (
	"bufio"
	"debug/elf"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// The examples' Dockerfiles, from this package's directory. The repository's
// root is the build context of both, so its .dockerignore is theirs.
var dockerfiles = []struct {
	path, binary, module string // module: the go build's directory, from the root
}{
	{"Dockerfile", "deployments", "sharding"},
	{"../../../interop/crsharding/examples/sharded/Dockerfile", "sharded", "interop/crsharding"},
}

const repoRoot = "../../.."

// stage is one FROM of a Dockerfile as TestDockerfiles reads it.
type stage struct {
	image    string            // the base, with the global ARGs' defaults substituted
	byArg    bool              // the base is named by a global ARG (a --build-arg can pin it)
	platform string            // FROM's --platform, as written
	args     []string          // the stage's ARG names
	env      map[string]string // ENV NAME=value
	user     string
	entry    string
	runs     []run
}

// run is one RUN line: its --mount flags and its command's words.
type run struct {
	workdir string
	mounts  []string
	words   []string
}

// readDockerfile reads the instructions TestDockerfiles checks: ARG
// (global and per stage), FROM, ENV, WORKDIR, USER, ENTRYPOINT and RUN, one
// instruction a line.
func readDockerfile(t *testing.T, path string) (stages []*stage, comments string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	global := map[string]string{}
	var st *stage
	workdir := "/"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if c, ok := strings.CutPrefix(line, "#"); ok {
			comments += c + "\n"
			continue
		}
		if line == "" {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			t.Fatalf("%s: a continued line; the test reads one instruction a line: %s", path, line)
		}
		instr, rest, _ := strings.Cut(line, " ")
		words := strings.Fields(rest)
		switch strings.ToUpper(instr) {
		case "ARG":
			for _, w := range words {
				name, def, _ := strings.Cut(w, "=")
				if st == nil {
					global[name] = def
				} else {
					st.args = append(st.args, name)
				}
			}
		case "FROM":
			st = &stage{env: map[string]string{}}
			stages = append(stages, st)
			for _, w := range words {
				if p, ok := strings.CutPrefix(w, "--platform="); ok {
					st.platform = p
				} else if !strings.HasPrefix(w, "--") && st.image == "" {
					name := strings.Trim(strings.TrimPrefix(w, "$"), "{}")
					if def, ok := global[name]; ok {
						st.image, st.byArg = def, true
					} else {
						st.image = w
					}
				}
			}
		case "ENV":
			for _, w := range words {
				name, v, _ := strings.Cut(w, "=")
				st.env[name] = v
			}
		case "WORKDIR":
			workdir = rest
		case "USER":
			st.user = rest
		case "ENTRYPOINT":
			st.entry = rest
		case "RUN":
			r := run{workdir: workdir}
			for len(words) > 0 && strings.HasPrefix(words[0], "--") {
				if m, ok := strings.CutPrefix(words[0], "--mount="); ok {
					r.mounts = append(r.mounts, m)
				}
				words = words[1:]
			}
			r.words = words
			st.runs = append(st.runs, r)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages, comments
}

// goRun returns the index of "go" followed by sub in words, or -1.
func goRun(words []string, sub string) int {
	for i := range len(words) - 1 {
		if words[i] == "go" && words[i+1] == sub {
			return i
		}
	}
	return -1
}

var digest = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)

// TestDockerfiles checks each example's Dockerfile as far as it can be
// without a Docker daemon: a multi-stage build whose final stage is
// distroless static (no shell) or scratch, run as a non-root user; a
// build stage on the builder's platform (FROM --platform=$BUILDPLATFORM)
// that cross-compiles for the target's (ARG TARGETOS TARGETARCH, GOOS and
// GOARCH from them, CGO_ENABLED=0), with the module cache mounted for every
// go command and the build cache for go build, where go looks for them
// (its ENV); and each base either pinned by digest or named by a global
// ARG (so a --build-arg pins it) with the reason stated. With
// SHARDING_IMAGE_BUILD=1 it also runs that go build, with the Dockerfile's
// environment and arguments but for -o, for linux and this machine's
// architecture, in the Dockerfile's WORKDIR mapped onto the repository,
// and checks that the binary is a static executable (no PT_INTERP, no
// needed shared libraries): it compiles every dependency without -race,
// minutes on a cold cache (more than go test's default 10-minute timeout
// on a busy 2-core machine: add -timeout 30m), so CI leaves it out.
func TestDockerfiles(t *testing.T) {
	for _, df := range dockerfiles {
		t.Run(df.binary, func(t *testing.T) {
			stages, comments := readDockerfile(t, df.path)
			if len(stages) < 2 {
				t.Fatalf("%s: %d stages, want a build stage and a final one", df.path, len(stages))
			}
			final := stages[len(stages)-1]
			if final.image != "scratch" && !strings.HasPrefix(final.image, "gcr.io/distroless/static") {
				t.Errorf("%s: final stage FROM %s, want scratch or gcr.io/distroless/static (no shell)", df.path, final.image)
			}
			if final.user == "" || final.user == "root" || strings.HasPrefix(final.user, "0") {
				t.Errorf("%s: final stage USER %q, want a non-root user", df.path, final.user)
			}
			if want := `["/` + df.binary + `"]`; final.entry != want {
				t.Errorf("%s: ENTRYPOINT %s, want %s (exec form: there is no shell)", df.path, final.entry, want)
			}
			for _, st := range stages {
				switch {
				case st.image == "scratch" || digest.MatchString(st.image):
				case !st.byArg:
					t.Errorf("%s: FROM %s: neither pinned by digest nor named by an ARG that a --build-arg can pin", df.path, st.image)
				case !strings.Contains(comments, "digest") || !strings.Contains(comments, "--build-arg"):
					t.Errorf("%s: FROM %s by tag, and no comment says why or how to pin it by digest (--build-arg)", df.path, st.image)
				}
			}

			var build *stage
			var b run
			for _, st := range stages {
				for _, r := range st.runs {
					if goRun(r.words, "build") >= 0 {
						if build != nil {
							t.Fatalf("%s: two RUN lines run go build", df.path)
						}
						build, b = st, r
					}
				}
			}
			if build == nil {
				t.Fatalf("%s: no RUN line runs go build", df.path)
			}
			if build.platform != "$BUILDPLATFORM" {
				t.Errorf("%s: build stage FROM --platform=%q, want $BUILDPLATFORM (build natively, cross-compile for the target)", df.path, build.platform)
			}
			for _, arg := range []string{"TARGETOS", "TARGETARCH"} {
				if !slices.Contains(build.args, arg) {
					t.Errorf("%s: build stage has no ARG %s (BuildKit sets it only for a stage that declares it)", df.path, arg)
				}
			}
			i := goRun(b.words, "build")
			env, args := b.words[:i], b.words[i+1:]
			for _, e := range []string{"CGO_ENABLED=0", "GOOS=$TARGETOS", "GOARCH=$TARGETARCH"} {
				if !slices.Contains(env, e) {
					t.Errorf("%s: go build without %s (has %q)", df.path, e, env)
				}
			}
			modCache, buildCache := build.env["GOMODCACHE"], build.env["GOCACHE"]
			if modCache == "" || buildCache == "" {
				t.Errorf("%s: build stage ENV GOMODCACHE=%q GOCACHE=%q, want both set, where the cache mounts are", df.path, modCache, buildCache)
			}
			for _, r := range build.runs {
				if goRun(r.words, "build") < 0 && goRun(r.words, "mod") < 0 {
					continue
				}
				want := []string{"type=cache,target=" + modCache}
				if goRun(r.words, "build") >= 0 {
					want = append(want, "type=cache,target="+buildCache)
				}
				for _, m := range want {
					if !slices.Contains(r.mounts, m) {
						t.Errorf("%s: RUN %s without --mount=%s (has %q)", df.path, strings.Join(r.words, " "), m, r.mounts)
					}
				}
			}

			dir, ok := strings.CutPrefix(b.workdir, "/src")
			if !ok || strings.Trim(dir, "/") != df.module {
				t.Fatalf("%s: go build in WORKDIR %s, want /src/%s, the module in the context", df.path, b.workdir, df.module)
			}
			dir = filepath.Join(repoRoot, filepath.FromSlash(dir))
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
				t.Errorf("%s: WORKDIR %s is no module of the repository: %v", df.path, b.workdir, err)
			}
			if os.Getenv("SHARDING_IMAGE_BUILD") == "" {
				t.Skip("set SHARDING_IMAGE_BUILD=1 to run the Dockerfile's go build and check the binary is static")
			}
			if runtime.GOOS != "linux" {
				t.Skip("the check reads an ELF binary")
			}
			out := filepath.Join(t.TempDir(), df.binary)
			args = slices.Clone(args)
			o := slices.Index(args, "-o")
			if o < 0 || o+1 >= len(args) {
				t.Fatalf("%s: go build without -o: %q", df.path, args)
			}
			args[o+1] = out
			cmd := exec.Command("go", args...)
			cmd.Dir = dir
			// GOFLAGS cleared: the image's builder has none (a -race there
			// would need cgo).
			cmd.Env = append(os.Environ(), "GOFLAGS=")
			target := strings.NewReplacer("$TARGETOS", "linux", "$TARGETARCH", runtime.GOARCH)
			for _, e := range env {
				cmd.Env = append(cmd.Env, target.Replace(e))
			}
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, b)
			}
			checkStatic(t, out)
		})
	}
}

// dockerignore is the root's .dockerignore: its patterns, in order, each
// as a regular expression on a slash-separated path of the context.
type dockerignore []struct {
	re        *regexp.Regexp
	exception bool // a "!" line: keep what it matches
}

// readDockerignore reads the subset of .dockerignore's syntax that the
// file uses (*, ?, ** and !; not character classes or escapes, which
// fail the test), with Docker's rules: a pattern is relative to the
// context's root, a path is left out if the last pattern that matches it
// or one of its parent directories is not an exception.
func readDockerignore(t *testing.T, path string) dockerignore {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the examples' build context (the repository's root) has no .dockerignore: %v", err)
	}
	var d dockerignore
	for line := range strings.Lines(string(data)) {
		p := strings.TrimSpace(line)
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		if strings.ContainsAny(p, `[\`) {
			t.Fatalf("%s: %q: the test reads no character class or escape", path, p)
		}
		exception := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(filepath.ToSlash(filepath.Clean(strings.TrimPrefix(p, "!"))), "/")
		var re strings.Builder
		re.WriteString("^")
		segs := strings.Split(p, "/")
		for i, seg := range segs {
			last := i == len(segs)-1
			if seg == "**" {
				re.WriteString(map[bool]string{true: ".*", false: "(?:.*/)?"}[last])
				continue
			}
			for _, r := range seg {
				switch r {
				case '*':
					re.WriteString("[^/]*")
				case '?':
					re.WriteString("[^/]")
				default:
					re.WriteString(regexp.QuoteMeta(string(r)))
				}
			}
			if !last {
				re.WriteString("/")
			}
		}
		re.WriteString("$")
		d = append(d, struct {
			re        *regexp.Regexp
			exception bool
		}{regexp.MustCompile(re.String()), exception})
	}
	return d
}

// ignored reports whether the context leaves out path (slash-separated,
// from the root).
func (d dockerignore) ignored(path string) bool {
	out := false
	for _, p := range d {
		for prefix := path; ; {
			if p.re.MatchString(prefix) {
				out = !p.exception
				break
			}
			i := strings.LastIndexByte(prefix, '/')
			if i < 0 {
				break
			}
			prefix = prefix[:i]
		}
	}
	return out
}

// TestDockerignore checks the examples' build context against the root's
// .dockerignore: every file the two go builds read (the go.mod and go.sum
// of each module of the repository they use, the Go files and embedded
// files of every package they compile, as go list reports them for linux)
// is sent; .git, every Markdown file, docs and testdata directory, test
// file, manifest and Dockerfile is not, so a change to one of them reuses
// the image's build.
func TestDockerignore(t *testing.T) {
	d := readDockerignore(t, filepath.Join(repoRoot, ".dockerignore"))
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	rel := func(p string) (string, bool) {
		r, err := filepath.Rel(root, p)
		if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			return "", false
		}
		return filepath.ToSlash(r), true
	}
	for _, df := range dockerfiles {
		dir := filepath.Join(root, filepath.FromSlash(df.module))
		golist := func(args ...string) []string {
			cmd := exec.Command("go", args...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOFLAGS=", "GOOS=linux", "CGO_ENABLED=0")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go %s in %s: %v", strings.Join(args, " "), df.module, err)
			}
			return strings.Fields(string(out))
		}
		var needed []string
		for _, m := range golist("list", "-m", "-f", "{{.Dir}}", "all") {
			if r, ok := rel(m); ok {
				needed = append(needed, r+"/go.mod", r+"/go.sum")
			}
		}
		for _, f := range golist("list", "-deps", "-f",
			`{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}} {{end}}{{range .EmbedFiles}}{{$d}}/{{.}} {{end}}{{range .SFiles}}{{$d}}/{{.}} {{end}}`,
			"./examples/"+df.binary) {
			if r, ok := rel(f); ok {
				needed = append(needed, r)
			}
		}
		if len(needed) < 10 {
			t.Fatalf("%s: only %d files of the repository found for the build: %q", df.binary, len(needed), needed)
		}
		for _, p := range needed {
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
				continue // a module without go.sum
			}
			if d.ignored(strings.TrimPrefix(p, "./")) {
				t.Errorf(".dockerignore leaves out %s, which the %s image's build reads", p, df.binary)
			}
		}
	}

	for _, p := range []string{".git", ".git/HEAD", "README.md", "docs/metrics.md", "sharding/docs/operate.md",
		"queue_test.go", "sharding/examples/deployments/deploy/20-deployment.yaml", "testdata/x",
		"sharding/examples/deployments/Dockerfile"} {
		if !d.ignored(p) {
			t.Errorf(".dockerignore sends %s to the build", p)
		}
	}
	err = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		r, _ := rel(path)
		switch {
		case e.IsDir() && (e.Name() == ".git" || e.Name() == "docs" || e.Name() == "testdata"):
			if !d.ignored(r) {
				t.Errorf(".dockerignore sends the directory %s to the build", r)
			}
			return fs.SkipDir
		case !e.IsDir() && (strings.HasSuffix(r, ".md") || strings.HasSuffix(r, "_test.go") || e.Name() == "Dockerfile"):
			if !d.ignored(r) {
				t.Errorf(".dockerignore sends %s to the build", r)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkStatic fails unless path is an ELF executable with no interpreter
// and no needed shared library.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a PT_INTERP program header: dynamically linked", path)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) > 0 {
		t.Errorf("%s needs shared libraries %q", path, libs)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		t.Errorf("%s: ELF type %v, want an executable", path, f.Type)
	}
	t.Logf("%s: static %v %v executable, no PT_INTERP, no shared library", filepath.Base(path), f.Class, f.Machine)
}
