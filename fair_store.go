package workqueue

// The fair store keeps one FIFO per tenant that has ready keys and a round:
// a circular list of those tenants. Pop serves the tenant at the front of
// the round and then, once its turn is used up, moves it to the back, which
// on a circular list is one pointer assignment. A tenant enters the round
// with its first ready key and leaves it with its last, so the round holds
// only tenants that can be served and Pop never skips anyone: both Push and
// Pop are O(1).

// maxSpareTenants bounds the released tenants kept for reuse. Each holds at
// most minRing slots, so spares cost a constant amount of memory.
const maxSpareTenants = 8

// fairTenant is the FIFO of one tenant that has ready keys, and its place in
// the round.
type fairTenant[T comparable] struct {
	fifo ring[T] // never empty while the tenant is in the round
	next *fairTenant[T]
	// credit is how many more keys the tenant may hand out in its current
	// turn; 0 means its next turn has not started.
	credit int
	name   string
}

// fairStore is the Store returned by NewFairStore and NewWeightedFairStore.
//
// The zero value is not usable; use a constructor. It is not safe for
// concurrent use: the queue calls it under its lock.
type fairStore[T comparable] struct {
	tenant func(T) string
	weight func(string) int // nil: every tenant gets one key per turn

	tenants shrinkingMap[string, *fairTenant[T]] // tenants in the round, by name
	// tail is the back of the round and tail.next its front; nil when the
	// store is empty.
	tail *fairTenant[T]
	// last is the tenant of the latest push, or nil: a run of keys from one
	// tenant skips the map lookup.
	last  *fairTenant[T]
	n     int              // keys in the store
	spare []*fairTenant[T] // released tenants for reuse, len <= maxSpareTenants
}

// NewFairStore returns a Store that shares Get fairly among tenants: it
// hands out keys round-robin across the tenants that have ready keys, one key
// per tenant per turn, and in FIFO order within one tenant. tenant names the
// tenant of a key (for Kubernetes keys, typically the namespace). Use it as
// Config.Store.
//
// A tenant joins the round at the back when it gets its first ready key and
// leaves it when its last one is handed out, so while k tenants have ready
// keys, a key that becomes the oldest of its tenant is handed out after at
// most k-1 keys of other tenants, however many keys they have queued: a
// flood of 100 keys from one tenant delays another tenant's single key by
// at most one key.
//
// tenant is called once per Push, under the queue's lock: it must be cheap,
// must not block and must not call into the queue. Touch does nothing.
//
// Push and Pop are O(1) amortized (Push does one map lookup by tenant name,
// skipped when the previous push had the same tenant), Len and Touch O(1).
// Popped slots are zeroed, a tenant's bookkeeping is released when it has
// nothing ready, and the tenant map shrinks after a burst of tenants.
//
// Like every Store it is not safe for concurrent use on its own. It returns
// the Store interface, as NewFIFOStore does: the store has no methods beyond
// it, and stores are only ever called through it.
func NewFairStore[T comparable](tenant func(T) string) Store[T] {
	return NewWeightedFairStore(tenant, nil)
}

// NewWeightedFairStore is NewFairStore with weights: in each of its turns a
// tenant hands out up to weight(tenant) keys in a row (values below 1 count
// as 1) before the next tenant's turn. A nil weight gives every tenant 1,
// which is NewFairStore.
//
// weight is called when a tenant's turn starts, so a changed weight applies
// from the tenant's next turn; like tenant it is called under the queue's
// lock and must be cheap. With weights, a key that becomes the oldest of
// its tenant waits for at most the sum of the other ready tenants' weights.
func NewWeightedFairStore[T comparable](tenant func(T) string, weight func(tenant string) int) Store[T] {
	if tenant == nil {
		panic("workqueue: NewFairStore needs a tenant function")
	}
	return &fairStore[T]{tenant: tenant, weight: weight}
}

// Push adds item, which is not in the store, at the back of its tenant's
// FIFO; a tenant with no other ready key joins the back of the round.
func (s *fairStore[T]) Push(item T) {
	name := s.tenant(item)
	t := s.last
	if t == nil || t.name != name {
		t = s.tenants.m[name]
		if t == nil {
			t = s.join(name)
		}
		s.last = t
	}
	t.fifo.Push(item)
	s.n++
}

// Pop removes and returns the oldest key of the tenant at the front of the
// round. Len() > 0.
func (s *fairStore[T]) Pop() T {
	t := s.tail.next
	if t.credit == 0 {
		t.credit = 1
		if s.weight != nil {
			t.credit = max(1, s.weight(t.name))
		}
	}
	item := t.fifo.Pop()
	s.n--
	t.credit--
	switch {
	case t.fifo.Len() == 0:
		s.leave(t)
	case t.credit == 0:
		s.tail = t // turn used up: the front becomes the back
	}
	return item
}

// Len reports the number of keys in the store.
func (s *fairStore[T]) Len() int { return s.n }

// Touch does nothing: a duplicate Add keeps the key's place.
func (s *fairStore[T]) Touch(T) {}

// join adds a tenant named name at the back of the round.
func (s *fairStore[T]) join(name string) *fairTenant[T] {
	t := reuse(&s.spare)
	t.name = name
	if s.tail == nil {
		t.next = t
	} else {
		t.next = s.tail.next
		s.tail.next = t
	}
	s.tail = t
	s.tenants.put(name, t)
	return t
}

// leave removes t, the front of the round, whose FIFO is empty, and keeps it
// for reuse if there is room and its ring is small.
func (s *fairStore[T]) leave(t *fairTenant[T]) {
	if t.next == t {
		s.tail = nil
	} else {
		s.tail.next = t.next
	}
	s.tenants.del(t.name)
	if s.last == t {
		s.last = nil
	}
	if len(s.spare) == maxSpareTenants || len(t.fifo.buf) > minRing {
		return
	}
	*t = fairTenant[T]{fifo: t.fifo} // the ring is empty and its slots zero
	s.spare = append(s.spare, t)
}
