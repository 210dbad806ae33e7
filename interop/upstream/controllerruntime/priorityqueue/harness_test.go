//go:build upstream

package priorityqueue

// The harness around controller-runtime's test files, which
// ../../suites_test.go adds to this package at test time (built with the
// tag upstream, only then). It skips the Ginkgo specs that the suite test
// names in $UPSTREAM_SKIP_SPECS (a JSON object of leaf texts and reasons:
// the specs whose failure on crpriority is a difference listed in
// interop/README.md), so that every other upstream check runs; the suite
// test keeps the list and checks the counts.

import (
	"encoding/json"
	"os"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	"go.uber.org/goleak"

	// The upstream test files import these too. Importing them here keeps
	// their modules in interop/go.mod: go mod tidy reads the files on
	// disk, and the upstream ones are added only at test time.
	_ "github.com/go-logr/logr/funcr"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/google/gofuzz"
	_ "github.com/onsi/gomega"
	_ "sigs.k8s.io/randfill"
)

// skippedSpecs maps an upstream spec's leaf text to the reason it is
// skipped.
var skippedSpecs map[string]string

var _ = BeforeEach(func() {
	if reason, ok := skippedSpecs[CurrentSpecReport().LeafNodeText]; ok {
		Skip(backend + ": " + reason)
	}
})

func TestMain(m *testing.M) {
	if s := os.Getenv("UPSTREAM_SKIP_SPECS"); s != "" {
		if err := json.Unmarshal([]byte(s), &skippedSpecs); err != nil {
			panic("priorityqueue: UPSTREAM_SKIP_SPECS: " + err.Error())
		}
	}
	opts := []goleak.Option{
		// Ginkgo's signal watcher lives as long as the process.
		goleak.IgnoreTopFunction("github.com/onsi/ginkgo/v2/internal/interrupt_handler.(*InterruptHandler).registerForInterrupts.func2"),
		// The upstream spec "updates metrics correctly when an item with
		// after is re-added with higher priority and no after" ends
		// holding the fake provider's lock; a reading of the metrics
		// bridge started before then waits for it for ever (as
		// controller-runtime's own unfinished-work loop would, had its
		// 500 ms tick come).
		goleak.IgnoreAnyFunction("github.com/go-coalesce/workqueue/interop/upstream/controllerruntime/priorityqueue.(*metricsBridge).sync"),
	}
	// With -tags crupstream: upstream's specs leave some of its queues
	// running (its suite checks no leaks); their goroutines stay.
	for _, f := range []string{"handleAddBuffer", "handleReadyItems", "handleWaitingItems", "logState", "updateUnfinishedWorkLoop"} {
		opts = append(opts, goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...])."+f))
	}
	goleak.VerifyTestMain(m, opts...)
}
