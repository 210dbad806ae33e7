package fakeshards_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/fakeshards"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestParseMatchesKEP checks that the fake server filters as apimachinery's
// own KEP-5866 selector does, for the selectors a replica sends (one
// shard's range, merged ranges, the whole space), by UID and by namespace.
func TestParseMatchesKEP(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, field := range []string{sharding.FieldUID, sharding.FieldNamespace} {
		for _, shards := range []int{1, 2, 16, 1024} {
			for range 20 {
				var held []int
				for i := range shards {
					if rng.IntN(3) == 0 {
						held = append(held, i)
					}
				}
				kep := sharding.Selector(field, shards, held)
				if kep == nil {
					continue
				}
				match, err := fakeshards.Parse(kep.String())
				if err != nil {
					t.Fatalf("Parse(%q): %v", kep.String(), err)
				}
				for i := range 200 {
					obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
						Namespace: fmt.Sprintf("ns-%d", rng.IntN(50)), Name: fmt.Sprint(i),
						UID: types.UID(fmt.Sprintf("%x", rng.Uint64())),
					}}
					want, err := kep.Matches(obj)
					if err != nil {
						t.Fatal(err)
					}
					if got := match(obj); got != want {
						t.Fatalf("%s: fake %v, apimachinery %v for %s/%s uid %s", kep.String(), got, want, obj.Namespace, obj.Name, obj.UID)
					}
				}
			}
		}
	}
}
