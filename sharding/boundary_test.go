package sharding_test

import (
	"testing"
	"testing/synctest"
	"time"
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
// their queued keys (Remove) rather than leaving them to be skipped: one
// worker is stuck, so every other key of the first replica waits in its
// queue when a second replica joins and takes half the shards.
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
		before := m.q.Len()
		rg.start(false)
		rg.waitBalanced(leaseDuration)
		owned := 0
		for _, name := range rg.names {
			if m.r.Owns(objectsNS + "/" + name) {
				owned++
			}
		}
		after := m.q.Len()
		if before < 60 || after > owned || owned > 48 {
			t.Errorf("first replica's queue: %d keys before the join, %d after, for the %d objects of the shards it kept", before, after, owned)
		}
		t.Logf("queue of the first replica: %d keys before the join, %d after; it owns %d objects", before, after, owned)
	})
}
