package sharding

// MergeRanges makes r's primary informer use one watch for all its held
// shards, their ranges merged, restarted whenever they change: the
// alternative shape TestCacheShapes measures. Call it before Run.
func MergeRanges(r *Replica) {
	r.primary.mu.Lock()
	r.primary.merged = true
	r.primary.mu.Unlock()
}
