package workqueue

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// The store benchmarks put the priority and fair stores side by side with
// the default FIFO ring, and the fair priority store beside both, on the
// same keys, so that their cost reads as a ratio (benchstat) rather than as
// absolute times, which drift between runs on shared machines. Keys look
// like Kubernetes keys, "namespace/name", and the fair stores' tenant is the
// namespace, found with strings.Cut as a controller would.

// storeBench is one store under test: how to make it, how many namespaces
// its keys spread over, and how to push the i-th key.
type storeBench struct {
	name    string
	tenants int
	make    func() Store[string]
	push    func(s Store[string], key string, i int)
}

func plainPush(s Store[string], key string, _ int) { s.Push(key) }

// storeBenches lists the stores to compare. levels=8 pushes the i-th key at
// priority i%8, so that levels are made and released all the time (a fresh
// event at a higher priority is handed out at once and its level emptied),
// the costly path of the priority store.
func storeBenches() []storeBench {
	return []storeBench{
		{"store=fifo", 1, NewFIFOStore[string], plainPush},
		{"store=priority/levels=1", 1, func() Store[string] { return NewPriorityStore[string]() }, plainPush},
		{"store=priority/levels=8", 1, func() Store[string] { return NewPriorityStore[string]() },
			func(s Store[string], key string, i int) { s.(PriorityStore[string]).PushPriority(key, i%8) }},
		{"store=fair/tenants=1", 1, func() Store[string] { return NewFairStore(namespaceOf) }, plainPush},
		{"store=fair/tenants=16", 16, func() Store[string] { return NewFairStore(namespaceOf) }, plainPush},
		{"store=priority/levels=4", 1, func() Store[string] { return NewPriorityStore[string]() }, prioPush(4)},
		{"store=fair/tenants=100", 100, func() Store[string] { return NewFairStore(namespaceOf) }, plainPush},
		{"store=fairpriority/levels=1", 1, fairPriorityBench(FairPriority[string]{}), plainPush},
		{"store=fairpriority/levels=4", 1, fairPriorityBench(FairPriority[string]{}), prioPush(4)},
		{"store=fairpriority/levels=8", 1, fairPriorityBench(FairPriority[string]{}), prioPush(8)},
		{"store=fairpriority/tenants=100", 100, fairPriorityBench(FairPriority[string]{Tenant: namespaceOf}), plainPush},
		{"store=fairpriority/levels=4/tenants=100", 100,
			fairPriorityBench(FairPriority[string]{Tenant: namespaceOf}), prioPush(4)},
		{"store=fairpriority/levels=4/tenants=100/maxwait", 100,
			fairPriorityBench(FairPriority[string]{Tenant: namespaceOf, MaxWait: time.Hour}), prioPush(4)},
		// Each push first runs the key, as Get and Done would: with a cap
		// of 1 its tenant leaves the rounds and rejoins them every time,
		// the costly path of the cap.
		{"store=fairpriority/levels=4/tenants=100/maxinflight=1", 100,
			fairPriorityBench(FairPriority[string]{Tenant: namespaceOf, MaxInFlight: 1}),
			func(s Store[string], key string, i int) {
				h := s.(heldStore[string])
				h.handedOut(key)
				h.finished(key)
				s.(PriorityStore[string]).PushPriority(key, i%4)
			}},
	}
}

// prioPush returns a push that puts the i-th key at priority i%levels.
func prioPush(levels int) func(s Store[string], key string, i int) {
	return func(s Store[string], key string, i int) { s.(PriorityStore[string]).PushPriority(key, i%levels) }
}

func fairPriorityBench(cfg FairPriority[string]) func() Store[string] {
	return func() Store[string] { return NewFairPriorityStore(cfg) }
}

// storeBenchKeys returns n keys spread round-robin over the given number of
// namespaces.
func storeBenchKeys(n, namespaces int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "ns-" + strconv.Itoa(i%namespaces) + "/deployment-" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkStoreCycle is the steady state of a busy queue: the store holds
// 1000 keys and each operation pops one and pushes it back, as Get and a
// later Add do.
func BenchmarkStoreCycle(b *testing.B) {
	for _, sb := range storeBenches() {
		b.Run(sb.name+"/keys="+strconv.Itoa(storeBenchN), func(b *testing.B) { benchStoreCycle(b, sb) })
	}
}

// BenchmarkStoreBurst is a resync: 1000 keys are pushed, then all popped,
// so the store grows from empty and shrinks back each time. One operation
// is the whole burst; ns/key is the time per key.
func BenchmarkStoreBurst(b *testing.B) {
	for _, sb := range storeBenches() {
		b.Run(sb.name+"/keys="+strconv.Itoa(storeBenchN), func(b *testing.B) { benchStoreBurst(b, sb) })
	}
}

// BenchmarkStoreInQueue is BenchmarkStoreCycle through a Queue: Get, Done
// and Add again, with 1000 keys ready. This is what a store costs a
// controller, the lock and the key table included. The priority store sees
// plain Add, so priority 0. store=default is the queue's built-in ring,
// which is called directly rather than through the Store interface.
func BenchmarkStoreInQueue(b *testing.B) {
	for _, sb := range queueStoreBenches() {
		b.Run(sb.name+"/keys="+strconv.Itoa(storeBenchN), func(b *testing.B) { benchStoreInQueue(b, sb) })
	}
}

// storeBenchN is the number of keys the store benchmarks keep in play.
const storeBenchN = 1000

// queueStoreBenches is storeBenches for BenchmarkStoreInQueue: with the
// built-in ring in front, and without levels=4 and levels=8, since plain
// Add has one priority.
func queueStoreBenches() []storeBench {
	benches := []storeBench{{"store=default", 1, func() Store[string] { return nil }, plainPush}}
	for _, sb := range storeBenches() {
		if !strings.Contains(sb.name, "levels=4") && !strings.Contains(sb.name, "levels=8") {
			benches = append(benches, sb)
		}
	}
	return benches
}

func benchStoreCycle(b *testing.B, sb storeBench) {
	s := sb.make()
	for i, k := range storeBenchKeys(storeBenchN, sb.tenants) {
		sb.push(s, k, i)
	}
	b.ReportAllocs()
	i := storeBenchN
	for b.Loop() {
		sb.push(s, s.Pop(), i)
		i++
	}
}

func benchStoreBurst(b *testing.B, sb storeBench) {
	s := sb.make()
	keys := storeBenchKeys(storeBenchN, sb.tenants)
	b.ReportAllocs()
	for b.Loop() {
		for i, k := range keys {
			sb.push(s, k, i)
		}
		for range keys {
			s.Pop()
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*storeBenchN), "ns/key")
}

func benchStoreInQueue(b *testing.B, sb storeBench) {
	q := NewWithConfig(Config[string]{Store: sb.make()})
	defer q.ShutDown()
	for _, k := range storeBenchKeys(storeBenchN, sb.tenants) {
		q.Add(k)
	}
	b.ReportAllocs()
	for b.Loop() {
		k, _ := q.Get()
		q.Done(k)
		q.Add(k)
	}
}
