// Package fakeshards answers KEP-5866's ListOptions.ShardSelector in front
// of a ListerWatcher that ignores it, such as one over client-go's fake
// clientset, so that tests (and the deployments example) can exercise both
// modes of the sharded cache: with Honour set, a LIST or watch carrying a
// shard selector returns only the objects in its ranges and a LIST echoes
// the selector in ListMeta.ShardInfo, as kube-apiserver does with the
// ShardedListAndWatch gate on; with Honour unset, the selector is ignored,
// as with the gate off.
//
// It also counts requests (LISTs per selector, watches open) and can hold
// back the LISTs of a selector, to test what a replica does while a shard
// is being filled.
package fakeshards

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/go-coalesce/workqueue/sharding"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ListerWatcher is a cache.ListerWatcher that answers ShardSelector (see
// the package doc). Its methods are safe for concurrent use.
type ListerWatcher struct {
	inner   cache.ListerWatcherWithContext
	startMu sync.Mutex // serializes starting and stopping the shared watch

	mu sync.Mutex // protects the fields below
	// honour: the selector is applied and echoed.
	honour  bool
	lists   map[string]int // full LISTs (no Limit) by selector
	probes  int            // LISTs with a Limit
	watches int            // watches started
	open    int            // watches not stopped yet
	held    map[string]chan struct{}
	// shared is the one watch of the wrapped ListerWatcher, read into
	// subs by a goroutine that closes readerDone when it ends. It is
	// started and stopped under startMu.
	shared     watch.Interface
	readerDone chan struct{}
	subs       []*subscriber
}

// New wraps lw; honour says whether selectors are applied.
func New(lw cache.ListerWatcher, honour bool) *ListerWatcher {
	return &ListerWatcher{
		inner:  cache.ToListerWatcherWithContext(lw),
		honour: honour,
		lists:  make(map[string]int),
		held:   make(map[string]chan struct{}),
	}
}

// SetHonour switches between the modes, as a server restarted with the
// gate flipped would.
func (f *ListerWatcher) SetHonour(honour bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.honour = honour
}

// Lists returns the number of full LISTs (without a Limit) made with
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

// Probes returns the number of LISTs made with a Limit.
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

// Hold makes full LISTs with selector wait until the returned function
// is called (or their context ends).
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

// List implements cache.Lister.
func (f *ListerWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	return f.ListWithContext(context.Background(), opts)
}

// Watch implements cache.Watcher.
func (f *ListerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return f.WatchWithContext(context.Background(), opts)
}

