package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/go-coalesce/workqueue"
)

// refQueue is a reference model of the queue without delays, written from
// the protocol rather than from the implementation: a slice for the ready
// keys in order, and a map for what is known of each key. It is slow and
// obviously right.
type refQueue struct {
	ready []string
	state map[string]refState // absent keys are not in the map
	shut  bool
	// ghosts is set for a queue with a Store it calls (remove.go): Remove
	// of a ready key leaves its entry in ready as a ghost (in ghost) until
	// Get passes over it or the store is rebuilt, and the key added again
	// meanwhile takes the ghost's place.
	ghosts bool
	ghost  map[string]bool
}

type refState int

const (
	refReady           refState = iota + 1 // in ready
	refProcessing                          // handed out, not Done
	refProcessingDirty                     // handed out, added again since
)

func newRefQueue() *refQueue {
	return &refQueue{state: map[string]refState{}, ghost: map[string]bool{}}
}

// live counts the ready keys: the entries of ready less the ghosts.
func (m *refQueue) live() int { return len(m.ready) - len(m.ghost) }

// enqueue makes k ready: at the tail, or at its ghost's place.
func (m *refQueue) enqueue(k string) {
	m.state[k] = refReady
	if m.ghost[k] {
		delete(m.ghost, k)
		return
	}
	m.ready = append(m.ready, k)
}

// settle drops the ghosts once they outnumber the ready keys by more than
// the queue's bound, or once no key is ready, as the queue rebuilds its
// store.
func (m *refQueue) settle() {
	if n := len(m.ghost); n > m.live()+64 || m.live() == 0 && n > 0 {
		m.ready = slices.DeleteFunc(m.ready, func(k string) bool { return m.ghost[k] })
		clear(m.ghost)
	}
}

func (m *refQueue) add(k string) {
	if m.shut {
		return
	}
	switch m.state[k] {
	case 0:
		m.enqueue(k)
	case refProcessing:
		m.state[k] = refProcessingDirty
	}
}

// get returns what Get returns; ok is false when Get would block.
func (m *refQueue) get() (k string, shutdown, ok bool) {
	if m.live() == 0 {
		return "", m.shut, m.shut
	}
	for m.ghost[m.ready[0]] {
		delete(m.ghost, m.ready[0]) // Get drops a ghost
		m.ready = m.ready[1:]
	}
	k, m.ready = m.ready[0], m.ready[1:]
	m.state[k] = refProcessing
	m.settle()
	return k, false, true
}

// remove is Remove: it cancels a pending run and reports whether there
// was one.
func (m *refQueue) remove(k string) bool {
	switch m.state[k] {
	case refReady:
		delete(m.state, k)
		if m.ghosts {
			m.ghost[k] = true // its entry stays in the store
			m.settle()
		} else {
			m.ready = slices.DeleteFunc(m.ready, func(r string) bool { return r == k })
		}
		return true
	case refProcessingDirty:
		m.state[k] = refProcessing
		return true
	}
	return false
}

func (m *refQueue) done(k string) {
	switch m.state[k] {
	case refProcessing:
		delete(m.state, k)
	case refProcessingDirty:
		m.enqueue(k)
	}
}

