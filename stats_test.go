package workqueue_test

// Tests of Len, Stats and the zero Queue, and of the calls the queue makes
// to a Store.

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/go-coalesce/workqueue"
)

// ---------------------------------------------------------------------------
// Len, Stats, zero value.

// TestLenCountsReadyOnly checks that Len counts neither processing,
// processing+dirty nor waiting keys, and that Stats counts each.
func TestLenCountsReadyOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.New[string]()
		q.Add("ready")
		q.Add("proc")
		q.Add("procdirty")
		// Hand out proc and procdirty, leave ready: take all three and
		// put "ready" back through Done+Add.
		for range 3 {
			k, _ := q.Get()
			if k == "ready" {
				q.Done(k)
				q.Add(k)
			}
		}
		q.Add("procdirty")
		q.AddAfter("waiting", time.Hour)
		require.Equal(t, 1, q.Len(), "Len counts only the ready key")
		require.Equal(t, workqueue.Stats{Ready: 1, Waiting: 1, Processing: 2, Dirty: 2}, trimStats(q.Stats()),
			"Stats: one ready, one waiting, two processing, two dirty (ready + processing+dirty)")
		q.ShutDown() // drops the waiting key and stops its timer
		require.Equal(t, workqueue.Stats{Ready: 1, Processing: 2, Dirty: 2}, trimStats(q.Stats()), "ShutDown drops the waiting key only")
	})
}

// TestStatsDurations checks that with metrics the ages of runs in progress
// are exact at the moment Stats is called.
func TestStatsDurations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.NewWithConfig(workqueue.Config[string]{Name: "q", Metrics: &countingMetrics{}})
		q.Add("a")
		q.Add("b")
		q.Get()
		time.Sleep(time.Second) // synctest's clock: instant
		q.Get()
		time.Sleep(time.Second)
		s := q.Stats()
		require.Equal(t, 3*time.Second, s.UnfinishedWork, "unfinished work is 2s (a) + 1s (b)")
		require.Equal(t, 2*time.Second, s.LongestRunning, "the oldest run (a) is 2s old")
		q.Done("a")
		q.Done("b")
		s = q.Stats()
		require.Zero(t, s.UnfinishedWork, "nothing is running")
		require.Zero(t, s.LongestRunning, "nothing is running")

		// Runs that end out of order, and a key run again.
		q.Add("a")
		q.Add("b")
		q.Add("c")
		q.Get() // a at 0s
		time.Sleep(time.Second)
		q.Get() // b at 1s
		time.Sleep(time.Second)
		q.Get() // c at 2s
		time.Sleep(time.Second)
		q.Done("b") // not the oldest
		s = q.Stats()
		require.Equal(t, 4*time.Second, s.UnfinishedWork, "a (3s) + c (1s) after b ended out of order")
		require.Equal(t, 3*time.Second, s.LongestRunning, "a is the oldest run")
		q.Add("b")
		get := func() string { k, _ := q.Get(); return k }
		require.Equal(t, "b", get(), "b runs again, at 3s")
		time.Sleep(time.Second)
		q.Done("a")
		s = q.Stats()
		require.Equal(t, 3*time.Second, s.UnfinishedWork, "c (2s) + b's second run (1s)")
		require.Equal(t, 2*time.Second, s.LongestRunning, "c is the oldest run; b's first run has ended")
		time.Sleep(time.Second)
		q.Done("c")
		s = q.Stats()
		require.Equal(t, 2*time.Second, s.UnfinishedWork, "b's second run only")
		require.Equal(t, 2*time.Second, s.LongestRunning, "b's second run, not its first")
		q.Done("b")
		require.Equal(t, workqueue.Stats{}, q.Stats(), "nothing left, durations zero")
	})
}

