package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-coalesce/workqueue/interop/bench"
	"github.com/stretchr/testify/require"
)

// The performance page's generated section is the summary: the chosen rows
// with their ratio, range and verdict, and a link to PERF.md, not the full
// table.
func TestSummarySectionIsTheSummary(t *testing.T) {
	rep := report{
		rows: []row{
			{w: bench.Workload{Name: "cycle", Theirs: "client-go", Goal: 0.6}, ours: []result{{ns: 45}, {ns: 50}}, theirs: []result{{ns: 100}, {ns: 100}}},
			{w: bench.Workload{Name: "requeue-1000", Theirs: "client-go"}, ours: []result{{ns: 1}}, theirs: []result{{ns: 2}}},
		},
		mem: []memRow{
			{w: bench.MemWorkload{Name: "memory-plain-int", Goal: 0.8}, keys: 1000, ours: []bench.MemResult{{Peak: 57}}, theirs: []bench.MemResult{{Peak: 100}}},
		},
		rounds:  2,
		command: "go run ./cmd/compare",
	}
	s := rep.summarySection("../interop/perf.svg", "../interop/PERF.md")
	require.Contains(t, s, "[interop/PERF.md](../interop/PERF.md)", "the summary links the full table")
	require.Contains(t, s, "![ratios ours/theirs](../interop/perf.svg)", "the summary shows the chart")
	require.Contains(t, s, "| cycle | client-go | **0.47** (0.45–0.50) | ≤ 0.6 ✓ |")
	require.Contains(t, s, "| memory-plain-int (peak heap, 1000 keys) | client-go plain | **0.57** (0.57–0.57) | ≤ 0.8 ✓ |")
	require.NotContains(t, s, "requeue-1000", "rows outside summaryRows stay in PERF.md only")
	require.NotContains(t, s, "ns/op |", "the full table's columns are PERF.md's")
}

// PERF.md is rewritten on every run; the hand-written notes below its
// marker survive, and a file without the marker gets none.
func TestPerfNotesAreKept(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "PERF.md")
	notes, err := keptNotes(path)
	require.NoError(t, err)
	require.Empty(t, notes, "no file, no notes")

	require.NoError(t, os.WriteFile(path, []byte("# old table\n\n"+notesMarker+"\n\n## Notes\n\nwhy the contended rows are bimodal\n"), 0o644))
	notes, err = keptNotes(path)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(notes, "\n"+notesMarker), "the notes start at the marker")
	require.Contains(t, notes, "why the contended rows are bimodal")
	require.NotContains(t, notes, "old table", "the generated part is not kept")
}

// The page the summary is written to by default exists, with its markers,
// and the chart and table it links resolve from it: a page moved or its
// markers edited away fails here, not silently at the next full run.
func TestDefaultSummaryPageHasMarkers(t *testing.T) {
	page := filepath.Join("..", "..", filepath.FromSlash(defaultSummary)) // from interop/cmd/compare
	b, err := os.ReadFile(page)
	require.NoError(t, err, "compare writes its summary into %s by default", defaultSummary)
	s := string(b)
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	require.True(t, i >= 0 && j > i, "%s has the perf markers, begin before end", defaultSummary)
	for _, f := range []string{"perf.svg", "PERF.md"} {
		rel, err := relPath(filepath.Dir(page), filepath.Join("..", "..", f))
		require.NoError(t, err)
		require.Contains(t, s[i:j], "("+filepath.ToSlash(rel)+")", "the summary links %s as compare writes it", f)
	}

	// And writing it keeps the page's text outside the markers.
	tmp := filepath.Join(t.TempDir(), "performance.md")
	require.NoError(t, os.WriteFile(tmp, b, 0o644))
	require.NoError(t, replaceBetweenMarkers(tmp, "NEW SUMMARY"))
	got, err := os.ReadFile(tmp)
	require.NoError(t, err)
	require.Equal(t, s[:i+len(beginMarker)]+"\nNEW SUMMARY\n"+s[j:], string(got))

	require.Error(t, replaceBetweenMarkers(filepath.Join(t.TempDir(), "none.md"), "x"), "a missing page is an error")
	noMarkers := filepath.Join(t.TempDir(), "plain.md")
	require.NoError(t, os.WriteFile(noMarkers, []byte("# page\n"), 0o644))
	require.Error(t, replaceBetweenMarkers(noMarkers, "x"), "a page without the markers is an error")
}
