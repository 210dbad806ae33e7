package main

import (
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestQuickstart runs the program as `go run ./examples/quickstart` does
// and checks every line it prints. Under synctest the clock is virtual, so
// the retry times are exact: the limiter's 10ms, then 20ms more. The lines
// are the README's promise to a newcomer: one run for many Adds, a second
// run after Done for a key changed while processing, two failures retried
// with backoff and forgotten on success, and a drain that handles every
// queued key (one without Drain that leaves them).
func TestQuickstart(t *testing.T) {
	want := `1. Coalescing: many Adds of one key, one run
   11 Adds (10 of default/web, 1 of default/db): Len() = 2
   run default/web
   run default/db
2. A key added while it is processed runs once more after Done
   Get -> default/web (processing)
   2 Adds meanwhile: state processing+dirty, Len() = 0 (no second worker gets it)
   Done: state ready, Len() = 1
   Get -> default/web again, with the latest state to read
3. Run: a handler that fails twice is retried with backoff
     0s  attempt 1 for default/web: fails
         OnError(default/web, "the API server said: conflict", retry=true): requeued after 10ms
   10ms  attempt 2 for default/web: fails
         OnError(default/web, "the API server said: conflict", retry=true): requeued after 20ms
   30ms  attempt 3 for default/web: synced
   Run returned; NumRequeues(default/web) = 0 (forgotten on success)
4. Shutdown: when the context ends, Run with Drain handles every queued key first
   Drain: false  context ended during the 1st key; Run returned: 1 of 5 keys handled, 4 left queued
   Drain: true   context ended during the 1st key; Run returned: 5 of 5 keys handled, 0 left queued
`
	synctest.Test(t, func(t *testing.T) {
		var out strings.Builder
		require.NoError(t, run(&out), "the quickstart must run to the end")
		require.Equal(t, want, out.String(), "the quickstart's output is what README shows a newcomer")
	})
}
