package main

import (
	"fmt"

	"github.com/go-coalesce/workqueue/sharding"
)

// The sharding module: a key's shard, and the KEP-5866 selector a replica
// holding some shards would ask the API server for.
func init() {
	register("sharding", func() (string, error) {
		const shards = 16
		s := sharding.ShardOf(sharding.Hash("default"), shards)
		if s < 0 || s >= shards {
			return "", fmt.Errorf("ShardOf = %d, want a shard in [0, %d)", s, shards)
		}
		sel := sharding.Selector(sharding.FieldNamespace, shards, []int{s})
		if sel.String() == "" {
			return "", fmt.Errorf("empty selector for shard %d", s)
		}
		return fmt.Sprintf("namespace default is in shard %d of %d: %s", s, shards, sel), nil
	})
}
