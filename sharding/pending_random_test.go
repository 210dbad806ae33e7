package sharding

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// checkPending checks pendingKeys' counts against its map: n, catchUp and
// outstanding are the map's counts, and every unfed key has a live entry
// in the feed (else it is owed and never fed).
func checkPending(t *testing.T, p *pendingKeys, step int, op string) {
	t.Helper()
	n := make([]int, len(p.n))
	cu := make([]int, len(p.n))
	fed := 0
	for key, k := range p.at {
		n[k.shard]++
		if k.kind != keyEvent {
			cu[k.shard]++
		}
		if k.kind == keyFed {
			fed++
		}
		if k.kind == keyUnfed {
			live := false
			for _, e := range p.feed {
				if e.key == key && e.shard == k.shard && e.at.Equal(k.at) {
					live = true
				}
			}
			if !live {
				t.Fatalf("step %d (%s): %s unfed with no live feed entry", step, op, key)
			}
		}
	}
	for s := range n {
		if n[s] != p.n[s] || cu[s] != p.catchUp[s] {
			t.Fatalf("step %d (%s): shard %d: n %d catchUp %d, want %d %d", step, op, s, p.n[s], p.catchUp[s], n[s], cu[s])
		}
	}
	if fed != p.outstanding {
		t.Fatalf("step %d (%s): outstanding %d, want %d", step, op, p.outstanding, fed)
	}
}

// TestPendingRandom drives pendingKeys with random gains, event adds,
// begins, owes, drops, feeds and changes of which shards are admitted,
// 200 seeds of 400 steps, and checks after every step that its counts are
// those of its records and that no key is owed without a place in the
// feed (owed and never fed: a key lost).
func TestPendingRandom(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var p pendingKeys
		p.init(3)
		admitted := []bool{true, true, true}
		at := time.Unix(0, 0)
		key := func() string { return "k" + strconv.Itoa(rng.IntN(12)) }
		shardOf := func(k string) int { v, _ := strconv.Atoi(k[1:]); return v % 3 }
		state := func(s int) shardFeed {
			if admitted[s] {
				return feedKey
			}
			return feedWait
		}
		for i := range 400 {
			at = at.Add(time.Millisecond * time.Duration(rng.IntN(3)))
			var op string
			switch rng.IntN(7) {
			case 0:
				s := rng.IntN(3)
				var keys []string
				for range rng.IntN(6) {
					k := key()
					if shardOf(k) == s {
						keys = append(keys, k)
					}
				}
				op = "gain"
				p.gain(s, at, keys)
			case 1:
				k := key()
				op = "add " + k
				p.add(k, shardOf(k), at)
			case 2:
				k := key()
				op = "begun " + k
				p.begun(k)
			case 3:
				k := key()
				op = "owe " + k
				p.owe(k, shardOf(k), at)
			case 4:
				s := rng.IntN(3)
				op = "drop " + strconv.Itoa(s)
				p.drop(s)
			case 5:
				op = "take"
				p.take(state)
			case 6:
				s := rng.IntN(3)
				admitted[s] = !admitted[s]
				op = "toggle"
			}
			checkPending(t, &p, i, op)
			p.ready(rng.IntN(3), at)
		}
	}
}
