package sharding

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// This file is the ring's shard count and field, and how the count
// changes while the ring runs.
//
// Exclusion must hold by hash range, and a shard Lease holds it only
// among the Leases of one count: shard 3 of 16 covers shards 6 and 7 of
// 32, which are other Leases, so two replicas could each win a
// conditional write on a Lease of its own count and admit overlapping
// ranges. So at any time one count is the ring's, and only its Leases
// are acquired. The ring's Lease ("<Name>-ring", created by the first
// replica of the ring) says which: AnnotationShards is the ring's count
// (and AnnotationField its field, which never changes), in generation
// AnnotationGeneration.
//
// A replica configured with another count joins the ring as a member
// that holds nothing (modeWaiting): it fills its cache for the share it
// will take once the ring has its count (the free shards its count's
// members would be dealt) and is Ready once that share is in its cache,
// so a rolling update that changes Config.Shards proceeds. When no
// member of the ring's count counts any more (they left, as the
// rollout's old pods do), a waiting member switches the ring to its count
// in three steps, each a write conditioned on the version it read:
//
//  1. It writes the target count into the ring's Lease (AnnotationTarget).
//     From then on no Lease of the ring's count is acquired; its holders
//     (modeClosing) stop admitting, drain and release each shard sealed
//     in the ring's generation g (AnnotationSealed), and the members seal
//     every free one (or create it sealed, where it is missing).
//  2. Once every Lease of the ring's count is sealed in g, a member writes
//     the ring's Lease with the target as its count, in generation g+1.
//  3. The members of the new count acquire its shards as in any ring:
//     each takes the shards it filled while waiting, so their keys wait
//     for the old holders' drain and three Lease round trips, not for a
//     list.
//
// No Lease of the old count is held at the switch and none can be
// acquired after it, so no key runs twice across a change of the count;
// the argument is docs/contract.md, "Why two replicas never run one key
// at once" (its part "Across a change of the shard count").
//
// The field cannot change so: ranges of two fields do not nest, and
// nothing tells which key an object had in the other. A replica
// configured with another field refuses (refuseRing): it writes nothing;
// Run returns an error that names both and wraps ErrRingMismatch; Ready
// fails with it, Metrics.Mismatch is 1 and it is logged at default
// verbosity. The same refusal, for the replicas already running, meets a
// ring mixed outside this protocol (the ring's Lease deleted by hand
// while replicas of another count hold shards): a Lease of a count that
// is not the ring's held by a live member.

// ErrRingMismatch is wrapped by the error Run returns when the ring was
// created with another Config.Field, or was mixed outside its protocol
// (errors.Is tells it). Another Config.Shards is no error: the ring
// switches to it online (see Config.Shards).
var ErrRingMismatch = errors.New("sharding: the ring has another field, or was mixed outside its protocol")

// ringConf is what every replica of a ring must share: the shard count
// and the hashed field. Zero parts are unknown (a Lease written before
// they were recorded) and agree with anything.
type ringConf struct {
	shards int
	field  string
}

func (c ringConf) String() string {
	shards, field := "?", c.field
	if c.shards > 0 {
		shards = strconv.Itoa(c.shards)
	}
	if field == "" {
		field = "?"
	}
	return fmt.Sprintf("Shards %s, Field %s", shards, field)
}

// agrees reports whether c, read from a Lease, may be the configuration
// ours: each part is unknown or equal.
func (c ringConf) agrees(ours ringConf) bool {
	return (c.shards == 0 || c.shards == ours.shards) && (c.field == "" || c.field == ours.field)
}

// What a replica of one count does in the ring (modeOf).
type ringMode uint8

const (
	modeLive    ringMode = iota // its count is the ring's: it holds shards
	modeClosing                 // its count is the ring's, switching away: it releases every shard, sealed
	modeWaiting                 // another count is the ring's: it holds nothing and fills its share
)

// modeOf is the mode of a replica configured with own shards in the ring
// whose Lease is ri. A ring without its Lease (deleted by hand while the
// ring runs) keeps the replica's count: ringConflict refuses where that
// would mix counts.
func modeOf(ri ringInfo, own int) ringMode {
	switch {
	case ri.exists && ri.conf.shards != 0 && ri.conf.shards != own:
		return modeWaiting
	case ri.exists && ri.target != 0:
		return modeClosing
	}
	return modeLive
}

// String names the mode for logs and the ring page.
func (m ringMode) String() string {
	return [...]string{"live", "closing", "waiting"}[m]
}

// leaseOf returns shard i of a ring of shards shards as v shows it, for a
// replica configured with own shards (whose own Leases are v.shards).
func leaseOf(v *view, own, shards, i int) shardInfo {
	if shards == own {
		return v.shards[i]
	}
	return v.others[shardKey{shards, i}]
}

