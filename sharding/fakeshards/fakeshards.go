// Package fakeshards answers KEP-5866's ListOptions.ShardSelector in front
// of a ListerWatcher that ignores it, such as one over client-go's fake
// clientset, so that tests (and the deployments example) can exercise both
// modes of the sharded cache: with Honour set, a LIST or watch carrying a
// shard selector returns only the objects in its ranges and a LIST echoes
// the selector in ListMeta.ShardInfo, as kube-apiserver does with the
// ShardedListAndWatch gate on; with Honour unset, the selector is ignored,
// as with the gate off.
//
// It serves LISTs and watches from a small watch cache of its own, fed by
// one watch of the wrapped ListerWatcher: client-go's fake clientset
// stamps no resourceVersion on objects, and each of its watches is a
// channel of 100 events that panics when full. The cache stamps every
// change with its own resourceVersion, so a LIST followed by a watch from
// its resourceVersion misses nothing, a watch resumes from the last
// version it saw, and a version older than the cache's start is answered
// 410 Gone, as by the API server.
//
// It serves watch-list streams (a watch with SendInitialEvents, what
// client-go's Reflector asks for first: the current objects, then a
// bookmark marking the end of the initial events) and pages a LIST with a
// Limit (a Continue token after each page but the last).
//
// It also counts requests (LISTs and streams per selector, objects listed,
// watches, events sent) and can hold back the LISTs and streams of a
// selector, to test what a replica does while a shard is being filled.
package fakeshards

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/go-coalesce/workqueue/sharding"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Server is the fake API server's side: a watch cache of the wrapped
// ListerWatcher's objects, shared by its clients (one per replica, as
// replicas share one API server, so that a replica's heap holds only its
// own cache). Its methods are safe for concurrent use.
type Server struct {
	inner cache.ListerWatcherWithContext
	// startMu serializes starting and stopping the shared watch.
	startMu sync.Mutex

	mu sync.Mutex // protects the fields below
	// honour: the selector is applied and echoed.
	honour bool
	// The cache: shared is the one watch of the wrapped ListerWatcher
	// (nil when stopped), read by a goroutine that closes readerDone
	// when it ends. objs are the objects, each a copy stamped with the
	// resourceVersion of its last change; log holds every change since
	// the cache started at version base; rv is the newest version.
	shared     watch.Interface
	readerDone chan struct{}
	template   runtime.Object // an empty list of the wrapped type
	objs       map[string]runtime.Object
	log        []watch.Event
	base, rv   int64
	subs       []*subscriber
}

// ListerWatcher is one client of a Server: a cache.ListerWatcher with its
// own counters and held-back selectors. Its methods are safe for
// concurrent use.
type ListerWatcher struct {
	srv *Server
	// owns: the client was made by New, the one client of its server,
	// and Close stops the server.
	owns bool

	mu      sync.Mutex     // protects the fields below
	lists   map[string]int // full LISTs and watch-list streams, by selector
	listed  int            // objects returned by full LISTs
	sent    int            // watch events sent (after the initial objects)
	probes  int            // LISTs with Limit 1
	watches int            // watches started
	open    int            // watches not stopped yet
	held    map[string]chan struct{}
}

// NewServer serves lw; honour says whether selectors are applied. Call
// Close when done with it.
func NewServer(lw cache.ListerWatcher, honour bool) *Server {
	return &Server{inner: cache.ToListerWatcherWithContext(lw), honour: honour}
}

// Client returns a new client of the server.
func (srv *Server) Client() *ListerWatcher {
	return &ListerWatcher{srv: srv, lists: make(map[string]int), held: make(map[string]chan struct{})}
}

// New returns the one client of a new Server on lw (see NewServer); the
// client's Close closes the server too.
func New(lw cache.ListerWatcher, honour bool) *ListerWatcher {
	c := NewServer(lw, honour).Client()
	c.owns = true
	return c
}

// Server returns the client's server.
func (f *ListerWatcher) Server() *Server { return f.srv }

// SetHonour switches between the modes, as a server restarted with the
// gate flipped would.
func (srv *Server) SetHonour(honour bool) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	srv.honour = honour
}

// SetHonour is f.Server().SetHonour.
func (f *ListerWatcher) SetHonour(honour bool) { f.srv.SetHonour(honour) }

// Lists returns the number of full LISTs (not probes; a paged LIST counts
// once) and watch-list streams made with
// selector ("" for unsharded LISTs).
func (f *ListerWatcher) Lists(selector string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists[selector]
}

// TotalLists returns the number of full LISTs, any selector.
func (f *ListerWatcher) TotalLists() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.lists {
		n += c
	}
	return n
}

// Listed returns the number of objects the full LISTs returned, in all.
func (f *ListerWatcher) Listed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listed
}

// Sent returns the number of watch events sent (not counting the objects
// a watch from no resourceVersion starts with).
func (f *ListerWatcher) Sent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent
}

// Reset sets every counter to zero.
func (f *ListerWatcher) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.lists)
	f.listed, f.sent, f.probes, f.watches = 0, 0, 0, 0
}

