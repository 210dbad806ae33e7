package shardcache

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// TestClientFilterFreesTheList pins what the real-server proof found: with
// the client filtering, a replica that keeps an eighth of a full LIST must
// not keep the LIST. A typed list's items are one array, so a store that
// holds pointers into it (as meta.ExtractList returns them) keeps every
// object alive; the heap then stays that of an unsharded informer. The
// feed's ListerWatcher copies the kept items out of each page.
func TestClientFilterFreesTheList(t *testing.T) {
	const shards, objects = 8, 4000
	shardOf := func(obj any) (int, bool) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return 0, false
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(m.GetNamespace(), "ns-"))
		return n % shards, true
	}
	data := strings.Repeat("x", 4096)
	var list *corev1.ConfigMapList
	lw := &cache.ListWatch{ListWithContextFunc: func(context.Context, metav1.ListOptions) (kruntime.Object, error) {
		l := list
		list = nil // the test keeps no reference
		return l, nil
	}}
	inf := New(Config{ListerWatcher: lw, Object: &corev1.ConfigMap{}, Shards: shards, ShardOf: shardOf,
		Selector: func([]int) string { return "" }})
	inf.target[0] = true
	f := &feed{shard: allShards, cancel: func() {}, covers: slices.Clone(inf.target)}
	inf.feeds[allShards] = f

	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	list = &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	for i := range objects {
		list.Items = append(list.Items, corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns-" + strconv.Itoa(i), Name: "cm", ResourceVersion: "1"},
			Data:       map[string]string{"d": strings.Clone(data[:4096-i%7])}, // distinct strings: not shared
		})
	}
	got, err := (&feedLW{inf: inf, f: f}).ListWithContext(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items, err := meta.ExtractList(got)
	if err != nil {
		t.Fatal(err)
	}
	found := make([]any, len(items))
	for i := range items {
		found[i] = items[i]
	}
	got, items = nil, nil
	if err := (&feedStore{inf: inf, f: f}).Replace(found, "1"); err != nil {
		t.Fatal(err)
	}
	found = nil
	kept := len(inf.indexer.ListKeys())
	after := heap()
	full := uint64(objects) * 4096
	t.Logf("kept %d of %d objects; heap grew by %d KiB (the LIST was %d KiB)", kept, objects, (after-before)>>10, full>>10)
	if kept != objects/shards {
		t.Fatalf("kept %d of %d objects, want an eighth", kept, objects)
	}
	// The kept objects cost kept × 4 KiB; allow three times that, far
	// below the whole LIST that a pointer into its array would keep.
	if grew := after - before; grew > 3*uint64(kept)*4096 {
		t.Fatalf("heap grew by %d KiB keeping %d of %d objects: the whole LIST (%d KiB) is still referenced", grew>>10, kept, objects, full>>10)
	}
	runtime.KeepAlive(inf)
}
