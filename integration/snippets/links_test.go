package snippets_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks checks every relative link of every Markdown file of the
// repository (found as TestSnippets finds them): the file or folder it names
// exists, and an anchor (#section) names a heading of the file it points
// into. It also checks the files the docs cite in code spans (`queue.go`,
// `docs/protocol.md`): a span that is a file name with one of citedExts
// must name a file that exists, relative to the Markdown file, to the
// repository's root or to the module the Markdown file is in. Links to
// other sites are not fetched.
func TestDocLinks(t *testing.T) {
	root := repoRoot(t)
	problems := checkDocLinks(t, root)
	if len(problems) > 0 {
		t.Errorf("docs: %d links or cited files do not exist:\n\t%s", len(problems), strings.Join(problems, "\n\t"))
	}
}

// TestDocLinksCatchBrokenLinks runs the check on a small repository of its
// own: a missing file, a missing anchor and a cited file that does not exist
// must each be named, by file:line; links that resolve must not.
func TestDocLinksCatchBrokenLinks(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"go.mod":       "module example.test\n\ngo 1.26.0\n",
		"queue.go":     "package x\n",
		"docs/ref.md":  "# Reference\n\n## The state table\n\n## Run: the worker loop\n\nBack to [the README](../README.md#try-it).\n",
		"sub/go.mod":   "module example.test/sub\n\ngo 1.26.0\n",
		"sub/local.go": "package sub\n",
		"sub/README.md": "# sub\n\n`local.go` and `queue.go` exist; `gone.go` and `docs/gone.md` do not; `sub/local.go` and `../queue.go` do.\n" + // line 3
			"[up](../docs/ref.md#run-the-worker-loop), `[T](l)` in code\n",
		"README.md": "# x\n\n## Try it\n\n" +
			"[ok](docs/ref.md#the-state-table), [here](#try-it), [site](https://example.com/x.md), ![img](docs/none.png)\n" + // line 5: none.png
			"[gone](docs/nothing.md) and [bad anchor](docs/ref.md#no-such-section)\n" + // line 6: both
			"```sh\n[not a link](in/code.md) `not/cited.go`\n```\n", // in a fence: skipped
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
	got := checkDocLinks(t, root)
	want := []string{
		"README.md:5: docs/none.png does not exist",
		"README.md:6: docs/nothing.md does not exist",
		"README.md:6: docs/ref.md has no heading for #no-such-section",
		"sub/README.md:3: cites `gone.go`, which does not exist",
		"sub/README.md:3: cites `docs/gone.md`, which does not exist",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("checkDocLinks found\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

var (
	// linkRE matches an inline link or image: [text](target) or
	// ![alt](target), with an optional "title".
	linkRE = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// codeSpanRE matches a code span of one backtick.
	codeSpanRE = regexp.MustCompile("`([^`]+)`")
	// citedRE matches a code span that is a file path.
	citedRE = regexp.MustCompile(`^[\w.-]+(?:/[\w.-]+)*\.(?:go|md|svg|png|sh|mod)$`)
)

// checkDocLinks returns a line per broken link or cited file of the
// Markdown files under root, as file:line: what is wrong.
func checkDocLinks(t *testing.T, root string) []string {
	var mdFiles []string
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
		if strings.HasSuffix(p, ".md") {
			mdFiles = append(mdFiles, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{} // the base name of every file of the repository
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skipDir(root, p, d) {
			return filepath.SkipDir
		}
		names[d.Name()] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{} // Markdown file to its headings' anchors
	anchorsOf := func(p string) map[string]bool {
		if a, ok := anchors[p]; ok {
			return a
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		a := headingAnchors(string(b))
		anchors[p] = a
		return a
	}
	var problems []string
	for _, p := range mdFiles {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel := relSlash(root, p)
		dir := filepath.Dir(p)
		mod := moduleDir(root, dir)
		for i, line := range proseLines(string(b)) {
			if line == "" {
				continue
			}
			report := func(format string, args ...any) {
				problems = append(problems, fmt.Sprintf("%s:%d: %s", rel, i+1, fmt.Sprintf(format, args...)))
			}
			for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(line, "``"), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				dest := p
				if file != "" {
					dest = filepath.Join(dir, filepath.FromSlash(file))
					if _, err := os.Stat(dest); err != nil {
						report("%s does not exist", file)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[anchor] {
					report("%s has no heading for #%s", relSlash(dir, dest), anchor)
				}
			}
			for _, m := range codeSpanRE.FindAllStringSubmatch(stripLinks(line), -1) {
				c := m[1]
				if !citedRE.MatchString(c) {
					continue
				}
				switch {
				case strings.Contains(c, "/"):
					if !existsIn(c, dir, root, mod) {
						report("cites `%s`, which does not exist", c)
					}
				case !names[c] && !citesElsewhere(rel):
					report("cites `%s`, which does not exist", c)
				}
			}
		}
	}
	return problems
}

// citesElsewhere reports whether the Markdown file at rel describes files
// of another project, read from the module cache at test time, which a
// file name alone may cite: the upstream suites' READMEs.
func citesElsewhere(rel string) bool {
	return strings.HasPrefix(rel, "interop/upstream/")
}

// stripLinks removes the targets of a line's links, so that a code span in
// a link's text is read, not its target.
func stripLinks(line string) string {
	return linkRE.ReplaceAllStringFunc(line, func(s string) string {
		i := strings.LastIndex(s, "](")
		return s[:i+1]
	})
}

// existsIn reports whether the slash-separated path c names a file or
// folder under any of the dirs.
func existsIn(c string, dirs ...string) bool {
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, filepath.FromSlash(c))); err == nil {
			return true
		}
	}
	return false
}

// moduleDir is the folder of the go.mod nearest above dir, within root.
func moduleDir(root, dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if d == root || filepath.Dir(d) == d {
			return root
		}
	}
}

func relSlash(base, p string) string {
	r, err := filepath.Rel(base, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(r)
}

// proseLines returns the file's lines with those of fenced code blocks and
// HTML comments blanked, so that line numbers stay those of the file.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	fence := ""
	inComment := false
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				fence = ""
			}
			lines[i] = ""
		case inComment:
			if strings.Contains(l, "-->") {
				inComment = false
			}
			lines[i] = ""
		default:
			if m := fenceRE.FindStringSubmatch(l); m != nil {
				fence = m[2]
				lines[i] = ""
			} else if strings.HasPrefix(trimmed, "<!--") && !strings.Contains(l, "-->") {
				inComment = true
				lines[i] = ""
			}
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown file: lower case, punctuation dropped, spaces as hyphens, and
// -1, -2, ... for repeats.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(text) {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimLeft(l, "#")
		if h == "" || (h[0] != ' ' && h[0] != '\t') {
			continue
		}
		a := slug(strings.TrimSpace(h))
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// slug is GitHub's anchor of a heading's text: links are reduced to their
// text, then letters, digits, '-' and '_' are kept (lower case), spaces
// become '-', and everything else is dropped.
func slug(h string) string {
	h = stripLinks(h)
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
