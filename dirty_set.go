package workqueue

// The dirty set and the processing set of client-go's queue are, here, two
// flags in one table keyed by the key. A key that needs (another) run is
// dirty; a key handed out by Get and not yet Done is processing. Keeping both
// facts (and whether the key waits for a deadline) in one map entry means
// Add, Get and Done hash the key once or twice each instead of four times,
// which is most of what separates a queue from the lock it is built on.
//
// The states of DESIGN.md map onto the flags as follows:
//
//	absent              no entry
//	ready               dirty                (the key is in the store)
//	waiting             waiting              (the key is in the delay heap)
//	processing          processing
//	processing+dirty    processing|dirty     (Done pushes it to the store)
//	processing+waiting  processing|waiting   (Done leaves it waiting)
//
// dirty and waiting are never both set: a key has at most one pending run.

const (
	fDirty      uint8 = 1 << iota // a run is due now: ready, or due again at Done
	fWaiting                      // a run is due at a deadline in the delay heap
	fProcessing                   // handed out by Get, Done not yet called
)

// keyState is what the queue knows of one key. It is stored by value in the
// table, so it is kept small: 16 bytes.
type keyState struct {
	// at is, in queue clock nanoseconds, when a key that is not
	// processing became dirty (for queue latency), or when a processing
	// key's run started (for work duration and the age gauges). Kept
	// only when the queue has metrics.
	at int64
	// prio is the priority of the key's pending run (0 for plain Add). It
	// travels with a processing+dirty key to the store at Done.
	prio int32
	// flags holds fDirty, fWaiting and fProcessing.
	flags uint8
	// gen is the generation of a processing key's run (with metrics), so
	// that the processing set can tell this run's record from an earlier
	// run's.
	gen uint16
}

// shrinkMin is the peak size below which a map is never rebuilt: small maps
// cost little and rebuilding them would be churn.
const shrinkMin = 1024

// shrinkingMap is a map that gives memory back. A Go map never shrinks: one
// that once held a million keys keeps the buckets for a million keys after
// they are deleted. shrinkingMap remembers its peak size and, once it drops
// below an eighth of it, copies the survivors into a fresh map. Each rebuild
// copies at most 1/7 of the deletions since the previous one, so the cost is
// O(1) amortized per delete, and the memory held is at most about eight
// times the live size (or shrinkMin), not the all-time peak.
//
// The zero value is an empty map ready to use. Not safe for concurrent use.
type shrinkingMap[K comparable, V any] struct {
	m    map[K]V
	peak int // largest len(m) since m was made
}

// put sets m[k] = v.
func (s *shrinkingMap[K, V]) put(k K, v V) {
	if s.m == nil {
		s.m = make(map[K]V)
	}
	s.m[k] = v
	if len(s.m) > s.peak {
		s.peak = len(s.m)
	}
}

// del removes k, rebuilding the map if it has emptied far below its peak.
func (s *shrinkingMap[K, V]) del(k K) {
	delete(s.m, k)
	if s.peak >= shrinkMin && len(s.m) < s.peak/8 {
		s.rebuild()
	}
}

func (s *shrinkingMap[K, V]) rebuild() {
	if len(s.m) == 0 {
		s.m = nil
		s.peak = 0
		return
	}
	m := make(map[K]V, len(s.m))
	for k, v := range s.m {
		m[k] = v
	}
	s.m = m
	s.peak = len(m)
}
