package sharding

import (
	"slices"
	"time"
)

// This file is the ledger's side of the sharded cache (runs.go has the
// rest): which shards every running sharded informer has synced (a
// shard's keys are admitted only then), the deleted keys that wait for a
// run, and when each lost shard lapsed (kept warm, keepWarm).

// addInformer registers a sharded informer that starts running: until it
// has synced a shard, the shard's keys are not admitted.
func (b *ledger) addInformer(inf *informer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.informers = append(b.informers, inf)
	b.infGen++
	clear(b.filled)
}

// removeInformer unregisters a sharded informer that stopped.
func (b *ledger) removeInformer(inf *informer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.informers = slices.DeleteFunc(b.informers, func(i *informer) bool { return i == inf })
	b.infGen++
}

// running returns the running sharded informers and their generation.
func (b *ledger) running() ([]*informer, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.informers), b.infGen
}

// setFilled installs which shards every running sharded informer has
// synced, computed for generation gen: an informer that started since
// cleared filled, and is counted at the next call.
func (b *ledger) setFilled(filled []bool, gen int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.infGen == gen {
		copy(b.filled, filled)
	}
}

// dropGone forgets the deleted keys of the given shards that are no longer
// active, and their pending keys (load.go), and returns the deleted keys
// (for the queue's Remove).
func (b *ledger) dropGone(lost []int) []string {
	if len(lost) == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	in := make([]bool, len(b.state))
	for _, i := range lost {
		in[i] = true
		if b.pending.at != nil && b.state[i].state != shardActive {
			b.pending.drop(i) // the queue's keys of it are removed
		}
	}
	var out []string
	for k, s := range b.gone {
		if in[s] && b.state[s].state != shardActive {
			out = append(out, k)
			delete(b.gone, k)
		}
	}
	return out
}

// goneShard returns the shard a deleted key had at its delete event, if
// the ledger still remembers it (until its run succeeds, or the shard is
// given up).
func (b *ledger) goneShard(key string) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.gone[key]
	return s, ok
}

// lapsedAt returns when the session ended while each shard was held (see
// keepWarm), zero for the others.
func (b *ledger) lapsedAt() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.lapsed)
}
