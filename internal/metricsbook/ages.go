package metricsbook

import (
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-coalesce/workqueue"
)

// MaxPriorities bounds the priority label values of one key in a family
// labelled by priority, as controller-runtime bounds its depth's: once a
// key (a queue name) has shown more distinct priorities, its values go
// under the single label value PriorityOverflow, for as long as the
// provider reports.
const (
	MaxPriorities    = 25
	PriorityOverflow = "exceeded_cardinality_limit"
)

// Ages is the bookkeeping of the ready-age gauge
// (workqueue.ReadyAgeMetricsProvider): the queues that report it, by key,
// and the priority labels each key has shown. The rules, beside the Book's:
//
//   - The queues of one key combine by priority: the larger age.
//   - A key's series for a priority appears at the first scrape that finds
//     a ready key at that priority in one of its queues, and stays, at 0
//     while none of its queues has one (as the other gauges stay at 0).
//   - A key that has shown more than MaxPriorities distinct priorities
//     reports one series from then on, labelled PriorityOverflow, with the
//     largest age of any priority: the family's series stay bounded by
//     MaxPriorities+1 per key, however many priorities the queues use.
//
// The zero value is empty, ready to use. Ages is safe for concurrent use.
type Ages[K comparable] struct {
	book Book[AgeSource[K]]

	mu   sync.Mutex          // protects keys and seen
	keys []K                 // every key that has shown a priority, in that order
	seen map[K]*prioritiesOf // by key
}

// AgeSource is what Ages keeps of one queue: its key and its ready-age reader.
type AgeSource[K comparable] struct {
	key  K
	read func(map[int]time.Duration)
}

// prioritiesOf is the priorities one key has shown; overflow is set once
// there were more than MaxPriorities, and then prios is nil.
type prioritiesOf struct {
	prios    map[int]struct{}
	overflow bool
}

// AgeSeries is one series of the ready-age gauge: a key, the priority
// label (a priority in decimal, or PriorityOverflow) and the age.
type AgeSeries[K comparable] struct {
	Key      K
	Priority string
	Age      time.Duration
}

// Add starts reporting the ready ages of a queue of key, whose Stats stats
// reads and whose ages read stores (the queue's ReadyAges); call ShutDown on
// the result from the queue's QueueMetrics.ShutDown.
func (a *Ages[K]) Add(key K, stats func() workqueue.Stats, read func(map[int]time.Duration)) *Queue[AgeSource[K]] {
	return a.book.Add(AgeSource[K]{key: key, read: read}, stats)
}

// Series reads every queue's ready ages and returns the series of every key
// that has shown a priority, in the order keys first showed one and, within
// a key, by priority, highest first.
func (a *Ages[K]) Series() []AgeSeries[K] {
	byKey := map[K]map[int]time.Duration{}
	a.book.Each(func(q *Queue[AgeSource[K]], s workqueue.Stats) {
		if s.Ready == 0 {
			return // nothing to read: skip the second lock
		}
		m := byKey[q.Meta.key]
		if m == nil {
			m = map[int]time.Duration{}
			byKey[q.Meta.key] = m
		}
		q.Meta.read(m) // keeps the larger age per priority
	})

	a.mu.Lock()
	defer a.mu.Unlock()
	for k, m := range byKey {
		a.see(k, m)
	}
	var out []AgeSeries[K]
	for _, k := range a.keys {
		ages, seen := byKey[k], a.seen[k]
		if seen.overflow {
			var oldest time.Duration
			for _, d := range ages {
				oldest = max(oldest, d)
			}
			out = append(out, AgeSeries[K]{Key: k, Priority: PriorityOverflow, Age: oldest})
			continue
		}
		prios := make([]int, 0, len(seen.prios))
		for p := range seen.prios {
			prios = append(prios, p)
		}
		slices.Sort(prios)
		for _, p := range slices.Backward(prios) {
			out = append(out, AgeSeries[K]{Key: k, Priority: strconv.Itoa(p), Age: ages[p]})
		}
	}
	return out
}

// see records the priorities of ages as shown by key. a.mu must be held.
func (a *Ages[K]) see(key K, ages map[int]time.Duration) {
	if len(ages) == 0 {
		return
	}
	s := a.seen[key]
	if s == nil {
		if a.seen == nil {
			a.seen = map[K]*prioritiesOf{}
		}
		s = &prioritiesOf{prios: map[int]struct{}{}}
		a.seen[key] = s
		a.keys = append(a.keys, key)
	}
	if s.overflow {
		return
	}
	for p := range ages {
		s.prios[p] = struct{}{}
	}
	if len(s.prios) > MaxPriorities {
		s.prios, s.overflow = nil, true
	}
}

// Len returns the number of queues whose ages are reported (and kept
// reachable).
func (a *Ages[K]) Len() int { return a.book.Len() }

// Close forgets every queue, as Book.Close: for a provider whose
// collections have stopped for good.
func (a *Ages[K]) Close() { a.book.Close() }
