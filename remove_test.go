package workqueue_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/stretchr/testify/require"
)

// rawStore is a user's Store (the queue cannot cut keys out of it) that
// lets a test see how many entries it really holds, ghosts included.
type rawStore struct{ workqueue.Store[string] }

func newRawStore() *rawStore { return &rawStore{workqueue.NewFIFOStore[string]()} }

// removeConfigs are the queue configurations Remove must work with: every
// state-table configuration, plus the built-in priority store (whose levels
// the key table keeps: no ghost), the fair store (ghosts per tenant) and a
// user's store (ghosts).
func removeConfigs() []queueConfig {
	return append(append([]queueConfig{}, queueConfigs...),
		queueConfig{"PriorityStore", func() *workqueue.Queue[string] {
			return workqueue.NewWithConfig(workqueue.Config[string]{Store: workqueue.NewPriorityStore[string]()})
		}},
		queueConfig{"FairStore", func() *workqueue.Queue[string] {
			return workqueue.NewWithConfig(workqueue.Config[string]{Store: workqueue.NewFairStore(func(k string) string {
				ns, _, _ := strings.Cut(k, "/")
				return ns
			})})
		}},
		queueConfig{"userStore", func() *workqueue.Queue[string] {
			return workqueue.NewWithConfig(workqueue.Config[string]{Store: newRawStore()})
		}},
	)
}

// rowKind says which configurations a row of removeTable holds for.
type rowKind int

const (
	allConfigs rowKind = iota
	tableKept          // the key table keeps the order
	stored             // the queue calls a Store
)

// storeCalled names the removeConfigs whose queue calls its Store: there
// Remove leaves ghosts (remove.go).
var storeCalled = map[string]bool{"FIFOStore": true, "FairStore": true, "userStore": true}

func opRemove(key string, want bool) step {
	return func(t *testing.T, q *workqueue.Queue[string]) {
		require.Equal(t, want, q.Remove(key), "Remove(%q) must report whether it cancelled a pending run", key)
	}
}

func opAddAfter(key string, d time.Duration) step {
	return func(t *testing.T, q *workqueue.Queue[string]) { q.AddAfter(key, d) }
}

func opSleep(d time.Duration) step {
	return func(t *testing.T, q *workqueue.Queue[string]) {
		time.Sleep(d) // fake time: the test runs in a synctest bubble
		synctest.Wait()
	}
}

// expectWaiting checks the number of waiting keys.
func expectWaiting(n int) step {
	return func(t *testing.T, q *workqueue.Queue[string]) {
		require.Equal(t, n, q.Stats().Waiting, "Stats.Waiting must count the keys waiting for a deadline")
	}
}