// ListWithContext lists through the wrapped ListerWatcher, without the
// selector, and applies the selector when honoured.
func (f *ListerWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	sel := opts.ShardSelector
	f.mu.Lock()
	honour := f.honour
	hold := f.held[sel]
	if opts.Limit > 0 {
		f.probes++
	} else {
		f.lists[sel]++
	}
	f.mu.Unlock()
	if hold != nil && opts.Limit == 0 {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	inner := opts
	inner.ShardSelector = ""
	list, err := f.inner.ListWithContext(ctx, inner)
	if err != nil || !honour || sel == "" {
		return list, err
	}
	match, err := Parse(sel)
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	var kept []runtime.Object
	for _, it := range items {
		if match(it) {
			kept = append(kept, it)
		}
	}
	if err := meta.SetList(list, kept); err != nil {
		return nil, err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, err
	}
	s, ok := lm.(metav1.ShardedListInterface)
	if !ok {
		return nil, fmt.Errorf("fakeshards: %T has no ShardInfo", list)
	}
	s.SetShardInfo(&metav1.ShardInfo{Selector: sel})
	return list, nil
}

// WatchWithContext starts a watch of the objects in the selector's ranges
// when honoured, of all objects otherwise.
//
// Two limits of client-go's fake clientset shape it: the fake stamps no
// resourceVersion on objects (a watch cannot resume from one), and each of
// its watches is a channel of 100 events that panics when full, filled by
// the writer under the fake's lock. So the ListerWatcher keeps one watch
// of the wrapped ListerWatcher (started at the newest version: no replay),
// read at once into an unbounded buffer per watch it serves; a new watch
// first gets every current object of its range as a Modified event (read
// by a LIST once it is registered), then the changes. Nothing made between
// a LIST and a watch is missed, and the last event of each object is its
// newest state.
func (f *ListerWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	sel := opts.ShardSelector
	f.mu.Lock()
	honour := f.honour
	f.mu.Unlock()
	match := func(runtime.Object) bool { return true }
	if honour && sel != "" {
		m, err := Parse(sel)
		if err != nil {
			return nil, err
		}
		match = m
	}
	sub := &subscriber{f: f, match: match, out: make(chan watch.Event), done: make(chan struct{}), more: make(chan struct{}, 1)}
	if err := f.subscribe(ctx, sub, opts); err != nil {
		return nil, err
	}
	list, err := f.inner.ListWithContext(ctx, metav1.ListOptions{LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector})
	if err == nil {
		var items []runtime.Object
		items, err = meta.ExtractList(list)
		var first []watch.Event
		for _, it := range items {
			first = append(first, watch.Event{Type: watch.Modified, Object: it})
		}
		f.mu.Lock()
		sub.buf = append(first, sub.buf...)
		f.mu.Unlock()
	}
	if err != nil {
		sub.Stop()
		return nil, err
	}
	go sub.run()
	return sub, nil
}

// subscribe registers sub, starting the shared watch if it is the first.
// The wrapped Watch is called without f.mu held: the reader needs f.mu to
// drain the fake's channel, and the fake's writers fill it meanwhile.
func (f *ListerWatcher) subscribe(ctx context.Context, sub *subscriber, opts metav1.ListOptions) error {
	f.startMu.Lock()
	defer f.startMu.Unlock()
	f.mu.Lock()
	running := f.shared != nil
	f.mu.Unlock()
	if !running {
		inner := metav1.ListOptions{
			LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector,
			ResourceVersion: strconv.FormatInt(math.MaxInt64, 10),
		}
		w, err := f.inner.WatchWithContext(context.WithoutCancel(ctx), inner)
		if err != nil {
			return err
		}
		done := make(chan struct{})
		f.mu.Lock()
		f.shared, f.readerDone = w, done
		f.mu.Unlock()
		go f.read(w, done)
	}
	f.mu.Lock()
	f.subs = append(f.subs, sub)
	f.watches++
	f.open++
	f.mu.Unlock()
	return nil
}

// read copies the shared watch's events into every subscriber's buffer.
// It takes what the channel holds at once and f.mu once per batch, so that
// it keeps up with the fake's writers, which panic when the channel holds
// 100 events.
func (f *ListerWatcher) read(w watch.Interface, done chan struct{}) {
	defer close(done)
	ch := w.ResultChan()
	for ev := range ch {
		batch := []watch.Event{ev}
	more:
		for {
			select {
			case ev, ok := <-ch:
				if !ok {
					break more
				}
				batch = append(batch, ev)
			default:
				break more
			}
		}
		f.mu.Lock()
		for _, s := range f.subs {
			s.buf = append(s.buf, batch...)
			s.signal()
		}
		f.mu.Unlock()
	}
}

// subscriber is one watch served from the shared one.
type subscriber struct {
	f     *ListerWatcher
	match func(runtime.Object) bool
	buf   []watch.Event // f.mu
	out   chan watch.Event
	done  chan struct{}
	more  chan struct{}
	once  sync.Once
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
		s.f.mu.Lock()
		batch := s.buf
		s.buf = nil
		s.f.mu.Unlock()
		if len(batch) == 0 {
			select {
			case <-s.more:
				continue
			case <-s.done:
				return
			}
		}
		for _, ev := range batch {
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
		}
	}
}

func (s *subscriber) ResultChan() <-chan watch.Event { return s.out }

// Stop ends the watch; the last one stops the shared watch.
func (s *subscriber) Stop() {
	s.once.Do(func() {
		close(s.done)
		f := s.f
		f.startMu.Lock()
		defer f.startMu.Unlock()
		f.mu.Lock()
		f.subs = slices.DeleteFunc(f.subs, func(o *subscriber) bool { return o == s })
		f.open--
		var w watch.Interface
		var done chan struct{}
		if len(f.subs) == 0 && f.shared != nil {
			w, done = f.shared, f.readerDone
			f.shared, f.readerDone = nil, nil
		}
		f.mu.Unlock()
		if w != nil {
			w.Stop()
			<-done
		}
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
