package interop

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/stretchr/testify/require"
	clientworkqueue "k8s.io/client-go/util/workqueue"
)

// Each test here is one deliberate difference from client-go (README.md,
// "Where it differs from client-go"), shown side by side: the same calls on both queues,
// and what each one does. If client-go changes its behaviour, the client-go
// half fails and the README must be updated.

// Done of a key that is not processing: client-go pushes it into its store a
// second time (kubernetes#79934), so Get hands it out twice, the second time
// while it is still processing. Ours ignores the Done.
func TestDifferenceDoneOfKeyNotProcessing(t *testing.T) {
	t.Parallel()
	t.Run("ours", func(t *testing.T) {
		q := workqueue.New[string]()
		q.Add("a")
		q.Done("a") // a is ready, not processing
		require.Equal(t, 1, q.Len(), "Done of a ready key changes nothing")
		k, _ := q.Get()
		require.Equal(t, "a", k)
		require.Equal(t, 0, q.Len(), "a is handed out once")
	})
	t.Run("client-go", func(t *testing.T) {
		q := clientworkqueue.NewTyped[string]()
		defer q.ShutDown()
		q.Add("a")
		q.Done("a")
		require.Equal(t, 2, q.Len(), "client-go pushes the dirty key again: a duplicate")
		k1, _ := q.Get()
		k2, _ := q.Get()
		require.Equal(t, []string{"a", "a"}, []string{k1, k2}, "client-go hands a out twice, to two workers at once")
	})
}

// Add of a key that waits for an AddAfter deadline: client-go adds it now
// and leaves the heap entry, so the key runs twice (kubernetes#126027). Ours
// keeps one pending run at the earliest time asked for: the Add.
func TestDifferenceAddOfWaitingKey(t *testing.T) {
	t.Parallel()
	type delaying = clientworkqueue.TypedDelayingInterface[string]
	story := func(t *testing.T, q delaying) (runs int) {
		q.AddAfter("a", time.Second)
		q.Add("a") // an event arrives: run now
		synctest.Wait()
		for range 2 {
			for q.Len() > 0 {
				k, _ := q.Get()
				runs++
				q.Done(k)
			}
			time.Sleep(time.Second) // the old deadline passes
			synctest.Wait()
		}
		return runs
	}
	t.Run("ours", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := workqueue.New[string]()
			defer q.ShutDown()
			require.Equal(t, 1, story(t, q), "one pending run: the Add replaced the delayed one")
		})
	})
	t.Run("client-go", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := clientworkqueue.NewTypedDelayingQueue[string]()
			defer q.ShutDown()
			require.Equal(t, 2, story(t, q), "client-go runs the key again when the stale deadline passes")
		})
	})
}

// AddAfter of a key that is already ready: the same rule seen from the
// other side. client-go remembers the deadline and runs the key once more
// after it has been processed; ours has the earlier run already.
func TestDifferenceAddAfterOfReadyKey(t *testing.T) {
	t.Parallel()
	story := func(q clientworkqueue.TypedDelayingInterface[string]) (runs int) {
		q.Add("a")
		q.AddAfter("a", time.Second)
		synctest.Wait()
		for range 2 {
			for q.Len() > 0 {
				k, _ := q.Get()
				runs++
				q.Done(k)
			}
			time.Sleep(time.Second)
			synctest.Wait()
		}
		return runs
	}
	t.Run("ours", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := workqueue.New[string]()
			defer q.ShutDown()
			require.Equal(t, 1, story(q))
		})
	})
	t.Run("client-go", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := clientworkqueue.NewTypedDelayingQueue[string]()
			defer q.ShutDown()
			require.Equal(t, 2, story(q))
		})
	})
}

