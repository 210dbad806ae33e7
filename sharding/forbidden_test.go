package sharding_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/fakeleases"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// lastGauge is a Gauge that keeps its last value.
type lastGauge struct {
	mu  sync.Mutex
	v   float64
	set bool
}

func (g *lastGauge) Set(v float64) {
	g.mu.Lock()
	g.v, g.set = v, true
	g.mu.Unlock()
}

func (g *lastGauge) get() (float64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.v, g.set
}

// refuser answers one verb on leases with 403 Forbidden, as an API server
// whose RBAC lacks it, from one clientset; it records when it first did.
type refuser struct {
	verb  string
	mu    sync.Mutex
	first time.Time
	n     int
	allow func(n int) bool // if set, the n-th request (from 1) is let through when it returns true
}

func (f *refuser) install(cs *fake.Clientset) {
	deny := func() (bool, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.n++
		if f.allow != nil && f.allow(f.n) {
			return false, nil
		}
		if f.first.IsZero() {
			f.first = time.Now()
		}
		return true, apierrors.NewForbidden(coordinationv1.Resource("leases"), "",
			errors.New(`User "system:serviceaccount:ns:ctl" cannot `+f.verb+` resource "leases" in API group "coordination.k8s.io" in the namespace "ns"`))
	}
	if f.verb == "watch" {
		cs.PrependWatchReactor("leases", func(clienttesting.Action) (bool, watch.Interface, error) {
			handled, err := deny()
			return handled, nil, err
		})
		return
	}
	cs.PrependReactor(f.verb, "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		handled, err := deny()
		return handled, nil, err
	})
}

func (f *refuser) firstAt() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first
}

// permReplica is one replica of a ring of 4 shards, for the permission
// tests: no sharded informer, default timing.
func permReplica(t *testing.T, store *fakeleases.Store, id string, forbidden *lastGauge, refuse *refuser, crash bool) *sharding.Replica {
	t.Helper()
	cs := store.Clientset(id)
	if refuse != nil {
		refuse.install(cs)
	}
	var m sharding.Metrics
	if forbidden != nil {
		m.Forbidden = forbidden
	}
	r, err := sharding.New(sharding.Config{
		Client: cs, Namespace: "ns", Name: "ring", Identity: id, Shards: 4,
		Object: &appsv1.Deployment{},
		// An informer of no objects: a replica admits a shard once its
		// cache has it (Ready waits for that), so it needs one.
		ListerWatcher: appsLW(fake.NewSimpleClientset(), "apps", false), //nolint:staticcheck // as newRing's
		Queue:         workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]()),
		Metrics:       m,
		SkipRelease:   crash,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, GracePeriod: gracePeriod,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// runAsync runs r until ctx ends, and gives its result and when it
// returned.
type result struct {
	err error
	at  time.Time
}

func runAsync(ctx context.Context, r *sharding.Replica) <-chan result {
	out := make(chan result, 1)
	go func() {
		err := r.Run(ctx)
		out <- result{err, time.Now()}
	}()
	return out
}

// TestForbidden refuses one verb on leases to a replica (issue #32: a
// missing RBAC rule), from its start or, for delete, when it must fence a
// killed replica: Run returns an error that names the verb and resource
// and wraps the server's 403, LeaseDuration to LeaseDuration + a period
// after the first refusal; Metrics.Forbidden is 1 and Ready fails
// meanwhile.
func TestForbidden(t *testing.T) {
	for _, verb := range []string{"create", "update", "delete", "get", "list", "watch"} {
		t.Run(verb, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := fakeleases.New()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var g lastGauge
				ref := &refuser{verb: verb}
				var peer <-chan result
				var peerCancel context.CancelFunc
				switch verb {
				case "get":
					// A membership Lease left by an earlier run: the
					// Create gets AlreadyExists, and the replica reads it.
					id := "a"
					if _, err := store.Clientset("setup").CoordinationV1().Leases("ns").Create(ctx, &coordinationv1.Lease{
						ObjectMeta: metav1.ObjectMeta{Name: "ring-member-a", Namespace: "ns",
							Labels: map[string]string{sharding.LabelRing: "ring", sharding.LabelRole: "member"}},
						Spec: coordinationv1.LeaseSpec{HolderIdentity: &id},
					}, metav1.CreateOptions{}); err != nil {
						t.Fatal(err)
					}
				case "delete":
					// A replica to fence: it runs, then crashes.
					b := permReplica(t, store, "b", nil, nil, true)
					var pctx context.Context
					pctx, peerCancel = context.WithCancel(ctx)
					defer peerCancel()
					peer = runAsync(pctx, b)
				}
				r := permReplica(t, store, "a", &g, ref, false)
				start := time.Now()
				done := runAsync(ctx, r)
				if verb == "delete" {
					time.Sleep(3 * leaseDuration / 2) // both joined and confirmed
					// b crashes: it stops renewing, its Lease stays, and a
					// must fence it.
					peerCancel()
					if res := <-peer; res.err != nil {
						t.Fatalf("b's Run: %v", res.err)
					}
				}
				// Meanwhile: refused, not ready. Run must return within
				// LeaseDuration + a period of the first refusal; give it
				// up to twice that before failing (a Run that never
				// returns would otherwise tick in simulated time until
				// the test binary's timeout).
				var res result
				checked, returned := false, false
				limit := time.After(3*leaseDuration + 2*maxPeriod)
				for !returned {
					select {
					case res = <-done:
						returned = true
						continue
					case <-limit:
						cancel()
						res = <-done
						t.Fatalf("Run did not return within 3×LeaseDuration while %s was refused (first at %v); it returned %v when cancelled",
							verb, ref.firstAt(), res.err)
					case <-time.After(100 * time.Millisecond):
					}
					if checked || ref.firstAt().IsZero() || time.Since(ref.firstAt()) < time.Second {
						continue
					}
					checked = true
					if v, _ := g.get(); v != 1 {
						t.Errorf("Metrics.Forbidden = %v a second after the first refused %s, want 1", v, verb)
					}
					if err := r.Ready(nil); err == nil || !strings.Contains(err.Error(), "cannot "+verb+" leases") {
						t.Errorf("Ready = %v a second after the first refused %s, want an error naming it", err, verb)
					}
				}
				if !checked {
					t.Errorf("Run returned before the gauge and Ready were checked, a second after the first refusal")
				}
				first := ref.firstAt()
				if first.IsZero() {
					t.Fatalf("no %s was refused (Run returned %v after %v)", verb, res.err, res.at.Sub(start))
				}
				want := `sharding: forbidden for LeaseDuration (15s): cannot ` + verb + ` leases in namespace "ns": `
				if res.err == nil || !strings.HasPrefix(res.err.Error(), want) {
					t.Errorf("Run returned %v, want an error starting %q", res.err, want)
				}
				if !apierrors.IsForbidden(res.err) {
					t.Errorf("Run's error %v: apierrors.IsForbidden is false", res.err)
				}
				var status apierrors.APIStatus
				if !errors.As(res.err, &status) {
					t.Errorf("Run's error %v does not wrap the server's status", res.err)
				}
				if took := res.at.Sub(first); took < leaseDuration || took > leaseDuration+maxPeriod {
					t.Errorf("Run returned %v after the first refused %s, want LeaseDuration (%v) to LeaseDuration + a period (%v) (started %v, first refused %v, returned %v: %v)",
						took, verb, leaseDuration, leaseDuration+maxPeriod, start, first, res.at, res.err)
				}
				if v, set := g.get(); v != 1 || !set {
					t.Errorf("Metrics.Forbidden = %v (set %v) once Run returned, want 1", v, set)
				}
				if err := r.Ready(nil); err == nil {
					t.Error("Ready = nil once Run returned for a refused verb")
				}
			})
		})
	}
}