// removeTable is the Remove column of the state table: each row puts a key
// in one state, removes it, and checks what is left, down to the queue
// being empty and the key being usable again.
//
// stored rows hold only for the configurations that call a Store
// (storeCalled), where Remove leaves a ghost and a key added again takes
// its place back; tableKept rows only for the others.
var removeTable = []struct {
	name  string
	steps []step
	only  rowKind
}{
	{"absent: no change, false", []step{
		opRemove("a", false), expectCounts(0, 0, 0), expectBlocked(),
		opAdd("a"), opRemove("b", false), expectCounts(1, 0, 1), expectGet("a"), opDone("a"),
	}, allConfigs},
	{"ready: absent, true", []step{
		opAdd("a"), opRemove("a", true), expectCounts(0, 0, 0), expectBlocked(),
		opRemove("a", false), expectCounts(0, 0, 0),
	}, allConfigs},
	{"ready: others keep their order", []step{
		opAdd("x/a", "x/b", "x/c"), opRemove("x/b", true), expectCounts(2, 0, 2),
		expectGet("x/a", "x/c"), expectBlocked(), opDone("x/a", "x/c"), expectCounts(0, 0, 0),
	}, allConfigs},
	{"ready: removed and added again runs once, at its new place", []step{
		opAdd("x/a", "x/b"), opRemove("x/a", true), opAdd("x/c", "x/a"), expectCounts(3, 0, 3),
		expectGet("x/b", "x/c", "x/a"), expectBlocked(), opDone("x/a", "x/b", "x/c"), expectCounts(0, 0, 0),
	}, tableKept},
	{"ready: removed and added again runs once, at its ghost's place", []step{
		opAdd("x/a", "x/b"), opRemove("x/a", true), opAdd("x/c", "x/a"), expectCounts(3, 0, 3),
		expectGet("x/a", "x/b", "x/c"), expectBlocked(), opDone("x/a", "x/b", "x/c"), expectCounts(0, 0, 0),
	}, stored},
	{"ready: removed and added again many times runs once", []step{
		opAdd("x/a"), opRemove("x/a", true), opAdd("x/a"), opRemove("x/a", true), opAdd("x/a"),
		opAdd("x/b"), opRemove("x/a", true), opAdd("x/a"), expectCounts(2, 0, 2),
		expectGet("x/b", "x/a"), expectBlocked(), expectCounts(0, 2, 0), opDone("x/a", "x/b"), expectCounts(0, 0, 0),
	}, tableKept},
	{"ready: removed and added again many times runs once, at its ghost's place", []step{
		opAdd("x/a"), opRemove("x/a", true), opAdd("x/a"), opRemove("x/a", true), opAdd("x/a"),
		opAdd("x/b"), opRemove("x/a", true), opAdd("x/a"), expectCounts(2, 0, 2),
		expectGet("x/a", "x/b"), expectBlocked(), expectCounts(0, 2, 0), opDone("x/a", "x/b"), expectCounts(0, 0, 0),
	}, stored},
	{"waiting: absent, true", []step{
		opAddAfter("a", time.Second), expectWaiting(1), opRemove("a", true), expectWaiting(0), expectCounts(0, 0, 0),
		opSleep(2 * time.Second), expectCounts(0, 0, 0), expectBlocked(),
	}, allConfigs},
	{"waiting: added again later gets a fresh deadline", []step{
		opAddAfter("a", time.Second), opRemove("a", true), opAddAfter("a", 3*time.Second),
		opSleep(2 * time.Second), expectWaiting(1), expectBlocked(),
		opSleep(time.Second), expectCounts(1, 0, 1), expectGet("a"), opDone("a"), expectCounts(0, 0, 0),
	}, allConfigs},
	{"processing: no change, false", []step{
		opAdd("a"), expectGet("a"), opRemove("a", false), expectCounts(0, 1, 0),
		opDone("a"), expectCounts(0, 0, 0), expectBlocked(),
	}, allConfigs},
	{"processing+dirty: processing, true, Done does not requeue", []step{
		opAdd("a"), expectGet("a"), opAdd("a"), expectCounts(0, 1, 1),
		opRemove("a", true), expectCounts(0, 1, 0), opRemove("a", false),
		opDone("a"), expectCounts(0, 0, 0), expectBlocked(),
	}, allConfigs},
	{"processing+waiting: processing, true, deadline dropped", []step{
		opAdd("a"), expectGet("a"), opAddAfter("a", time.Second), expectWaiting(1),
		opRemove("a", true), expectWaiting(0), expectCounts(0, 1, 0),
		opSleep(2 * time.Second), expectCounts(0, 1, 0),
		opDone("a"), expectCounts(0, 0, 0), expectWaiting(0), expectBlocked(),
	}, allConfigs},
	{"after ShutDown: still removes", []step{
		opAdd("a", "b"), opShutDown(), opRemove("a", true), expectCounts(1, 0, 1),
		expectGet("b"), expectShutdown(), opDone("b"), expectCounts(0, 0, 0),
	}, allConfigs},
}

// TestRemoveStateTable runs the Remove column of the state table against
// every store path.
func TestRemoveStateTable(t *testing.T) {
	for _, row := range removeTable {
		for _, cfg := range removeConfigs() {
			if row.only != allConfigs && (row.only == stored) != storeCalled[cfg.name] {
				continue
			}
			t.Run(row.name+"/"+cfg.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					q := cfg.new()
					for _, s := range row.steps {
						s(t, q)
					}
					q.ShutDown() // the delay timer, if any
				})
			})
		}
	}
}

// TestRemoveGhostsAreBounded adds and removes keys over and over with no
// Get: the ghosts that Remove leaves in a user's store must be dropped once
// they outnumber the live keys, so the store holds O(live keys), and the
// live keys keep their order through the rebuild.
func TestRemoveGhostsAreBounded(t *testing.T) {
	store := newRawStore()
	q := workqueue.NewWithConfig(workqueue.Config[string]{Store: store})
	q.Add("keep-1")
	for i := range 10000 {
		k := fmt.Sprint(i % 7)
		q.Add(k)
		require.True(t, q.Remove(k), "Remove of a ready key")
		require.LessOrEqual(t, store.Len(), 2*q.Len()+64+1, "ghosts must not pile up (round %d)", i)
	}
	q.Add("keep-2")
	require.Equal(t, 2, q.Len(), "only the kept keys are ready")
	for _, want := range []string{"keep-1", "keep-2"} {
		got, _ := q.Get()
		require.Equal(t, want, got, "live keys keep their order across rebuilds")
		q.Done(got)
	}
	require.Zero(t, store.Len(), "no ghost is left once the live keys are out")
}

