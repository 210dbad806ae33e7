package crsharding

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestQueueCountsNewWork: the adds of new work, ready now (Add,
// AddWithOpts with no After and not RateLimited, AddAfter with no delay)
// are checked with Admit, which counts them as ready; requeues (AddAfter
// with a delay, AddRateLimited, AddWithOpts with After or RateLimited) and
// the replica's own adds of a gained shard's keys (keyQueue.Add, which the
// replica counted already) with Owns. Mutants: Add or AddWithOpts through
// Owns (nothing counted); every AddWithOpts through Admit (requeues
// counted); keyQueue.Add through AddWithOpts (counted twice).
func TestQueueCountsNewWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := ownedOf("ns/mine", "ns/mine2")
		q := newQueue(o, nil, workqueue.Config[reconcile.Request]{})
		defer q.ShutDown()
		mine, mine2, theirs := req("ns", "mine"), req("ns", "mine2"), req("ns", "theirs")

		q.Add(mine)
		q.Add(theirs)
		require.Equal(t, []string{"ns/mine"}, o.counted(), "Add counts an owned key")
		q.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(handler.LowPriority)}, theirs, mine, mine2)
		require.Equal(t, []string{"ns/mine", "ns/mine2"}, o.counted(), "an event handler's AddWithOpts counts the owned keys")
		q.AddAfter(mine, 0)
		require.Equal(t, []string{"ns/mine"}, o.counted(), "AddAfter with no delay is Add")

		q.AddAfter(mine, time.Second)
		q.AddRateLimited(mine)
		q.AddWithOpts(priorityqueue.AddOpts{After: time.Second}, mine)
		q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, mine2)
		require.Empty(t, o.counted(), "requeues are not counted")

		sh := &Sharding{queue: q}
		keyQueue{sh}.Add("ns/mine2")
		keyQueue{sh}.Add("ns/theirs")
		require.Empty(t, o.counted(), "the replica's own adds are not counted again")
		time.Sleep(2 * time.Second) // simulated time: past every delay
		synctest.Wait()
		require.Equal(t, []string{"ns/mine", "ns/mine2"}, drain(q), "every owned add is in the queue")
	})
}

// ringBacklog returns what replica id reports of the shards it holds:
// their ready keys, summed, and the oldest's age.
func (h *simRing) ringBacklog(id string) (ready int, oldest time.Duration) {
	h.mu.Lock()
	rep := h.replicas[id]
	h.mu.Unlock()
	for _, s := range rep.sh.Replica().Status().Shards {
		if s.Holder == id {
			ready += s.Ready
			oldest = max(oldest, s.Oldest)
		}
	}
	return ready, oldest
}

// settle waits until replica r0 has run every key (one worker, simWork
// each) and reported the shards' load since.
func (h *simRing) settle() {
	time.Sleep(simObjects*simWork + 5*time.Second)
	synctest.Wait()
}

// TestEventsCountAsReady runs one replica of a controller-runtime
// controller (sharded_test.go's ring, one worker): once the gained shards'
// keys have all run, a change of every object reaches the queue through
// controller-runtime's event handler only (the replica sets
// SkipEventKeys), and the replica reports those keys as ready, the oldest
// as old as the change, until their runs begin; then none. Mutant: Queue's
// Add and AddWithOpts checking with Owns (the events are not counted):
// nothing is reported ready.
func TestEventsCountAsReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newSimRing(t, sharding.FilterServer)
		h.once, h.workers = true, 1
		h.start("r0")
		h.balanced()
		h.settle()
		n, old := h.ringBacklog("r0")
		require.Zero(t, n, "keys ready once the gained shards' keys all ran")
		require.Zero(t, old)

		cms := h.objs.CoreV1().ConfigMaps(simNS)
		l, err := cms.List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		for _, cm := range l.Items {
			cm.Data["value"] = "changed"
			_, err := cms.Update(t.Context(), &cm, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		// Past a report (one per RetryPeriod), within the first runs.
		time.Sleep(5 * simWork)
		synctest.Wait()
		n, old = h.ringBacklog("r0")
		t.Logf("5 s after the change: %d ready, the oldest %v", n, old)
		require.Greater(t, n, simObjects-10, "the changed objects' keys are reported ready, but for the few begun")
		require.GreaterOrEqual(t, old, 4*simWork, "the oldest is about as old as the change")

		h.settle()
		n, old = h.ringBacklog("r0")
		require.Zero(t, n, "keys ready once every key ran")
		require.Zero(t, old)
		require.Equal(t, 2*simObjects, h.runs.Runs(), "every key ran twice: gained, changed")
		h.stopAll()
	})
}

// TestRequeuesNotCounted runs one replica of a controller-runtime
// controller (one worker) whose every reconcile asks to run again
// (RequeueAfter 100 ms, or an error: a rate-limited requeue): once the
// gained shards' keys have all run, the queue holds the requeued keys,
// ready, but the replica reports none: a retry is not a backlog of new
// work. Mutant: Queue's AddWithOpts checking every add with Admit: the
// requeued keys are reported ready.
func TestRequeuesNotCounted(t *testing.T) {
	for _, errs := range []bool{false, true} {
		t.Run(fmt.Sprintf("error=%v", errs), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newSimRing(t, sharding.FilterServer)
				h.errs, h.workers = errs, 1
				h.start("r0")
				h.balanced()
				h.settle()
				// The gained shards' keys are fed among the requeued ones
				// (one for every few of their runs, sharding's catch-up
				// share): wait until the replica owes none, so that what
				// it reports ready is only what the requeues add.
				n, old := h.ringBacklog("r0")
				for deadline := time.Now().Add(30 * time.Minute); n > 0 && time.Now().Before(deadline); n, old = h.ringBacklog("r0") {
					time.Sleep(10 * simWork)
					synctest.Wait()
				}
				h.mu.Lock()
				q := h.replicas["r0"].sh.current()
				h.mu.Unlock()
				require.Greater(t, q.Len(), simObjects/2, "requeued keys wait, ready, in the queue")
				require.Zero(t, n, "requeued keys reported ready")
				require.Zero(t, old)
				h.stopAll()
			})
		})
	}
}
