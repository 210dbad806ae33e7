// Watches and watch-list streams served from a Server's cache, one
// subscriber per watch.

package fakeshards

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// WatchWithContext watches from opts.ResourceVersion (the changes after
// it, from the cache's log; 410 Gone if it is older than the cache), or,
// without one, from now with every current object as an Added event. It
// drops the events of objects outside the selector when honoured.
func (c *ListerWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f := c.srv
	stream := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	if stream {
		// A watch-list stream is the initial list of a Reflector: it is
		// counted and held back as a full LIST of its selector.
		c.mu.Lock()
		c.lists[opts.ShardSelector]++
		hold := c.held[opts.ShardSelector]
		c.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	if err := f.start(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.objs == nil {
		return nil, fmt.Errorf("fakeshards: the cache stopped")
	}
	match, err := f.matcher(opts.ShardSelector)
	if err != nil {
		return nil, err
	}
	sub := &subscriber{f: c, srv: f, match: match, out: make(chan watch.Event), done: make(chan struct{}), ended: make(chan struct{}), more: make(chan struct{}, 1)}
	if stream {
		if err := f.streamLocked(c, sub, opts.ResourceVersion, match); err != nil {
			return nil, err
		}
	} else if opts.ResourceVersion == "" {
		for _, o := range f.objs {
			sub.buf = append(sub.buf, watch.Event{Type: watch.Added, Object: o})
		}
		sub.initial = len(sub.buf)
	} else {
		from, err := strconv.ParseInt(opts.ResourceVersion, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("fakeshards: resourceVersion %q: %w", opts.ResourceVersion, err)
		}
		if from < f.base {
			sub.buf = []watch.Event{{Type: watch.Error, Object: &apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, f.base)).ErrStatus}}
		} else {
			i, _ := slices.BinarySearchFunc(f.log, from, func(ev watch.Event, rv int64) int {
				m, _ := meta.Accessor(ev.Object)
				v, _ := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
				return int(v - rv)
			})
			for ; i < len(f.log); i++ {
				m, _ := meta.Accessor(f.log[i].Object)
				if v, _ := strconv.ParseInt(m.GetResourceVersion(), 10, 64); v > from {
					sub.buf = append(sub.buf, f.log[i])
				}
			}
		}
	}
	f.subs = append(f.subs, sub)
	c.mu.Lock()
	c.watches++
	c.open++
	c.mu.Unlock()
	go sub.run()
	return sub, nil
}

// streamLocked starts sub as a watch-list stream (KEP-3157, what a
// Reflector asks for first): every current object in the selector as an
// Added event, then a Bookmark marked as the end of the initial events,
// at the newest resourceVersion, then the changes after it. A version
// older than the cache is answered 410 Gone. f.mu must be held.
func (f *Server) streamLocked(c *ListerWatcher, sub *subscriber, rv string, match func(runtime.Object) bool) error {
	if rv != "" && rv != "0" {
		from, err := strconv.ParseInt(rv, 10, 64)
		if err != nil {
			return fmt.Errorf("fakeshards: resourceVersion %q: %w", rv, err)
		}
		if from < f.base {
			sub.buf = []watch.Event{{Type: watch.Error, Object: &apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, f.base)).ErrStatus}}
			return nil
		}
	}
	keys := make([]string, 0, len(f.objs))
	for k, o := range f.objs {
		if match(o) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		sub.buf = append(sub.buf, watch.Event{Type: watch.Added, Object: f.objs[k]})
	}
	bookmark, err := f.newItemLocked()
	if err != nil {
		return err
	}
	m, err := meta.Accessor(bookmark)
	if err != nil {
		return err
	}
	m.SetResourceVersion(strconv.FormatInt(f.rv, 10))
	m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	sub.buf = append(sub.buf, watch.Event{Type: watch.Bookmark, Object: bookmark})
	sub.initial = len(sub.buf)
	c.mu.Lock()
	c.listed += len(keys)
	c.mu.Unlock()
	return nil
}

// newItemLocked returns an empty object of the listed type. f.mu must be
// held.
func (f *Server) newItemLocked() (runtime.Object, error) {
	if u, ok := f.template.(*unstructured.UnstructuredList); ok {
		item := &unstructured.Unstructured{}
		item.SetAPIVersion(u.GetAPIVersion())
		item.SetKind(strings.TrimSuffix(u.GetKind(), "List"))
		return item, nil
	}
	items, err := meta.GetItemsPtr(f.template)
	if err != nil {
		return nil, err
	}
	elem := reflect.TypeOf(items).Elem().Elem()
	obj, ok := reflect.New(elem).Interface().(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("fakeshards: %v is not an object", elem)
	}
	return obj, nil
}

// subscriber is one watch served from the cache.
type subscriber struct {
	f     *ListerWatcher // its client, for the counters
	srv   *Server
	match func(runtime.Object) bool
	buf   []watch.Event // srv.mu
	// initial counts the current objects at the head of the stream, not
	// counted as sent (set before run starts, then run's).
	initial int
	out     chan watch.Event
	done    chan struct{} // closed by Stop
	ended   chan struct{} // closed by end: the stream closes
	more    chan struct{}
	once    sync.Once
	endOnce sync.Once
}

func (s *subscriber) signal() {
	select {
	case s.more <- struct{}{}:
	default:
	}
}

func (s *subscriber) run() {
	defer close(s.out)
	for {
		s.srv.mu.Lock()
		batch := s.buf
		s.buf = nil
		s.srv.mu.Unlock()
		if len(batch) == 0 {
			select {
			case <-s.more:
				continue
			case <-s.done:
				return
			case <-s.ended:
				return
			}
		}
		for _, ev := range batch {
			initial := s.initial > 0
			if initial {
				s.initial--
			}
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				if !s.match(ev.Object) {
					continue
				}
			}
			select {
			case s.out <- ev:
			case <-s.done:
				return
			}
			if !initial {
				s.f.mu.Lock()
				s.f.sent++
				s.f.mu.Unlock()
			}
		}
	}
}

func (s *subscriber) ResultChan() <-chan watch.Event { return s.out }

// end closes the stream (the client sees the watch end) once the events
// already buffered are out.
func (s *subscriber) end() {
	s.endOnce.Do(func() { close(s.ended) })
	s.Stop()
}

// Stop ends the watch.
func (s *subscriber) Stop() {
	s.once.Do(func() {
		close(s.done)
		s.srv.mu.Lock()
		s.srv.subs = slices.DeleteFunc(s.srv.subs, func(o *subscriber) bool { return o == s })
		s.srv.mu.Unlock()
		s.f.mu.Lock()
		s.f.open--
		s.f.mu.Unlock()
	})
}