// TestRemoveGhostColumn follows the key table's ghost column (remove.go)
// through the states a key of a user's store can be in: a ghost only (an
// fGhost entry, absent to every reader), its ghost live again once it is
// added again, a ghost popped and dropped, and nothing once the last is
// out. CheckTable
// holds the table to its invariants after every step.
func TestRemoveGhostColumn(t *testing.T) {
	store := newRawStore()
	q := workqueue.NewWithConfig(workqueue.Config[string]{Store: store})
	entries := func(want int, step string) {
		t.Helper()
		n, err := workqueue.CheckTable(q)
		require.NoError(t, err, step)
		require.Equal(t, want, n, "key table entries after %s", step)
	}

	// Only ghosts left: they go at once, and the table forgets the key.
	q.Add("x")
	require.True(t, q.Remove("x"))
	require.Zero(t, store.Len(), "a store left with only ghosts is emptied")
	entries(0, "Remove of the only ready key")

	for _, k := range []string{"a", "b", "c"} {
		q.Add(k)
	}
	require.True(t, q.Remove("a"))
	require.True(t, q.Remove("b"))
	entries(3, "Remove of a and b") // a and b hold only ghosts
	require.Equal(t, workqueue.KeyAbsent, q.State("a"), "a key with only ghosts is absent")
	require.Equal(t, 1, q.Len())
	require.Equal(t, []string{"c ready"}, inspected(q), "Inspect lists no ghost")

	q.Add("a") // takes over its fGhost entry, and its ghost is live again
	entries(3, "Add of a again")
	require.Equal(t, workqueue.KeyReady, q.State("a"))
	require.Equal(t, 3, store.Len(), "a's ghost is its live entry again: nothing pushed")
	require.True(t, q.Remove("a"))
	q.Add("a")
	entries(3, "a removed and added again") // a live, b's fGhost entry, c
	require.Equal(t, 2, q.Len())
	require.Equal(t, 3, store.Len(), "one entry per key, live or ghost")
	require.Equal(t, []string{"a ready", "c ready"}, inspected(q), "Inspect passes over b's ghost")

	// The store holds a, b (a ghost), c: a comes out at its ghost's place,
	// then Get passes over b's ghost (b's entry goes with it) and hands
	// out c.
	got, _ := q.Get()
	require.Equal(t, "a", got, "a key added again takes its ghost's place")
	q.Done("a")
	entries(2, "Get and Done of a") // b's fGhost entry and c
	got, _ = q.Get()
	require.Equal(t, "c", got)
	require.Zero(t, store.Len())
	q.Done("c")
	entries(0, "the last Done")

	// Churn with a key kept ready, so that ghosts stay until rebuilds drop
	// them: the log compacts and grows with fGhost entries in it.
	q.Add("keep")
	for i := range 2000 {
		k := fmt.Sprint(i % 300)
		q.Add(k)
		require.True(t, q.Remove(k))
		if i%3 == 0 {
			q.Add(k) // some keys come back over their ghosts
		}
		_, err := workqueue.CheckTable(q)
		require.NoError(t, err, "round %d", i)
	}
	for q.Len() > 0 {
		k, _ := q.Get()
		q.Done(k)
	}
	require.Zero(t, store.Len())
	entries(0, "the churn's drain")
}

// inspected lists every key Inspect gives, with its state, sorted
// (Inspect cannot read the order of a user's store).
func inspected(q *workqueue.Queue[string]) []string {
	var ks []string
	for _, k := range q.Inspect(100) {
		ks = append(ks, k.Key+" "+k.State.String())
	}
	slices.Sort(ks)
	return ks
}

// TestRemoveReleasesDrain checks that a ShutDownWithDrainAll waiting on ready keys returns
// when Remove cancels the last of them.
func TestRemoveReleasesDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[string]()
		q.Add("a")
		q.Add("b")
		done := make(chan struct{})
		go func() {
			_ = q.ShutDownWithDrainAll(context.Background())
			close(done)
		}()
		synctest.Wait()
		require.True(t, q.Remove("a"))
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("the drain must wait while b is ready")
		default:
		}
		require.True(t, q.Remove("b"))
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("the drain must return once Remove left nothing ready or processing")
		}
	})
}

