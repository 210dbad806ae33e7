package sharding

import (
	"runtime"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestClientFilterFreesTheList pins what the real-server proof found: with
// the client filtering, a replica that keeps an eighth of a full LIST must
// not keep the LIST. A typed list's items are one array, so a store that
// holds pointers into it (as meta.ExtractList returns them) keeps every
// object alive; the heap then stays that of an unsharded informer.
func TestClientFilterFreesTheList(t *testing.T) {
	const shards, objects = 8, 4000
	r := &Replica{field: FieldNamespace, shards: shards, wake: make(chan struct{}, 1)}
	inf := newInformer(r, nil, &corev1.ConfigMap{}, nil, true)
	inf.target[0] = true
	l := &loop{shard: clientLoop}
	inf.loops[clientLoop] = l

	data := strings.Repeat("x", 4096)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	list := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	for i := range objects {
		list.Items = append(list.Items, corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns-" + strconv.Itoa(i), Name: "cm", ResourceVersion: "1"},
			Data:       map[string]string{"d": data[:4096-i%7]}, // distinct strings: not shared
		})
		list.Items[i].Data["d"] = strings.Clone(list.Items[i].Data["d"])
	}
	if _, err := inf.replace(l, list); err != nil {
		t.Fatal(err)
	}
	kept := len(inf.indexer.ListKeys())
	list = nil
	after := heap()
	full := uint64(objects) * 4096
	t.Logf("kept %d of %d objects; heap grew by %d KiB (the LIST was %d KiB)", kept, objects, (after-before)>>10, full>>10)
	if kept == 0 || kept > objects/4 {
		t.Fatalf("kept %d of %d objects, want about an eighth", kept, objects)
	}
	// The kept objects cost kept × 4 KiB; allow three times that, far
	// below the whole LIST that a pointer into its array would keep.
	if grew := after - before; grew > 3*uint64(kept)*4096 {
		t.Fatalf("heap grew by %d KiB keeping %d of %d objects: the whole LIST (%d KiB) is still referenced", grew>>10, kept, objects, full>>10)
	}
	runtime.KeepAlive(inf)
}
