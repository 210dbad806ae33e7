package sharding

import (
	"reflect"
	"testing"
	"time"
)

func TestReportRoundTrip(t *testing.T) {
	held := []heldShard{
		{shard: 0, state: stateAdmitted, objects: 12, known: true,
			load: shardLoad{work: 1500 * time.Millisecond, ready: 3, oldest: 250 * time.Millisecond}},
		{shard: 5, state: stateFilling, objects: 0},
		{shard: 7, state: stateDraining, objects: 4, known: true},
	}
	for _, workers := range []int{0, 8} {
		v := reportOf(held, workers)
		got, w := parseReport(v, 8)
		if !reflect.DeepEqual(got, held) || w != workers {
			t.Errorf("parseReport(%q) = %+v, %d; want %+v, %d", v, got, w, held, workers)
		}
	}
	// An older writer's entries (three fields) read with an unknown load;
	// unreadable entries and shards out of range are skipped.
	got, w := parseReport("w:x 1:a:3 2:a:5:x:1:1 9:a:1:1:1:1 3:d:2:10:0:0 4:a:1:1", 8)
	want := []heldShard{{shard: 1, state: stateAdmitted, objects: 3},
		{shard: 3, state: stateDraining, objects: 2, known: true, load: shardLoad{work: 10 * time.Millisecond}}}
	if !reflect.DeepEqual(got, want) || w != 0 {
		t.Errorf("parseReport = %+v, %d; want %+v, 0", got, w, want)
	}
}
