package linearizability

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// A check that cannot fail proves nothing, so TestMutantsCaught builds the
// queue with its atomicity broken and requires the checker to reject what
// it records. Each mutant opens a window, with the queue's lock released, in
// the middle of one transition of the state table; the patch is made to a
// copy of a core file at test time (go build's -overlay), so the core's
// sources never hold it. Every mutant is in one build, switched on by
// LINEARIZE_MUTANT, so one compilation serves them all.
type mutant struct {
	name string
	file string // of the core
	// old is the text of file the window goes into, new the text with
	// it. The test fails if old is no longer there: the mutant must then
	// be moved to where the transition now is.
	old, new string
	// configs and shape are what its histories run on.
	configs []string
	shape   shape
}

// window releases the queue's lock and lets other goroutines run: what
// every transition must not do in its middle.
const window = "q.mu.Unlock(); runtime.Gosched(); q.mu.Lock()"

var mutants = []mutant{
	{
		// Add of an absent key marks it dirty in the key table, and
		// only after the window pushes it to the Store: a second Add
		// in the window finds it due and returns, yet Len and Get do
		// not see it.
		name: "dirty-window",
		file: "dirty_set.go",
		old: `		q.dirty++
		q.enqueue(item, prio)
		return true`,
		new: `		q.dirty++
		if q.store != nil && linearizeMutant == "dirty-window" {
			` + window + `
		}
		q.enqueue(item, prio)
		return true`,
		configs: storeConfigs,
		shape:   mutantShape,
	},
	{
		// Get takes the key out of the Store, and only after the
		// window marks it processing: an Add in the window finds it
		// due (ready) and returns, so the run it asked for is lost.
		name: "take-window",
		file: "queue.go",
		old: `		item, p = q.pop()
		t.takeAt(p)`,
		new: `		item, p = q.pop()
		if linearizeMutant == "take-window" {
			` + window + `
			_, _, p = t.find(item)
		}
		t.takeAt(p)`,
		configs: storeConfigs,
		shape:   mutantShape,
	},
	{
		// Remove finds the key ready and, only after the window, acts
		// on what it finds then: a Get in the window takes the key,
		// and Remove still reports a pending run it cancelled. It is
		// in the path every configuration takes, so its histories use
		// the queues whose key table keeps the order (New and the
		// priority store), with Remove.
		name: "remove-window",
		file: "remove.go",
		old: `		q.dirty--
		if t.isReady(pos) {`,
		new: `		q.dirty--
		if linearizeMutant == "remove-window" {
			` + window + `
			if _, slot, pos = t.find(item); pos < 0 {
				return true
			}
		}
		if t.isReady(pos) {`,
		configs: []string{"New", "PriorityStore"},
		shape:   short,
	},
}

// The first two mutants break the queue only where it keeps a Store, and a
// Remove in their windows would corrupt the key table (and crash, which is
// not the checker's catch), so their histories use the Store
// configurations and no Remove.
var (
	storeConfigs = []string{"FIFOStore", "FairStore"}
	mutantShape  = shape{workers: 4, ops: 10}
)

// mutantHistories bounds the histories TestCatchMutant records before it
// gives up on a mutant.
const mutantHistories = 20000

func TestMutantsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the queue patched, and runs it: skipped with -short")
	}
	core := goOutput(t, "list", "-f", "{{.Dir}}", "github.com/go-coalesce/workqueue")
	patched := map[string]string{}
	for _, m := range mutants {
		src, ok := patched[m.file]
		if !ok {
			b, err := os.ReadFile(filepath.Join(core, m.file))
			if err != nil {
				t.Fatal(err)
			}
			// Each patched file imports runtime for the window (the
			// package clause is followed by its doc or its imports).
			src = strings.Replace(string(b), "package workqueue\n", "package workqueue\n\nimport \"runtime\"\n", 1)
		}
		if strings.Count(src, m.old) != 1 {
			t.Fatalf("mutant %s: %s no longer holds, once, the text it patches:\n%s", m.name, m.file, m.old)
		}
		patched[m.file] = strings.Replace(src, m.old, m.new, 1)
	}
	// The switch, in whichever file comes first.
	patched[mutants[0].file] += "\nvar linearizeMutant = os.Getenv(\"LINEARIZE_MUTANT\")\n"
	patched[mutants[0].file] = strings.Replace(patched[mutants[0].file], "import \"runtime\"\n", "import \"runtime\"\nimport \"os\"\n", 1)

	dir := t.TempDir()
	replace := map[string]string{}
	for file, src := range patched {
		mutated := filepath.Join(dir, file)
		if err := os.WriteFile(mutated, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		replace[filepath.Join(core, file)] = mutated
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "linearizability.test")
	start := time.Now()
	args := []string{"test", "-c", "-o", bin, "-overlay", overlayFile}
	if raceEnabled {
		args = append(args, "-race") // std and the dependencies are then compiled already
	}
	goOutput(t, append(args, ".")...)
	t.Logf("built the mutated queue's tests in %v", time.Since(start).Round(time.Millisecond))

	caught := regexp.MustCompile(`caught .*`)
	for _, m := range mutants {
		cmd := exec.Command(bin, "-test.run", "^TestCatchMutant$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "LINEARIZE_MUTANT="+m.name)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("mutant %s: the checker did not reject its histories (%v):\n%s", m.name, err, out)
			continue
		}
		t.Logf("mutant %s: %s", m.name, caught.Find(out))
		if testing.Verbose() {
			t.Logf("its output, with the rejected history:\n%s", out)
		}
	}
}

// TestCatchMutant runs in the build TestMutantsCaught makes, with
// LINEARIZE_MUTANT naming the mutant: it records histories until the
// checker rejects one, and fails if none is rejected.
func TestCatchMutant(t *testing.T) {
	name := os.Getenv("LINEARIZE_MUTANT")
	if name == "" {
		t.Skip("runs in TestMutantsCaught's build of a mutated queue")
	}
	i := slices.IndexFunc(mutants, func(m mutant) bool { return m.name == name })
	if i < 0 {
		t.Fatalf("LINEARIZE_MUTANT=%s: no such mutant", name)
	}
	m := mutants[i]
	var cs []config
	for _, c := range configs {
		if slices.Contains(m.configs, c.name) {
			cs = append(cs, c)
		}
	}
	seed := baseSeed(t)
	start := time.Now()
	for i := range uint64(mutantHistories) {
		c := cs[i%uint64(len(cs))]
		h := record(c, m.shape, seed+i)
		if res := porcupine.CheckOperationsTimeout(newModel(c.order), h, checkTimeout); res == porcupine.Illegal {
			t.Logf("caught %s on %s after %d histories in %v (seed %d)\n%s", name, c.name, i+1, time.Since(start).Round(time.Millisecond), seed+i, describeHistory(h))
			return
		}
	}
	t.Fatalf("mutant %s not caught in %d histories (seeds from %d)", name, mutantHistories, seed)
}

// goOutput runs the go command in the test's directory and returns its
// output, trimmed; it fails the test if the command fails.
func goOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
