package sharding

import "fmt"

// MergeRanges makes r's primary informer use one watch for all its held
// shards, their ranges merged, restarted whenever they change: the
// alternative shape TestCacheShapes measures. Call it before Run.
func MergeRanges(r *Replica) { r.primary.MergeRanges() }

// DebugState describes r's primary informer (the shards it keeps, target,
// against those r admits), for test failures.
func DebugState(r *Replica) string {
	admitted := r.Shards()
	_, alive := r.runs.readiness()
	return fmt.Sprintf("alive %v admitted %v %s", alive, admitted, r.primary.DebugState())
}
