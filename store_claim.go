package workqueue

import (
	"reflect"
	"runtime"
	"sync"
	"weak"
)

// claimed holds the stores that queues have taken, keyed by a weak pointer
// to each: a store is in it while it is alive and leaves it (a cleanup
// deletes its entry) once it is unreachable, so the set costs nothing for a
// store that is gone and never keeps one alive. Weak pointers, not
// addresses: two weak pointers are equal only if made from the same live
// object, so a new store allocated where a dead one was is never mistaken
// for it, however late the cleanup runs. Only NewWithConfig touches it,
// and only for a queue with a Store.
var claimed sync.Map // weak.Pointer[byte] -> struct{}

// claimStore records that a queue took s, and panics if a queue took it
// before. Only stores held by pointer can be told apart; a pointer to a
// zero-size type is skipped, since all of those may share one address (and
// such a store could not hold keys anyway), as is a store held by value,
// which is copied.
func claimStore[T comparable](s Store[T]) {
	v := reflect.ValueOf(s)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Type().Elem().Size() == 0 {
		return
	}
	p := (*byte)(v.UnsafePointer())
	w := weak.Make(p)
	if _, taken := claimed.LoadOrStore(w, struct{}{}); taken {
		panic("workqueue: Store already used by another queue")
	}
	runtime.AddCleanup(p, func(w weak.Pointer[byte]) { claimed.Delete(w) }, w)
}
