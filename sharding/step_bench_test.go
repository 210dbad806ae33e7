package sharding

import (
	"fmt"
	"testing"
)

// BenchmarkStep is one replica's step on a ring of n members whose last
// member just joined and holds nothing (so the plan has moves), the
// others holding the shards in turn: what every replica runs on each
// change the watch delivers.
func BenchmarkStep(b *testing.B) {
	for _, c := range []struct{ members, shards int }{{8, 64}, {100, 1024}} {
		b.Run(fmt.Sprintf("%dx%d", c.members, c.shards), func(b *testing.B) {
			ids := make([]string, c.members)
			for k := range ids {
				ids[k] = fmt.Sprintf("r%03d", k)
			}
			holders := make([]string, c.shards)
			var active []int
			for i := range holders {
				holders[i] = ids[i%(c.members-1)]
				if holders[i] == ids[0] {
					active = append(active, i)
				}
			}
			v := testView(ids, holders)
			m := testMachine(ids[0], c.shards)
			m.aliveFor = settledTicks
			o := observation{now: t0, v: v, session: sessionState{alive: true, session: "s-" + ids[0]}, active: active}
			b.ReportAllocs()
			for b.Loop() {
				m.Step(o)
			}
		})
	}
}
