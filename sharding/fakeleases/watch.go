package fakeleases

import (
	"slices"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	clienttesting "k8s.io/client-go/testing"
)

// This file is the Store's WATCH, answered as the API server's watch cache
// answers it:
//
//   - A watch from resourceVersion R gets, in resourceVersion order, every
//     change after R that matches its namespace and label selector, then
//     the changes as they happen; a watch from "" or "0" first gets the
//     matching Leases as they are now as ADDED events.
//   - A DELETED event carries the Lease's last state at the resourceVersion
//     of the delete (which bumps the store's resourceVersion, as etcd's
//     revision does). A Lease whose labels stop or start matching the
//     selector is DELETED or ADDED for that watch.
//   - The store keeps the last HistoryLimit changes. A watch from an older
//     resourceVersion gets one ERROR event, 410 Gone "too old resource
//     version", and ends, as the server answers it; a reflector then lists
//     again. Compact drops the history, so that any watch started after it
//     from an older resourceVersion gets that answer.
//   - With allowWatchBookmarks, a BOOKMARK carrying the store's current
//     resourceVersion is sent every BookmarkInterval; the watch ends after
//     its timeoutSeconds.
//
// Each watch has a queue filled under the store's lock (so no write is
// missed between the history and the live changes, and the order is the
// store's) and one goroutine that delivers it; a write never waits for a
// slow reader. HoldWatches stops that delivery for a replica (its events
// queue up, as behind a slow connection) and ExpireWatches ends its watches
// with 410 Gone, so tests can delay a replica's view and make it relist.

// HistoryLimit is the number of changes the store keeps for watches that
// start from a past resourceVersion.
const HistoryLimit = 10000

// BookmarkInterval is how often a watch that allows bookmarks gets one.
const BookmarkInterval = time.Minute

// change is one entry of the store's history.
type change struct {
	typ      watch.EventType // Added, Modified or Deleted
	old, new *coordinationv1.Lease
	rv       int64
}

// watcher is one open watch.
type watcher struct {
	identity  string
	namespace string
	sel       labels.Selector
	result    chan watch.Event
	stop      chan struct{} // closed by Stop
	wake      chan struct{} // capacity 1: the queue grew, or the hold changed

	// Guarded by the Store's mu.
	queue   []watch.Event
	stopped bool
}

// Stop ends the watch; its result channel is closed once its goroutine has
// returned. It may be called more than once.
func (w *watcher) Stop() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
}

func (w *watcher) ResultChan() <-chan watch.Event { return w.result }

func (w *watcher) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// HoldWatches stops (hold true) or resumes the delivery of watch events to
// identity's watches: events queue up meanwhile and are delivered in order
// once resumed, as behind a slow connection.
func (s *Store) HoldWatches(identity string, hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[identity] = hold
	for w := range s.watchers {
		if w.identity == identity {
			w.poke()
		}
	}
}

// ExpireWatches ends every open watch of identity with 410 Gone ("too old
// resource version"), the events it had not delivered dropped, and drops
// the store's history (Compact), so that the reflector cannot resume from
// where it was and must list again.
func (s *Store) ExpireWatches(identity string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compactLocked()
	for w := range s.watchers {
		if w.identity == identity {
			w.queue = append(w.queue[:0], tooOld(s.rv))
			w.stopped = true // no more events after the error
			delete(s.watchers, w)
			w.poke()
		}
	}
}

// Compact drops the history of changes: a watch started later from a
// resourceVersion older than the store's current one gets 410 Gone.
func (s *Store) Compact() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compactLocked()
}

func (s *Store) compactLocked() {
	s.history = nil
	s.compacted = s.rv
}

// tooOld is the error event that ends a watch from a compacted version.
func tooOld(rv int64) watch.Event {
	st := apierrors.NewResourceExpired("too old resource version: " + strconv.FormatInt(rv, 10)).Status()
	return watch.Event{Type: watch.Error, Object: &st}
}

