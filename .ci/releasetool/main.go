// Command releasetool is the Go half of .ci/release-proof: it finds the
// modules of this repository that users fetch, checks that their go.mod
// files resolve outside the repository, and writes a module proxy folder in
// the layout of the Go module proxy protocol (https://go.dev/ref/mod#goproxy-protocol).
//
// Zips are made with golang.org/x/mod/zip, the package the go command and
// proxy.golang.org use, so a file the go command would leave out (a nested
// module, a symlink, a name it rejects) is left out here too. The files are
// those git would publish: tracked and untracked-but-not-ignored files of
// the working tree, or the tree of a git revision.
//
// It is its own module, inside .ci, so it is never part of a published
// module (the go.mod beside this file cuts it out of the core's zip) and
// the core never depends on golang.org/x/mod.
//
// Usage:
//
//	releasetool modules -root DIR -version V [-unpublished a,b] [-nocheck]
//	releasetool zip -root DIR -proxy DIR -version V [-rev REV] [-omit p,q] MODDIR
//	releasetool setversion -root DIR -version V [-unpublished a,b]
package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

func main() {
	if len(os.Args) < 2 {
		fatalf("usage: releasetool modules|zip|setversion [flags]")
	}
	var err error
	switch os.Args[1] {
	case "modules":
		err = modulesCmd(os.Args[2:])
	case "zip":
		err = zipCmd(os.Args[2:])
	case "setversion":
		err = setVersionCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (want modules, zip or setversion)", os.Args[1])
	}
	if err != nil {
		fatalf("%v", err)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "releasetool: "+format+"\n", args...)
	os.Exit(1)
}

// A mod is one module of the repository: its folder relative to the
// repository root ("." for the root) and its parsed go.mod.
type mod struct {
	dir  string
	file *modfile.File
}

func (m mod) path() string { return m.file.Module.Mod.Path }

// modulesCmd prints "DIR<TAB>MODULE PATH" for every published module, in
// tag order (the root first), after checking (unless -nocheck) that each one's go.mod is
// fit to be fetched by a user at -version.
func modulesCmd(args []string) error {
	fl := flag.NewFlagSet("modules", flag.ExitOnError)
	root := fl.String("root", ".", "repository root")
	version := fl.String("version", "", "the version the release will tag")
	unpublished := fl.String("unpublished", "", "comma-separated folders whose modules are never published (test-only)")
	nocheck := fl.Bool("nocheck", false, "list the modules without checking their go.mod files")
	fl.Parse(args)

	mods, err := published(*root, splitList(*unpublished))
	if err != nil {
		return err
	}
	if !*nocheck {
		if errs := check(mods, *version, splitList(*unpublished)); len(errs) > 0 {
			for _, e := range errs {
				fmt.Fprintln(os.Stderr, e)
			}
			return fmt.Errorf("%d problem(s) in go.mod files; a user's go command would not resolve these modules as tagged", len(errs))
		}
	}
	for _, m := range mods {
		fmt.Printf("%s\t%s\n", m.dir, m.path())
	}
	return nil
}

// published finds every go.mod git would publish, except those in folders
// the go command ignores for packages (names starting with "." or "_",
// testdata, vendor: .ci holds tools, not library code) and those under
// an unpublished folder. The root module comes first, then by folder.
func published(root string, unpublished []string) ([]mod, error) {
	files, err := gitFiles(root)
	if err != nil {
		return nil, err
	}
	var mods []mod
	for _, f := range files {
		if path.Base(f) != "go.mod" {
			continue
		}
		dir := path.Dir(f)
		if ignoredDir(dir) || slices.ContainsFunc(unpublished, func(u string) bool { return dir == u || strings.HasPrefix(dir, u+"/") }) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree, not yet in git
		}
		if err != nil {
			return nil, err
		}
		mf, err := modfile.Parse(f, data, nil)
		if err != nil {
			return nil, err
		}
		if mf.Module == nil {
			return nil, fmt.Errorf("%s: no module line", f)
		}
		mods = append(mods, mod{dir: dir, file: mf})
	}
	slices.SortFunc(mods, func(a, b mod) int {
		if a.dir == "." || b.dir == "." {
			return boolInt(b.dir == ".") - boolInt(a.dir == ".")
		}
		return strings.Compare(a.dir, b.dir)
	})
	if len(mods) == 0 || mods[0].dir != "." {
		return nil, errors.New("no go.mod at the repository root")
	}
	return tagOrder(mods), nil
}

