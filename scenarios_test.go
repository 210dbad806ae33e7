package workqueue_test

// Two scenarios that measure what the fair priority store is for, in fake
// time (synctest), so that their figures are exact and the same on every
// machine: the starvation of an informer's initial list behind a flood of
// priority-0 keys, and a slow tenant that takes every worker. Each logs a
// FIGURES line and asserts the bounds the options promise.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/go-coalesce/workqueue"
)

// served is what the scenarios record of one key's run.
type served struct {
	key      string
	prio     int
	wait     time.Duration // from its Add to its Get
	startsAt time.Duration // since the scenario began
}

// runWorkers starts n workers that take keys from q until it reports
// shutdown, each run lasting work(key), and records each run. It returns
// a function that waits for the workers and returns the records.
func runWorkers(q *workqueue.Queue[string], n int, start time.Time, addedAt func(string) time.Time, work func(string) time.Duration) func() []served {
	var (
		mu  sync.Mutex
		out []served
		wg  sync.WaitGroup
	)
	for range n {
		wg.Go(func() {
			for {
				k, prio, shutdown := q.GetWithPriority()
				if shutdown {
					return
				}
				now := time.Now()
				mu.Lock()
				out = append(out, served{k, prio, now.Sub(addedAt(k)), now.Sub(start)})
				mu.Unlock()
				time.Sleep(work(k))
				q.Done(k)
			}
		})
	}
	return func() []served {
		wg.Wait()
		return out
	}
}

// p99 returns the 99th percentile of ds (nearest rank).
func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*99+99)/100-1]
}

// starvation is the first scenario: 4 workers whose runs take run each;
// priority-0 keys (each a new key) arriving at 1.2 times the workers'
// throughput for 60 s; and 1,000 keys of an informer's initial list at
// priority -100 at the start. After the 60 s the arrivals stop and the
// workers finish everything.
type starvationFigures struct {
	lowMax           time.Duration // longest wait of a -100 key
	lowBy60          int           // -100 keys served while priority 0 arrived
	p0p99, p0Max     time.Duration // waits of the priority-0 keys
	lowLast, p0Count int
}

func starvation(t *testing.T, store workqueue.Store[string]) (f starvationFigures) {
	const (
		workers  = 4
		run      = 100 * time.Millisecond
		arrivals = 60 * time.Second
		initial  = 1000
	)
	// 4 workers finish 40 keys a second; 1.2 times that is 48.
	every := run * 10 / (workers * 12)
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.NewWithConfig(workqueue.Config[string]{Store: store})
		start := time.Now()
		var mu sync.Mutex
		added := map[string]time.Time{}
		addedAt := func(k string) time.Time { mu.Lock(); defer mu.Unlock(); return added[k] }
		for i := range initial {
			k := fmt.Sprintf("list/%d", i)
			added[k] = start
			q.AddWithPriority(k, -100)
		}
		wait := runWorkers(q, workers, start, addedAt, func(string) time.Duration { return run })
		for i := 0; ; i++ {
			at := start.Add(time.Duration(i) * every)
			if at.Sub(start) >= arrivals {
				break
			}
			time.Sleep(time.Until(at))
			k := fmt.Sprintf("event/%d", i)
			mu.Lock()
			added[k] = time.Now()
			mu.Unlock()
			q.Add(k)
		}
		require.NoError(t, q.ShutDownWithDrainAll(context.Background()))
		var p0 []time.Duration
		for _, s := range wait() {
			if s.prio == -100 {
				f.lowMax = max(f.lowMax, s.wait)
				f.lowLast++
				if s.startsAt < arrivals {
					f.lowBy60++
				}
				continue
			}
			p0 = append(p0, s.wait)
			f.p0Max = max(f.p0Max, s.wait)
		}
		f.p0p99, f.p0Count = p99(p0), len(p0)
	})
	return f
}

