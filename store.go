package workqueue

// Store holds the ready keys of a Queue: keys that are due for processing and
// not yet handed out by Get. It decides the order in which Get hands them out.
//
// Caller and locking: only the Queue calls a Store, and always with the
// queue's lock held, from whichever goroutine called Add, Get, Done or fired
// a delay. A Store therefore needs no locking of its own, must not block, and
// must not call back into the queue.
//
// Invariants the queue keeps for the Store:
//   - Push is called only with an item that is not in the store, so the
//     store holds at most one entry per item.
//   - Pop is called only when Len() > 0.
//   - Touch is called only with an item that is in the store, when it is
//     added again while still waiting to be handed out (a duplicate Add).
//     A FIFO ignores it; a store may use it to reorder.
//
// Queue.Remove cannot take an item out of a Store, so the item's entry
// stays in the store until Pop hands it out and the queue drops it (see
// remove.go), or the queue rebuilds the store without it by popping
// everything and pushing the live items back. An item removed and added
// again while its entry is still there is not pushed again: the queue
// calls Touch (or PriorityStore.Raise), and the item keeps that entry's
// place in the store's order, as a duplicate Add would.
//
// One store serves one queue: the queue's key table and the store hold the
// same keys, so a store shared by two queues would hand one queue the keys
// of the other. NewWithConfig panics when given a store (any pointer to a
// non-empty type) that another queue already took.
//
// The method set equals client-go's workqueue.Queue[T], so a store written
// for one library works with the other.
type Store[T comparable] interface {
	// Push adds item, which is not in the store.
	Push(item T)
	// Pop removes and returns the next item to hand out. Len() > 0.
	Pop() T
	// Len reports how many items the store holds.
	Len() int
	// Touch tells the store that item, which it holds, was added again.
	Touch(item T)
}

// PriorityStore is a Store that orders keys by an integer priority, higher
// first. When Config.Store is a PriorityStore, AddWithPriority and
// AddAfterWithPriority pass their priority to it; plain Push means priority 0.
// The queue keeps the same locking and invariants as for Store, and in
// addition:
//   - PushPriority is called only with an item that is not in the store.
//   - Raise is called only with an item that is in the store at a priority
//     lower than priority; the store moves it to the back of that level.
type PriorityStore[T comparable] interface {
	Store[T]
	// PushPriority adds item, which is not in the store, at priority.
	PushPriority(item T, priority int)
	// Raise moves item, which is in the store at a lower priority, to the
	// back of priority's level.
	Raise(item T, priority int)
}

// heldStore is a Store that may hold back some of its keys (a tenant at its
// cap) and that the queue tells about runs; it can also remove a key, so the
// queue never leaves it ghosts.
type heldStore[T comparable] interface {
	Store[T]
	// available reports how many of the Len() keys Pop may return now.
	available() int
	// handedOut tells the store that item, which Pop just returned, was
	// handed out by Get (it is processing now).
	handedOut(item T)
	// finished tells the store that the run of item, handed out before,
	// ended (Done). It returns how many keys became available.
	finished(item T) int
	// remove takes item, which the store holds, out of it (Queue.Remove).
	remove(item T)
}

// frontStore reports the front key of each FIFO the store keeps (for the
// fair priority store, one per tenant and priority level with ready keys,
// those held back by a cap included), with the FIFO's priority: the queue
// reads each key's ready time from its table and keeps, per level, the
// oldest, for the ready-age gauge. yield returns false to stop.
type frontStore[T comparable] interface {
	fronts(yield func(prio int, item T) bool)
}
