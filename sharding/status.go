package sharding

import (
	"slices"
	"time"
)

// This file answers "who holds what, and why is key K not reconciled"
// from one replica: Status copies the ring as this replica's watch has it
// (every shard's Lease, every member's), with what each holder reported
// of its shards at its last membership write (AnnotationReport), and this
// replica's own shards as they are now. The ring page (package ringpage)
// shows it. Nothing here is read by a decision.

// Status is the ring as one replica sees it at Time.
type Status struct {
	Time      time.Time `json:"time"`
	Ring      string    `json:"ring"` // Config.Name
	Namespace string    `json:"namespace"`
	Identity  string    `json:"identity"` // this replica
	// ShardCount is S; Field the hashed field ("uid" or "namespace").
	ShardCount int    `json:"shardCount"`
	Field      string `json:"field"`
	// RingShards is the ring's shard count as its Lease says (0: no
	// Lease seen), in its Generation (the switches of the count so far);
	// Target is the count the ring is switching to (0: none). Mode is this
	// replica's part: "live" (RingShards is its count: it holds shards),
	// "closing" (its count is switching away: it releases them) or
	// "waiting" (another count is the ring's: it holds none, and fills
	// the share it will take). Shards below are of ShardCount.
	RingShards int    `json:"ringShards"`
	Generation int    `json:"generation"`
	Target     int    `json:"target,omitempty"`
	Mode       string `json:"mode"`
	// Filtering is who filters this replica's cache: "server" or "client".
	Filtering string `json:"filtering"`
	// Alive is true while this replica's session is alive (a membership
	// write answered less than RenewDeadline ago); Session is its token,
	// SessionStart when its join was sent. Ready is Ready's error, ""
	// when ready.
	Alive        bool      `json:"alive"`
	Session      string    `json:"session,omitempty"`
	SessionStart time.Time `json:"sessionStart,omitzero"`
	Ready        string    `json:"ready,omitempty"`
	// LeaseDuration is how long a member's Lease may stay unchanged
	// before another replica fences it; RenewDeadline how long a member
	// runs keys after its last answered write was sent.
	LeaseDuration time.Duration `json:"leaseDurationNanos"`
	RenewDeadline time.Duration `json:"renewDeadlineNanos"`
	// Members are the ring's membership Leases, by identity.
	Members []MemberStatus `json:"members"`
	// Shards are the ring's shards, by index.
	Shards []ShardStatus `json:"shards"`
	// Balance is the ring's balance as this replica plans it from its
	// view (every replica with the same view plans the same).
	Balance BalanceStatus `json:"balance"`
}

// BalanceStatus is the ring's plan of moves and why it is what it is
// (Config.Balance, docs/contract.md "Balance").
type BalanceStatus struct {
	// By is "load" or "count"; Fallback, when by count, says why (the
	// Config, a member that publishes no load, nothing measured).
	By       string `json:"by"`
	Fallback string `json:"fallback,omitempty"`
	// Mean is the counted members' mean load (work per minute), Heaviest
	// the heaviest shard's, Bound the band's top: 1.15 × the larger. Gain
	// is the least a move must lower the larger of its two members' loads
	// by (the hysteresis).
	Mean     time.Duration `json:"meanNanos"`
	Heaviest time.Duration `json:"heaviestNanos"`
	Bound    time.Duration `json:"boundNanos"`
	Gain     time.Duration `json:"gainNanos"`
	// InFlight are the moves begun and not yet taken, Budget how many
	// may be at once.
	InFlight int `json:"inFlight"`
	Budget   int `json:"budget"`
	// Moves are the moves planned now; Held why no further one is:
	// "band" (every member within the band), "hysteresis" (no move gains
	// Gain), "budget" (Budget moves in flight), "share" (the next move
	// would carry the minute's moves over a tenth of the ring's objects)
	// or "unmeasured" (a shard held or in flight has no report yet).
	Moves []MoveStatus `json:"moves,omitempty"`
	Held  string       `json:"held,omitempty"`
}

// MoveStatus is one planned move: the shard, its holder and its taker, the
// shard's work, and the cause ("join", "leave", "count" or "load"; "" for
// a move by load in flight: its taker has synced the shard, or it is
// released for it).
type MoveStatus struct {
	Shard int           `json:"shard"`
	From  string        `json:"from"`
	To    string        `json:"to"`
	Work  time.Duration `json:"workNanos"`
	Cause string        `json:"cause"`
}

