// Package metricsbook is the bookkeeping that every metrics provider of
// this repository does the same way: which queues still have gauges to
// report, how the gauges of queues reported as one combine, and when a
// shut-down queue is forgotten. The Prometheus adapter (prometheus/), the
// OpenTelemetry adapter (otel/) and the host-family adapter
// (interop/hostmetrics) each keep one Book and differ only in where the
// values go.
//
// The rules, written once here:
//
//   - A queue is read when scraped, through the stats function its
//     provider was given: one call per queue per Each (a provider that
//     reads several families by Each reads its queues that many times),
//     made without any lock of the Book held, so a scrape never holds two
//     locks at once.
//   - Queues reported as one (the same name, or the same labels) add up
//     their depth, delayed keys and unfinished work; their longest running
//     processor is the larger of theirs (Gauges.Add).
//   - A queue that has shut down keeps its gauges while it has keys ready,
//     waiting or processing. The first scrape that finds it shut down with
//     none reports nothing for it and forgets it, so the provider no longer
//     keeps it reachable. A queue never shut down is kept for as long as the
//     Book is (or until Close).
//   - Forgetting a queue does not take its series away: a key (a name) that
//     has had a queue keeps its gauges, at 0 once no queue of it is left,
//     for as long as the provider reports (Keys, KeptTotals). This is what
//     the hosts show: client-go's series (component-base's provider,
//     controller-runtime's) are never deleted, and an idle queue's read 0.
//     It costs a provider nothing it did not already pay: its counters and
//     histograms keep one series per key forever too, and a key holds no
//     reference to any queue. A provider whose host keeps the series itself
//     (interop/hostmetrics) needs no Keys.
//
// The package is internal to the core module's path, so only this
// repository's modules import it; but an older release of prometheus/, otel/
// or interop/ may be built against a newer core (a user's go.mod picks the
// newest core any module requires), so its API changes only as an exported
// API would: add, never change or remove.
package metricsbook

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-coalesce/workqueue"
)

// Book holds the queues whose gauges a provider reports, in the order they
// were added. M is what the provider needs to report a queue: its name, its
// labels, its priority counts.
//
// The zero value is an empty Book, ready to use. A Book is safe for
// concurrent use.
type Book[M any] struct {
	mu     sync.Mutex  // protects queues and closed
	queues []*Queue[M] // queues still reported, in the order of Add
	closed bool        // set by Close: queues stays empty
}

// Queue is one queue in a Book.
type Queue[M any] struct {
	// Meta is what Add was given; read-only.
	Meta     M
	stats    func() workqueue.Stats
	shutDown atomic.Bool // set by ShutDown
}

// Add starts reporting a queue, whose Stats stats reads (the function a
// MetricsProvider is given), and returns it; call ShutDown on it from the
// queue's QueueMetrics.ShutDown. After Close, the queue is returned but not
// kept.
func (b *Book[M]) Add(meta M, stats func() workqueue.Stats) *Queue[M] {
	q := &Queue[M]{Meta: meta, stats: stats}
	b.mu.Lock()
	if !b.closed {
		b.queues = append(b.queues, q)
	}
	b.mu.Unlock()
	return q
}

// ShutDown marks the queue as shut down; the next scrapes decide, from its
// Stats, when it is forgotten. For QueueMetrics.ShutDown.
func (q *Queue[M]) ShutDown() { q.shutDown.Store(true) }

// Len returns the number of queues the Book reports (and keeps reachable).
func (b *Book[M]) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queues)
}

// Close forgets every queue, and every queue added from now on: for a
// provider whose scrapes have stopped for good. Each returns false from
// then on.
func (b *Book[M]) Close() {
	b.mu.Lock()
	clear(b.queues)
	b.queues = nil
	b.closed = true
	b.mu.Unlock()
}

// Each reads the Stats of every queue of the Book, once each, and calls f
// with the queue and its Stats, in the order the queues were added; a queue
// found shut down with nothing ready, waiting or processing is skipped and
// forgotten. It returns false, calling f for none, once Close was called.
//
// Each holds no lock of the Book while it reads Stats or calls f (the
// stats function takes the queue's lock), so f may call other methods of
// the Book. Scrapes may run concurrently; each reads every queue.
func (b *Book[M]) Each(f func(q *Queue[M], s workqueue.Stats)) bool {
	b.mu.Lock()
	queues := append([]*Queue[M](nil), b.queues...)
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return false
	}

	var finished []*Queue[M]
	for _, q := range queues {
		// Load shutDown before reading Stats: if the queue had shut down
		// by then, the Stats are of the shut-down queue, and a shut-down
		// queue with nothing ready, waiting or processing stays that way
		// (Add and AddAfter are ignored after ShutDown). Read the other
		// way round, a queue could be seen empty, then take a key and
		// shut down, and be forgotten with that key.
		down := q.shutDown.Load()
		s := q.stats()
		if down && s.Ready == 0 && s.Waiting == 0 && s.Processing == 0 {
			finished = append(finished, q)
			continue
		}
		f(q, s)
	}
	if len(finished) > 0 {
		b.forget(finished)
	}
	return true
}

