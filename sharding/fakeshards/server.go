// The shared watch cache of a Server: how it starts, stamps and follows
// the wrapped ListerWatcher, and the selectors it honours.

package fakeshards

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/go-coalesce/workqueue/sharding"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

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
	// Checked under startMu: a request whose context ended before Close
	// (a stopped Reflector's pager, which client-go leaves to finish on
	// its own) fails here instead of starting a closed server again.
	if err := ctx.Err(); err != nil {
		return err
	}
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
