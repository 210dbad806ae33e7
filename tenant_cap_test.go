package workqueue_test

// Tests of the per-tenant cap (FairPriority.MaxInFlight) at the edges of
// the queue's protocol: a tenant at its cap is skipped without blocking
// the others, its keys stay ready and coalesce, Done lets the next one
// through, and Len, Inspect, Remove, ShutDown, GetContext and the drains
// stay right while keys are held back.

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/go-coalesce/workqueue"
)

// tenantOf names a test key's tenant: what comes before its '/'.
func tenantOf(k string) string {
	t, _, _ := strings.Cut(k, "/")
	return t
}

// newCapped returns a queue whose tenants may each have k keys processing.
func newCapped(k int, stopGets bool) *workqueue.Queue[string] {
	return workqueue.NewWithConfig(workqueue.Config[string]{
		Store:              workqueue.NewFairPriorityStore(workqueue.FairPriority[string]{Tenant: tenantOf, MaxInFlight: k}),
		GetStopsAtShutDown: stopGets,
	})
}

// TestTenantCapSkipsWithoutBlocking checks that Get passes over a tenant at
// its cap to another tenant's key, that the held key still counts as ready,
// that a Get finding only held keys waits, and that Done of the tenant's
// running key lets the held one through to that waiting Get.
func TestTenantCapSkipsWithoutBlocking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newCapped(1, false)
		q.Add("a/1")
		q.Add("a/2")
		q.Add("b/1")
		k, _ := q.Get()
		require.Equal(t, "a/1", k, "the first key goes first")
		k, _ = q.Get()
		require.Equal(t, "b/1", k, "tenant a is at its cap: Get must skip a/2 for b's key")
		require.Equal(t, 1, q.Len(), "a held key is still ready: Len counts it")
		require.Equal(t, workqueue.Stats{Ready: 1, Processing: 2, Dirty: 1}, trimStats(q.Stats()), "Stats counts the held key as ready")
		require.Equal(t, workqueue.KeyReady, q.State("a/2"), "a held key is ready")

		ch := startGets(q, 1)
		synctest.Wait()
		require.Empty(t, ch, "only a held key is ready: Get must wait")
		q.Done("b/1")
		synctest.Wait()
		require.Empty(t, ch, "Done of another tenant's key does not lift a's cap")
		q.Done("a/1")
		synctest.Wait()
		require.Len(t, ch, 1, "Done of a's running key must let a/2 through to the waiting Get")
		r := <-ch
		require.Equal(t, getResult[string]{"a/2", false}, r)
		q.Done("a/2")
		q.ShutDown()
	})
}

// TestTenantCapKeysCoalesce checks that a held key added again stays one
// ready key, and that Inspect lists it as ready.
func TestTenantCapKeysCoalesce(t *testing.T) {
	q := newCapped(1, false)
	q.Add("a/1")
	k, _ := q.Get()
	require.Equal(t, "a/1", k)
	for range 3 {
		q.Add("a/2")
	}
	require.Equal(t, 1, q.Len(), "adds of a held key coalesce into one ready key")
	infos := q.Inspect(10)
	require.Len(t, infos, 2, "Inspect lists the running key and the held one")
	require.Equal(t, workqueue.KeyProcessing, infos[0].State)
	require.Equal(t, "a/2", infos[1].Key)
	require.Equal(t, workqueue.KeyReady, infos[1].State, "Inspect lists a held key as ready")

	// a/1 added again while processing, then Done: a/1's finished run
	// lets one key of a through, and a/1 itself is ready again.
	q.Add("a/1")
	q.Done("a/1")
	require.Equal(t, 2, q.Len(), "a/1 is ready again after Done, beside a/2")
	k, _ = q.Get()
	require.Contains(t, []string{"a/1", "a/2"}, k)
	require.Equal(t, 1, q.Len())
	q.Done(k)
	k2, _ := q.Get()
	require.NotEqual(t, k, k2, "each key runs once")
	q.Done(k2)
	require.Equal(t, workqueue.Stats{}, trimStats(q.Stats()))
}

