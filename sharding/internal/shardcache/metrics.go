package shardcache

// The causes of a list, as Config.Listed is told them. Every list sent
// is told once, at its first page (a list that fails and is retried by
// the Reflector is told again, with the same cause).
const (
	// ListInitial is a feed's first list before the informer first
	// synced the shards it holds: the replica's start.
	ListInitial = "initial"
	// ListGain is a feed's first list for shards gained since then: a
	// move to this replica (in client mode, the one feed's restart,
	// which lists every object).
	ListGain = "gain"
	// ListRelist is a feed listing again after its first list was in:
	// its watch ended with 410 Gone (the server no longer had its
	// resourceVersion) or failed.
	ListRelist = "relist"
	// ListDowngrade is the first list of the feed that replaces the
	// per-shard feeds once the server stopped filtering by shard.
	ListDowngrade = "downgrade"
)

// listStarts tells Config.Listed that feed f sends a list request whose
// continue token is cont: the start of a list when cont is empty.
func (inf *Informer) listStarts(f *feed, cont string) {
	if inf.cfg.Listed == nil || cont != "" {
		return
	}
	inf.mu.Lock()
	cause := ListGain
	switch {
	case f.listed:
		cause = ListRelist
	case f.downgrade:
		cause = ListDowngrade
	case !inf.everSynced:
		cause = ListInitial
	}
	resource := inf.resource
	inf.mu.Unlock()
	inf.cfg.Listed(resource, cause)
}
