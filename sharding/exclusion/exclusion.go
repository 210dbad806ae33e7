// Package exclusion is the exclusion oracle of sharding's tests: one
// Tracker that the replicas of a ring report every handler run to, which
// records as a violation any run that overlaps another replica's, and any
// run that ends without having begun.
//
// Runs overlap if their keys are equal or if their shards' hash ranges
// intersect. Ranges, not Lease names, because a ring can run two shard
// counts at once during a count switch: shard 3 of 16 is the hash range
// [3·2⁶⁴/16, 4·2⁶⁴/16), which holds shards 6 and 7 of 32, other Leases.
// The guarantee the tests check (sharding/docs/contract.md, "Why two
// replicas never run one key at once") is that no two replicas run keys of
// intersecting ranges at any instant; a key check alone would see a broken
// ring only when both replicas happen to run the same key at once.
//
// A test that tracks what replicas admit rather than what they run enters
// each admitted shard as a run whose key is the shard's String.
package exclusion

import (
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"time"
)

// Shard is shard Index of a ring of Count shards, Count a power of two:
// the hash range [Index·2⁶⁴/Count, (Index+1)·2⁶⁴/Count), the keys whose
// 64-bit hash has Index as its top log₂Count bits (sharding.ShardOf). The
// zero Shard means the replica could not tell the key's shard: such a run
// is checked by its key only.
type Shard struct {
	Index, Count int
}

// String returns "Index/Count".
func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// valid reports whether s is a range: Count a power of two, Index in
// [0, Count).
func (s Shard) valid() bool {
	return s.Count > 0 && s.Count&(s.Count-1) == 0 && s.Index >= 0 && s.Index < s.Count
}

// bounds returns the first and last hash of s (both included, so that the
// last shard's end, 2⁶⁴, needs no 65th bit). s must be valid.
func (s Shard) bounds() (first, last uint64) {
	shift := 64 - bits.TrailingZeros(uint(s.Count)) // 64 for one shard: Go shifts it to 0
	first = uint64(s.Index) << shift
	last = uint64(s.Index+1)<<shift - 1 // the last shard: 0 - 1 wraps to 2⁶⁴-1
	return first, last
}

// Overlaps reports whether the hash ranges of s and o intersect, whatever
// their counts. Shards of one count overlap only if they are the same; of
// two counts, if the larger count's shard lies within the smaller's. A
// zero or invalid Shard overlaps nothing.
func (s Shard) Overlaps(o Shard) bool {
	if !s.valid() || !o.valid() {
		return false
	}
	f1, l1 := s.bounds()
	f2, l2 := o.bounds()
	return f1 <= l2 && f2 <= l1
}

// Tracker records the runs of a ring's replicas and their violations. Its
// zero value is ready to use; it is safe for concurrent use (the
// replicas' handlers call it from their workers).
type Tracker struct {
	mu         sync.Mutex    // protects the fields below
	inflight   map[run]Shard // the runs that entered and have not exited
	violations []string      // in the order they were seen
	runs       int           // runs entered
}

type run struct{ replica, key string }

// Enter records that replica starts running key, whose object lies in
// shard s as the replica sees it (its Count is the replica's). It records
// a violation if another replica runs the same key or a key of a shard
// that overlaps s, if this replica already runs key, or if s is neither
// zero nor a valid shard.
func (t *Tracker) Enter(replica, key string, s Shard) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inflight == nil {
		t.inflight = map[run]Shard{}
	}
	if s != (Shard{}) && !s.valid() {
		t.violations = append(t.violations, fmt.Sprintf("%s: %s entered %s in shard %v, which is no shard", stamp(), replica, key, s))
	}
	var clash []string
	for r, rs := range t.inflight {
		switch {
		case r.key == key && r.replica == replica:
			clash = append(clash, fmt.Sprintf("%s already runs it", replica))
		case r.key == key:
			clash = append(clash, fmt.Sprintf("%s runs it (shard %v)", r.replica, rs))
		case r.replica != replica && s.Overlaps(rs):
			clash = append(clash, fmt.Sprintf("%s runs %s of shard %v", r.replica, r.key, rs))
		}
	}
	if len(clash) > 0 {
		slices.Sort(clash) // map order would make the message differ from run to run
		t.violations = append(t.violations, fmt.Sprintf("%s: %s entered %s (shard %v) while %v", stamp(), replica, key, s, clash))
	}
	t.inflight[run{replica, key}] = s
	t.runs++
}

// Exit records that replica's run of key returned. It records a violation
// if replica was not running key: a run that ends without having begun
// means the caller's entries and exits do not pair, and the tracker would
// otherwise miss an overlap it hides.
func (t *Tracker) Exit(replica, key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := run{replica, key}
	if _, ok := t.inflight[r]; !ok {
		t.violations = append(t.violations, fmt.Sprintf("%s: %s left %s, which it was not running", stamp(), replica, key))
		return
	}
	delete(t.inflight, r)
}

// stamp returns the time of day to the millisecond, for a violation's
// message (a synctest bubble's clock inside one).
func stamp() string { return time.Now().Format("15:04:05.000") }

// Violations returns the violations recorded so far, in order.
func (t *Tracker) Violations() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.violations)
}

// Runs returns how many runs have entered.
func (t *Tracker) Runs() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.runs
}

// InFlight returns how many runs have entered and not exited.
func (t *Tracker) InFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.inflight)
}