// TestTenantCapDrainAll checks that ShutDownWithDrainAll returns once the
// held keys have run, and that the Done that makes a held key available
// wakes the getter waiting for it, not only the drainer that waits on the
// same condition: the drainer is waiting first and another run still goes,
// so only the wake of the held key can reach the getter.
func TestTenantCapDrainAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newCapped(1, false)
		q.Add("a/1")
		q.Add("a/2")
		q.Add("b/1")
		k1, _ := q.Get() // a/1
		k2, _ := q.Get() // b/1
		require.Equal(t, []string{"a/1", "b/1"}, []string{k1, k2})

		drained := make(chan error, 1)
		go func() { drained <- q.ShutDownWithDrainAll(context.Background()) }()
		synctest.Wait()
		require.Empty(t, drained, "the drain waits for the held key")

		ch := startGets(q, 1)
		synctest.Wait()
		require.Empty(t, ch, "after ShutDown a Get still waits for a held key whose tenant is running")

		q.Done("a/1")
		synctest.Wait()
		require.Len(t, ch, 1, "Done of a/1 must wake the getter for a/2 while a drainer waits")
		require.Equal(t, getResult[string]{"a/2", false}, <-ch)
		require.Empty(t, drained, "b/1 and a/2 still run")
		q.Done("a/2")
		q.Done("b/1")
		synctest.Wait()
		require.Len(t, drained, 1, "the drain returns once every key ran")
		require.NoError(t, <-drained)
		k, shutdown := q.Get()
		require.True(t, shutdown, "nothing is left: Get reports shutdown, got %q", k)
	})
}

// TestTenantCapDrainWithWorkers drains a queue whose one tenant has many
// keys and a cap, with workers that keep calling Get and Done: both drains
// return, and every key runs once.
func TestTenantCapDrainWithWorkers(t *testing.T) {
	for _, all := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			q := newCapped(2, false)
			for i := range 50 {
				q.Add("a/" + string(rune('A'+i)))
			}
			q.Add("b/1")
			done := make(chan string, 100)
			for range 4 {
				go func() {
					for {
						k, shutdown := q.Get()
						if shutdown {
							return
						}
						done <- k
						q.Done(k)
					}
				}()
			}
			synctest.Wait()
			var err error
			if all {
				err = q.ShutDownWithDrainAll(context.Background())
			} else {
				q.ShutDownWithDrain()
			}
			require.NoError(t, err)
			synctest.Wait()
			require.Equal(t, 0, q.Len())
			require.Len(t, done, 51, "every key runs once")
		})
	}
}

// TestTenantCapShutDown checks the two shutdown rules with held keys:
// client-go's (Get keeps waiting for a held key while its tenant runs, then
// hands it out, then reports shutdown) and GetStopsAtShutDown's (at once).
func TestTenantCapShutDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newCapped(1, false)
		q.Add("a/1")
		q.Add("a/2")
		k, _ := q.Get()
		require.Equal(t, "a/1", k)
		q.ShutDown()
		ch := startGets(q, 1)
		synctest.Wait()
		require.Empty(t, ch, "a held key is ready and a's run goes on: Get must wait, not report shutdown")
		require.Equal(t, 1, q.Len())
		q.Done("a/1")
		synctest.Wait()
		require.Equal(t, getResult[string]{"a/2", false}, <-ch, "after ShutDown Get still hands out the held key")
		q.Done("a/2")
		_, shutdown := q.Get()
		require.True(t, shutdown, "no key is left: Get reports shutdown")
	})
	synctest.Test(t, func(t *testing.T) {
		q := newCapped(1, true)
		q.Add("a/1")
		q.Add("a/2")
		q.Get()
		q.ShutDown()
		_, shutdown := q.Get()
		require.True(t, shutdown, "GetStopsAtShutDown: Get reports shutdown at once, held keys or not")
		_, err := q.GetContext(context.Background())
		require.ErrorIs(t, err, workqueue.ErrShutDown)
		require.Equal(t, 1, q.Len(), "the held key stays ready")
		q.Done("a/1")
		require.ErrorIs(t, q.ShutDownWithDrainContext(context.Background()), nil, "nothing runs: the drain returns")
	})
}

