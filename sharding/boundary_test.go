package sharding_test

import (
	"github.com/go-coalesce/workqueue"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/fakeleases"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// TestExclusionBoundary tests the timing assumption of invariant 1 at its
// boundary. Every key's handler runs until cancelled; one replica is cut
// off. It must cancel its runs within RenewDeadline of its last renewal,
// the other may take its shards only after LeaseDuration, and a handler
// that returns within the margin between the two keeps the ring exclusive.
// A handler that ignores its cancellation for longer than the margin does
// overlap with the new holder, and the tracker must see it: that is the
// assumption being necessary, and the tracker being able to fail.
func TestExclusionBoundary(t *testing.T) {
	margin := leaseDuration - renewDeadline - maxPeriod // the victim renewed at most a period before the cut
	for _, tc := range []struct {
		name      string
		returnIn  time.Duration
		violation bool
	}{
		{"returns within the margin", margin - time.Second, false},
		{"ignores cancellation past LeaseDuration", leaseDuration + retryPeriod, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rg := newRing(t, 16, 8)
				rg.block = true
				rg.workers = 8
				rg.retDly = tc.returnIn
				defer rg.stopAll()
				rg.start(false)
				rg.start(false)
				rg.waitBalanced(leaseDuration)
				time.Sleep(time.Second)
				victim := rg.ids()[0]
				cut := time.Now()
				rg.leases.CutOff(victim, true)
				take := rg.waitTaken(victim, leaseDuration+3*retryPeriod)
				if take < leaseDuration-maxPeriod {
					t.Errorf("shards taken over %v after the cut, before LeaseDuration − 1.1×RetryPeriod", take)
				}
				lost, ok := rg.tr.lostTime(victim)
				switch {
				case !ok:
					t.Errorf("the cut-off replica's runs were never cancelled with ErrLeaseLost")
				case lost.Sub(cut) > renewDeadline:
					t.Errorf("the cut-off replica cancelled its runs %v after the cut, RenewDeadline is %v", lost.Sub(cut), renewDeadline)
				}
				time.Sleep(tc.returnIn + retryPeriod)
				v := rg.tr.violationList()
				if tc.violation && len(v) == 0 {
					t.Errorf("a handler that returns %v after cancellation overlapped with nobody: the tracker missed it", tc.returnIn)
				}
				if !tc.violation && len(v) > 0 {
					t.Errorf("invariant 1: %v", v)
				}
				rg.leases.CutOff(victim, false)
				t.Logf("FIGURES boundary: runs cancelled %v after the cut (RenewDeadline %v), shards taken over %v after it (LeaseDuration %v); %d overlaps",
					lost.Sub(cut), renewDeadline, take, leaseDuration, len(v))
			})
		})
	}
}

// TestHandoverWaitsForRuns checks ownership case 1: a replica that gives
// shards up to a newcomer releases each only once its runs have returned.
// Every key's handler runs until cancelled (at the end of GracePeriod) and
// then takes another second to return; the newcomer must not start any of
// them before.
func TestHandoverWaitsForRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rg := newRing(t, 16, 16)
		rg.block = true
		rg.workers = 16
		rg.retDly = time.Second
		defer rg.stopAll()
		first := rg.start(false)
		rg.waitBalanced(leaseDuration)
		time.Sleep(time.Second)
		start := time.Now()
		rg.start(false)
		rg.waitBalanced(leaseDuration)
		took := time.Since(start)
		if took < gracePeriod {
			t.Errorf("the newcomer got its shards %v after joining, before the grace period (%v) of the runs it had to wait for", took, gracePeriod)
		}
		rg.checkExclusive()
		_ = first
		t.Logf("FIGURES handover: shards handed over %v after the join (GracePeriod %v + return 1s)", took, gracePeriod)
	})
}

// TestNewSessionWaitsForRuns checks ownership case 2: a replica cut off
// past RenewDeadline and healed before anyone fenced it starts a new
// session (which frees its shard Leases for everyone at once) only once
// the runs of the old session have returned, here 2s after their
// cancellation. A third replica joins once the victim has lapsed, so that
// someone other than the victim is short of shards when the victim's old
// shard Leases become free, and a short RetryPeriod makes it act within
// 200ms of the new session, well inside those 2s.
func TestNewSessionWaitsForRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rg := newRing(t, 16, 64)
		rg.block = true
		rg.workers = 64
		rg.retDly = 2 * time.Second
		rg.timing.RetryPeriod = 200 * time.Millisecond
		defer rg.stopAll()
		rg.start(false)
		rg.start(false)
		rg.waitBalanced(leaseDuration)
		victim := rg.ids()[0]
		rg.leases.CutOff(victim, true)
		time.Sleep(renewDeadline + 200*time.Millisecond)
		rg.start(false)
		time.Sleep(300 * time.Millisecond)
		rg.leases.CutOff(victim, false)
		rg.waitBalanced(leaseDuration)
		time.Sleep(leaseDuration)
		rg.checkExclusive()
	})
}

