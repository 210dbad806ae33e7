package sharding

import (
	"testing"
	"time"
)

// TestLateAnswerAdmitsNothing shows that acceptAnswer's first case (an
// answer RenewDeadline or more after its write was sent proves nothing)
// changes nothing a replica does: over every ordering of a write's
// sending, the session's state and deadline as an earlier write left
// them (writes are sent one at a time, so that deadline is before this
// write's sent+RenewDeadline), the answer's arrival and the expire timer,
// the ledger admits at the same instants, and holds the same session and
// shards once the timer has fired, with the case and without it (the
// answer then taken as acceptAnswer takes it with no bound). Without it, a
// late join begins a session whose deadline has passed: it admits
// nothing, and the timer ends it at once.
func TestLateAnswerAdmitsNothing(t *testing.T) {
	const rd = 10 * time.Second
	sent := t0.Add(time.Minute)
	type state struct {
		alive    bool
		session  string
		deadline time.Time
		active   bool
	}
	apply := func(b *ledger, w sentWrite, now time.Time, bound time.Duration) {
		b.mu.Lock()
		a := acceptAnswer(w, now, bound, liveSession{alive: b.alive, session: b.session, deadline: b.deadline})
		switch a {
		case answerJoined:
			b.alive, b.joined, b.session = true, true, w.session
		case answerIgnored:
			b.mu.Unlock()
			return
		}
		b.deadline = w.at.Add(rd)
		b.mu.Unlock()
	}
	cases := 0
	for _, wasAlive := range []bool{false, true} {
		for _, st := range []state{
			{alive: false, session: "s0"},
			{alive: true, session: "s1", deadline: sent.Add(-time.Second), active: true},
			{alive: true, session: "s1", deadline: sent.Add(rd - time.Second), active: true},
			{alive: true, session: "s1", deadline: sent.Add(rd - time.Nanosecond), active: true},
			{alive: true, session: "s0", deadline: sent.Add(rd - time.Second), active: true},
		} {
			for _, late := range []time.Duration{rd, rd + time.Nanosecond, rd + time.Second, 2 * rd} {
				now := sent.Add(late)
				session := "s1"
				if !wasAlive {
					session = "s2"
				}
				w := sentWrite{at: sent, wasAlive: wasAlive, session: session}
				var with, without ledger
				for _, b := range []*ledger{&with, &without} {
					b.init(1)
					b.alive, b.joined, b.session, b.deadline = st.alive, st.alive, st.session, st.deadline
					if st.active {
						b.state[0].state = shardActive
					}
					b.filled[0] = true
				}
				with.answered(w, now, rd)
				apply(&without, w, now, 1<<62)
				for _, at := range []time.Time{now, now.Add(time.Nanosecond), now.Add(rd), now.Add(2 * rd)} {
					if a, b := with.admitsLocked(0, at), without.admitsLocked(0, at); a || b {
						t.Errorf("wasAlive %v, %+v, answered %v after: admits at +%v: %v with the bound, %v without", wasAlive, st, late, at.Sub(now), a, b)
					}
				}
				// The expire timer fires at the deadline, which has passed.
				with.lose(false, now)
				without.lose(false, now)
				if with.alive != without.alive || with.state[0] != without.state[0] {
					t.Errorf("wasAlive %v, %+v, answered %v after: after the timer alive %v, %+v with the bound; %v, %+v without",
						wasAlive, st, late, with.alive, with.state[0], without.alive, without.state[0])
				}
				cases++
			}
		}
	}
	t.Logf("%d orderings", cases)
}

// TestEndedSessionAnswerAdmitsNothing shows that acceptAnswer's check
// that a renewal's session is still alive and the same when its answer
// arrives changes nothing the ledger does, wherever the session ended
// before the answer: over every ending (the expire timer, or the view,
// before or after the deadline the earlier write set), every arrival
// within RenewDeadline of the write, and a join after it, the ledger
// admits at the same instants (never, until the join) and holds the same
// state, with the check and without it (the renewal then taken as one of
// the live session). An ended session's shards are free and it is not
// alive, so a deadline moved by the late success admits nothing, and the
// next write is a join, which sets its own deadline. The simulation
// cannot catch the mutant for that reason; TestLateAnswerEndsSession
// checks the Leases the real loop writes.
func TestEndedSessionAnswerAdmitsNothing(t *testing.T) {
	const rd = 10 * time.Second
	sent := t0.Add(time.Minute)
	apply := func(b *ledger, w sentWrite, now time.Time, check bool) {
		b.mu.Lock()
		defer b.mu.Unlock()
		a := acceptAnswer(w, now, rd, liveSession{alive: b.alive, session: b.session, deadline: b.deadline})
		if !check && a == answerIgnored && now.Before(w.at.Add(rd)) && w.wasAlive {
			a = answerRenewed // the mutant: a renewal's success accepted whatever the session
		}
		switch a {
		case answerJoined:
			b.alive, b.joined, b.session = true, true, w.session
		case answerIgnored:
			return
		}
		b.deadline = w.at.Add(rd)
	}
	cases := 0
	for _, endAt := range []time.Duration{-time.Second, time.Second, rd / 2, rd - time.Nanosecond} {
		for _, deadline := range []time.Duration{-time.Second, time.Nanosecond, rd / 2, rd - time.Nanosecond} {
			for _, late := range []time.Duration{0, time.Nanosecond, time.Second, rd / 2, rd - time.Nanosecond} {
				if late < endAt {
					continue // the session ends before the answer arrives
				}
				now := sent.Add(late)
				var with, without ledger
				for _, b := range []*ledger{&with, &without} {
					b.init(1)
					b.alive, b.joined, b.session, b.deadline = true, true, "s1", sent.Add(deadline)
					b.state[0].state = shardActive
					b.filled[0] = true
					b.lose(true, sent.Add(endAt)) // the timer, or the view (sessionOver)
				}
				w := sentWrite{at: sent, wasAlive: true, session: "s1"}
				apply(&with, w, now, true)
				apply(&without, w, now, false)
				join := sentWrite{at: now.Add(time.Second), session: "s2"}
				for _, at := range []time.Time{now, now.Add(time.Nanosecond), now.Add(rd / 2), now.Add(2 * rd)} {
					if a, b := with.admitsLocked(0, at), without.admitsLocked(0, at); a || b {
						t.Errorf("ended at %v, deadline %v, answered after %v: admits at +%v: %v with the check, %v without", endAt, deadline, late, at.Sub(now), a, b)
					}
				}
				with.lose(false, now.Add(rd))
				without.lose(false, now.Add(rd))
				apply(&with, join, join.at.Add(time.Second), true)
				apply(&without, join, join.at.Add(time.Second), false)
				if with.alive != without.alive || with.session != without.session || !with.deadline.Equal(without.deadline) || with.state[0] != without.state[0] {
					t.Errorf("ended at %v, deadline %v, answered after %v: after a join alive %v %q %v %+v with the check; %v %q %v %+v without",
						endAt, deadline, late, with.alive, with.session, with.deadline, with.state[0], without.alive, without.session, without.deadline, without.state[0])
				}
				cases++
			}
		}
	}
	t.Logf("%d orderings", cases)
}
