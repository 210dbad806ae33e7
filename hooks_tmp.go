package workqueue

// Temporary copy of the hooks store38 defines in store.go; removed at merge.
type heldStore[T comparable] interface {
	Store[T]
	available() int
	handedOut(item T)
	finished(item T) int
	remove(item T)
}