// MemberStatus is one membership Lease as the replica's watch has it.
type MemberStatus struct {
	Identity string `json:"identity"`
	Session  string `json:"session"`
	// Confirmed is true once the session was renewed (its writer was
	// answered): only confirmed members get a share.
	Confirmed bool `json:"confirmed"`
	// SessionStart and Renewed are the Lease's acquireTime and renewTime,
	// by the member's clock.
	SessionStart time.Time `json:"sessionStart,omitzero"`
	Renewed      time.Time `json:"renewed,omitzero"`
	// Seen is when this replica's watch delivered the Lease's current
	// version (this replica's clock); it fences the member LeaseDuration
	// later unless the Lease changes.
	Seen time.Time `json:"seen"`
	// Live is Confirmed and Seen less than RenewDeadline ago. A member
	// whose Lease has not changed for longer has stopped running keys by
	// its own rule (it stops RenewDeadline after sending its last answered
	// write, which the watch delivered later), though it is fenced only
	// LeaseDuration after Seen.
	Live bool `json:"live"`
	// Share is the number of shards the member is due (0 if it does not
	// count yet); Held the shards whose Lease names it in its session.
	Share int `json:"share"`
	Held  int `json:"held"`
	// Load is the work of the shards it holds (per minute, as their
	// holders report it), once the moves in flight are done; OverBound
	// is true when that is over BalanceStatus.Bound. Workers are its
	// workers as it reports them (0: not reported).
	Load      time.Duration `json:"loadNanos"`
	OverBound bool          `json:"overBound,omitempty"`
	Workers   int           `json:"workers,omitempty"`
}

// ShardStatus is one shard of the ring.
type ShardStatus struct {
	Shard int `json:"shard"`
	// Range is the shard's hash range, [Start, End) in hexadecimal;
	// Selector its KEP-5866 selector.
	Range    string `json:"range"`
	Selector string `json:"selector"`
	// Holder is the identity its Lease names ("" when released or never
	// held), HolderSession the session it names.
	Holder        string `json:"holder,omitempty"`
	HolderSession string `json:"holderSession,omitempty"`
	// Held is true when the holder's membership Lease names that session:
	// the shard is held. Otherwise it is free, whatever Holder says.
	Held bool `json:"held"`
	// HolderLive is Held and the holder's member Live.
	HolderLive bool `json:"holderLive"`
	// Since is the Lease's acquireTime: when the holder acquired it, by
	// its clock. HolderSessionStart is the holder's session's start.
	Since              time.Time `json:"since,omitzero"`
	HolderSessionStart time.Time `json:"holderSessionStart,omitzero"`
	// State is the holder's account of the shard: "admitted" (synced,
	// its keys run), "filling" (its cache not synced yet: no key runs),
	// "draining" (being given up), or "" (no account: free, or the holder
	// reported nothing). Synced and Admitted say the same in two bits;
	// Objects are the shard's objects in the holder's cache.
	State    string `json:"state,omitempty"`
	Synced   bool   `json:"synced"`
	Admitted bool   `json:"admitted"`
	Objects  int    `json:"objects"`
	// ReportedAt is when that account was taken: Time for this replica's
	// own shards, the holder's last membership write (its renewTime)
	// for another's.
	ReportedAt time.Time `json:"reportedAt,omitzero"`
	// Local is this replica's own state of the shard: "admitted",
	// "filling", "draining", "warm" (not held: its session lapsed and its
	// cache is kept), or "".
	Local string `json:"local,omitempty"`
	// LoadKnown is true when a report gives the shard's load: Work, its
	// handlers' time over the last minute, Ready its keys waiting in the
	// queue and Oldest the oldest's wait (its holder's report; for a
	// free shard, the last one that listed it).
	LoadKnown bool          `json:"loadKnown"`
	Work      time.Duration `json:"workNanos"`
	Ready     int           `json:"ready"`
	Oldest    time.Duration `json:"oldestNanos"`
	// MoveTo is the member the plan moves the shard to ("" none), and
	// MoveCause why.
	MoveTo    string `json:"moveTo,omitempty"`
	MoveCause string `json:"moveCause,omitempty"`
}

