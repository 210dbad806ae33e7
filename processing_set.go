package workqueue

// The processing flag of a key lives in the key table (dirty_set.go). What
// is kept here is the part of the processing set that only metrics need:
// when each processing key was handed out. It answers "how long has the
// oldest run been going" and "how much unfinished work is there" exactly at
// the moment a scrape asks, without a goroutine recomputing them on a tick.
//
// A queue without metrics never touches it, so its Get and Done stay free of
// clock reads.
type processingSet[T comparable] struct {
	started shrinkingMap[T, int64] // processing key -> Get time, queue clock ns
	sum     int64                  // sum of the values in started
}

// start records that item was handed out at now.
func (p *processingSet[T]) start(item T, now int64) {
	p.started.put(item, now)
	p.sum += now
}

// finish forgets item and returns when it was handed out.
func (p *processingSet[T]) finish(item T) int64 {
	t := p.started.m[item]
	p.started.del(item)
	p.sum -= t
	return t
}

// ages returns the sum of the ages of all processing keys and the age of
// the oldest one, at now. O(n) in the number of processing keys for the
// oldest, which is bounded by the number of workers.
func (p *processingSet[T]) ages(now int64) (unfinished, longest int64) {
	n := int64(len(p.started.m))
	if n == 0 {
		return 0, 0
	}
	oldest := now
	for _, t := range p.started.m {
		oldest = min(oldest, t)
	}
	return n*now - p.sum, now - oldest
}