// TestGiveUpRemovesKeys checks that a replica giving shards up removes
// their queued keys (Remove) rather than leaving them to be skipped, and
// forgets the catch-up runs it owed them: one worker is stuck, so every
// other key of the first replica waits (in its queue, or to be fed to it)
// when a second replica joins and takes half the shards.
func TestGiveUpRemovesKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rg := newRing(t, 16, 64)
		rg.block = true
		rg.workers = 1
		rg.retDly = 0
		defer rg.stopAll()
		first := rg.start(false)
		rg.waitBalanced(leaseDuration)
		time.Sleep(time.Second)
		rg.mu.Lock()
		m := rg.members[first]
		rg.mu.Unlock()
		before, queued := sharding.Owed(m.r), m.q.Len()
		rg.start(false)
		rg.waitBalanced(leaseDuration)
		owned := 0
		for _, name := range rg.names {
			if m.r.Owns(objectsNS + "/" + name) {
				owned++
			}
		}
		after := sharding.Owed(m.r)
		var foreign []string
		for _, k := range m.q.Inspect(0) {
			if k.State == workqueue.KeyReady && !m.r.Owns(k.Key) {
				foreign = append(foreign, k.Key)
			}
		}
		if before < 60 || queued == 0 || after > owned || owned > 48 || len(foreign) > 0 {
			t.Errorf("first replica: %d keys owed (%d queued) before the join, %d after, for the %d objects of the shards it kept; queued keys of shards given up: %v", before, queued, after, owned, foreign)
		}
		t.Logf("first replica: %d keys owed (%d queued) before the join, %d after; it owns %d objects", before, queued, after, owned)
	})
}

// TestFencedRenewal is issue #24 in simulated time, over the fake store
// (which, as the API server does, creates a Lease on an update of one that
// is gone unless the update carries a UID). The fenced replica's last
// renewal, sent while it is alive, reaches the store only once another
// replica has fenced it (deleted its membership Lease), and the fencer's
// shard writes each take 100-300ms.
//
// r-0 holds the ring's one shard. Its membership writes fail from then
// on (so its Lease stops changing and r-1 counts towards the fence), but
// the first one sent in the last two periods of its session is held until
// r-1 has deleted r-0's membership Lease, and then served. Before the fix
// it re-created the Lease in r-0's old session, r-0 took itself for alive
// again, read the shard Lease (which still named its session, r-1's
// acquisition being slow) and ran the shard's keys beside r-1. Now the
// renewal carries the Lease's UID and is refused, and a renewal answered
// after its session ended is not accepted anyway.
func TestFencedRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const victim, fencerID = "r-0", "r-1"
		rg := newRing(t, 1, 8)
		rg.block = true
		rg.workers = 8
		// RenewDeadline close to LeaseDuration, so that a renewal sent
		// in the last two periods of a session and held until the fence
		// is still served within RenewDeadline of being sent.
		rg.timing.LeaseDuration = 3 * time.Second
		rg.timing.RenewDeadline = 2500 * time.Millisecond
		rg.timing.RetryPeriod = 250 * time.Millisecond
		rg.timing.GracePeriod = time.Second
		window := rg.timing.RenewDeadline - 2*rg.timing.RetryPeriod
		memberName := "ctl-member-" + victim

		var (
			mu       sync.Mutex // protects armed, held and serving
			armed    bool
			held     heldWrite
			serving  bool
			released = make(chan struct{})
			slow     atomic.Bool
			jitter   = rand.New(rand.NewPCG(1, 2))
		)
		memberLease := func() (coordinationv1.Lease, bool) {
			for _, l := range rg.leases.Leases() {
				if l.Name == memberName {
					return l, true
				}
			}
			return coordinationv1.Lease{}, false
		}
		rg.onWrite = func(id, _ string, l *coordinationv1.Lease, err error) {
			mu.Lock()
			defer mu.Unlock()
			if id == victim && serving {
				serving = false
				held.err = err
				if l != nil {
					held.session = l.Annotations[sharding.AnnotationSession]
				}
			}
		}
		rg.react = func(id string, cs *fake.Clientset) {
			switch id {
			case victim:
				cs.PrependReactor("*", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
					if a.GetVerb() == "get" || a.GetVerb() == "list" {
						return false, nil, nil
					}
					mu.Lock()
					if !armed {
						mu.Unlock()
						return false, nil, nil
					}
					sent := time.Now()
					renewals := rg.renewedAt(victim)
					lastOK := renewals[len(renewals)-1]
					u, isUpdate := a.(clienttesting.UpdateAction)
					if !isUpdate || sent.Before(lastOK.Add(window)) {
						mu.Unlock()
						return true, nil, fakeleases.ErrCutOff
					}
					armed = false
					mu.Unlock()
					l := u.GetObject().(*coordinationv1.Lease)
					h := heldWrite{
						renewal: l.Spec.RenewTime.After(l.Spec.AcquireTime.Time),
						left:    lastOK.Add(rg.timing.RenewDeadline).Sub(sent),
					}
					for time.Since(sent) < 4*rg.timing.LeaseDuration {
						if _, ok := memberLease(); !ok {
							h.fenced = true
							break
						}
						time.Sleep(5 * time.Millisecond)
					}
					h.served = time.Since(sent)
					mu.Lock()
					held = h
					serving = true // the store's next write of the victim is this one
					mu.Unlock()
					close(released)
					return false, nil, nil // on to the store
				})
			case fencerID:
				cs.PrependReactor("*", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
					if (a.GetVerb() == "update" || a.GetVerb() == "create") && slow.Load() {
						if l := a.(clienttesting.CreateAction).GetObject().(*coordinationv1.Lease); l.Labels[sharding.LabelRole] == "shard" {
							time.Sleep(100*time.Millisecond + time.Duration(jitter.Int64N(int64(200*time.Millisecond))))
						}
					}
					return false, nil, nil
				})
			}
		}
		defer rg.stopAll()
		rg.start(false)
		rg.waitBalanced(leaseDuration)
		rg.start(false)
		rg.waitBalanced(leaseDuration)
		time.Sleep(time.Second)
		if got := rg.owner(); got[0] != victim {
			t.Fatalf("shard 0 held by %q, want %s (first in identity order)", got[0], victim)
		}
		before, _ := memberLease()
		oldSession := before.Annotations[sharding.AnnotationSession]

		mu.Lock()
		armed = true
		mu.Unlock()
		slow.Store(true)
		<-released
		// Objects keep changing, so both replicas have keys to run.
		rg.churnEvery(rg.timing.RetryPeriod/2, 10*time.Millisecond)
		mu.Lock()
		h := held
		mu.Unlock()
		if !h.renewal || !h.fenced || h.served >= rg.timing.RenewDeadline {
			t.Fatalf("not issue #24's case: %+v (want a renewal served after the fence, within RenewDeadline of being sent)", h)
		}
		if h.err == nil {
			t.Errorf("%s's renewal, served after the fence, re-created its membership Lease (session %s, the old one: %v)",
				victim, h.session, h.session == oldSession)
		}
		rg.churnEvery(rg.timing.LeaseDuration, 10*time.Millisecond)
		slow.Store(false)
		rg.checkExclusive()
		rg.waitBalanced(leaseDuration)
		t.Logf("FIGURES fenced renewal: sent %v before the session's deadline, served %v after it was sent, answered %v; %d overlaps",
			h.left, h.served, h.err, len(rg.tr.violationList()))
	})
}

