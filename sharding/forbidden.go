package sharding

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

// This file tracks the requests the API server refuses: a
// replica that misses an RBAC verb must fail clearly, never hang looking
// healthy. Without create or update on leases it would never hold a shard;
// without delete it would never take over a crashed replica's shards (the
// fence deletes its membership Lease); without list or watch it would
// never see the ring. Every API request of the replica reports its
// outcome here: the Lease requests through leaseIO (leases.go), the
// ring's list and watch included, and the sharded cache's list and watch
// through the callbacks the informers are given.
//
// A kind of request is a verb on a resource ("create", "leases"). It is
// refused from its first 403 until a request of that kind succeeds, or is
// answered in a way only an authorized request is (a Conflict, a
// NotFound...: authorized, leases.go). While any is refused,
// Metrics.Forbidden is 1 and Ready fails; once one has been refused for
// LeaseDuration, Run leaves and returns the error (checkPermissions,
// loop.go). LeaseDuration is the bound because it is how long the others
// wait for a silent member: a replica that cannot do its part for that
// long is as good as gone.

// permissions is the tracker. Its zero value is not usable; init it. Its
// methods are safe for concurrent use; only they touch its fields.
type permissions struct {
	// Set by init, read-only after.
	namespace string // of the Leases, for messages
	ring      string // Config.Name, for messages
	identity  string // Config.Identity, for messages
	gauge     Gauge  // Metrics.Forbidden, may be nil
	poke      func() // wakes the loop when a kind of request becomes refused

	mu      sync.Mutex // protects refused; the gauge is set under it
	refused map[request]refusal
}

// request is a kind of request: a verb on a resource.
type request struct{ verb, resource string }

type refusal struct {
	since time.Time // the first 403 since the last success
	err   error     // the last 403
}

func (p *permissions) init(cfg Config, poke func()) {
	p.namespace, p.ring, p.identity = cfg.Namespace, cfg.Name, cfg.Identity
	p.gauge, p.poke = cfg.Metrics.Forbidden, poke
	p.refused = make(map[request]refusal)
	setGauge(p.gauge, 0)
}

// refuse records that a request of the replica failed with err. Errors
// other than 403 Forbidden are ignored. The first 403 of a kind of request
// is logged at default verbosity, naming the verb, the resource, the
// Leases' namespace and the server's message, and wakes the loop.
func (p *permissions) refuse(verb, resource string, err error) {
	if !apierrors.IsForbidden(err) {
		return
	}
	k := request{verb, resource}
	p.mu.Lock()
	cur, already := p.refused[k]
	if !already {
		cur.since = time.Now()
	}
	cur.err = err
	p.refused[k] = cur
	setGauge(p.gauge, 1)
	p.mu.Unlock()
	if already {
		return
	}
	klog.ErrorS(err, "sharding: the API server refuses a request the replica needs; grant it (RBAC) or the replica leaves the ring after LeaseDuration",
		"verb", verb, "resource", resource, "namespace", p.namespace, "ring", p.ring, "identity", p.identity)
	if p.poke != nil {
		p.poke()
	}
}

// grant records that a request of that kind succeeded: it is no longer
// refused.
func (p *permissions) grant(verb, resource string) {
	k := request{verb, resource}
	p.mu.Lock()
	_, was := p.refused[k]
	delete(p.refused, k)
	if was && len(p.refused) == 0 {
		setGauge(p.gauge, 0)
	}
	p.mu.Unlock()
	if was {
		klog.InfoS("sharding: the API server grants a request it refused before", "verb", verb, "resource", resource,
			"namespace", p.namespace, "ring", p.ring, "identity", p.identity)
	}
}

// outcome records the outcome of a request: a success (err nil), an
// answer only an authorized request gets (authorized, leases.go), or a
// failure.
func (p *permissions) outcome(verb, resource string, err error) {
	if err == nil || authorized(err) {
		p.grant(verb, resource)
		return
	}
	p.refuse(verb, resource, err)
}

// overdue returns when the first refused kind of request falls due (zero if
// none is refused), and, once it is refused for at least d at now, the
// error Run stops with.
func (p *permissions) overdue(now time.Time, d time.Duration) (time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var due time.Time
	var worst request
	for _, k := range p.sortedLocked() {
		at := p.refused[k].since.Add(d)
		if due.IsZero() || at.Before(due) {
			due, worst = at, k
		}
	}
	if due.IsZero() || now.Before(due) {
		return due, nil
	}
	return due, fmt.Errorf("sharding: forbidden for LeaseDuration (%v): %s: %w", d, p.describe(worst), p.refused[worst].err)
}

// describe names a kind of request as a sentence: cannot create leases in
// namespace "demo".
func (p *permissions) describe(k request) string {
	if k.resource == "leases" {
		return fmt.Sprintf("cannot %s leases in namespace %q", k.verb, p.namespace)
	}
	return fmt.Sprintf("cannot %s %s", k.verb, k.resource)
}

func (p *permissions) sortedLocked() []request {
	ks := make([]request, 0, len(p.refused))
	for k := range p.refused {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b request) int {
		if c := strings.Compare(a.resource, b.resource); c != 0 {
			return c
		}
		return strings.Compare(a.verb, b.verb)
	})
	return ks
}

// err returns an error naming every kind of request refused now, wrapping
// the server's errors, or nil.
func (p *permissions) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.refused) == 0 {
		return nil
	}
	var errs []error
	for _, k := range p.sortedLocked() {
		errs = append(errs, fmt.Errorf("%s: %w", p.describe(k), p.refused[k].err))
	}
	return fmt.Errorf("sharding: forbidden: %w", errors.Join(errs...))
}

// shareFill records whether the replica has filled its share once
// (Ready): written by the loop (sync, exec.go), read by Ready.
type shareFill struct {
	mu              sync.Mutex
	checked         bool // the loop has checked a counted share once
	done            bool // as many shards admitted as the share, once
	admitted, share int  // at the last check
}

// set records a check: admitted shards now, of a share of share.
func (f *shareFill) set(admitted, share int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return
	}
	f.checked, f.done, f.admitted, f.share = true, admitted >= share, admitted, share
}

// err is Ready's answer about the share.
func (f *shareFill) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.done:
		return nil
	case !f.checked:
		return errors.New("sharding: joined, but not counted in the ring's shares yet (its first renewal is not in)")
	}
	return fmt.Errorf("sharding: filling its share: %d of %d shards admitted (held, and in its cache)", f.admitted, f.share)
}

// mismatch is the replica's refusal of its ring, for Ready.
type mismatch struct {
	mu  sync.Mutex // protects err
	err error
}

func (m *mismatch) get() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// set records err unless a refusal is recorded already, and reports
// whether it did.
func (m *mismatch) set(err error) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return false
	}
	m.err = err
	return true
}