// AddRateLimited after ShutDown: client-go asks the limiter first, so a
// queue that is going away still counts a failure (and spends a bucket
// token). Ours does not touch the limiter.
func TestDifferenceAddRateLimitedAfterShutDown(t *testing.T) {
	t.Parallel()
	t.Run("ours", func(t *testing.T) {
		q := workqueue.NewRateLimitingQueue(workqueue.NewItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second))
		q.ShutDown()
		q.AddRateLimited("a")
		require.Equal(t, 0, q.NumRequeues("a"), "no failure counted after ShutDown")
		require.Equal(t, 0, q.Stats().Waiting, "and nothing waits")
	})
	t.Run("client-go", func(t *testing.T) {
		q := clientworkqueue.NewTypedRateLimitingQueue(clientworkqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second))
		q.ShutDown()
		q.AddRateLimited("a")
		require.Equal(t, 1, q.NumRequeues("a"), "client-go counts a failure for a key it then drops")
	})
}

// Goroutines: a delaying queue of ours starts none, neither when it is made,
// nor when a key is added or waits for its AddAfter deadline (a timer calls
// the queue when it is due), nor at ShutDown; client-go's starts its waiting
// loop (with a 10 s heartbeat) in the constructor and keeps it until
// ShutDown. Each half counts the goroutines that the queue's calls started
// and that are alive after each call, in a synctest bubble so that a
// goroutine that ShutDown ends has ended when it is counted.
func TestDifferenceGoroutines(t *testing.T) {
	t.Parallel()
	t.Run("ours", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g := newGoroutineTally()
			var q *workqueue.Queue[string]
			g.run(func() { q = workqueue.New[string]() })
			defer q.ShutDown() // ends what a failed check leaves, before the bubble does
			require.Zero(t, g.alive(), "New starts no goroutine")
			g.run(func() { q.Add("a") })
			require.Zero(t, g.alive(), "nor does Add")
			g.run(func() { q.AddAfter("b", time.Hour) })
			require.Equal(t, 1, q.Stats().Waiting, "b waits")
			require.Zero(t, g.alive(), "nor a key waiting for its deadline")
			g.run(q.ShutDown)
			require.Zero(t, g.alive(), "nor ShutDown")
		})
	})
	t.Run("client-go", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g := newGoroutineTally()
			var q clientworkqueue.TypedDelayingInterface[string]
			g.run(func() { q = clientworkqueue.NewTypedDelayingQueue[string]() })
			defer q.ShutDown()
			require.Equal(t, 1, g.alive(), "client-go's constructor starts its waiting loop")
			g.run(func() { q.AddAfter("b", time.Hour) })
			require.Equal(t, 1, g.alive(), "which is alone while a key waits")
			g.run(q.ShutDown)
			require.Zero(t, g.alive(), "and ends at ShutDown")
		})
	})
}

// goroutineTally counts the goroutines started by the functions it runs,
// and by those goroutines in turn, through a profiler label of its own: a
// goroutine inherits its creator's labels, and the caller's own labels are
// restored when a function returns. Other tests running in parallel have
// other labels, so they are not counted.
type goroutineTally struct{ label string }

var goroutineTallies atomic.Int64

func newGoroutineTally() goroutineTally {
	return goroutineTally{label: fmt.Sprint(goroutineTallies.Add(1))}
}

const goroutineTallyKey = "differences-goroutine-tally"

// run calls f under the tally's label.
func (g goroutineTally) run(f func()) {
	pprof.Do(context.Background(), pprof.Labels(goroutineTallyKey, g.label), func(context.Context) { f() })
}

// alive waits until every goroutine of the calling synctest bubble is
// blocked, and returns how many goroutines carry the tally's label.
func (g goroutineTally) alive() int {
	synctest.Wait()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		panic(err)
	}
	// Each record of the profile counts the goroutines with one stack and
	// one label set: "<n> @ <pcs>", then "# labels: {...}" if any.
	want := fmt.Sprintf("%q:%q", goroutineTallyKey, g.label)
	n := 0
	for rec := range strings.SplitSeq(buf.String(), "\n\n") {
		var count int
		if _, err := fmt.Sscanf(rec, "%d @", &count); err == nil && strings.Contains(rec, want) {
			n += count
		}
	}
	return n
}
