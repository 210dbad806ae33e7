// Command compare runs the workloads of package bench on our queue and on
// client-go's (controller-runtime's priority queue for priorities),
// interleaved in one process so that both see the same machine, and reports
// the medians and the ratios ours/theirs.
//
// From the interop folder:
//
//	go run ./cmd/compare          # full run, 1-2 minutes
//	go run ./cmd/compare -quick   # CI-sized run, a few seconds
//
// It prints a Markdown table and writes PERF.md (the table and the machine),
// perf.svg (a bar chart of the ratios) and, between the perf markers of the
// repository's docs/performance.md, the summary of the goals' rows.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-coalesce/workqueue/interop/bench"
)

func main() {
	// testing.Init registers the test binary's flags (test.benchtime,
	// which testing.Benchmark reads, and many more) on flag.CommandLine.
	// compare's own flags live in a set of their own, so that -h lists
	// only them.
	testing.Init()
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./cmd/compare [flags]\n\n"+
			"Runs every workload on our queue and on client-go's (controller-runtime's for priorities),\n"+
			"interleaved, and writes PERF.md, perf.svg and the summary in docs/performance.md.\n\nflags:\n")
		fs.PrintDefaults()
	}
	var (
		quick     = fs.Bool("quick", false, "CI-sized run: one round, short benchmarks, 100k keys for memory")
		rounds    = fs.Int("rounds", 7, "rounds of interleaved runs; the median is reported")
		benchtime = fs.Duration("benchtime", 300*time.Millisecond, "time per benchmark run")
		memKeys   = fs.Int("memkeys", 1_000_000, "keys in the memory burst")
		out       = fs.String("out", ".", "folder to write PERF.md and perf.svg into")
		summaryTo = fs.String("summary", defaultSummary, "file whose perf markers get the summary (\"\" for none)")
		only      = fs.String("only", "", "run only workloads whose name contains this")
	)
	_ = fs.Parse(os.Args[1:])
	if *quick {
		*rounds, *benchtime, *memKeys = 1, 20*time.Millisecond, 100_000
	}
	if err := flag.Set("test.benchtime", benchtime.String()); err != nil {
		fail(err)
	}

	start := time.Now()
	var rows []row
	workloads := bench.Workloads()
	for _, w := range workloads {
		if strings.Contains(w.Name, *only) {
			rows = append(rows, row{w: w})
		}
	}
	for r := range *rounds {
		fmt.Fprintf(os.Stderr, "round %d/%d\n", r+1, *rounds)
		for i := range rows {
			// Alternate who goes first, so that neither always runs
			// on a cache warmed (or a heap grown) by the other.
			if r%2 == 0 {
				rows[i].ours = append(rows[i].ours, run(rows[i].w.RunOurs))
				rows[i].theirs = append(rows[i].theirs, run(rows[i].w.RunTheirs))
			} else {
				rows[i].theirs = append(rows[i].theirs, run(rows[i].w.RunTheirs))
				rows[i].ours = append(rows[i].ours, run(rows[i].w.RunOurs))
			}
			if rows[i].floors == nil {
				rows[i].floors = make([][]result, len(rows[i].w.Floors))
			}
			for j, f := range rows[i].w.Floors {
				rows[i].floors[j] = append(rows[i].floors[j], run(f.Run))
			}
		}
	}
	var mem []memRow
	for _, w := range bench.MemWorkloads() {
		if strings.Contains(w.Name, *only) {
			mem = append(mem, memRow{w: w, keys: *memKeys})
		}
	}
	memRounds := min(*rounds, 3)
	for r := range memRounds {
		fmt.Fprintf(os.Stderr, "memory %d/%d\n", r+1, memRounds)
		for i := range mem {
			m := &mem[i]
			if r%2 == 0 {
				m.ours = append(m.ours, m.w.RunOurs(m.keys))
				m.theirs = append(m.theirs, m.w.RunTheirs(m.keys))
			} else {
				m.theirs = append(m.theirs, m.w.RunTheirs(m.keys))
				m.ours = append(m.ours, m.w.RunOurs(m.keys))
			}
			if m.w.RunFloor != nil {
				m.floor = append(m.floor, m.w.RunFloor(m.keys))
			}
		}
	}

	rep := report{
		rows:    rows,
		mem:     mem,
		rounds:  *rounds,
		bt:      *benchtime,
		quick:   *quick,
		took:    time.Since(start),
		when:    time.Now().UTC(),
		command: "go run ./cmd/compare" + map[bool]string{true: " -quick"}[*quick],
	}
	table := rep.table()
	fmt.Println(table)
	fmt.Printf("took %v\n", rep.took.Round(time.Second))

	notes, err := keptNotes(*out + "/PERF.md")
	if err != nil {
		fail(err)
	}
	if err := os.WriteFile(*out+"/PERF.md", []byte(rep.perfMD(table)+notes), 0o644); err != nil {
		fail(err)
	}
	if err := os.WriteFile(*out+"/perf.svg", []byte(rep.svg()), 0o644); err != nil {
		fail(err)
	}
	if *summaryTo != "" {
		svg, err := relPath(filepath.Dir(*summaryTo), filepath.Join(*out, "perf.svg"))
		if err != nil {
			fail(err)
		}
		perf, err := relPath(filepath.Dir(*summaryTo), filepath.Join(*out, "PERF.md"))
		if err != nil {
			fail(err)
		}
		if err := replaceBetweenMarkers(*summaryTo, rep.summarySection(filepath.ToSlash(svg), filepath.ToSlash(perf))); err != nil {
			fail(err)
		}
	}
}