// TestRemoveMetrics checks that the gauges drop at once and that a removed
// key records neither queue latency nor an add of its own.
func TestRemoveMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &countingMetrics{}
		q := workqueue.NewWithConfig(workqueue.Config[string]{Name: "q", Metrics: m})
		q.Add("a")
		q.AddAfter("b", time.Second)
		q.Add("c")
		require.Equal(t, workqueue.Stats{Ready: 2, Waiting: 1, Dirty: 2}, trimStats(m.stats()))
		require.True(t, q.Remove("a"))
		require.True(t, q.Remove("b"))
		require.Equal(t, workqueue.Stats{Ready: 1, Dirty: 1}, trimStats(m.stats()), "depth and the waiting gauge drop at once")
		c, _ := q.Get()
		q.Add(c) // processing+dirty
		require.True(t, q.Remove(c))
		q.Done(c)
		time.Sleep(2 * time.Second)
		require.Equal(t, int64(1), m.waited.Load(), "only c, which Get handed out, records queue latency")
		require.Equal(t, int64(3), m.added.Load(), "adds are counted when keys become due, Remove takes none back")
		require.Equal(t, workqueue.Stats{}, trimStats(m.stats()), "nothing is left")
		q.ShutDown()
	})
}

// TestRemoveKeepsLimiterMemory checks that Remove cancels the run but not
// the key's failure count: that is Forget.
func TestRemoveKeepsLimiterMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.NewRateLimitingQueue(workqueue.NewItemExponentialFailureRateLimiter[string](time.Second, time.Minute))
		q.AddRateLimited("a")
		q.AddRateLimited("a")
		require.True(t, q.Remove("a"), "the retry is cancelled")
		require.Equal(t, 2, q.NumRequeues("a"), "the limiter still remembers the failures")
		require.Equal(t, workqueue.Stats{}, trimStats(q.Stats()))
		q.ShutDown()
	})
}

// TestRemoveConcurrent races Remove against Add, Get and Done on a few
// keys, under -race, then drains the queue: the drain must end (no ghost
// counted as ready, no key stuck) and leave every counter at zero.
func TestRemoveConcurrent(t *testing.T) {
	for _, cfg := range removeConfigs() {
		t.Run(cfg.name, func(t *testing.T) {
			q := cfg.new()
			var adders, workers sync.WaitGroup
			for w := range 4 {
				adders.Go(func() {
					for i := range 3000 {
						k := fmt.Sprintf("ns%d/%d", w%2, i%5)
						if i%3 == 1 {
							q.Remove(k)
						} else {
							q.Add(k)
						}
					}
				})
			}
			for range 2 {
				workers.Go(func() {
					for {
						k, shutdown := q.Get()
						if shutdown {
							return
						}
						q.Remove(k) // processing: changes nothing, or cancels a re-add
						q.Done(k)
					}
				})
			}
			adders.Wait()
			q.ShutDownWithDrain()
			workers.Wait()
			require.Equal(t, workqueue.Stats{}, trimStats(q.Stats()), "every key is accounted for")
			require.Zero(t, q.Len())
		})
	}
}

// indexedStore is a user's PriorityStore that indexes its keys (it wraps
// NewPriorityStore, which the queue then calls like any other store) and
// records every call that breaks Store's contract: a Push of a key it
// holds, a Touch of one it does not, a Raise that does not raise.
type indexedStore struct {
	workqueue.PriorityStore[string]
	held       map[string]int // key -> priority
	calls      []string
	violations []string
}

func newIndexedStore() *indexedStore {
	return &indexedStore{PriorityStore: workqueue.NewPriorityStore[string](), held: map[string]int{}}
}

func (s *indexedStore) Push(item string) { s.PushPriority(item, 0) }

func (s *indexedStore) PushPriority(item string, p int) {
	s.calls = append(s.calls, fmt.Sprintf("push %s %d", item, p))
	if _, ok := s.held[item]; ok {
		s.violations = append(s.violations, "Push of "+item+", already in the store")
	}
	s.held[item] = p
	s.PriorityStore.PushPriority(item, p)
}

func (s *indexedStore) Pop() string {
	item := s.PriorityStore.Pop()
	delete(s.held, item)
	return item
}