// status is Status at now.
func (r *Replica) status(now time.Time) Status {
	var v view
	r.ring.snapshot(&v)
	ss := r.runs.status()
	alive, session := ss.alive, ss.session
	st := Status{
		Time: now, Ring: r.cfg.Name, Namespace: r.cfg.Namespace, Identity: r.cfg.Identity,
		ShardCount: r.shards, Field: r.field, Filtering: r.Filtering().String(),
		Alive: alive, LeaseDuration: r.cfg.LeaseDuration, RenewDeadline: r.cfg.RenewDeadline,
		RingShards: v.ringLease.conf.shards, Generation: v.ringLease.gen, Target: v.ringLease.target,
		Mode: modeOf(v.ringLease, r.shards).String(),
	}
	if alive {
		st.Session = session
		if m, ok := v.members[r.cfg.Identity]; ok && m.session == session {
			st.SessionStart = m.started
		}
	}
	if err := r.Ready(nil); err != nil {
		st.Ready = err.Error()
	}
	b := balanceOf(&v, r.shards)
	share := make(map[string]int, len(b.ids))
	for k, id := range b.ids {
		share[id] = b.share(k)
	}
	bs, to, causes, lp := balanceStatus(&v, b, r.cfg.Balance)
	st.Balance = bs
	reports := make(map[string]map[int]heldShard, len(v.members))
	for id, m := range v.members {
		ms := MemberStatus{
			Identity: id, Session: m.session, Confirmed: m.confirmed,
			SessionStart: m.started, Renewed: m.renewed, Seen: m.at,
			Live:  m.confirmed && now.Sub(m.at) < r.cfg.RenewDeadline,
			Share: share[id], Held: b.held[id], Workers: m.load.workers,
			Load: lp.loads[id], OverBound: bs.By == "load" && lp.loads[id] > lp.bound,
		}
		st.Members = append(st.Members, ms)
		rep := make(map[int]heldShard)
		for _, h := range m.load.held {
			rep[h.shard] = h
		}
		reports[id] = rep
	}
	slices.SortFunc(st.Members, func(a, b MemberStatus) int {
		switch {
		case a.Identity < b.Identity:
			return -1
		case a.Identity > b.Identity:
			return 1
		}
		return 0
	})
	live := make(map[string]bool, len(st.Members))
	for _, m := range st.Members {
		live[m.Identity] = m.Live
	}
	local := make(map[int]heldShard)
	for _, h := range r.obs.heldNow() {
		local[h.shard] = h
	}
	warm := r.warmShards(r.runs.held(), now)
	for i, s := range v.shards {
		rg := Range(r.field, r.shards, i)
		ss := ShardStatus{
			Shard: i, Range: "[" + rg.Start + ", " + rg.End + ")",
			Selector: Selector(r.field, r.shards, []int{i}).String(),
			Holder:   s.holder, HolderSession: s.session, Since: s.acquired,
			Held: holds(&v, s),
		}
		if ss.Held {
			ss.HolderLive = live[s.holder]
			ss.HolderSessionStart = v.members[s.holder].started
			if s.holder == r.cfg.Identity {
				if h, ok := local[i]; ok {
					ss.State, ss.Objects, ss.ReportedAt = h.state, h.objects, now
				}
			} else if h, ok := reports[s.holder][i]; ok {
				ss.State, ss.Objects, ss.ReportedAt = h.state, h.objects, v.members[s.holder].renewed
			}
		}
		ss.Synced = ss.State == stateAdmitted || ss.State == stateDraining
		ss.Admitted = ss.State == stateAdmitted
		if h, ok := local[i]; ok {
			ss.Local = h.state
		} else if _, ok := warm[i]; ok {
			ss.Local = stateWarm
		}
		ss.LoadKnown, ss.Work, ss.MoveTo, ss.MoveCause = lp.known[i], lp.work[i], to[i], causes[i]
		if h, ok := local[i]; ok && s.holder == r.cfg.Identity {
			ss.Ready, ss.Oldest = h.load.ready, h.load.oldest
		} else if h, ok := reports[s.holder][i]; ok {
			ss.Ready, ss.Oldest = h.load.ready, h.load.oldest
		}
		st.Shards = append(st.Shards, ss)
	}
	return st
}

// warmShards returns the shards kept warm at now, of those not held
// (keepWarm, session.go), each with when it stops being kept.
func (r *Replica) warmShards(held []int, now time.Time) map[int]time.Time {
	out := make(map[int]time.Time)
	for s, at := range r.runs.lapsedAt() {
		if at.IsZero() || slices.Contains(held, s) {
			continue
		}
		if ok, until := keepWarm(r.ring.shard(s), r.cfg.Identity, at, now, warmTTL(r.cfg.LeaseDuration)); ok {
			out[s] = until
		}
	}
	return out
}

// balanceStatus is the plan that a replica configured with balance
// computes from v (machine.plan), for Status: the plan, by shard its
// taker and cause, and the plan by load (its work and loads, if by load).
func balanceStatus(v *view, b balance, balance Balance) (BalanceStatus, []string, []string, loadPlan) {
	m := machine{conf: machineConf{balance: balance}, work: make([]time.Duration, len(v.shards))}
	to, causes := m.plan(v, &b)
	lp := m.plans.load
	if lp.loads == nil { // by count: the loads as they are, for the page
		lp.loads = make(map[string]time.Duration)
		var total time.Duration
		for i, s := range v.shards {
			if holds(v, s) {
				lp.loads[s.holder] += lp.work[i]
			}
			total += lp.work[i]
			lp.heaviest = max(lp.heaviest, lp.work[i])
		}
		if len(b.ids) > 0 {
			lp.mean = total / time.Duration(len(b.ids))
		}
	}
	bs := BalanceStatus{By: "count", Fallback: lp.fallback, Mean: lp.mean, Heaviest: lp.heaviest}
	if lp.fallback == "" {
		bs = BalanceStatus{By: "load", Mean: lp.mean, Heaviest: lp.heaviest, Bound: lp.bound,
			Gain:     time.Duration(loadGain * float64(max(lp.mean, lp.heaviest))),
			InFlight: lp.inflight, Budget: lp.budget, Held: lp.held}
	}
	for i, t := range to {
		if t == "" {
			continue
		}
		from := v.shards[i].holder
		bs.Moves = append(bs.Moves, MoveStatus{Shard: i, From: from, To: t, Work: lp.work[i], Cause: causes[i]})
	}
	return bs, to, causes, lp
}
