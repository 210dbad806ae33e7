package shardcache

import (
	"context"
	"errors"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// errDowngraded ends a feed's list when the server stopped filtering; the
// feed is stopped, and the informer has switched to client mode.
var errDowngraded = errors.New("shardcache: the server stopped filtering by shard")

// feedLW is the ListerWatcher of feed f's Reflector. It adds f's
// ShardSelector to every request, reports every request to the replica,
// and drops the objects of the shards f does not fill from every LIST page
// and every watch event, before the Reflector sees them: the pager's
// accumulated list then holds f's objects only. In client mode the server
// sends every object of the resource, and a replica keeps 1/N of them.
//
// It makes the Reflector list by pages, never by a watch-list stream, and
// every page from a consistent read (see ListWithContext): with the
// server not filtering, streams cost the replicas and the API server more
// than pages to settle a start, a kill and a join (with JSON, each event's
// envelope and then its object are decoded, where a page's items are
// decoded once, in the page; sharding/docs/measured.md, "Pages, beside
// streams and before", has the figures). Both keep a replica's memory to
// its own shards (filtered page by page, or event by event) and spare the
// server a response of every object.
type feedLW struct {
	inf *Informer
	f   *feed
}

// pageSize is the Limit of each LIST page (client-go's pager's default).
const pageSize = 500

// IsWatchListSemanticsUnSupported tells client-go's Reflector to list by
// pages rather than stream its initial list (see feedLW).
func (l *feedLW) IsWatchListSemanticsUnSupported() bool { return true }

func (l *feedLW) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

func (l *feedLW) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

// wanted returns, for each shard, whether f keeps its objects now.
func (l *feedLW) wanted() []bool {
	inf := l.inf
	inf.mu.Lock()
	defer inf.mu.Unlock()
	want := make([]bool, len(inf.target))
	for s := range want {
		want[s] = inf.keeps(l.f, s)
	}
	return want
}

// ListWithContext lists one page of f's shards. The Reflector's first
// list asks for resourceVersion "0" (any version), for which the API
// server's watch cache ignores the Limit and answers with every object in
// one response, which the replica would then decode whole before the
// filter drops 15/16 of it; it is sent as a consistent read instead
// (resourceVersion ""), which kube-apiserver 1.31+ serves from the watch
// cache page by page (older servers, from etcd, page by page).
func (l *feedLW) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	opts.ShardSelector = l.f.sel
	l.inf.listStarts(l.f, opts.Continue)
	if opts.ResourceVersion == "0" && opts.Continue == "" && opts.Limit > 0 {
		opts.ResourceVersion = ""
	}
	list, err := l.inf.lw.ListWithContext(ctx, opts)
	if err != nil {
		l.inf.failed(ctx, "list", err)
		return nil, err
	}
	l.inf.succeeded("list")
	if _, ok := shardInfoOf(list); l.f.sel != "" && opts.Continue == "" && !ok {
		l.inf.downgrade(l.f, "a sharded LIST came back without ListMeta.ShardInfo: the server stopped honouring ListOptions.ShardSelector")
		return nil, errDowngraded
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	want := l.wanted()
	kept := items[:0:0]
	for _, item := range items {
		if s, ok := l.inf.cfg.ShardOf(item); ok && want[s] {
			kept = append(kept, item)
		}
	}
	if len(kept) == len(items) {
		return list, nil
	}
	// SetList copies the kept items into a new array: a typed list's items
	// are one array, and a pointer into it would keep every object of the
	// page alive (TestClientFilterFreesTheList).
	if err := meta.SetList(list, kept); err != nil {
		return nil, err
	}
	return list, nil
}

// WatchWithContext watches f's shards from the resourceVersion of its
// list. A server that stopped honouring the selector sends other shards'
// objects too: the filter keeps them out, and the next list tells (its
// answer lacks ShardInfo).
func (l *feedLW) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.ShardSelector = l.f.sel
	w, err := l.inf.lw.WatchWithContext(ctx, opts)
	if err != nil {
		l.inf.failed(ctx, "watch", err)
		return nil, err
	}
	l.inf.succeeded("watch")
	keep := func(ev watch.Event) bool {
		switch ev.Type {
		case watch.Added, watch.Modified, watch.Deleted:
		case watch.Error:
			l.inf.failed(ctx, "watch", apierrors.FromObject(ev.Object))
			return true
		default:
			return true
		}
		s, ok := l.inf.cfg.ShardOf(ev.Object)
		return ok && l.keeps(s)
	}
	return newFilteredWatch(w, keep), nil
}

// keeps reports whether f keeps the objects of shard s now.
func (l *feedLW) keeps(s int) bool {
	l.inf.mu.Lock()
	defer l.inf.mu.Unlock()
	return l.inf.keeps(l.f, s)
}

// filteredWatch passes on the events of a watch that keep accepts.
// apimachinery's watch.Filter does the same, but its goroutine blocks for
// good on an event nobody reads once the Reflector has stopped the watch;
// this one ends with Stop.
type filteredWatch struct {
	in   watch.Interface
	out  chan watch.Event
	done chan struct{}
	once sync.Once
}

func newFilteredWatch(in watch.Interface, keep func(watch.Event) bool) *filteredWatch {
	w := &filteredWatch{in: in, out: make(chan watch.Event), done: make(chan struct{})}
	go func() {
		defer close(w.out)
		for {
			select {
			case <-w.done:
				return
			case ev, ok := <-in.ResultChan():
				if !ok {
					return
				}
				if !keep(ev) {
					continue
				}
				select {
				case w.out <- ev:
				case <-w.done:
					return
				}
			}
		}
	}()
	return w
}

func (w *filteredWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *filteredWatch) Stop() {
	w.once.Do(func() {
		close(w.done)
		w.in.Stop()
	})
}
