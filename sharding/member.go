package sharding

import (
	"context"
	"time"

	"k8s.io/klog/v2"
)

// This file is the replica's session: the tick's write of its membership
// Lease (a renewal, or a join that starts a new session), what its answer
// proves (acceptAnswer, decide.go), and the expire timer that ends the
// session RenewDeadline after the last answered write was sent.

// renew renews the membership Lease, or, if the session has lapsed and
// every run of it has returned, starts a new session (ownership case 2);
// membershipWrite (decide.go) says which.
//
// A session never comes back once it has ended (issue #24):
//
//   - An update carries the UID and resourceVersion of our Lease (see
//     leaseRef), so it cannot re-create a Lease another replica deleted.
//     Finding the Lease gone ends the session at once: another replica
//     fenced it and may hold its shards. Only a Create makes a new Lease,
//     and it is always a join.
//   - A renewal's success is accepted only if the session is still alive
//     when the answer arrives (acceptAnswer); the next write is otherwise
//     a join.
func (r *Replica) renew(ctx context.Context) {
	st := r.runs.status()
	alive, session, leaving := st.alive, st.session, st.leaving
	write, join := membershipWrite(alive, leaving, st.inflight)
	if !write {
		return
	}
	sent := time.Now()
	start := r.sessionStart
	if join {
		session, start = newSession(), sent
	}
	out, err := r.io.writeMember(ctx, r.member, session, start, sent, memberMark{synced: r.plans.synced, leaving: leaving})
	if err != nil {
		r.memberWrite(err)
		if r.memberLost(ctx, err) && alive {
			r.lose(true)
		}
		return
	}
	r.memberWrite(nil)
	r.member = refOf(out)
	r.ring.upsert(out) // our write, from the server's answer
	switch r.runs.answered(sent, time.Now(), r.cfg.RenewDeadline, alive, session) {
	case answerIgnored:
		return
	case answerJoined:
		r.sessionStart = start
		r.aliveFor = 0
	}
	deadline := sent.Add(r.cfg.RenewDeadline)
	if r.expire == nil {
		r.expire = time.AfterFunc(time.Until(deadline), func() {
			klog.V(2).InfoS("sharding: no renewal answered within RenewDeadline: stops admitting keys", "ring", r.cfg.Name, "identity", r.cfg.Identity)
			r.lose(false)
		})
	} else {
		r.expire.Reset(time.Until(deadline))
	}
}

// memberLost learns what became of our membership Lease after a write of
// it failed with err (afterMemberError, afterMemberGet: decide.go), and
// reports whether the Lease it named is gone: our session, if any, is then
// over.
func (r *Replica) memberLost(ctx context.Context, err error) bool {
	switch afterMemberError(err) {
	case memberGone:
		r.member = leaseRef{} // create it next time
		return true
	case memberRead:
		cur, gerr := r.io.getMember(ctx)
		next, gone := afterMemberGet(r.member, cur, gerr)
		r.member = next
		return gone
	}
	return false
}
