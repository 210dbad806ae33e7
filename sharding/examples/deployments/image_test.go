package main

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// The examples' Dockerfiles, from this package's directory. The repository's
// root is the build context of both.
var dockerfiles = []struct {
	path, binary string
}{
	{"Dockerfile", "deployments"},
	{"../../../interop/crsharding/examples/sharded/Dockerfile", "sharded"},
}

const repoRoot = "../../.."

// dockerfile is what TestDockerfiles reads of a Dockerfile: its stages'
// bases, the final stage's USER and ENTRYPOINT, and the one RUN of the
// build stage that runs go build with the WORKDIR it runs in.
type dockerfile struct {
	froms      []string
	user       string
	entrypoint string
	buildDir   string   // WORKDIR of the go build, under /src (the context)
	buildEnv   []string // NAME=value words before go
	buildArgs  []string // after go
}

func readDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d dockerfile
	workdir := "/"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			t.Fatalf("%s: a continued line; the test reads one instruction a line: %s", path, line)
		}
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			d.froms = append(d.froms, strings.Fields(rest)[0])
			d.user, d.entrypoint = "", ""
		case "WORKDIR":
			workdir = rest
		case "USER":
			d.user = rest
		case "ENTRYPOINT":
			d.entrypoint = rest
		case "RUN":
			words := strings.Fields(rest)
			i := slices.Index(words, "go")
			if i < 0 || i+1 >= len(words) || words[i+1] != "build" {
				continue
			}
			if d.buildArgs != nil {
				t.Fatalf("%s: two RUN lines run go build", path)
			}
			d.buildDir, d.buildEnv, d.buildArgs = workdir, words[:i], words[i+1:]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDockerfiles checks each example's Dockerfile as far as it can be
// without a Docker daemon: a multi-stage build whose final stage is
// distroless static (no shell) or scratch, run as a non-root user, whose
// go build has CGO_ENABLED=0 and GOOS=linux. With SHARDING_IMAGE_BUILD=1
// it also runs that go build, with the Dockerfile's environment and
// arguments but for -o, in the Dockerfile's WORKDIR mapped onto the
// repository, and checks that the binary is a static executable (no
// PT_INTERP, no needed shared libraries): it compiles every dependency
// without -race, minutes on a cold cache, so CI leaves it out.
func TestDockerfiles(t *testing.T) {
	for _, df := range dockerfiles {
		t.Run(df.binary, func(t *testing.T) {
			d := readDockerfile(t, df.path)
			if len(d.froms) < 2 {
				t.Fatalf("%s: %d stages, want a build stage and a final one", df.path, len(d.froms))
			}
			final := d.froms[len(d.froms)-1]
			if final != "scratch" && !strings.HasPrefix(final, "gcr.io/distroless/static") {
				t.Errorf("%s: final stage FROM %s, want scratch or gcr.io/distroless/static (no shell)", df.path, final)
			}
			if d.user == "" || d.user == "root" || strings.HasPrefix(d.user, "0") {
				t.Errorf("%s: final stage USER %q, want a non-root user", df.path, d.user)
			}
			if want := `["/` + df.binary + `"]`; d.entrypoint != want {
				t.Errorf("%s: ENTRYPOINT %s, want %s (exec form: there is no shell)", df.path, d.entrypoint, want)
			}
			if d.buildArgs == nil {
				t.Fatalf("%s: no RUN line runs go build", df.path)
			}
			for _, env := range []string{"CGO_ENABLED=0", "GOOS=linux"} {
				if !slices.Contains(d.buildEnv, env) {
					t.Errorf("%s: go build without %s (has %q)", df.path, env, d.buildEnv)
				}
			}
			dir, ok := strings.CutPrefix(d.buildDir, "/src")
			if !ok {
				t.Fatalf("%s: go build in WORKDIR %s, want one under /src, the context", df.path, d.buildDir)
			}
			dir = filepath.Join(repoRoot, filepath.FromSlash(dir))
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
				t.Errorf("%s: WORKDIR %s is no module of the repository: %v", df.path, d.buildDir, err)
			}
			if os.Getenv("SHARDING_IMAGE_BUILD") == "" {
				t.Skip("set SHARDING_IMAGE_BUILD=1 to run the Dockerfile's go build and check the binary is static")
			}
			if runtime.GOOS != "linux" {
				t.Skip("the check reads an ELF binary")
			}
			out := filepath.Join(t.TempDir(), df.binary)
			args := slices.Clone(d.buildArgs)
			i := slices.Index(args, "-o")
			if i < 0 || i+1 >= len(args) {
				t.Fatalf("%s: go build without -o: %q", df.path, args)
			}
			args[i+1] = out
			cmd := exec.Command("go", args...)
			cmd.Dir = dir
			// GOFLAGS cleared: the image's builder has none (a -race there
			// would need cgo).
			cmd.Env = append(os.Environ(), "GOFLAGS=")
			cmd.Env = append(cmd.Env, d.buildEnv...)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, b)
			}
			checkStatic(t, out)
		})
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