// tagOrder puts every module after the modules of ours it requires (the
// root first, the others by folder where they do not depend on each
// other): the order of the release tags, so that when a tag is pushed
// everything it requires is already tagged.
func tagOrder(mods []mod) []mod {
	byPath := map[string]mod{}
	for _, m := range mods {
		byPath[m.path()] = m
	}
	var out []mod
	state := map[string]int{} // 1: visiting, 2: placed
	var visit func(m mod)
	visit = func(m mod) {
		if state[m.path()] != 0 {
			return // placed, or a cycle (which go.mod files allow): keep folder order
		}
		state[m.path()] = 1
		for _, r := range m.file.Require {
			if dep, ok := byPath[r.Mod.Path]; ok {
				visit(dep)
			}
		}
		state[m.path()] = 2
		out = append(out, m)
	}
	for _, m := range mods {
		visit(m)
	}
	return out
}

// rootOf returns the module at the repository root; published makes sure
// there is one.
func rootOf(mods []mod) mod {
	for _, m := range mods {
		if m.dir == "." {
			return m
		}
	}
	panic("releasetool: no root module")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func ignoredDir(dir string) bool {
	if dir == "." {
		return false
	}
	for _, el := range strings.Split(dir, "/") {
		if strings.HasPrefix(el, ".") || strings.HasPrefix(el, "_") || el == "testdata" || el == "vendor" {
			return true
		}
	}
	return false
}

// check returns one message per problem that would make a published module
// unusable from outside the repository, or different there from here.
func check(mods []mod, version string, unpublished []string) []string {
	var errs []string
	add := func(m mod, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%s: ", path.Join(m.dir, "go.mod"))+fmt.Sprintf(format, args...))
	}
	core := rootOf(mods).path()
	ours := map[string]string{} // module path -> folder
	for _, m := range mods {
		ours[m.path()] = m.dir
	}
	isOurs := func(p string) bool { return p == core || strings.HasPrefix(p, core+"/") }

	if !semver.IsValid(version) || semver.Canonical(version) != version {
		errs = append(errs, fmt.Sprintf("version %q (.ci/VERSION) is not a canonical semantic version like v0.1.0", version))
		return errs
	}
	for _, m := range mods {
		// The go command finds a module of a multi-module repository by its
		// path below the repository's: a mismatch makes it unfetchable.
		want := core
		if m.dir != "." {
			want = core + "/" + m.dir
		}
		if m.path() != want {
			add(m, "module path is %s; in folder %s it must be %s, or the go command will not find it", m.path(), m.dir, want)
		}
		if err := module.Check(m.path(), version); err != nil {
			add(m, "cannot be tagged %s: %v", version, err)
		}
		replaced := map[string]string{}
		for _, r := range m.file.Replace {
			if !isOurs(r.Old.Path) {
				// A replace applies only in the main module: users would
				// build against the original, not what CI tests.
				add(m, "replaces %s, which users of this module would not get (a replace in a dependency is ignored); require the version needed instead", r.Old.Path)
				continue
			}
			replaced[r.Old.Path] = r.New.Path
		}
		for _, r := range m.file.Require {
			p := r.Mod.Path
			if !isOurs(p) {
				continue
			}
			dir, ok := ours[p]
			if !ok {
				add(m, "requires %s, which is not a published module (test-only folders: %s); users could not fetch it", p, strings.Join(unpublished, ", "))
				continue
			}
			if r.Mod.Version != version {
				add(m, "requires %s %s, but the release tags %s: users would fetch %s %s (which %s); run: .ci/release-version %s",
					p, r.Mod.Version, version, p, r.Mod.Version, missingOrOld(r.Mod.Version), version)
			}
			rel, err := filepath.Rel(filepath.FromSlash(m.dir), filepath.FromSlash(dir))
			if err != nil {
				add(m, "%v", err)
				continue
			}
			wantRel := filepath.ToSlash(rel)
			if !strings.HasPrefix(wantRel, ".") {
				wantRel = "./" + wantRel
			}
			got, ok := replaced[p]
			switch {
			case !ok:
				add(m, "requires %s without `replace %s => %s`: tests in the repository would use the tagged %s, not the code beside them", p, p, wantRel, version)
			case path.Clean(got) != path.Clean(wantRel):
				add(m, "replaces %s with %s; it must be %s, its folder in this repository", p, got, wantRel)
			}
		}
	}
	return errs
}

func missingOrOld(v string) string {
	if v == "v0.0.0" || strings.HasPrefix(v, "v0.0.0-") {
		return "was never tagged"
	}
	return "is not the code in this tree"
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.Trim(strings.TrimSpace(f), "/"); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// gitFiles lists, relative to dir, the files git would publish from dir:
// tracked files still present and untracked files that are not ignored,
// with forward slashes.
func gitFiles(dir string) ([]string, error) {
	out, err := git(dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return nil, err
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(f))); errors.Is(err, fs.ErrNotExist) {
			continue // deleted, not yet committed
		}
		files = append(files, f)
	}
	slices.Sort(files)
	return slices.Compact(files), nil
}