// watchLocked serves a WATCH. s.mu must be held.
func (s *Store) watchLocked(identity string, a clienttesting.WatchAction) (watch.Interface, error) {
	opts := a.(clienttesting.WatchActionImpl).GetListOptions()
	sel := a.GetWatchRestrictions().Labels
	if sel == nil {
		sel = labels.Everything()
	}
	w := &watcher{
		identity:  identity,
		namespace: a.GetNamespace(),
		sel:       sel,
		result:    make(chan watch.Event),
		stop:      make(chan struct{}),
		wake:      make(chan struct{}, 1),
	}
	switch rv := opts.ResourceVersion; rv {
	case "", "0":
		// The Leases as they are now, then every change from here.
		for _, l := range s.matchingLocked(w.namespace, sel) {
			w.queue = append(w.queue, watch.Event{Type: watch.Added, Object: l.DeepCopy()})
		}
		s.watchers[w] = struct{}{}
	default:
		from, err := strconv.ParseInt(rv, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest("invalid resourceVersion " + strconv.Quote(rv))
		}
		if from < s.compacted {
			w.queue = append(w.queue, tooOld(s.compacted))
			w.stopped = true
			break
		}
		for _, c := range s.history {
			if c.rv > from {
				if ev, ok := w.event(c); ok {
					w.queue = append(w.queue, ev)
				}
			}
		}
		s.watchers[w] = struct{}{}
	}
	var timeout time.Duration
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	go s.deliver(w, timeout, opts.AllowWatchBookmarks)
	return w, nil
}

// event is c as watch w sees it, if it sees it at all.
func (w *watcher) event(c change) (watch.Event, bool) {
	l := c.new
	if l == nil {
		l = c.old
	}
	if l.Namespace != w.namespace {
		return watch.Event{}, false
	}
	was := c.old != nil && w.sel.Matches(labels.Set(c.old.Labels))
	is := c.new != nil && w.sel.Matches(labels.Set(c.new.Labels))
	var typ watch.EventType
	switch {
	case c.typ == watch.Deleted && was:
		typ = watch.Deleted
	case was && is:
		typ = watch.Modified
	case is:
		typ = watch.Added
	case was:
		typ = watch.Deleted // its labels no longer match
	default:
		return watch.Event{}, false
	}
	obj := l.DeepCopy()
	obj.ResourceVersion = strconv.FormatInt(c.rv, 10)
	return watch.Event{Type: typ, Object: obj}, true
}

// recordLocked appends a change to the history and to the queue of every
// watch that sees it. s.mu must be held.
func (s *Store) recordLocked(typ watch.EventType, old, new *coordinationv1.Lease) {
	c := change{typ: typ, rv: s.rv}
	if old != nil {
		c.old = old.DeepCopy()
	}
	if new != nil {
		c.new = new.DeepCopy()
	}
	s.history = append(s.history, c)
	if n := len(s.history) - HistoryLimit; n > 0 {
		s.compacted = s.history[n-1].rv
		s.history = slices.Delete(s.history, 0, n)
	}
	for w := range s.watchers {
		if ev, ok := w.event(c); ok {
			w.queue = append(w.queue, ev)
			w.poke()
		}
	}
}

// deliver sends w's queued events in order until w is stopped, times out,
// or has sent a terminal error; then it closes the result channel.
func (s *Store) deliver(w *watcher, after time.Duration, bookmarks bool) {
	defer close(w.result)
	defer func() {
		s.mu.Lock()
		delete(s.watchers, w)
		s.mu.Unlock()
	}()
	var timeout <-chan time.Time
	if after > 0 {
		t := time.NewTimer(after)
		defer t.Stop()
		timeout = t.C
	}
	var tick <-chan time.Time
	if bookmarks {
		t := time.NewTicker(BookmarkInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		s.mu.Lock()
		held := s.heldLocked(w.identity)
		var ev watch.Event
		have := !held && len(w.queue) > 0
		if have {
			ev = w.queue[0]
			w.queue[0] = watch.Event{}
			w.queue = w.queue[1:]
		}
		done := !have && w.stopped && len(w.queue) == 0
		s.mu.Unlock()
		if done {
			return
		}
		if have {
			select {
			case w.result <- ev:
				continue
			case <-w.stop:
				return
			case <-timeout:
				return
			}
		}
		select {
		case <-w.wake:
		case <-w.stop:
			return
		case <-timeout:
			return
		case <-tick:
			s.mu.Lock()
			if !s.heldLocked(w.identity) {
				bm := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatInt(s.rv, 10)}}
				w.queue = append(w.queue, watch.Event{Type: watch.Bookmark, Object: bm})
			}
			s.mu.Unlock()
		}
	}
}

// heldLocked reports whether identity's watch events are held back: by
// HoldWatches, or because its responses are all lost. s.mu must be held.
func (s *Store) heldLocked(identity string) bool {
	return s.held[identity] || s.lossy[identity] == LoseAll
}
