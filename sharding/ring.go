package sharding

import (
	"fmt"
	"hash/fnv"
	"math/bits"

	"k8s.io/apimachinery/pkg/api/meta"
	kubesharding "k8s.io/apimachinery/pkg/sharding"
)

// The fields an object can be sharded by. They are the field paths of
// KEP-5866's shardRange (k8s.io/apimachinery/pkg/sharding), so a replica
// can hand its ranges to the API server as a ListOptions.ShardSelector.
const (
	// FieldUID shards by object.metadata.uid: objects spread evenly, but a
	// name that is deleted and created again gets a new UID and may land
	// in another shard (see docs/contract.md, "Keys and shards").
	FieldUID = "object.metadata.uid"
	// FieldNamespace shards by object.metadata.namespace: every object of
	// a namespace is in one shard, and a key's shard follows from the key
	// alone.
	FieldNamespace = "object.metadata.namespace"
)

// Hash returns the 64-bit FNV-1a hash of value, the hash KEP-5866 uses
// (apimachinery's sharding.HashField prints the same number in hex).
func Hash(value string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(value)) // never fails
	return h.Sum64()
}

// ShardOf returns the shard of hash in a ring of shards shards, which must
// be a power of two: the top log2(shards) bits of the hash. Shard i is
// therefore the contiguous range [i·2^64/shards, (i+1)·2^64/shards), which
// is what Range prints.
func ShardOf(hash uint64, shards int) int {
	return int(hash >> (64 - bits.TrailingZeros(uint(shards))))
}

// Range returns shard i of a ring of shards shards as a KEP-5866 range
// requirement on field: Start inclusive, End exclusive, both 0x-prefixed
// lowercase hex with 16 digits, except the end of the last shard, which is
// "0x10000000000000000" (2^64), as apimachinery's sharding package wants.
func Range(field string, shards, i int) kubesharding.ShardRangeRequirement {
	return rangeOf(field, shards, i, i+1)
}

// rangeOf returns the range that covers shards [from, to).
func rangeOf(field string, shards, from, to int) kubesharding.ShardRangeRequirement {
	shift := 64 - bits.TrailingZeros(uint(shards))
	bound := func(i int) string {
		if i == shards {
			return "0x10000000000000000"
		}
		if shift == 64 { // one shard: i is 0
			return "0x0000000000000000"
		}
		return fmt.Sprintf("0x%016x", uint64(i)<<shift)
	}
	return kubesharding.ShardRangeRequirement{Key: field, Start: bound(from), End: bound(to)}
}

// Selector returns a KEP-5866 selector that matches the objects of the
// given shards (sorted or not), with adjacent shards merged into one range.
// A selector that matches nothing cannot be written in KEP-5866's syntax,
// so for no shards it returns nil: a replica that holds nothing must not
// list at all.
func Selector(field string, shards int, held []int) kubesharding.Selector {
	if len(held) == 0 {
		return nil
	}
	in := make([]bool, shards)
	for _, s := range held {
		in[s] = true
	}
	var reqs []kubesharding.ShardRangeRequirement
	for i := 0; i < shards; {
		if !in[i] {
			i++
			continue
		}
		j := i
		for j < shards && in[j] {
			j++
		}
		reqs = append(reqs, rangeOf(field, shards, i, j))
		i = j
	}
	return kubesharding.NewSelector(reqs...)
}

// fieldValue returns the value of field in obj, or false if obj has no
// object metadata.
func fieldValue(obj any, field string) (string, bool) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", false
	}
	if field == FieldNamespace {
		return m.GetNamespace(), true
	}
	return string(m.GetUID()), true
}

// validShards reports whether n is a usable shard count: a power of two
// from 1 to 2^16 (Lease names and per-shard state stay small).
func validShards(n int) bool {
	return n >= 1 && n <= 1<<16 && n&(n-1) == 0
}