func git(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s (in %s): %v: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// zipCmd writes MODULE/@v/VERSION.{zip,mod,info} and adds VERSION to
// MODULE/@v/list under -proxy, for the module in folder MODDIR of -root:
// from the working tree, or from git revision -rev.
func zipCmd(args []string) error {
	fl := flag.NewFlagSet("zip", flag.ExitOnError)
	root := fl.String("root", ".", "repository root")
	proxy := fl.String("proxy", "", "proxy folder to write into")
	version := fl.String("version", "", "version to publish the module as")
	rev := fl.String("rev", "", "git revision to take the files from (default: the working tree)")
	omit := fl.String("omit", "", "comma-separated paths, relative to the repository root, to leave out of the zip (to prove that a missing file is caught)")
	fl.Parse(args)
	if fl.NArg() != 1 || *proxy == "" || *version == "" {
		return errors.New("usage: releasetool zip -root DIR -proxy DIR -version V [-rev REV] [-omit p,q] MODDIR")
	}
	dir := path.Clean(filepath.ToSlash(fl.Arg(0)))

	var files []modzip.File
	var err error
	if *rev == "" {
		files, err = treeFiles(*root, dir)
	} else {
		files, err = revFiles(*root, *rev, dir)
	}
	if err != nil {
		return err
	}

	// Deliberate breakage for the proof's own test: drop files as if they
	// had been left out of the release.
	for _, o := range splitList(*omit) {
		rel := o
		if dir != "." {
			var ok bool
			if rel, ok = strings.CutPrefix(o, dir+"/"); !ok {
				continue
			}
		}
		n := len(files)
		files = slices.DeleteFunc(files, func(f modzip.File) bool { return f.Path() == rel })
		if len(files) < n {
			fmt.Fprintf(os.Stderr, "releasetool: deliberately left %s out of the zip of %s\n", o, dir)
		}
	}

	var goMod []byte
	for _, f := range files {
		if f.Path() == "go.mod" {
			if goMod, err = readAll(f); err != nil {
				return err
			}
		}
	}
	if goMod == nil {
		return fmt.Errorf("%s: no go.mod", dir)
	}
	modPath := modfile.ModulePath(goMod)
	m := module.Version{Path: modPath, Version: *version}

	// What the go command would leave out. Files of nested modules belong
	// to those modules; anything else left out would be a file that works
	// here and is missing for users, so it fails the proof.
	cf, _ := modzip.CheckFiles(files)
	if err := cf.Err(); err != nil {
		return fmt.Errorf("%s: the go command would refuse to zip this module: %v", modPath, err)
	}
	nested := 0
	for _, o := range cf.Omitted {
		if inNestedModule(files, o.Path) {
			nested++
			continue
		}
		return fmt.Errorf("%s: %s would be left out of the module zip (%v): users would not get it", modPath, o.Path, o.Err)
	}

	escaped, err := module.EscapePath(modPath)
	if err != nil {
		return err
	}
	vdir := filepath.Join(*proxy, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	zipName := filepath.Join(vdir, *version+".zip")
	var buf bytes.Buffer
	if err := modzip.Create(&buf, m, files); err != nil {
		return err
	}
	if err := os.WriteFile(zipName, buf.Bytes(), 0o644); err != nil {
		return err
	}
	if _, err := modzip.CheckZip(m, zipName); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, *version+".mod"), goMod, 0o644); err != nil {
		return err
	}
	when, err := commitTime(*root, *rev)
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{*version, when})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, *version+".info"), info, 0o644); err != nil {
		return err
	}
	if err := addToList(filepath.Join(vdir, "list"), *version); err != nil {
		return err
	}
	from := "working tree"
	if *rev != "" {
		from = *rev
	}
	fmt.Printf("%s@%s: %d files, %d bytes zipped, from %s (%d files of nested modules left out)\n",
		modPath, *version, len(cf.Valid), buf.Len(), from, nested)
	return nil
}

