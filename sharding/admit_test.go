package sharding

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// admitReplica returns a replica of 4 shards sharded by field whose ledger
// admits shard s (held, filled, alive for an hour), without running its
// loop: its primary informer is built but not run, so its store is empty.
func admitReplica(t *testing.T, field string, s int) *Replica {
	t.Helper()
	r, err := New(Config{Client: &fake.Clientset{}, Namespace: "ns", Name: "admit", Identity: "r0", Object: &corev1.ConfigMap{},
		Queue: simNoQueue{}, Shards: 4, Field: field})
	if err != nil {
		t.Fatal(err)
	}
	r.NewInformer(&cache.ListWatch{}, &corev1.ConfigMap{}, 0, nil)
	b := &r.runs
	b.alive, b.deadline = true, time.Now().Add(time.Hour)
	b.state[s].state, b.filled[s] = shardActive, true
	return r
}

// readyOf is shard s's ready keys and the oldest's age, as the replica
// reports them.
func readyOf(r *Replica, s int) (int, time.Duration) {
	l, _ := r.runs.measured([]int{s}, time.Now())
	return l[0].ready, l[0].oldest
}

// TestReplicaAdmit: Admit answers as Owns, and counts an owned key among
// its shard's ready keys from the call until a run of it begins in
// Handler; a key not owned is not counted, a key admitted twice keeps its
// first time, and Owns counts nothing. A deleted key (no object, its delete
// event seen) is admitted by the shard of its delete event, as Owns does.
// Mutants: Admit as Owns (nothing counted), Admit recording a key not
// owned, Handler's begin not forgetting the key.
func TestReplicaAdmit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Sharding by namespace, a key's shard is its namespace's: ns-0 in
		// shard s, other in another.
		s := ShardOf(Hash("ns-0"), 4)
		other := ""
		for i := 1; other == ""; i++ {
			if ns := fmt.Sprintf("ns-%d", i); ShardOf(Hash(ns), 4) != s {
				other = ns
			}
		}
		r := admitReplica(t, FieldNamespace, s)
		owned, owned2, foreign := "ns-0/a", "ns-0/b", other+"/a"

		if r.Admit(foreign) || r.Owns(foreign) {
			t.Fatalf("Admit(%q) or Owns true for a key of a shard not held", foreign)
		}
		if n, _ := readyOf(r, ShardOf(Hash(other), 4)); n != 0 {
			t.Errorf("a refused key is counted: %d ready in its shard", n)
		}
		if !r.Owns(owned) {
			t.Fatalf("Owns(%q) false for a key of an admitted shard", owned)
		}
		if n, _ := readyOf(r, s); n != 0 {
			t.Errorf("Owns counted a key: %d ready, want 0", n)
		}

		if !r.Admit(owned) {
			t.Fatalf("Admit(%q) false for a key of an admitted shard", owned)
		}
		time.Sleep(5 * time.Second)
		if n, old := readyOf(r, s); n != 1 || old != 5*time.Second {
			t.Errorf("5s after Admit: %d ready, oldest %v; want 1, 5s", n, old)
		}
		if !r.Admit(owned) || !r.Admit(owned2) {
			t.Fatal("Admit of owned keys false")
		}
		time.Sleep(time.Second)
		if n, old := readyOf(r, s); n != 2 || old != 6*time.Second {
			t.Errorf("admitted again, and a second key: %d ready, oldest %v; want 2, 6s (the first time kept)", n, old)
		}

		ran := false
		err := r.Handler(func(context.Context, string) error {
			ran = true
			if n, old := readyOf(r, s); n != 1 || old != time.Second {
				t.Errorf("while %s runs: %d ready, oldest %v; want 1 (%s), 1s", owned, n, old, owned2)
			}
			return nil
		})(context.Background(), owned)
		if err != nil || !ran {
			t.Fatalf("Handler(%q): ran %v, %v", owned, ran, err)
		}
		if n, _ := readyOf(r, s); n != 1 {
			t.Errorf("after the run: %d ready, want 1", n)
		}
	})
}

// TestReplicaAdmitDeleted: sharding by UID, a key whose object is not in
// the store is admitted only once its delete event has been seen, by the
// shard of that event.
func TestReplicaAdmitDeleted(t *testing.T) {
	r := admitReplica(t, FieldUID, 2)
	if r.Admit("ns/gone") {
		t.Fatal("Admit true for a key of no object and no delete event")
	}
	r.runs.event("ns/gone", 2, true, false, time.Now())
	if !r.Admit("ns/gone") {
		t.Fatal("Admit false for a deleted key of an admitted shard")
	}
	if n, _ := readyOf(r, 2); n != 1 {
		t.Errorf("deleted key admitted: %d ready in its shard, want 1", n)
	}
}
