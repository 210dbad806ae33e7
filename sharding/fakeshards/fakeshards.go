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
	"slices"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// other LIST counts as one full LIST. A request whose context has ended
// fails with its error, as client-go's do (a Reflector stopped while its
// pager is between pages must not restart a closed server).
func (f *ListerWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
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
