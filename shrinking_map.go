package workqueue

// shrinkMin is the peak size below which a map is never rebuilt: small maps
// cost little and rebuilding them would be churn.
const shrinkMin = 1024

// keepMax is the largest burst that maps and rings keep room for when it
// recurs (see shrinkingMap and ring): bursts up to this many keys cycle
// without allocating; above it, memory matters more than the allocations of
// growing again.
const keepMax = 16384

// shrinkingMap is a map that gives memory back. A Go map never shrinks: one
// that once held a million keys keeps the buckets for a million keys after
// they are deleted. shrinkingMap remembers the most it has held since it was
// made and, once it drops below an eighth of that, copies the survivors
// into a fresh map. Each rebuild copies at most 1/7 of the deletions since
// the previous one, so the cost is O(1) amortized per delete, and the memory
// held is at most about eight times the live size (or shrinkMin), not the
// all-time peak.
//
// One exception keeps periodic work cheap: when the map empties and fills
// again to about the same size (a resync every few minutes, a batch of
// retries), rebuilding it after each burst would only make the next burst
// grow it again. So a map whose previous burst (the most it held between two
// moments it was empty) reached at least half its size is kept, up to
// keepMax entries. A single large burst still gives its memory back.
//
// The zero value is an empty map ready to use. Not safe for concurrent use.
type shrinkingMap[K comparable, V any] struct {
	m     map[K]V
	peak  int // largest len(m) since m was made: a proxy for its capacity
	burst int // largest len(m) since it was last empty
	prev  int // burst's value when the map last emptied
}

// put sets m[k] = v.
func (s *shrinkingMap[K, V]) put(k K, v V) {
	if s.m == nil {
		s.m = make(map[K]V)
	}
	s.m[k] = v
	if n := len(s.m); n > s.burst {
		s.burst = n
		s.peak = max(s.peak, n)
	}
}

// del removes k, rebuilding the map if it has emptied far below its peak.
func (s *shrinkingMap[K, V]) del(k K) {
	delete(s.m, k)
	s.deleted()
}

// deleted does the bookkeeping after a delete.
func (s *shrinkingMap[K, V]) deleted() {
	n := len(s.m)
	if n == 0 {
		s.prev, s.burst = s.burst, 0
	}
	if s.peak >= shrinkMin && n < s.peak/8 && !s.recurring() {
		s.rebuild()
	}
}

// recurring reports whether the map is sized for a burst that happened
// before: the previous burst filled at least half of it, and was small
// enough to be worth keeping room for.
func (s *shrinkingMap[K, V]) recurring() bool {
	return s.peak <= keepMax && s.prev <= keepMax && 2*s.prev >= s.peak
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