// processing returns the processing keys in a fixed order.
func (m *refQueue) processing() []string {
	var ks []string
	for k, s := range m.state {
		if s == refProcessing || s == refProcessingDirty {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

func (m *refQueue) stats() workqueue.Stats {
	s := workqueue.Stats{Ready: m.live()}
	for _, st := range m.state {
		switch st {
		case refProcessing:
			s.Processing++
		case refProcessingDirty:
			s.Processing++
			s.Dirty++
		}
	}
	s.Dirty += m.live()
	return s
}

var fuzzKeys = []string{"a", "b", "c", "d"}

// FuzzQueue drives five queues (the default ring, one with metrics, the
// priority store, and two that call a Store: NewFIFOStore and a user's)
// and the reference model of each group with the same operations, and compares every answer: the key and flag Get returns, GetContext's error,
// what Remove reports, Len, Stats, ShuttingDown and what a drain returns.
//
// Each byte is one operation: the low 3 bits choose it, the next 2 bits a
// key, the top 3 bits a variant.
func FuzzQueue(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		{0x00, 0x08, 0x10, 0x02, 0x02, 0x02, 0x03, 0x0b},                   // add a b c, three gets, done a b
		{0x00, 0x02, 0x00, 0x00, 0x03, 0x02, 0x03, 0x03},                   // a processing+dirty, Done twice
		{0x00, 0x02, 0x08, 0x00, 0x04, 0x02, 0x02},                         // re-add while processing, Done via op 4
		{0x00, 0x08, 0x02, 0x05, 0x00, 0x02, 0x02, 0x03, 0x0b, 0x02},       // ShutDown with a and b
		{0x00, 0x02, 0x00, 0x05, 0x02, 0x03, 0x02, 0x02},                   // processing+dirty across ShutDown
		{0x00, 0x02, 0x07, 0x04, 0x02, 0x07},                               // drain with a cancelled context
		{0x10, 0x18, 0x22, 0x06, 0x06, 0x06, 0x47, 0x2f},                   // GetContext, cancelled GetContext
		{0x03, 0x0f, 0x00, 0x00, 0x08, 0x10, 0x18, 0x02, 0x26, 0x06, 0x04}, // Done of absent keys, GetContext
		{0x00, 0x02, 0x00, 0x04, 0x02, 0x00, 0x04, 0x02, 0x04, 0x27, 0x02},
		{0x00, 0x08, 0x01, 0x00, 0x02, 0x02}, // Remove of a ready key, Add again
		[]byte("the quick brown fox jumps over the lazy dog"),
	} {
		f.Add(seed)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	f.Fuzz(func(t *testing.T, ops []byte) {
		// The queues whose key table keeps the order, and those that
		// call a Store (where Remove leaves ghosts), each beside its model.
		fuzzQueue(t, ops, cancelled, newRefQueue(),
			workqueue.New[string](),
			workqueue.NewWithConfig(workqueue.Config[string]{Name: "fuzz", Metrics: &countingMetrics{}}),
			// Remove cuts keys out of the priority store.
			workqueue.NewWithConfig(workqueue.Config[string]{Store: workqueue.NewPriorityStore[string]()}),
		)
		ghosted := newRefQueue()
		ghosted.ghosts = true
		fuzzQueue(t, ops, cancelled, ghosted,
			workqueue.NewWithConfig(workqueue.Config[string]{Store: workqueue.NewFIFOStore[string]()}),
			workqueue.NewWithConfig(workqueue.Config[string]{Store: newRawStore()}),
		)
	})
}

// fuzzQueue runs ops on qs and m, the model of every queue in qs, and
// compares their answers (see FuzzQueue).
func fuzzQueue(t *testing.T, ops []byte, cancelled context.Context, m *refQueue, qs ...*workqueue.Queue[string]) {
	var trace []string // what happened so far, for failure messages

	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("after %v: %s", trace, fmt.Sprintf(format, args...))
	}
	// get calls Get (or GetContext) on every queue when the model says
	// it will not block, and compares the answers.
	get := func(withCtx bool) {
		k, shutdown, ok := m.get()
		if !ok {
			return
		}
		trace = append(trace, "Get")
		for i, q := range qs {
			if withCtx {
				gk, err := q.GetContext(context.Background())
				wantErr := error(nil)
				if shutdown {
					wantErr = workqueue.ErrShutDown
				}
				if gk != k || !errors.Is(err, wantErr) || (wantErr == nil) != (err == nil) {
					fail("queue %d: GetContext = %q, %v; model %q, %v", i, gk, err, k, wantErr)
				}
				continue
			}
			gk, gs := q.Get()
			if gk != k || gs != shutdown {
				fail("queue %d: Get = %q, %v; model %q, %v", i, gk, gs, k, shutdown)
			}
		}
	}

	for _, b := range ops {
		key := fuzzKeys[(b>>3)&3]
		variant := b >> 5
		switch b & 7 {
		case 1:
			// Add stays the most common operation: half of these
			// are Remove.
			if variant < 4 {
				trace = append(trace, "Remove "+key)
				want := m.remove(key)
				for i, q := range qs {
					if got := q.Remove(key); got != want {
						fail("queue %d: Remove(%q) = %v; model %v", i, key, got, want)
					}
				}
				break
			}
			fallthrough
		case 0:
			trace = append(trace, "Add "+key)
			m.add(key)
			for _, q := range qs {
				q.Add(key)
			}
		case 2:
			if variant&1 == 1 {
				// A context that ended takes nothing, ready key or not.
				trace = append(trace, "GetContext(cancelled)")
				for i, q := range qs {
					if k, err := q.GetContext(cancelled); !errors.Is(err, context.Canceled) || k != "" {
						fail("queue %d: GetContext(cancelled) = %q, %v; want context.Canceled", i, k, err)
					}
				}
				continue
			}
			get(false)
		case 6:
			get(true)
		case 3:
			trace = append(trace, "Done "+key)
			m.done(key)
			for _, q := range qs {
				q.Done(key)
			}
		case 4:
			// Done of a processing key, so that Done is not mostly a
			// no-op on random keys.
			ps := m.processing()
			if len(ps) == 0 {
				continue
			}
			k := ps[int(variant)%len(ps)]
			trace = append(trace, "Done "+k)
			m.done(k)
			for _, q := range qs {
				q.Done(k)
			}
		case 5:
			if variant != 0 {
				continue // Len and Stats are compared after every op
			}
			trace = append(trace, "ShutDown")
			m.shut = true
			for _, q := range qs {
				q.ShutDown()
			}
		case 7:
			s := m.stats()
			empty := s.Ready == 0 && s.Processing == 0
			switch {
			case variant == 0:
				// A drain that cannot wait: nil if no key is
				// processing (ready keys are left to Get: the drain
				// of ShutDownWithDrainContext waits only for runs in
				// progress), else the context's error. Either way,
				// shut down.
				trace = append(trace, "ShutDownWithDrainContext(cancelled)")
				m.shut = true
				idle := s.Processing == 0
				for i, q := range qs {
					err := q.ShutDownWithDrainContext(cancelled)
					if idle && err != nil || !idle && !errors.Is(err, context.Canceled) {
						fail("queue %d: ShutDownWithDrainContext(cancelled) = %v with stats %+v", i, err, s)
					}
				}
			case variant == 1 && empty:
				trace = append(trace, "ShutDownWithDrain")
				m.shut = true
				for _, q := range qs {
					q.ShutDownWithDrain()
				}
			default:
				trace = append(trace, "Done "+key)
				m.done(key)
				for _, q := range qs {
					q.Done(key)
				}
			}
		}
		want := m.stats()
		for i, q := range qs {
			if got := trimStats(q.Stats()); got != want {
				fail("queue %d: Stats = %+v; model %+v", i, got, want)
			}
			if n := q.Len(); n != want.Ready {
				fail("queue %d: Len = %d; model %d", i, n, want.Ready)
			}
			if q.ShuttingDown() != m.shut {
				fail("queue %d: ShuttingDown = %v; model %v", i, q.ShuttingDown(), m.shut)
			}
			if _, err := workqueue.CheckTable(q); err != nil {
				fail("queue %d: key table: %v", i, err)
			}
		}
	}

	// Finish: shut down, then hand out and finish everything, in the
	// model's order; every queue must end empty and report shutdown.
	trace = append(trace, "ShutDown, drain")
	m.shut = true
	for _, q := range qs {
		q.ShutDown()
	}
	for {
		for _, k := range m.processing() {
			m.done(k)
			for _, q := range qs {
				q.Done(k)
			}
		}
		k, shutdown, _ := m.get()
		for i, q := range qs {
			if gk, gs := q.Get(); gk != k || gs != shutdown {
				fail("queue %d: Get while draining = %q, %v; model %q, %v", i, gk, gs, k, shutdown)
			}
		}
		if shutdown {
			break
		}
	}
	for i, q := range qs {
		if got := trimStats(q.Stats()); got != (workqueue.Stats{}) {
			fail("queue %d: Stats after the drain = %+v; want empty", i, got)
		}
		if err := q.ShutDownWithDrainContext(cancelled); err != nil {
			fail("queue %d: drain of an empty queue = %v", i, err)
		}
		// Nothing outlives the drain: no key, and no fGhost entry
		// once its ghosts came out of the store.
		if n, err := workqueue.CheckTable(q); n != 0 || err != nil {
			fail("queue %d: key table after the drain: %d entries, %v", i, n, err)
		}
	}
}