// TestZeroValueQueue checks that a Queue declared as a variable works:
// Add, a blocking Get, GetContext, Done, ShutDown and drain.
func TestZeroValueQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var q workqueue.Queue[string]
		require.Equal(t, 0, q.Len(), "an empty zero queue")
		q.Done("x") // not processing: ignored
		ch := startGets(&q, 1)
		synctest.Wait()
		require.Empty(t, ch, "Get on an empty zero queue must block")
		q.Add("a")
		synctest.Wait()
		require.Equal(t, getResult[string]{"a", false}, <-ch, "a blocked Get on a zero queue must wake on Add")
		q.Add("a")
		q.Add("b")
		q.Done("a")
		item, err := q.GetContext(context.Background())
		require.NoError(t, err, "GetContext on a zero queue")
		require.Equal(t, "b", item, "b was ready before a's Done pushed a")
		q.Done("b")
		done := make(chan struct{})
		go func() {
			q.ShutDownWithDrain()
			close(done)
		}()
		synctest.Wait()
		require.True(t, q.ShuttingDown(), "the drain shuts the zero queue down")
		require.Equal(t, 1, q.Len(), "a is still ready")
		expectGet("a")(t, &q)
		q.Done("a")
		synctest.Wait()
		<-done
		item, shutdown := q.Get()
		require.True(t, shutdown, "Get after ShutDown on a drained zero queue reports shutdown")
		require.Zero(t, item, "with the zero key")
	})
}

// ---------------------------------------------------------------------------
// Store protocol.

// recordingStore is a FIFO Store that logs every call the queue makes and
// records violations of the Store invariants.
type recordingStore struct {
	fifo       workqueue.Store[string]
	in         map[string]bool
	log        []string
	violations []string
}

func newRecordingStore() *recordingStore {
	return &recordingStore{fifo: workqueue.NewFIFOStore[string](), in: map[string]bool{}}
}

func (s *recordingStore) Push(item string) {
	s.log = append(s.log, "push "+item)
	if s.in[item] {
		s.violations = append(s.violations, "Push of "+item+", already in the store")
	}
	s.in[item] = true
	s.fifo.Push(item)
}

func (s *recordingStore) Pop() string {
	if s.fifo.Len() == 0 {
		s.violations = append(s.violations, "Pop of an empty store")
		return ""
	}
	item := s.fifo.Pop()
	delete(s.in, item)
	s.log = append(s.log, "pop "+item)
	return item
}

func (s *recordingStore) Len() int { return s.fifo.Len() }

func (s *recordingStore) Touch(item string) {
	s.log = append(s.log, "touch "+item)
	if !s.in[item] {
		s.violations = append(s.violations, "Touch of "+item+", not in the store")
	}
	s.fifo.Touch(item)
}

// TestStoreProtocol checks which Store calls the queue makes for each row
// of the state table: Push once per newly ready key, Touch only for a
// duplicate Add of a ready key (not of a processing key), Pop only when
// Len() > 0.
func TestStoreProtocol(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRecordingStore()
		q := workqueue.NewWithConfig(workqueue.Config[string]{Store: s})
		expect := func(what string, want ...string) {
			t.Helper()
			if want == nil {
				want = []string{}
			}
			require.Equal(t, want, append([]string{}, s.log...), "store calls for %s", what)
			s.log = s.log[:0]
		}
		q.Add("a")
		q.Add("b")
		expect("two new keys", "push a", "push b")
		q.Add("a")
		q.Add("a")
		expect("duplicate adds of a ready key", "touch a", "touch a")
		expectGet("a")(t, q)
		expect("Get", "pop a")
		q.Add("a")
		q.Add("a")
		expect("adds of a processing key: neither Touch nor Push")
		q.Done("x")
		q.Done("b")
		expect("Done of keys that are not processing")
		q.Done("a")
		expect("Done of a processing+dirty key", "push a")
		q.Done("a")
		expect("second Done")
		expectGet("b", "a")(t, q)
		expect("two Gets", "pop b", "pop a")
		q.Done("a")
		q.Done("b")
		expect("Done of clean processing keys")
		expectBlocked()(t, q)
		q.ShutDown()
		expectShutdown()(t, q)
		q.Add("c")
		expect("Get after ShutDown with nothing ready, Add after ShutDown")
		require.Empty(t, s.violations, "the queue must keep the Store invariants")
	})
}
