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