// TestForbiddenTransient refuses the replica's renewals (update) for two
// periods, then grants them: Run goes on, Metrics.Forbidden goes back to
// 0 and Ready to nil.
func TestForbiddenTransient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := fakeleases.New()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var g lastGauge
		// The first update is the first renewal; refuse it and the next.
		ref := &refuser{verb: "update", allow: func(n int) bool { return n > 2 }}
		r := permReplica(t, store, "a", &g, ref, false)
		done := runAsync(ctx, r)
		time.Sleep(5 * time.Second)
		if v, _ := g.get(); v != 1 || ref.firstAt().IsZero() {
			t.Fatalf("Metrics.Forbidden = %v after two refused renewals (refused first at %v), want 1", v, ref.firstAt())
		}
		if err := r.Ready(nil); err == nil || !strings.Contains(err.Error(), "cannot update leases") {
			t.Errorf("Ready = %v while updates are refused, want an error naming them", err)
		}
		select {
		case res := <-done:
			t.Fatalf("Run returned %v after a transient refusal", res.err)
		case <-time.After(3 * leaseDuration):
		}
		if v, _ := g.get(); v != 0 {
			t.Errorf("Metrics.Forbidden = %v once updates are granted, want 0", v)
		}
		if err := r.Ready(nil); err != nil {
			t.Errorf("Ready = %v once updates are granted, want nil", err)
		}
		if got := r.Shards(); len(got) != 4 {
			t.Errorf("Shards() = %v once updates are granted, want all 4", got)
		}
		held := 0
		for _, l := range store.Leases() {
			if l.Labels[sharding.LabelRole] == "shard" && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "a" {
				held++
			}
		}
		if held != 4 {
			t.Errorf("a holds %d shard Leases after the transient refusal, want 4", held)
		}
		cancel()
		if res := <-done; res.err != nil {
			t.Errorf("Run returned %v when its context ended, want nil", res.err)
		}
	})
}

// TestReadyBeforeJoin checks Ready before Run, while joined, and after
// Run returned.
func TestReadyBeforeJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := fakeleases.New()
		ctx, cancel := context.WithCancel(context.Background())
		r := permReplica(t, store, "a", nil, nil, false)
		if err := r.Ready(nil); err == nil || !strings.Contains(err.Error(), "not in the ring yet") {
			t.Errorf("Ready before Run = %v, want not in the ring yet", err)
		}
		done := runAsync(ctx, r)
		time.Sleep(time.Second)
		if err := r.Ready(nil); err == nil || !strings.Contains(err.Error(), "not counted") {
			t.Errorf("Ready once joined, before its first renewal = %v, want not counted yet", err)
		}
		// Counted at its first renewal (one period), it takes its share
		// (every shard) at its third tick and fills it.
		time.Sleep(2 * time.Second)
		if err := r.Ready(nil); err == nil || !strings.Contains(err.Error(), "filling its share: 0 of 4") {
			t.Errorf("Ready once counted, before its third tick = %v, want filling its share", err)
		}
		time.Sleep(3 * time.Second)
		if err := r.Ready(nil); err != nil {
			t.Errorf("Ready once its share is admitted = %v (Shards() %v), want nil", err, r.Shards())
		}
		cancel()
		<-done
		if err := r.Ready(nil); err == nil {
			t.Error("Ready after Run returned = nil, want an error")
		}
	})
}