// TestTenantCapGetContextCancel checks that a GetContext waiting while only
// held keys are ready returns the context's error when it is cancelled,
// takes nothing, and leaves the held key for a later Get.
func TestTenantCapGetContextCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newCapped(1, false)
		q.Add("a/1")
		q.Add("a/2")
		q.Get()
		ctx, cancel := context.WithCancel(context.Background())
		ch := goGetContext(ctx, q)
		synctest.Wait()
		require.Empty(t, ch, "only a held key: GetContext waits")
		cancel()
		synctest.Wait()
		r := <-ch
		require.ErrorIs(t, r.err, context.Canceled)
		require.Zero(t, r.item)
		require.Equal(t, 1, q.Len(), "the held key stays ready")
		q.Done("a/1")
		k, err := q.GetContext(context.Background())
		require.NoError(t, err)
		require.Equal(t, "a/2", k)
		q.Done(k)
		q.ShutDown()
	})
}

// TestTenantCapRemoveHeld checks that Remove of a held key takes it out of
// the store at once (no entry is left for Get to pass over), and that the
// key added again is one ready key.
func TestTenantCapRemoveHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newCapped(1, false)
		q.Add("a/1")
		q.Add("a/2")
		q.Add("a/3")
		q.Get()
		require.True(t, q.Remove("a/2"), "a held key has a pending run")
		require.False(t, q.Remove("a/2"))
		require.Equal(t, 1, q.Len())
		require.Equal(t, workqueue.KeyAbsent, q.State("a/2"))
		n, err := workqueue.CheckTable(q)
		require.NoError(t, err)
		require.Equal(t, 2, n, "a/1 and a/3: the removed key leaves no entry")

		q.Done("a/1")
		k, _ := q.Get()
		require.Equal(t, "a/3", k, "the removed key is not handed out")
		ch := startGets(q, 1)
		synctest.Wait()
		require.Empty(t, ch, "nothing else is ready")
		q.Add("a/2")
		require.Equal(t, 1, q.Len(), "added again after Remove: one ready key, held")
		synctest.Wait()
		require.Empty(t, ch, "a/2 is held while a/3 runs")
		q.Done("a/3")
		synctest.Wait()
		require.Equal(t, getResult[string]{"a/2", false}, <-ch)
		q.Done("a/2")
		q.ShutDown()
		n, err = workqueue.CheckTable(q)
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

// TestTenantCapWakesGetters checks that an Add wakes a waiting getter for
// each key it makes available, and only those: of three getters waiting
// on an empty queue, a key of each tenant wakes one, the second key of a
// tenant at its cap none, until its tenant's Done.
func TestTenantCapWakesGetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newCapped(1, false)
		ch := startGets(q, 3)
		synctest.Wait()
		q.Add("a/1")
		synctest.Wait()
		require.Len(t, ch, 1, "an Add must wake a getter")
		q.Add("a/2")
		q.Add("b/1")
		synctest.Wait()
		require.Len(t, ch, 2, "b/1 wakes a second getter; a/2 is held")
		got := []string{(<-ch).item, (<-ch).item}
		require.ElementsMatch(t, []string{"a/1", "b/1"}, got)
		q.Done("a/1")
		synctest.Wait()
		require.Equal(t, getResult[string]{"a/2", false}, <-ch, "a's Done lets a/2 through to the third getter")
		q.Done("a/2")
		q.Done("b/1")
		q.ShutDown()
	})
}
