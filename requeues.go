package workqueue

import (
	"cmp"
	"slices"
	"time"
)

// The keys that keep failing are the ones with the most requeues, and only
// the rate limiter counts requeues. A RateLimiter can only be asked about a
// key it is given, so a queue cannot rank its keys through the interface
// without asking about every one of them, outside its lock. The limiters of
// this package can do better: they hold the counts, and pick the largest in
// one pass under their own lock. MostRequeued uses that when it can and
// falls back to asking about the keys of a snapshot otherwise.

// keyCount is a key and its requeues.
type keyCount[T comparable] struct {
	key T
	n   int
}

// requeueRanker is implemented by the limiters of this package: they can
// list their n keys with the most requeues, most first. ok is false when
// the limiter cannot say (a MaxOf or WithMaxWait over a limiter from
// elsewhere).
type requeueRanker[T comparable] interface {
	mostRequeued(n int) (top []keyCount[T], ok bool)
}

var (
	_ requeueRanker[int] = (*ItemExponentialFailureRateLimiter[int])(nil)
	_ requeueRanker[int] = (*ItemFastSlowRateLimiter[int])(nil)
	_ requeueRanker[int] = (*BucketRateLimiter[int])(nil)
	_ requeueRanker[int] = (*MaxOfRateLimiter[int])(nil)
	_ requeueRanker[int] = (*WithMaxWaitRateLimiter[int])(nil)
)

// most returns the n keys with the most failures, most first (ties in no
// particular order). One pass over the counts under f.mu, keeping the best
// n in a min-heap: O(keys · log n).
func (f *failureCounts[T]) most(n int) []keyCount[T] {
	f.mu.Lock()
	defer f.mu.Unlock()
	n = min(n, len(f.m.m))
	if n <= 0 {
		return nil
	}
	h := make([]keyCount[T], 0, n)
	for k, c := range f.m.m {
		if len(h) < n {
			h = append(h, keyCount[T]{k, c})
			for i := len(h) - 1; i > 0 && h[i].n < h[(i-1)/2].n; i = (i - 1) / 2 {
				h[i], h[(i-1)/2] = h[(i-1)/2], h[i]
			}
			continue
		}
		if c <= h[0].n {
			continue
		}
		h[0] = keyCount[T]{k, c}
		for i := 0; ; {
			m, l, r := i, 2*i+1, 2*i+2
			if l < n && h[l].n < h[m].n {
				m = l
			}
			if r < n && h[r].n < h[m].n {
				m = r
			}
			if m == i {
				break
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	sortCounts(h)
	return h
}

func sortCounts[T comparable](top []keyCount[T]) {
	slices.SortStableFunc(top, func(a, b keyCount[T]) int { return cmp.Compare(b.n, a.n) })
}

func (r *ItemExponentialFailureRateLimiter[T]) mostRequeued(n int) ([]keyCount[T], bool) {
	return r.failures.most(n), true
}

func (r *ItemFastSlowRateLimiter[T]) mostRequeued(n int) ([]keyCount[T], bool) {
	return r.failures.most(n), true
}

// The bucket counts no key.
func (r *BucketRateLimiter[T]) mostRequeued(int) ([]keyCount[T], bool) { return nil, true }

// mostRequeued ranks by the largest count of the limiters, as NumRequeues
// does. A key among the n first by that maximum is among the n first of
// the limiter that gives it its maximum, so the union of the limiters' own
// top n, re-counted, holds the answer.
func (r *MaxOfRateLimiter[T]) mostRequeued(n int) ([]keyCount[T], bool) {
	var union []keyCount[T]
	for _, l := range r.limiters {
		rk, ok := l.(requeueRanker[T])
		if !ok {
			return nil, false
		}
		top, ok := rk.mostRequeued(n)
		if !ok {
			return nil, false
		}
		union = append(union, top...)
	}
	seen := make(map[T]bool, len(union))
	out := union[:0]
	for _, kc := range union {
		if !seen[kc.key] {
			seen[kc.key] = true
			out = append(out, keyCount[T]{kc.key, r.NumRequeues(kc.key)})
		}
	}
	sortCounts(out)
	return out[:min(n, len(out))], true
}

func (r *WithMaxWaitRateLimiter[T]) mostRequeued(n int) ([]keyCount[T], bool) {
	if r.limiter == nil {
		return nil, true
	}
	if rk, ok := r.limiter.(requeueRanker[T]); ok {
		return rk.mostRequeued(n)
	}
	return nil, false
}

// requeueScan is how many waiting keys MostRequeued asks a limiter from
// elsewhere about, besides the processing and ready keys.
const requeueScan = 1000

// MostRequeued returns up to n keys with the most requeues (NumRequeues
// above zero), most first, each with its state in the queue (KeyAbsent for
// a key the limiter counts that is not queued, such as one given up
// on and not forgotten).
//
// With the limiters of this package (alone or combined by
// NewMaxOfRateLimiter and NewWithMaxWaitRateLimiter) the ranking is exact:
// the limiter picks its largest counts in one pass under its own lock,
// O(counted keys · log n), and the queue then looks the n keys up under
// its lock. Any other limiter can only be asked about a key it is given,
// so the ranking is among the keys of a snapshot (InspectLimited): the
// first n processing and ready keys and the 1000 waiting keys due soonest.
// Either way the counts and states are read a moment apart, not at one
// instant.
func (q *RateLimitingQueue[T]) MostRequeued(n int) []KeyInfo[T] {
	if n <= 0 {
		return nil
	}
	if rk, ok := q.limiter.(requeueRanker[T]); ok {
		if top, ok := rk.mostRequeued(n); ok {
			if len(top) == 0 {
				return nil
			}
			out := make([]KeyInfo[T], len(top))
			q.lock()
			for i, kc := range top {
				out[i] = q.infoOf(kc.key)
				out[i].Requeues = kc.n
			}
			q.mu.Unlock()
			return out
		}
	}
	keys := q.InspectLimited(InspectLimits{Processing: n, Waiting: max(n, requeueScan), Ready: n})
	keys = slices.DeleteFunc(keys, func(e KeyInfo[T]) bool { return e.Requeues <= 0 })
	slices.SortStableFunc(keys, func(a, b KeyInfo[T]) int { return cmp.Compare(b.Requeues, a.Requeues) })
	if len(keys) == 0 {
		return nil
	}
	return slices.Clip(keys[:min(n, len(keys))])
}

// infoOf returns what a snapshot says of item, times included. q.mu must
// be held.
func (q *Queue[T]) infoOf(item T) KeyInfo[T] {
	st, ok := q.entry(item)
	if !ok {
		return KeyInfo[T]{Key: item}
	}
	e := info(item, st)
	if st.flags&fWaiting != 0 {
		e.Due = q.clock.Add(time.Duration(st.when))
	}
	if st.flags&fProcessing != 0 && q.metrics != nil {
		e.Started = q.clock.Add(time.Duration(st.at))
	}
	return e
}