// Probes returns the number of LISTs made with Limit 1 (the sharded
// informer's probe of the server's mode).
func (f *ListerWatcher) Probes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probes
}

// Watches returns the number of watches started and of those still open.
func (f *ListerWatcher) Watches() (started, open int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watches, f.open
}

// Hold makes this client's full LISTs with selector wait until the
// returned function is called (or their context ends).
func (f *ListerWatcher) Hold(selector string) (release func()) {
	ch := make(chan struct{})
	f.mu.Lock()
	f.held[selector] = ch
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			if f.held[selector] == ch {
				delete(f.held, selector)
			}
			f.mu.Unlock()
			close(ch)
		})
	}
}

// EndWatches ends every open watch of every client (its channel is
// closed), as an API server does when a watch times out: clients watch
// again from the last resourceVersion they saw, without listing.
func (srv *Server) EndWatches() {
	for _, s := range srv.watchesOf(nil) {
		s.end()
	}
}

// watchesOf returns the open watches of client f, or of every client when
// f is nil, copied so that they can be ended without srv.mu held.
func (srv *Server) watchesOf(f *ListerWatcher) []*subscriber {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	var subs []*subscriber
	for _, s := range srv.subs {
		if f == nil || s.f == f {
			subs = append(subs, s)
		}
	}
	return subs
}

// EndWatches ends this client's open watches (see Server.EndWatches).
func (f *ListerWatcher) EndWatches() {
	for _, s := range f.srv.watchesOf(f) {
		s.end()
	}
}

// Close ends every watch and stops the cache; a later request starts it
// again, with versions from before answered 410 Gone.
func (srv *Server) Close() {
	for _, s := range srv.watchesOf(nil) {
		s.Stop()
	}
	srv.stopShared()
}

// Close ends this client's watches. It stops the server only when the
// client was made by New: a client of a shared Server (Server.Client)
// leaves it running for the others, as a replica that stops leaves the API
// server's watch cache as it is; whoever made the Server closes it.
//
// (Stopping the shared server when the closing client saw no other
// client's watch open restarted it under a client that was between a LIST
// and its watch: that client's watch then got 410 Gone and it listed
// again, which no real API server does when another client goes away.)
func (f *ListerWatcher) Close() {
	for _, s := range f.srv.watchesOf(f) {
		s.Stop()
	}
	if f.owns {
		f.srv.stopShared()
	}
}

// List implements cache.Lister.
func (f *ListerWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	return f.ListWithContext(context.Background(), opts)
}

// Watch implements cache.Watcher.
func (f *ListerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return f.WatchWithContext(context.Background(), opts)
}

