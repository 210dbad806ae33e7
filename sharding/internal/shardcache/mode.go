package shardcache

import (
	"context"
	"errors"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
)

// The probe's retry delays. The Reflectors back off on their own.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// probe decides the mode: a LIST of at most one object with a selector
// that matches everything tells whether the server echoes ShardInfo. It
// retries until it has an answer or ctx ends, then starts the feeds of the
// shards held by then. (The Reflector cannot tell: it does not show the
// LIST's ListMeta.)
func (inf *Informer) probe(ctx context.Context) {
	sel := inf.cfg.Selector(allOf(inf.cfg.Shards))
	backoff := minBackoff
	for {
		// A consistent read: resourceVersion "0" would be served from
		// the watch cache, which ignores the limit on some versions.
		list, err := inf.lw.ListWithContext(ctx, metav1.ListOptions{ShardSelector: sel, Limit: 1})
		if err == nil {
			inf.succeeded("list")
			_, server := shardInfoOf(list)
			inf.mu.Lock()
			inf.decided = true
			inf.server = server
			inf.follow()
			inf.mu.Unlock()
			inf.logMode(ctx, server, "")
			return
		}
		inf.failed(ctx, "list", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func allOf(n int) []int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}

func (inf *Informer) logMode(ctx context.Context, server bool, why string) {
	if server {
		inf.logger(ctx).Info("sharding: the server filters by shard (ShardedListAndWatch): listing and watching each held shard's range")
	} else {
		if why == "" {
			why = "the server ignores ListOptions.ShardSelector (feature gate ShardedListAndWatch off, or kube-apiserver older than 1.36)"
		}
		inf.logger(ctx).Info("sharding: watching every object and filtering by shard on the client", "reason", why)
	}
	if g := inf.cfg.ServerFiltering; g != nil {
		g.Set(map[bool]float64{true: 1, false: 0}[server])
	}
}

// downgrade switches to client mode after feed f's sharded list showed
// that the server stopped honouring the selector (see listwatch.go).
func (inf *Informer) downgrade(f *feed, why string) {
	inf.mu.Lock()
	if !inf.current(f) || !inf.server {
		inf.mu.Unlock()
		return
	}
	inf.server = false
	// Every held shard is listed again by the one feed; those already
	// synced keep their objects meanwhile (its list updates them).
	for k, o := range inf.feeds {
		o.cancel()
		delete(inf.feeds, k)
	}
	ctx := inf.ctx
	if ctx != nil && ctx.Err() == nil && slices.Contains(inf.target, true) {
		inf.start(allShards)
		inf.feeds[allShards].downgrade = true
	}
	inf.mu.Unlock()
	inf.logMode(ctx, false, why)
}

// failed reports a failed request to the replica and to the handler set
// by SetWatchErrorHandler (its Reflector argument is nil: several
// Reflectors feed the informer, and client-go offers no way to set a
// Reflector's handler from outside its own informer).
func (inf *Informer) failed(ctx context.Context, verb string, err error) {
	if errors.Is(err, context.Canceled) || errors.Is(err, errDowngraded) {
		return
	}
	var status apierrors.APIStatus
	inf.mu.Lock()
	if errors.As(err, &status) && status.Status().Details != nil && status.Status().Details.Kind != "" {
		// The server's name for the resource is better than a guess.
		inf.resource = status.Status().Details.Kind
	}
	resource, fn := inf.resource, inf.errFn
	inf.mu.Unlock()
	if inf.cfg.Failed != nil {
		inf.cfg.Failed(verb, resource, err)
	}
	if fn != nil {
		fn(ctx, nil, err)
		return
	}
	klog.FromContext(ctx).V(2).Info("sharding: "+verb+" failed", "resource", inf.name, "err", err)
}

func (inf *Informer) succeeded(verb string) {
	if inf.cfg.Succeeded == nil {
		return
	}
	inf.mu.Lock()
	resource := inf.resource
	inf.mu.Unlock()
	inf.cfg.Succeeded(verb, resource)
}

// resourceOf guesses the plural resource name of obj's type, until an
// error from the server names it.
func resourceOf(obj runtime.Object) string {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Empty() {
		if kinds, _, err := scheme.Scheme.ObjectKinds(obj); err == nil && len(kinds) > 0 {
			gvk = kinds[0]
		}
	}
	if gvk.Kind == "" {
		return ""
	}
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return plural.Resource
}

// shardInfoOf returns the selector a LIST answer says it was filtered by.
func shardInfoOf(list runtime.Object) (string, bool) {
	if u, ok := list.(*unstructured.UnstructuredList); ok {
		sel, found, _ := unstructured.NestedString(u.Object, "metadata", "shardInfo", "selector")
		return sel, found
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return "", false
	}
	if s, ok := lm.(metav1.ShardedListInterface); ok && s.GetShardInfo() != nil {
		return s.GetShardInfo().Selector, true
	}
	return "", false
}