func inNestedModule(files []modzip.File, p string) bool {
	for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
		for _, f := range files {
			if f.Path() == dir+"/go.mod" {
				return true
			}
		}
	}
	return false
}

func readAll(f modzip.File) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// treeFiles lists the working-tree files of the module in dir (relative to
// root), as git would publish them. Like the go command, it adds the
// repository's LICENSE to a module in a subfolder that has none.
func treeFiles(root, dir string) ([]modzip.File, error) {
	abs := filepath.Join(root, filepath.FromSlash(dir))
	names, err := gitFiles(abs)
	if err != nil {
		return nil, err
	}
	var files []modzip.File
	for _, n := range names {
		p := filepath.Join(abs, filepath.FromSlash(n))
		info, err := os.Lstat(p)
		if err != nil {
			return nil, err
		}
		files = append(files, diskFile{path: n, file: p, info: info})
	}
	if dir != "." && !slices.ContainsFunc(files, func(f modzip.File) bool { return f.Path() == "LICENSE" }) {
		p := filepath.Join(root, "LICENSE")
		if info, err := os.Lstat(p); err == nil {
			files = append(files, diskFile{path: "LICENSE", file: p, info: info})
		}
	}
	return files, nil
}

type diskFile struct {
	path, file string
	info       fs.FileInfo
}

func (f diskFile) Path() string                 { return f.path }
func (f diskFile) Lstat() (fs.FileInfo, error)  { return f.info, nil }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.file) }

