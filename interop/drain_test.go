package interop

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/stretchr/testify/require"
	clientworkqueue "k8s.io/client-go/util/workqueue"
)

// The drains, side by side with client-go. ShutDownWithDrain follows
// client-go's rule (return once no key is processing; keys still ready stay
// ready), so that code written for client-go that stops its workers and then
// drains returns on ours too. Waiting for every queued key is
// ShutDownWithDrainAll, which client-go does not have.

// drainQueue is what the drain shape needs of a queue; both queues have it.
type drainQueue interface {
	Add(string)
	Get() (string, bool)
	Done(string)
	Len() int
	ShutDownWithDrain()
}

// workersStopThenDrain is the shape of the trial that hung: workers that
// loop while ctx lives (for ctx.Err() == nil { key, _ := q.Get(); ...;
// q.Done(key) }) stop on it with keys still queued, and then the main
// goroutine drains on exit. It reports whether the drain returned, how many
// keys were left queued before it, and how many after. Run it in a synctest
// bubble.
func workersStopThenDrain(q drainQueue) (returned bool, before, after int) {
	ctx, cancel := context.WithCancel(context.Background())
	var workers sync.WaitGroup
	for range 2 {
		workers.Go(func() {
			for ctx.Err() == nil {
				key, shutdown := q.Get()
				if shutdown {
					return
				}
				time.Sleep(time.Millisecond) // the work
				q.Done(key)
			}
		})
	}
	for i := range 200 {
		q.Add(fmt.Sprint("default/", i))
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	workers.Wait()
	before = q.Len()

	done := make(chan struct{})
	go func() {
		q.ShutDownWithDrain()
		close(done)
	}()
	synctest.Wait()
	select {
	case <-done:
		returned = true
	default:
		// Hung: a ShutDown (which client-go's queue and ours both
		// treat as "force") releases the goroutine so that the bubble
		// can end.
		q.(interface{ ShutDown() }).ShutDown()
		<-done
	}
	return returned, before, q.Len()
}

// TestDrainAfterWorkersStop: the trial's shape returns on both queues, and
// neither drops the keys that were left queued.
func TestDrainAfterWorkersStop(t *testing.T) {
	t.Parallel()
	t.Run("ours", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			returned, before, after := workersStopThenDrain(workqueue.New[string]())
			require.Positive(t, before, "the workers must stop with keys still queued")
			require.True(t, returned, "ShutDownWithDrain must return with %d keys queued and no worker", before)
			require.Equal(t, before, after, "the drain drops no key: they stay ready for Get")
		})
	})
	t.Run("client-go", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			returned, before, after := workersStopThenDrain(clientworkqueue.NewTyped[string]())
			require.Positive(t, before)
			require.True(t, returned, "client-go's ShutDownWithDrain returns")
			require.Equal(t, before, after)
		})
	})
}

// TestDifferenceShutDownWithDrain: both ShutDownWithDrain return as soon as
// nothing is processing, with a key still queued (kubernetes PR #141079),
// and both hand that key out afterwards. ShutDownWithDrainAll is the one
// difference: it waits until the queued key has run.
func TestDifferenceShutDownWithDrain(t *testing.T) {
	t.Parallel()
	same := func(t *testing.T, q drainQueue) {
		synctest.Test(t, func(t *testing.T) {
			q.Add("a")
			returned := make(chan struct{})
			go func() {
				q.ShutDownWithDrain()
				close(returned)
			}()
			synctest.Wait()
			select {
			case <-returned:
			default:
				t.Fatal("ShutDownWithDrain must return at once: nothing is processing")
			}
			require.Equal(t, 1, q.Len(), "a is still queued")
			k, shutdown := q.Get()
			require.False(t, shutdown, "and still handed out")
			require.Equal(t, "a", k)
			q.Done(k)
		})
	}
	t.Run("ours", func(t *testing.T) { same(t, workqueue.New[string]()) })
	t.Run("client-go", func(t *testing.T) { same(t, clientworkqueue.NewTyped[string]()) })
	t.Run("ours ShutDownWithDrainAll", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := workqueue.New[string]()
			q.Add("a")
			var returned atomic.Bool
			errc := make(chan error, 1)
			go func() {
				errc <- q.ShutDownWithDrainAll(context.Background())
				returned.Store(true)
			}()
			synctest.Wait()
			require.False(t, returned.Load(), "ShutDownWithDrainAll waits while a is queued")
			k, shutdown := q.Get()
			require.False(t, shutdown, "the queued key is still handed out")
			q.Done(k)
			synctest.Wait()
			require.NoError(t, <-errc, "and returns once it has run")
		})
	})
}
