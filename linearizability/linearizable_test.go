package linearizability

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The suite's budget: short histories, many of them. LINEARIZE_LONG=1
// checks longer ones, with more goroutines; LINEARIZE_HISTORIES=n sets how
// many per configuration.
var (
	short = shape{workers: 4, ops: 10, remove: true}
	long  = shape{workers: 8, ops: 40, remove: true}
)

const (
	shortHistories = 5000 // per configuration
	longHistories  = 5000
)

// checkTimeout bounds porcupine's search for one history. The histories are
// far too short to need it; it is there so that a history that is
// unexpectedly hard fails with a message instead of hanging.
const checkTimeout = time.Minute

// baseSeed is the seed of the first history: LINEARIZE_SEED, or drawn. The
// seed fixes each worker's operations; the interleaving is the machine's,
// so a seed replays the same calls, not necessarily the same history.
func baseSeed(t *testing.T) uint64 {
	if s := os.Getenv("LINEARIZE_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LINEARIZE_SEED=%q: %v", s, err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// TestLinearizable records histories of concurrent Add, AddAfter(0),
// AddWithPriority, Get, GetContext, Done, Remove, Len and ShutDown on each
// configuration and checks every one against the specification.
func TestLinearizable(t *testing.T) {
	sh, n := short, shortHistories
	if os.Getenv("LINEARIZE_LONG") != "" {
		sh, n = long, longHistories
	}
	if s := os.Getenv("LINEARIZE_HISTORIES"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("LINEARIZE_HISTORIES=%q: want a positive number", s)
		}
	}
	seed := baseSeed(t)
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			model := newModel(c.order)
			var recording, checking time.Duration
			ops := 0
			for i := range uint64(n) {
				start := time.Now()
				h := record(c, sh, seed+i)
				recording += time.Since(start)
				ops += len(h)
				start = time.Now()
				ok := check(t, model, h, c, seed+i)
				checking += time.Since(start)
				if !ok {
					return
				}
			}
			t.Logf("%d histories of %d workers × %d calls, %d calls in all, recorded in %v, checked in %v (seeds %d..%d)",
				n, sh.workers, sh.ops, ops, recording.Round(time.Millisecond), checking.Round(time.Millisecond), seed, seed+uint64(n)-1)
		})
	}
}

// check reports whether porcupine finds history h linearizable, and fails
// t, with the history and where to see it drawn, if not.
func check(t *testing.T, model porcupine.Model, h []porcupine.Operation, c config, seed uint64) bool {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(model, h, checkTimeout)
	switch res {
	case porcupine.Ok:
		return true
	case porcupine.Unknown:
		t.Errorf("%s, seed %d: porcupine found no answer within %v (%d operations)", c.name, seed, checkTimeout, len(h))
		return false
	}
	t.Errorf("%s, seed %d: history not linearizable (%s)\n%s", c.name, seed, visualize(t, model, info), describeHistory(h))
	return false
}

// visualize writes porcupine's drawing of a rejected history to a file
// kept after the test and says where.
func visualize(t *testing.T, model porcupine.Model, info porcupine.LinearizationInfo) string {
	dir, err := os.MkdirTemp("", "linearizability-")
	if err != nil {
		return "no drawing: " + err.Error()
	}
	path := filepath.Join(dir, "history.html")
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		return "no drawing: " + err.Error()
	}
	return "drawn in " + path
}

// describeHistory lists h by worker, each call with its stamps.
func describeHistory(h []porcupine.Operation) string {
	var b strings.Builder
	for _, op := range h {
		fmt.Fprintf(&b, "  worker %d [%3d,%3d] %s\n", op.ClientId, op.Call, op.Return, describe(op.Input.(input), op.Output.(output)))
	}
	return b.String()
}