// heldWrite is what TestFencedRenewal's held write was.
type heldWrite struct {
	renewal bool          // renewTime after acquireTime: sent while the session was alive
	fenced  bool          // served after the fence, not after the timeout
	left    time.Duration // of the session when it was sent
	served  time.Duration // after it was sent
	err     error         // the store's answer
	session string        // of the Lease it stored, if it succeeded
}

// TestLateAnswerEndsSession checks the other half of issue #24's fix: a
// renewal's success counts only if its session is still alive when the
// answer arrives. A lone replica's renewal, sent in the last two periods of
// its session, is held by the store until 300ms after the session's
// deadline (the replica has cancelled its runs by then) and then served:
// the Lease was not fenced, so the update succeeds, within RenewDeadline
// of being sent. The replica must not take that for a renewal of the
// session that ended: it holds nothing until it has joined again.
func TestLateAnswerEndsSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const id = "r-0"
		rg := newRing(t, 1, 8)
		rg.timing.LeaseDuration = 3 * time.Second
		rg.timing.RenewDeadline = 2500 * time.Millisecond
		rg.timing.RetryPeriod = 250 * time.Millisecond
		window := rg.timing.RenewDeadline - 2*rg.timing.RetryPeriod
		var (
			mu       sync.Mutex // protects armed
			armed    bool
			released = make(chan struct{})
		)
		rg.react = func(_ string, cs *fake.Clientset) {
			cs.PrependReactor("*", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
				if a.GetVerb() == "get" || a.GetVerb() == "list" {
					return false, nil, nil
				}
				mu.Lock()
				defer mu.Unlock()
				if !armed {
					return false, nil, nil
				}
				renewals := rg.renewedAt(id)
				lastOK := renewals[len(renewals)-1]
				if time.Now().Before(lastOK.Add(window)) {
					return true, nil, fakeleases.ErrCutOff
				}
				armed = false
				time.Sleep(time.Until(lastOK.Add(rg.timing.RenewDeadline + 300*time.Millisecond)))
				close(released)
				return false, nil, nil // on to the store
			})
		}
		defer rg.stopAll()
		rg.start(false)
		rg.waitBalanced(leaseDuration)
		time.Sleep(time.Second)
		member := func() string {
			for _, l := range rg.leases.Leases() {
				if l.Name == "ctl-member-"+id {
					return l.Annotations[sharding.AnnotationSession]
				}
			}
			return ""
		}
		old := member()
		mu.Lock()
		armed = true
		mu.Unlock()
		<-released
		for range 2 * rg.timing.RetryPeriod / (10 * time.Millisecond) {
			synctest.Wait()
			if held := rg.holders()[0]; len(held) > 0 && member() == old {
				t.Fatalf("%s holds shard 0 in its old session, after a renewal answered past the session's deadline", id)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if member() == old {
			t.Errorf("%s did not join again with a new session after its session ended", id)
		}
		rg.waitBalanced(leaseDuration)
	})
}
