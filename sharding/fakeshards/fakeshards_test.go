package fakeshards_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/fakeshards"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
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

// TestCloseLeavesServer checks that a client of a shared server that
// closes leaves the server's cache running for the others: a client that
// listed, and has no watch open yet, then watches from its LIST's
// resourceVersion and gets the changes after it, not 410 Gone, as from an
// API server that another client went away from. (Closing a client used to
// stop the server whenever no other client had a watch open, which made a
// replica between its LIST and its watch list everything again.)
func TestCloseLeavesServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		objs := fake.NewSimpleClientset() //nolint:staticcheck // the field-managed fake is not needed
		cms := objs.CoreV1().ConfigMaps("ns")
		mk := func(name string) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
			if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		mk("before")
		srv := fakeshards.NewServer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return cms.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return cms.Watch(ctx, o)
			},
		}, true)
		defer srv.Close()
		a, b := srv.Client(), srv.Client()
		list, err := a.List(metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lm, err := meta.ListAccessor(list)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.List(metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		b.Close()
		mk("after")
		synctest.Wait()
		w, err := a.Watch(metav1.ListOptions{ResourceVersion: lm.GetResourceVersion()})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		select {
		case ev := <-w.ResultChan():
			m, _ := meta.Accessor(ev.Object)
			if ev.Type != watch.Added || m == nil || m.GetName() != "after" {
				t.Errorf("watch from %s after another client closed: first event %s %+v; want Added of \"after\"", lm.GetResourceVersion(), ev.Type, ev.Object)
			}
		case <-time.After(time.Minute):
			t.Errorf("watch from %s after another client closed: no event", lm.GetResourceVersion())
		}
	})
}