// forget drops the given queues, keeping the others in order.
func (b *Book[M]) forget(finished []*Queue[M]) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := b.queues[:0]
	for _, q := range b.queues {
		drop := false
		for _, f := range finished {
			if q == f {
				drop = true
				break
			}
		}
		if !drop {
			kept = append(kept, q)
		}
	}
	clear(b.queues[len(kept):]) // let the dropped queues be collected
	b.queues = kept
}

// Gauges are the gauge values of the queues reported as one.
type Gauges struct {
	Depth      int           // sum of Stats.Dirty: workqueue_depth
	Delayed    int           // sum of Stats.Waiting: workqueue_delayed_items
	Unfinished time.Duration // sum of Stats.UnfinishedWork: workqueue_unfinished_work_seconds
	Longest    time.Duration // largest Stats.LongestRunning: workqueue_longest_running_processor_seconds
}

// Add combines the Stats of one more queue into g.
func (g *Gauges) Add(s workqueue.Stats) {
	g.Depth += s.Dirty
	g.Delayed += s.Waiting
	g.Unfinished += s.UnfinishedWork
	g.Longest = max(g.Longest, s.LongestRunning)
}

// Total is the Gauges of every queue whose key is Key.
type Total[K comparable] struct {
	Key K
	Gauges
}

// Totals reads the Book (Each) and returns the Gauges of its queues
// combined by their Meta (a provider's name, or its series), in the order
// each Meta's first queue was added; false once the Book is closed.
func Totals[M comparable](b *Book[M]) ([]Total[M], bool) {
	var out []Total[M]
	index := map[M]int{}
	ok := b.Each(func(q *Queue[M], s workqueue.Stats) {
		k := q.Meta
		i, seen := index[k]
		if !seen {
			i = len(out)
			index[k] = i
			out = append(out, Total[M]{Key: k})
		}
		out[i].Add(s)
	})
	return out, ok
}

// Keys is the set of keys (a provider's queue names) whose gauges a
// provider keeps reporting: every key that has had a queue in its Book, in
// the order each first had one, whether or not a queue of it is still
// there. A key is never removed: the set grows with the number of distinct
// names, as the provider's counter series do.
//
// The zero value is an empty set, ready to use. Keys is safe for concurrent
// use.
type Keys[K comparable] struct {
	mu    sync.Mutex // protects order and index
	order []K
	index map[K]struct{}
}

// Add adds key, if it is not in the set yet. Call it before the Book's Add
// for a queue of that key, so that every key a scrape finds a queue of is
// already in the set when KeptTotals lists it.
func (k *Keys[K]) Add(key K) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.index[key]; ok {
		return
	}
	if k.index == nil {
		k.index = map[K]struct{}{}
	}
	k.index[key] = struct{}{}
	k.order = append(k.order, key)
}

// All returns the keys, in the order they were first added, in a new
// slice.
func (k *Keys[K]) All() []K {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]K(nil), k.order...)
}

// KeptTotals is Totals for a provider that keeps its series: it reads the
// Book (Each), then returns a Total for every key of keys, in their order,
// with the Gauges of the key's queues combined, or zero Gauges when none of
// its queues is left (never had one, or all forgotten). A queue whose key is
// not in keys is left out: Keys.Add comes before Book.Add. False once the
// Book is closed.
func KeptTotals[K comparable](b *Book[K], keys *Keys[K]) ([]Total[K], bool) {
	live, ok := Totals(b)
	if !ok {
		return nil, false
	}
	// Read after the Book: every queue just read had its key added
	// before it joined the Book, so its key is in all.
	all := keys.All()
	byKey := make(map[K]Gauges, len(live))
	for _, t := range live {
		byKey[t.Key] = t.Gauges
	}
	out := make([]Total[K], len(all))
	for i, k := range all {
		out[i] = Total[K]{Key: k, Gauges: byKey[k]}
	}
	return out, true
}
