package sharding

import "time"

// This file is what a replica knows of the load of the shards it holds,
// and of the others' (their AnnotationReport): the measure that balance
// by load and the ring's scaling signal are computed from.

// shardLoad is the load of one held shard, as its holder measured it.
type shardLoad struct {
	// work is the handler time of the shard's runs over the last
	// loadWindow (reconcile time per minute, summed over the workers).
	work time.Duration
	// ready is the number of the shard's keys waiting in the queue, and
	// oldest the age of the oldest of them (zero if none).
	ready  int
	oldest time.Duration
}

// loadWindow is the span over which a shard's work is measured.
const loadWindow = time.Minute

// memberLoad is one member's load, as its last membership write
// reported it (AnnotationReport): its held shards with their load (known
// false on a shard whose load it does not measure), and its workers (0:
// not reported).
type memberLoad struct {
	held    []heldShard
	workers int
}
