package sharding_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/go-coalesce/workqueue/sharding"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubesharding "k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
)

// TestHashVectors checks Hash against published FNV-1a 64 vectors and
// against apimachinery's sharding.HashField, which the API server uses.
func TestHashVectors(t *testing.T) {
	for in, want := range map[string]uint64{
		"":       0xcbf29ce484222325,
		"a":      0xaf63dc4c8601ec8c,
		"foobar": 0x85944171f73967e8,
	} {
		if got := sharding.Hash(in); got != want {
			t.Errorf("Hash(%q) = %#x, want %#x", in, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		v := strconv.FormatUint(rng.Uint64(), 36)
		want, err := strconv.ParseUint(kubesharding.HashField(v), 16, 64)
		if err != nil {
			t.Fatalf("HashField(%q): %v", v, err)
		}
		if got := sharding.Hash(v); got != want {
			t.Fatalf("Hash(%q) = %#x, apimachinery says %#x", v, got, want)
		}
	}
}

// TestRangesMatchKEP checks that an object is in shard i exactly when
// apimachinery's selector for Range(i) matches it, for both fields and
// several ring sizes, and that Selector merges adjacent shards.
func TestRangesMatchKEP(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	objs := make([]*appsv1.Deployment, 300)
	for i := range objs {
		objs[i] = &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{
			Namespace: fmt.Sprintf("ns-%d", rng.IntN(50)),
			Name:      fmt.Sprintf("d-%d", i),
			UID:       types.UID(fmt.Sprintf("%x-%x", rng.Uint64(), rng.Uint64())),
		}}
	}
	for _, field := range []string{sharding.FieldUID, sharding.FieldNamespace} {
		for _, s := range []int{1, 2, 16, 256, 1024} {
			if r := sharding.Range(field, s, 0); r.Start != "0x0000000000000000" {
				t.Errorf("S=%d: shard 0 starts at %s", s, r.Start)
			}
			if r := sharding.Range(field, s, s-1); r.End != "0x10000000000000000" {
				t.Errorf("S=%d: last shard ends at %s", s, r.End)
			}
			for _, o := range objs {
				v := string(o.UID)
				if field == sharding.FieldNamespace {
					v = o.Namespace
				}
				shard := sharding.ShardOf(sharding.Hash(v), s)
				for _, i := range []int{0, shard, (shard + 1) % s, s - 1} {
					ok, err := kubesharding.NewSelector(sharding.Range(field, s, i)).Matches(o)
					if err != nil {
						t.Fatal(err)
					}
					if ok != (i == shard) {
						t.Fatalf("%s S=%d: object in shard %d, selector of shard %d matches: %v", field, s, shard, i, ok)
					}
				}
				held := []int{shard}
				if s > 2 {
					held = []int{(shard + 2) % s, shard}
				}
				if ok, _ := sharding.Selector(field, s, held).Matches(o); !ok {
					t.Fatalf("%s S=%d: Selector(%v) misses an object of shard %d", field, s, held, shard)
				}
			}
		}
	}
	sel := sharding.Selector(sharding.FieldUID, 16, []int{5, 0, 1, 2})
	if got := len(sel.Requirements()); got != 2 {
		t.Errorf("Selector of shards 0,1,2,5 has %d ranges, want 2: %s", got, sel)
	}
	want := "shardRange(object.metadata.uid, '0x0000000000000000', '0x3000000000000000') || shardRange(object.metadata.uid, '0x5000000000000000', '0x6000000000000000')"
	if sel.String() != want {
		t.Errorf("Selector =\n%s\nwant\n%s", sel, want)
	}
	if sharding.Selector(sharding.FieldUID, 16, nil) != nil {
		t.Error("Selector of no shards is not nil")
	}
	all := make([]int, 16)
	for i := range all {
		all[i] = i
	}
	if got := sharding.Selector(sharding.FieldUID, 16, all).Requirements(); !slices.Equal(got, []kubesharding.ShardRangeRequirement{
		{Key: sharding.FieldUID, Start: "0x0000000000000000", End: "0x10000000000000000"},
	}) {
		t.Errorf("Selector of every shard = %v", got)
	}
}