// revFiles lists the files of the module in dir at git revision rev, through
// git archive as the go command does (so export-ignore and line endings are
// treated the same), adding the root LICENSE where the folder has none.
func revFiles(root, rev, dir string) ([]modzip.File, error) {
	args := []string{"-c", "core.autocrlf=input", "-c", "core.eol=lf", "archive", "--format=zip", rev}
	if dir != "." {
		args = append(args, "--", dir)
	}
	out, err := git(root, args...)
	if err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(bytes.NewReader(out), int64(len(out)))
	if err != nil {
		return nil, err
	}
	var files []modzip.File
	for _, zf := range zr.File {
		if strings.HasSuffix(zf.Name, "/") {
			continue
		}
		name := zf.Name
		if dir != "." {
			var ok bool
			if name, ok = strings.CutPrefix(name, dir+"/"); !ok {
				continue
			}
		}
		files = append(files, archived{name: name, f: zf})
	}
	if dir != "." && !slices.ContainsFunc(files, func(f modzip.File) bool { return f.Path() == "LICENSE" }) {
		if lic, err := git(root, "cat-file", "blob", rev+":LICENSE"); err == nil {
			files = append(files, inMemory{name: "LICENSE", data: lic})
		}
	}
	return files, nil
}

type archived struct {
	name string
	f    *zip.File
}

func (a archived) Path() string                 { return a.name }
func (a archived) Lstat() (fs.FileInfo, error)  { return a.f.FileInfo(), nil }
func (a archived) Open() (io.ReadCloser, error) { return a.f.Open() }

type inMemory struct {
	name string
	data []byte
}

func (m inMemory) Path() string                 { return m.name }
func (m inMemory) Lstat() (fs.FileInfo, error)  { return memInfo{m}, nil }
func (m inMemory) Open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(m.data)), nil }

type memInfo struct{ m inMemory }

func (i memInfo) Name() string       { return path.Base(i.m.name) }
func (i memInfo) Size() int64        { return int64(len(i.m.data)) }
func (i memInfo) Mode() fs.FileMode  { return 0o644 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return false }
func (i memInfo) Sys() any           { return nil }

// commitTime is the committer time of rev (HEAD for the working tree): the
// Time a proxy reports for a tag on that commit.
func commitTime(root, rev string) (time.Time, error) {
	if rev == "" {
		rev = "HEAD"
	}
	out, err := git(root, "log", "-1", "--format=%ct", rev)
	if err != nil {
		return time.Time{}, err
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(sec, 0).UTC(), nil
}

// addToList adds version to a proxy's @v/list, one version a line, in
// semantic-version order.
func addToList(name, version string) error {
	var versions []string
	if data, err := os.ReadFile(name); err == nil {
		versions = strings.Fields(string(data))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	semver.Sort(versions)
	return os.WriteFile(name, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// setVersionCmd makes every published module require the others at
// -version (only requirements that are already there change), the edit a
// release makes before its tags, as OpenTelemetry-Go's multimod prerelease
// does. It leaves replace directives alone.
func setVersionCmd(args []string) error {
	fl := flag.NewFlagSet("setversion", flag.ExitOnError)
	root := fl.String("root", ".", "repository root")
	version := fl.String("version", "", "the version the release will tag")
	unpublished := fl.String("unpublished", "", "comma-separated folders whose modules are never published (test-only)")
	fl.Parse(args)
	if !semver.IsValid(*version) || semver.Canonical(*version) != *version {
		return fmt.Errorf("version %q is not a canonical semantic version like v0.1.0", *version)
	}
	mods, err := published(*root, splitList(*unpublished))
	if err != nil {
		return err
	}
	core := rootOf(mods).path()
	for _, m := range mods {
		changed := false
		for _, r := range m.file.Require {
			if (r.Mod.Path == core || strings.HasPrefix(r.Mod.Path, core+"/")) && r.Mod.Version != *version {
				if err := m.file.AddRequire(r.Mod.Path, *version); err != nil {
					return err
				}
				changed = true
			}
		}
		if !changed {
			continue
		}
		m.file.Cleanup()
		data, err := m.file.Format()
		if err != nil {
			return err
		}
		name := filepath.Join(*root, filepath.FromSlash(m.dir), "go.mod")
		if err := os.WriteFile(name, data, 0o644); err != nil {
			return err
		}
		fmt.Printf("%s: requires our modules at %s\n", path.Join(m.dir, "go.mod"), *version)
	}
	return nil
}
