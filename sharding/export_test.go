package sharding

import "fmt"

// DebugState describes r's primary informer (the shards it keeps, target,
// against those r admits), for test failures.
func DebugState(r *Replica) string {
	admitted := r.Shards()
	_, alive := r.runs.readiness()
	return fmt.Sprintf("alive %v admitted %v %s", alive, admitted, r.primary.DebugState())
}

// Owed returns the keys r owes a run: those added for an event and the
// catch-up keys of the shards it gained, fed to its queue or not
// (pendingKeys).
func Owed(r *Replica) int {
	r.runs.mu.Lock()
	defer r.runs.mu.Unlock()
	return len(r.runs.pending.at)
}

// CatchUpWindow is catchUpWindow, for the tests of package sharding_test.
const CatchUpWindow = catchUpWindow