// sealedIn reports whether s is sealed in generation gen.
func sealedIn(s shardInfo, gen int) bool { return s.exists && s.sealed && s.sealedGen == gen }

// reshardStep is self's part in a switch of the ring's count (reshard).
type reshardStep struct {
	start    bool  // write the ring's target: self's count
	complete bool  // write the switch done: the target is the ring's count, next generation
	seal     []int // seal these free Leases of the ring's count now
}

// reshard decides self's part, as a replica configured with own shards,
// in a switch of the ring's count, from v (see the file comment). Only a
// member that counts (counts, decide.go) writes. It starts a switch to
// its count when that is not the ring's, no member of the ring's count is
// in v but those leaving, and settled is true (the caller's session has
// seen the renewals of the members that started with it: a ring's
// creator is a member a period after it created the ring, and one that
// crashed is until it is fenced). During a switch it seals its part of
// the free Leases of the ring's count (shard i is sealed by the counting
// member at position i mod n in identity order, so that each is written
// once), and records the switch once every one of them is sealed in the
// ring's generation.
func reshard(v *view, self string, own int, settled bool) reshardStep {
	ri := v.ringLease
	live := ri.conf.shards
	if !ri.exists || !validShards(live) {
		return reshardStep{}
	}
	if m, ok := v.members[self]; !ok || !counts(m) {
		return reshardStep{}
	}
	if ri.target == 0 {
		return reshardStep{start: own != live && settled && !ringCounts(v, live)}
	}
	var ids []string
	for id, m := range v.members {
		if counts(m) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	k := slices.Index(ids, self)
	var step reshardStep
	all := true
	for i := range live {
		s := leaseOf(v, own, live, i)
		if sealedIn(s, ri.gen) {
			continue
		}
		all = false
		if i%len(ids) == k && !holds(v, s) {
			step.seal = append(step.seal, i)
		}
	}
	step.complete = all
	return step
}

// ringCounts reports whether a member of the ring's count live is in v,
// not leaving.
func ringCounts(v *view, live int) bool {
	for _, m := range v.members {
		if (m.conf.shards == 0 || m.conf.shards == live) && !m.leaving {
			return true
		}
	}
	return false
}

// mismatchError is a refusal to join, or to stay in, a ring configured
// otherwise. It wraps ErrRingMismatch.
type mismatchError struct{ msg string }

func (e *mismatchError) Error() string        { return e.msg }
func (e *mismatchError) Is(target error) bool { return target == ErrRingMismatch }

func mismatchf(format string, args ...any) error {
	return &mismatchError{msg: fmt.Sprintf(format, args...)}
}

// ringConflict decides whether a replica configured with ours, named
// self, must refuse ring as v shows it: the ring's Lease names another
// field; or a shard Lease held by a live member (its membership Lease is
// in v with the Lease's session) was written with another field, or is
// of a count that is not the ring's (ours, if the ring has no Lease). It
// returns the refusal, naming both configurations, or nil.
func ringConflict(v *view, ring, namespace, self string, ours ringConf) error {
	rl := v.ringLease
	if rl.exists && rl.conf.field != "" && rl.conf.field != ours.field {
		return mismatchf("sharding: this replica has Config.Field %s, but ring %q was created with Field %s "+
			"(Lease %s/%s); the field of a running ring cannot change: run every replica of a ring with the same Field, "+
			"or change it as sharding/docs/operate.md says (stop the ring, delete its Leases)",
			ours.field, ring, rl.conf.field, namespace, ringLeaseName(ring))
	}
	live := ours.shards
	if rl.exists && rl.conf.shards != 0 {
		live = rl.conf.shards
	}
	check := func(k shardKey, s shardInfo) error {
		field := s.conf.field != "" && s.conf.field != ours.field
		if !field && k.shards == live || s.holder == self || !holds(v, s) { // holds, a look-up, last
			return nil
		}
		if field {
			return mismatchf("sharding: this replica has Config.Field %s, but shard Lease %s/%s of ring %q, held by %q, was written with Field %s; "+
				"run every replica of a ring with the same Field",
				ours.field, namespace, shardLeaseName(ring, k.shards, k.i), ring, s.holder, s.conf.field)
		}
		if k.shards != live {
			return mismatchf("sharding: this replica has Config.Shards %d, and ring %q has Shards %d, but shard Lease %s/%s, held by %q, is of Shards %d: "+
				"the ring was mixed outside its protocol (its Lease %s/%s deleted while it ran?); stop every replica and delete the ring's Leases",
				ours.shards, ring, live, namespace, shardLeaseName(ring, k.shards, k.i), s.holder, k.shards, namespace, ringLeaseName(ring))
		}
		return nil
	}
	for i, s := range v.shards {
		if err := check(shardKey{ours.shards, i}, s); err != nil {
			return err
		}
	}
	for k, s := range v.others {
		if err := check(k, s); err != nil {
			return err
		}
	}
	return nil
}
