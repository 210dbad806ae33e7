package sharding

import "fmt"

// DebugState describes r's primary informer (the shards it keeps, target,
// against those r admits), for test failures.
func DebugState(r *Replica) string {
	admitted := r.Shards()
	_, alive := r.runs.readiness()
	return fmt.Sprintf("alive %v admitted %v %s", alive, admitted, r.primary.DebugState())
}
