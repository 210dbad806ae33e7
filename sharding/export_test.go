package sharding

import "fmt"

// MergeRanges makes r's primary informer use one watch for all its held
// shards, their ranges merged, restarted whenever they change: the
// alternative shape TestCacheShapes measures. Call it before Run.
func MergeRanges(r *Replica) {
	r.primary.mu.Lock()
	r.primary.merged = true
	r.primary.mu.Unlock()
}

// DebugState describes r's primary informer (the shards it keeps, target,
// against those r admits), for test failures.
func DebugState(r *Replica) string {
	admitted := r.Shards()
	_, alive := r.runs.readiness()
	inf := r.primary
	inf.mu.Lock()
	defer inf.mu.Unlock()
	var loops []int
	for s := range inf.loops {
		loops = append(loops, s)
	}
	return fmt.Sprintf("alive %v admitted %v mode %v decided %v target %v synced %v loops %v objects %d", alive, admitted, inf.mode, inf.decided, inf.target, inf.synced, loops, len(inf.indexer.ListKeys()))
}