func (s *indexedStore) Touch(item string) {
	s.calls = append(s.calls, "touch "+item)
	if _, ok := s.held[item]; !ok {
		s.violations = append(s.violations, "Touch of "+item+", not in the store")
	}
	s.PriorityStore.Touch(item)
}

func (s *indexedStore) Raise(item string, p int) {
	s.calls = append(s.calls, fmt.Sprintf("raise %s %d", item, p))
	if old, ok := s.held[item]; !ok || old >= p {
		s.violations = append(s.violations, fmt.Sprintf("Raise of %s to %d, held %v at %d", item, p, ok, old))
	}
	s.held[item] = p
	s.PriorityStore.Raise(item, p)
}

// TestRemoveAddKeepsStoreContract removes ready keys from a queue whose
// user's Store indexes its keys and makes them ready again, by Add at a
// lower, the same and a higher priority and by a deadline: the queue must
// never Push a key whose ghost is still in the store, but turn the ghost
// back into the live entry (Touch, or Raise for a higher priority), so
// the store's Len stays exact and the key runs once, at its ghost's place.
func TestRemoveAddKeepsStoreContract(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newIndexedStore()
		q := workqueue.NewWithConfig(workqueue.Config[string]{Store: s})
		expect := func(step string, want ...string) {
			t.Helper()
			require.Equal(t, len(want), q.Len(), "Len after %s", step)
			require.Equal(t, len(s.held), s.PriorityStore.Len(), "the store's index and its Len agree after %s", step)
			for _, w := range want {
				k, prio, _ := q.GetWithPriority()
				require.Equal(t, w, fmt.Sprintf("%s %d", k, prio), "Get after %s", step)
				q.Done(k)
			}
			require.Empty(t, s.violations, "Store contract after %s; calls %v", step, s.calls)
			_, err := workqueue.CheckTable(q)
			require.NoError(t, err, step)
		}

		q.Add("a")
		q.Add("b")
		require.True(t, q.Remove("a"))
		q.Add("a")
		expect("Remove and Add at priority 0", "a 0", "b 0")

		q.AddWithPriority("a", 5)
		q.Add("b")
		require.True(t, q.Remove("a"))
		q.AddWithPriority("a", 1)
		expect("Add again at a lower priority: the ghost's", "a 5", "b 0")

		q.AddWithPriority("a", 1)
		q.AddWithPriority("b", 3)
		require.True(t, q.Remove("a"))
		q.AddWithPriority("a", 7)
		expect("Add again at a higher priority: raised", "a 7", "b 3")

		q.Add("a")
		q.Add("b")
		require.True(t, q.Remove("a"))
		q.AddAfter("a", time.Second)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		expect("a deadline that passes", "a 0", "b 0")
		require.Zero(t, s.PriorityStore.Len())
		q.ShutDown()
	})
}

// TestRemoveThenAddOrder checks where a key removed while ready and added
// again goes, store by store, as docs/protocol.md says: to the tail where
// the key is cut out (no Store, NewPriorityStore, NewFairPriorityStore),
// and to its ghost's place where the store cannot cut it out
// (NewFIFOStore, NewFairStore).
func TestRemoveThenAddOrder(t *testing.T) {
	for _, sc := range []struct {
		name  string
		store workqueue.Store[string]
		want  []string
	}{
		{"default", nil, []string{"b", "c", "a"}},
		{"priority", workqueue.NewPriorityStore[string](), []string{"b", "c", "a"}},
		{"fairpriority", workqueue.NewFairPriorityStore(workqueue.FairPriority[string]{}), []string{"b", "c", "a"}},
		{"fairpriority+cap", workqueue.NewFairPriorityStore(workqueue.FairPriority[string]{Tenant: func(string) string { return "" }, MaxInFlight: 5}), []string{"b", "c", "a"}},
		{"fifo", workqueue.NewFIFOStore[string](), []string{"a", "b", "c"}},
		{"fair", workqueue.NewFairStore(func(string) string { return "" }), []string{"a", "b", "c"}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			q := workqueue.NewWithConfig(workqueue.Config[string]{Store: sc.store})
			for _, k := range []string{"a", "b", "c"} {
				q.Add(k)
			}
			require.True(t, q.Remove("a"))
			q.Add("a")
			var got []string
			for range 3 {
				k, _ := q.Get()
				got = append(got, k)
			}
			require.Equal(t, sc.want, got)
			q.ShutDown()
		})
	}
}