// relPath is target relative to dir, both given relative to the working
// directory (filepath.Rel cannot relate ".." to "perf.svg" on its own).
func relPath(dir, target string) (string, error) {
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	absTarget, err := filepath.Abs(target)
	if err != nil {
		return "", err
	}
	return filepath.Rel(absDir, absTarget)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "compare:", err)
	os.Exit(1)
}

// result is one benchmark run.
type result struct {
	ns, bytes, allocs float64 // per op
}

func run(f func(*testing.B)) result {
	r := testing.Benchmark(f)
	if r.N == 0 {
		fail(fmt.Errorf("a benchmark failed"))
	}
	return result{
		ns:     float64(r.T.Nanoseconds()) / float64(r.N),
		bytes:  float64(r.MemBytes) / float64(r.N),
		allocs: float64(r.MemAllocs) / float64(r.N),
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func medianResult(rs []result) result {
	pick := func(f func(result) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return median(xs)
	}
	return result{
		ns:     pick(func(r result) float64 { return r.ns }),
		bytes:  pick(func(r result) float64 { return r.bytes }),
		allocs: pick(func(r result) float64 { return r.allocs }),
	}
}

// medianMem is the median peak and the median kept of the rounds.
func medianMem(ms []bench.MemResult) bench.MemResult {
	peaks := make([]float64, len(ms))
	kept := make([]float64, len(ms))
	for i, m := range ms {
		peaks[i], kept[i] = float64(m.Peak), float64(m.Kept)
	}
	return bench.MemResult{Peak: uint64(median(peaks)), Kept: uint64(median(kept))}
}

type row struct {
	w            bench.Workload
	ours, theirs []result
	floors       [][]result // one series per w.Floors
}

// ratio is the median over the rounds of ours/theirs within each round.
func (r row) ratio() float64 { return perRound(r.ours, r.theirs) }

// floorRatios is ratio's counterpart for each floor, as "0.23" for a sole
// floor and "0.23 slots · 0.29 map" for several, or a dash for none.
func (r row) floorRatios() string {
	if len(r.floors) == 0 {
		return "—"
	}
	parts := make([]string, len(r.floors))
	for j, f := range r.floors {
		parts[j] = strings.TrimSpace(fmt.Sprintf("%.2f %s", perRound(f, r.theirs), r.w.Floors[j].Name))
		// ours/floor is shown for every floor, not only where a goal
		// names one: how close ours runs to the least the workload needs
		// is the figure a reader checks a "near the floor" claim against.
		o := perRound(r.ours, f)
		if g := r.w.Floors[j].Goal; g > 0 {
			parts[j] += fmt.Sprintf(" (ours/floor %.2f %s)", o, verdict(o, g))
		} else {
			parts[j] += fmt.Sprintf(" (ours/floor %.2f)", o)
		}
	}
	return strings.Join(parts, " · ")
}

// slowMode is, for a bimodal workload, the ratio of the medians of the
// slower half of each library's rounds: how the two compare when both are
// in their slow mode, whichever rounds that happened in.
func (r row) slowMode() float64 {
	slow := func(rs []result) float64 {
		ns := make([]float64, len(rs))
		for i, x := range rs {
			ns[i] = x.ns
		}
		slices.Sort(ns)
		return median(ns[len(ns)/2:])
	}
	return slow(r.ours) / slow(r.theirs)
}

// spread is the lowest and highest of the rounds' ratios.
func (r row) spread() (lo, hi float64) {
	lo, hi = math.Inf(1), 0
	for i := range r.ours {
		x := r.ours[i].ns / r.theirs[i].ns
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}

// perRound is the median over the rounds of a[i]/b[i]. The two runs of one
// round are adjacent in time, so a change of load on the machine between
// rounds cancels out, which it does not in a ratio of medians.
func perRound(a, b []result) float64 {
	rs := make([]float64, len(a))
	for i := range a {
		rs[i] = a[i].ns / b[i].ns
	}
	return median(rs)
}

type memRow struct {
	w            bench.MemWorkload
	keys         int
	ours, theirs []bench.MemResult
	floor        []bench.MemResult // when w.RunFloor is set
}

// peakRatio is the median over the rounds of ours/theirs peak growth.
func (m memRow) peakRatio() float64 {
	rs := make([]float64, len(m.ours))
	for i := range m.ours {
		rs[i] = float64(m.ours[i].Peak) / math.Max(1, float64(m.theirs[i].Peak))
	}
	return median(rs)
}

// spread is the lowest and highest of the rounds' peak ratios.
func (m memRow) spread() (lo, hi float64) {
	lo, hi = math.Inf(1), 0
	for i := range m.ours {
		r := float64(m.ours[i].Peak) / math.Max(1, float64(m.theirs[i].Peak))
		lo, hi = math.Min(lo, r), math.Max(hi, r)
	}
	return lo, hi
}

// keptShare is the part of the heap grown for the burst that is still held
// after the drain.
func keptShare(m bench.MemResult) float64 {
	if m.Peak == 0 {
		return 0
	}
	return float64(m.Kept) / float64(m.Peak)
}

type report struct {
	rows    []row
	mem     []memRow
	rounds  int
	bt      time.Duration
	quick   bool
	took    time.Duration
	when    time.Time
	command string
}

// bar is one bar of the chart.
type bar struct {
	label string
	ratio float64
	goal  float64
}

func (rep report) bars() []bar {
	var bs []bar
	for _, r := range rep.rows {
		bs = append(bs, bar{r.w.Name + " vs " + r.w.Theirs, r.ratio(), r.w.Goal})
	}
	if o, c, f := rep.metricsOverhead(); o > 0 {
		bs = append(bs, bar{"metrics on / off (ours)", o, 0}, bar{"metrics on / off (client-go)", c, 0})
		if f > 0 {
			bs = append(bs, bar{"metrics on / off (floor)", f, 0})
		}
	}
	for _, m := range rep.mem {
		bs = append(bs, bar{m.w.Name + " peak vs client-go", m.peakRatio(), m.w.Goal})
	}
	return bs
}

// metricsOverhead returns cycle-metrics/cycle for ours, for client-go and
// for the floor (which reads the clock three times with metrics on).
func (rep report) metricsOverhead() (ours, theirs, floor float64) {
	var plain, metrics *row
	for i := range rep.rows {
		switch rep.rows[i].w.Name {
		case "cycle":
			plain = &rep.rows[i]
		case "cycle-metrics":
			metrics = &rep.rows[i]
		}
	}
	if plain == nil || metrics == nil {
		return 0, 0, 0
	}
	if len(metrics.floors) > 0 && len(plain.floors) > 0 {
		floor = perRound(metrics.floors[0], plain.floors[0])
	}
	return perRound(metrics.ours, plain.ours), perRound(metrics.theirs, plain.theirs), floor
}

func verdict(ratio, goal float64) string {
	switch {
	case goal == 0:
		return "—"
	case ratio <= goal:
		return fmt.Sprintf("≤ %.2g ✓", goal)
	default:
		return fmt.Sprintf("≤ %.2g ✗", goal)
	}
}

func bytesString(b uint64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

func (rep report) table() string {
	var sb strings.Builder
	sb.WriteString("| workload | ours ns/op | ours B/op | ours allocs/op | theirs | theirs ns/op | theirs B/op | theirs allocs/op | ours/theirs | goal | floor/theirs |\n")
	sb.WriteString("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: |\n")
	for _, r := range rep.rows {
		o, t := medianResult(r.ours), medianResult(r.theirs)
		lo, hi := r.spread()
		ratio := fmt.Sprintf("**%.2f** (%.2f–%.2f)", r.ratio(), lo, hi)
		goal := verdict(r.ratio(), r.w.Goal)
		if r.w.Bimodal {
			ratio += fmt.Sprintf(", slow half %.2f", r.slowMode())
			goal += fmt.Sprintf(", slow half %s", verdict(r.slowMode(), r.w.Goal))
		}
		fmt.Fprintf(&sb, "| %s | %.1f | %.0f | %.2f | %s | %.1f | %.0f | %.2f | %s | %s | %s |\n",
			r.w.Name, o.ns, o.bytes, o.allocs, r.w.Theirs, t.ns, t.bytes, t.allocs, ratio, goal,
			r.floorRatios())
	}
	if o, c, f := rep.metricsOverhead(); o > 0 {
		floor := "—"
		if f > 0 {
			floor = fmt.Sprintf("floor %.2fx", f)
		}
		fmt.Fprintf(&sb, "| metrics on / off | %.2fx | | | client-go | %.2fx | | | | %s | %s |\n", o, c, "—", floor)
	}
	for _, m := range rep.mem {
		o, t := medianMem(m.ours), medianMem(m.theirs)
		lo, hi := m.spread()
		kept := keptShare(o)
		floor := ""
		if len(m.floor) > 0 {
			floor = fmt.Sprintf("floor %.2f (%s); ", float64(medianMem(m.floor).Peak)/math.Max(1, float64(t.Peak)), bytesString(medianMem(m.floor).Peak))
		}
		fmt.Fprintf(&sb, "| %s: %d keys, peak growth | %s | | | client-go plain | %s | | | **%.2f** (%.2f–%.2f) | %s | %skept after drain: %s (%.2f%% of peak) %s |\n",
			m.w.Name, m.keys, bytesString(o.Peak), bytesString(t.Peak), m.peakRatio(), lo, hi, verdict(m.peakRatio(), m.w.Goal),
			floor, bytesString(o.Kept), 100*kept, map[bool]string{true: "≤ 10% ✓", false: "≤ 10% ✗"}[kept <= 0.1])
	}
	return sb.String()
}

func (rep report) machine() string {
	return fmt.Sprintf("%s/%s, %d CPUs (GOMAXPROCS %d), %s, %s",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(),
		rep.when.Format("2006-01-02 15:04 UTC"))
}

func (rep report) method() string {
	return fmt.Sprintf("`%s`: %d round(s), each workload run with testing.Benchmark for %v on ours and then on theirs "+
		"(the order alternates by round); ns/op, B/op and allocs/op are medians of the rounds, and ours/theirs is the median "+
		"of each round's ratio, below 1 is faster. "+
		"Took %v.", rep.command, rep.rounds, rep.bt, rep.took.Round(time.Second))
}

// defaultSummary is the file, relative to the interop folder, whose perf
// markers get the summary: the repository's performance page.
const defaultSummary = "../docs/performance.md"

// summarySection is what goes between the perf markers of the performance
// page: the summary table and links to the chart and to PERF.md, whose
// paths relative to the page are svg and perf. The full table is PERF.md's
// alone, so that the page stays short.
func (rep report) summarySection(svg, perf string) string {
	return fmt.Sprintf("Measured on %s with `%s`, %d rounds; ours/theirs is the median of the rounds' ratios "+
		"(their range in parentheses), below 1 is faster. Every row, with ns/op, allocations, floors and "+
		"what each workload does: [%s](%s).\n\n![ratios ours/theirs](%s)\n\n%s",
		rep.machine(), rep.command, rep.rounds, linkText(perf), perf, svg, rep.summary())
}

// linkText is a relative path as a link shows it: from the repository's
// root, without the leading ../ that reach it from the page.
func linkText(p string) string {
	for {
		q, ok := strings.CutPrefix(p, "../")
		if !ok {
			q, ok = strings.CutPrefix(p, "./")
		}
		if !ok {
			return p
		}
		p = q
	}
}

// summaryRows are the rows of the summary: one of each kind of
// workload (a plain cycle, metrics, a burst, a hot key, delays,
// priorities, contention, a worker pool, memory). PERF.md has all rows.
var summaryRows = map[string]bool{
	"cycle": true, "cycle-metrics": true, "burst-1000": true, "hot-key-x10": true,
	"addafter-10k": true, "priority-1000": true, "distinct-x8-int": true, "pool-2x32-int": true,
	"memory-plain-int": true, "memory-plain-string": true, "memory-metrics-int": true, "memory-priority-int": true,
}

// summary is the performance page's table: for each of summaryRows, what it is
// compared with, the ratio with its range, and the goal's verdict.
func (rep report) summary() string {
	var sb strings.Builder
	sb.WriteString("| workload | against | ours/theirs | goal |\n")
	sb.WriteString("| --- | --- | ---: | --- |\n")
	for _, r := range rep.rows {
		if !summaryRows[r.w.Name] {
			continue
		}
		lo, hi := r.spread()
		fmt.Fprintf(&sb, "| %s | %s | **%.2f** (%.2f–%.2f) | %s |\n", r.w.Name, r.w.Theirs, r.ratio(), lo, hi, verdict(r.ratio(), r.w.Goal))
	}
	for _, m := range rep.mem {
		if !summaryRows[m.w.Name] {
			continue
		}
		lo, hi := m.spread()
		fmt.Fprintf(&sb, "| %s (peak heap, %d keys) | client-go plain | **%.2f** (%.2f–%.2f) | %s |\n",
			m.w.Name, m.keys, m.peakRatio(), lo, hi, verdict(m.peakRatio(), m.w.Goal))
	}
	return sb.String()
}

// notesMarker starts the hand-written part of PERF.md (what the figures
// mean, how the contended rows were diagnosed): everything from it to the
// end of the file is kept when the file is written again.
const notesMarker = "<!-- notes: written by hand; go run ./cmd/compare keeps everything below this line -->"

// keptNotes returns the hand-written part of the PERF.md at path, from
// notesMarker on, preceded by a blank line; "" if there is none.
func keptNotes(path string) (string, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	i := strings.Index(string(b), notesMarker)
	if i < 0 {
		return "", nil
	}
	return "\n" + string(b[i:]), nil
}

func (rep report) perfMD(table string) string {
	var sb strings.Builder
	sb.WriteString("# Performance: ours against client-go and controller-runtime\n\n")
	sb.WriteString("Written by `go run ./cmd/compare` in the interop module; do not edit by hand above the notes marker (the notes below it are kept).\n\n")
	fmt.Fprintf(&sb, "- Machine: %s\n", rep.machine())
	fmt.Fprintf(&sb, "- Method: %s\n\n", rep.method())
	sb.WriteString("![ratios ours/theirs](perf.svg)\n\n")
	sb.WriteString(table)
	sb.WriteString("\nWorkloads (one op is):\n\n")
	for _, r := range rep.rows {
		fmt.Fprintf(&sb, "- `%s`: %s.\n", r.w.Name, r.w.Doc)
	}
	sb.WriteString("- `metrics on / off`: ns/op of cycle-metrics ÷ cycle, for each library (no goal: the goals are cycle-metrics against client-go and against the floor with clock reads), " +
		"and for the floor, whose only metrics work is the three clock reads that exact durations need.\n")
	sb.WriteString("- `floor/theirs`: the same workload on a floor (bench/floor.go, and the core module's internal/benchwork for the floors its benchmarks share), which does only the work its protocol " +
		"cannot avoid and nothing else; no queue can do better on this machine, so a goal below the floor's ratio is out of reach here. " +
		"addafter-10k has two: `slots` keeps key state in an array reached through an index, `map` in a map of states as ours does. " +
		"The contention rows' `plain` floor is one sync.Mutex, a map, a slice and a sync.Cond (the floor of the contention goals); their `backoff` floor is the same " +
		"code taking its lock as our queue does (a TryLock that backs off before it parks, lock.go in the core module), the floor for a queue with that lock. " +
		"ours/floor is the median of each round's ratio of ours to that floor, with a verdict where a goal names the floor.\n")
	sb.WriteString("- `memory-*`: live heap (after GC) grown by adding that many distinct keys to our queue in the named configuration, " +
		"against client-go's plain queue with the same keys, and what ours still holds once they are all drained while the queue is " +
		"still referenced; the keys themselves are not counted. Medians of up to 3 interleaved rounds, with the rounds' range. " +
		"The plain rows' floor is the contention floor (a Go map of one flag per key and a ring): the least a queue that keeps a " +
		"Go map and a separate FIFO can hold. Ours is below it because its plain queue keeps no Go map: its ordered table " +
		"(ordered_table.go) is the key table and the FIFO at once, and stores each key once.\n")
	sb.WriteString("- `slow half`: the contended rows are bimodal (see the notes below); this compares the medians of the slower half of " +
		"each library's rounds.\n")
	if rep.quick {
		sb.WriteString("\nThis was a -quick run: numbers are indicative only.\n")
	}
	return sb.String()
}

// svg draws the ratios as horizontal bars on a linear scale, with a line at
// 1.0 (as fast as theirs) and a tick at each goal. Hand-written: no
// dependencies.
func (rep report) svg() string {
	bs := rep.bars()
	const (
		left, right = 250.0, 70.0
		width       = 820.0
		barH, gap   = 18.0, 8.0
		top         = 56.0
	)
	scaleMax := 1.25
	for _, b := range bs {
		scaleMax = math.Max(scaleMax, math.Min(b.ratio, 3)*1.05)
	}
	plotW := width - left - right
	x := func(v float64) float64 { return left + plotW*math.Min(v, scaleMax)/scaleMax }
	height := top + float64(len(bs))*(barH+gap) + 56
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&sb, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&sb, `<text x="%.0f" y="20" font-size="14" font-weight="bold">ours ÷ theirs (time; memory kept): below 1.0 is better</text>`+"\n", left)
	// grid
	for v := 0.0; v <= scaleMax+1e-9; v += 0.25 {
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#ddd"/>`+"\n", x(v), top-6, x(v), height-46)
		fmt.Fprintf(&sb, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#666">%.2f</text>`+"\n", x(v), height-32, v)
	}
	for i, b := range bs {
		y := top + float64(i)*(barH+gap)
		color := "#4c78a8"
		if b.goal > 0 && b.ratio > b.goal {
			color = "#e45756"
		}
		fmt.Fprintf(&sb, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-8, y+barH-5, escape(b.label))
		fmt.Fprintf(&sb, `<rect x="%.0f" y="%.1f" width="%.1f" height="%.0f" fill="%s"/>`+"\n", left, y, x(b.ratio)-left, barH, color)
		fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x(math.Max(b.ratio, b.goal))+5, y+barH-5, ratioString(b.ratio))
		if b.goal > 0 {
			fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-width="2" stroke-dasharray="3,2"><title>goal %.2f</title></line>`+"\n",
				x(b.goal), y-2, x(b.goal), y+barH+2, b.goal)
		}
	}
	fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="black" stroke-width="1.5"/>`+"\n", x(1), top-10, x(1), height-46)
	fmt.Fprintf(&sb, `<text x="%.1f" y="%.0f" text-anchor="middle">1.0 = as theirs</text>`+"\n", x(1), top-14)
	fmt.Fprintf(&sb, `<text x="%.0f" y="%.0f" fill="#666">dotted tick: goal · red bar: goal missed · metrics rows: on ÷ off within one library</text>`+"\n", 10.0, height-16)
	fmt.Fprintf(&sb, `<text x="%.0f" y="%.0f" fill="#666">%s</text>`+"\n", 10.0, height-2, escape(rep.machine()))
	sb.WriteString("</svg>\n")
	return sb.String()
}

// ratioString shows small ratios with enough digits to tell them from 0.
func ratioString(r float64) string {
	switch {
	case r < 0.01:
		return fmt.Sprintf("%.2g", r)
	case r < 0.1:
		return fmt.Sprintf("%.3f", r)
	}
	return fmt.Sprintf("%.2f", r)
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

const (
	beginMarker = "<!-- perf:begin (written by go run ./cmd/compare) -->"
	endMarker   = "<!-- perf:end -->"
)

// replaceBetweenMarkers puts section between the perf markers of the file
// at path. A file that is missing or lacks the markers is an error, so that
// a moved or edited page does not silently stop getting the figures.
func replaceBetweenMarkers(path, section string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i := strings.Index(s, beginMarker)
	j := strings.Index(s, endMarker)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s ... %s markers to write the summary between", path, beginMarker, endMarker)
	}
	s = s[:i+len(beginMarker)] + "\n" + section + "\n" + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}