// ListWithContext lists from the server's cache, applying the selector
// when honoured (and echoing it in ListMeta.ShardInfo) and the Limit: a
// page ends with a Continue token (the last key returned) when more
// objects follow. A LIST with Limit 1 is a probe; the first page of any
// other LIST counts as one full LIST.
func (f *ListerWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	sel := opts.ShardSelector
	f.mu.Lock()
	hold := f.held[sel]
	probe := opts.Limit == 1
	switch {
	case probe:
		f.probes++
	case opts.Continue == "":
		f.lists[sel]++
	default:
		hold = nil // held once, at its first page
	}
	f.mu.Unlock()
	if hold != nil && !probe {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	srv := f.srv
	if err := srv.start(ctx); err != nil {
		return nil, err
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.template == nil {
		return nil, fmt.Errorf("fakeshards: the cache stopped")
	}
	match, err := srv.matcher(sel)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(srv.objs))
	for k := range srv.objs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var items []runtime.Object
	cont := ""
	for _, k := range keys {
		if k <= opts.Continue {
			continue
		}
		if o := srv.objs[k]; match(o) {
			if opts.Limit > 0 && int64(len(items)) == opts.Limit {
				cont, _ = cache.MetaNamespaceKeyFunc(items[len(items)-1])
				break
			}
			items = append(items, o)
		}
	}
	list := srv.template.DeepCopyObject()
	if err := meta.SetList(list, items); err != nil {
		return nil, err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, err
	}
	lm.SetResourceVersion(strconv.FormatInt(srv.rv, 10))
	lm.SetContinue(cont)
	if srv.honour && sel != "" {
		s, ok := lm.(metav1.ShardedListInterface)
		if !ok {
			return nil, fmt.Errorf("fakeshards: %T has no ShardInfo", list)
		}
		s.SetShardInfo(&metav1.ShardInfo{Selector: sel})
	}
	if !probe {
		f.mu.Lock()
		f.listed += len(items)
		f.mu.Unlock()
	}
	return list, nil
}

// matcher returns the filter of sel: everything unless honoured. f.mu
// must be held.
func (f *Server) matcher(sel string) (func(runtime.Object) bool, error) {
	if !f.honour || sel == "" {
		return func(runtime.Object) bool { return true }, nil
	}
	return Parse(sel)
}

// start starts the cache if it is stopped: the shared watch first (from
// the newest version: no replay), then a LIST. The LIST is taken and
// loaded with f.mu held, so the reader applies the changes it saw after
// the load, in order: the last one of each object is its newest state.
func (f *Server) start(ctx context.Context) error {
	f.startMu.Lock()
	defer f.startMu.Unlock()
	f.mu.Lock()
	running := f.shared != nil
	f.mu.Unlock()
	if running {
		return nil
	}
	w, err := f.inner.WatchWithContext(context.WithoutCancel(ctx), metav1.ListOptions{ResourceVersion: strconv.FormatInt(math.MaxInt64, 10)})
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	list, err := f.inner.ListWithContext(context.WithoutCancel(ctx), metav1.ListOptions{})
	if err != nil {
		w.Stop()
		return err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		w.Stop()
		return err
	}
	if err := meta.SetList(list, nil); err != nil {
		w.Stop()
		return err
	}
	f.template = list
	// A new version range: watches from before it get 410 Gone.
	f.rv++
	f.base = f.rv
	f.log = nil
	f.objs = make(map[string]runtime.Object, len(items))
	for _, it := range items {
		f.stampLocked(it)
		k, _ := cache.MetaNamespaceKeyFunc(it)
		f.objs[k] = it
	}
	done := make(chan struct{})
	f.shared, f.readerDone = w, done
	go f.read(w, done)
	return nil
}

// stampLocked gives obj the next resourceVersion. f.mu must be held.
func (f *Server) stampLocked(obj runtime.Object) {
	f.rv++
	if m, err := meta.Accessor(obj); err == nil {
		m.SetResourceVersion(strconv.FormatInt(f.rv, 10))
	}
}

// stopShared stops the cache.
func (f *Server) stopShared() {
	f.startMu.Lock()
	defer f.startMu.Unlock()
	f.mu.Lock()
	w, done := f.shared, f.readerDone
	f.shared, f.readerDone, f.template, f.objs, f.log = nil, nil, nil, nil, nil
	f.mu.Unlock()
	if w != nil {
		w.Stop()
		<-done
	}
}

// read applies the shared watch's changes to the cache and hands them to
// every watch.
func (f *Server) read(w watch.Interface, done chan struct{}) {
	defer close(done)
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Added, watch.Modified, watch.Deleted:
		default:
			continue
		}
		k, err := cache.MetaNamespaceKeyFunc(ev.Object)
		if err != nil {
			continue
		}
		f.mu.Lock()
		if f.objs == nil {
			f.mu.Unlock()
			continue
		}
		obj := ev.Object.DeepCopyObject()
		f.stampLocked(obj)
		_, existed := f.objs[k]
		switch {
		case ev.Type == watch.Deleted:
			if !existed {
				f.mu.Unlock()
				continue
			}
			delete(f.objs, k)
		case existed:
			ev.Type = watch.Modified
			f.objs[k] = obj
		default:
			ev.Type = watch.Added
			f.objs[k] = obj
		}
		ev.Object = obj
		f.log = append(f.log, ev)
		for _, s := range f.subs {
			s.buf = append(s.buf, ev)
			s.signal()
		}
		f.mu.Unlock()
	}
}

// WatchWithContext watches from opts.ResourceVersion (the changes after
// it, from the cache's log; 410 Gone if it is older than the cache), or,
// without one, from now with every current object as an Added event. It
// drops the events of objects outside the selector when honoured.
func (c *ListerWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
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

var rangeRE = regexp.MustCompile(`^shardRange\((object\.metadata\.(?:uid|namespace)), '0x([0-9a-f]{1,17})', '0x([0-9a-f]{1,17})'\)$`)

// Parse parses a KEP-5866 selector of the form sharding.Selector writes
// (shardRange terms joined by " || ") and returns its match function.
func Parse(selector string) (func(obj runtime.Object) bool, error) {
	type rng struct {
		field   string
		lo, hi  uint64
		hiIsMax bool // hi is 2^64
	}
	var rs []rng
	for _, term := range strings.Split(selector, " || ") {
		m := rangeRE.FindStringSubmatch(term)
		if m == nil {
			return nil, fmt.Errorf("fakeshards: cannot parse %q", term)
		}
		r := rng{field: m[1]}
		var err error
		if r.lo, err = strconv.ParseUint(m[2], 16, 64); err != nil {
			return nil, fmt.Errorf("fakeshards: %q: %w", term, err)
		}
		if len(m[3]) == 17 {
			r.hiIsMax = true
		} else if r.hi, err = strconv.ParseUint(m[3], 16, 64); err != nil {
			return nil, fmt.Errorf("fakeshards: %q: %w", term, err)
		}
		rs = append(rs, r)
	}
	return func(obj runtime.Object) bool {
		m, err := meta.Accessor(obj)
		if err != nil {
			return false
		}
		for _, r := range rs {
			v := string(m.GetUID())
			if r.field == sharding.FieldNamespace {
				v = m.GetNamespace()
			}
			h := sharding.Hash(v)
			if h >= r.lo && (r.hiIsMax || h < r.hi) {
				return true
			}
		}
		return false
	}, nil
}