// TestScenarioStarvation measures the starvation of an initial list at
// priority -100 with strict priority (NewPriorityStore) and with the bound
// on waiting (NewFairPriorityStore with MaxWait 5 s).
//
// MaxWait is 5 s: fifty runs. A queue that keeps up never has a key wait
// that long, so there the order stays strict priority; a queue that falls
// behind (here the priority-0 keys alone outrun the workers) serves a key
// within MaxWait of its time plus the keys that were ready before it, so
// the bound should sit well above the normal latency of the top level and
// well below what a user would call starving (minutes).
func TestScenarioStarvation(t *testing.T) {
	strict := starvation(t, workqueue.NewPriorityStore[string]())
	bounded := starvation(t, workqueue.NewFairPriorityStore(workqueue.FairPriority[string]{MaxWait: 5 * time.Second}))
	t.Logf("FIGURES starvation (4 workers, 100ms runs, priority 0 at 1.2x throughput for 60s, 1000 keys at -100 at t=0): "+
		"NewPriorityStore: -100 served during the 60s %d/1000, longest -100 wait %v, priority-0 p99 %v (max %v, %d keys); "+
		"NewFairPriorityStore{MaxWait: 5s}: -100 served during the 60s %d/1000, longest -100 wait %v, priority-0 p99 %v (max %v, %d keys)",
		strict.lowBy60, strict.lowMax, strict.p0p99, strict.p0Max, strict.p0Count,
		bounded.lowBy60, bounded.lowMax, bounded.p0p99, bounded.p0Max, bounded.p0Count)
	// At t=0 one priority-0 key is ready and 4 workers are idle: up to 3
	// keys of the list run then, and none after, while priority 0
	// outruns the workers.
	require.Less(t, strict.lowBy60, 4, "strict priority: no -100 key runs once priority 0 outruns the workers")
	require.Equal(t, 1000, bounded.lowBy60, "with MaxWait every -100 key runs while priority 0 still arrives")
	// Once overdue, the initial list is the oldest ready work: it goes out
	// within MaxWait plus the time the 4 workers need for it (1000 runs of
	// 100ms), plus one run.
	require.LessOrEqual(t, bounded.lowMax, 5*time.Second+25*time.Second+100*time.Millisecond, "the longest -100 wait is bounded")
	require.Equal(t, 1000, strict.lowLast)
	require.Equal(t, strict.p0Count, bounded.p0Count, "both serve every key in the end")
}

// tenants is the second scenario: 8 workers; one tenant with 1,000 keys
// whose runs take slow, and 20 tenants with 10 keys each whose runs take
// fast, all added at the start, the slow tenant's first. It returns the
// waits of the fast tenants' keys and when the slow tenant's last run
// ended.
func tenants(t *testing.T, maxInFlight int) (fastP99, fastMax, slowEnd time.Duration) {
	const (
		workers = 8
		slow    = time.Second
		fast    = 10 * time.Millisecond
	)
	synctest.Test(t, func(t *testing.T) {
		q := workqueue.NewWithConfig(workqueue.Config[string]{Store: workqueue.NewFairPriorityStore(workqueue.FairPriority[string]{
			Tenant: tenantOf, MaxInFlight: maxInFlight,
		})})
		start := time.Now()
		for i := range 1000 {
			q.Add(fmt.Sprintf("slow/%d", i))
		}
		for n := range 20 {
			for i := range 10 {
				q.Add(fmt.Sprintf("fast%02d/%d", n, i))
			}
		}
		wait := runWorkers(q, workers, start, func(string) time.Time { return start }, func(k string) time.Duration {
			if tenantOf(k) == "slow" {
				return slow
			}
			return fast
		})
		require.NoError(t, q.ShutDownWithDrainAll(context.Background()))
		var waits []time.Duration
		for _, s := range wait() {
			if tenantOf(s.key) == "slow" {
				slowEnd = max(slowEnd, s.startsAt+slow)
				continue
			}
			waits = append(waits, s.wait)
			fastMax = max(fastMax, s.wait)
		}
		require.Len(t, waits, 200)
		fastP99 = p99(waits)
	})
	return fastP99, fastMax, slowEnd
}

// TestScenarioTenants measures the fast tenants' waits behind a slow one,
// with fairness inside the level in both runs, without and with a cap of
// 4 keys in flight per tenant.
//
// The cap is 4, half the workers: whatever one tenant does, the others
// keep half the workers; a cap that small costs the slow tenant nothing
// here once the fast tenants are done, but while it is the only tenant
// with keys it leaves the other half idle, which is the price of the
// guarantee (the cap does not lend unused workers).
func TestScenarioTenants(t *testing.T) {
	p99Fair, maxFair, endFair := tenants(t, 0)
	p99Cap, maxCap, endCap := tenants(t, 4)
	t.Logf("FIGURES tenants (8 workers, 1 tenant x 1000 keys of 1s, 20 tenants x 10 keys of 10ms, fair rounds in both): "+
		"no cap: fast p99 wait %v (max %v), slow tenant done at %v; MaxInFlight 4: fast p99 wait %v (max %v), slow tenant done at %v",
		p99Fair, maxFair, endFair, p99Cap, maxCap, endCap)
	require.Less(t, p99Cap, p99Fair, "the cap shortens the fast tenants' waits")
	// With 4 workers left to them, the fast tenants' 200 runs of 10ms take
	// at most 500ms.
	require.LessOrEqual(t, maxCap, 500*time.Millisecond+10*time.Millisecond, "with the cap the fast tenants keep 4 workers")
}
