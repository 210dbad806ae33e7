package sharding_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/fakeshards"
)

// slowLists makes every LIST of the sharded resource (but the one-object
// probe) take delay before its first page is answered, as a list of a
// large resource does: what a move costs when the taker lists after the
// holder has released.
type slowLists struct {
	lw    *fakeshards.ListerWatcher
	delay time.Duration
}

func (s slowLists) List(o metav1.ListOptions) (runtime.Object, error) {
	return s.ListWithContext(context.Background(), o)
}

func (s slowLists) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return s.lw.WatchWithContext(context.Background(), o)
}

func (s slowLists) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	if o.Limit != 1 && o.Continue == "" {
		t := time.NewTimer(s.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	return s.lw.ListWithContext(ctx, o)
}

func (s slowLists) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return s.lw.WatchWithContext(ctx, o)
}

// admissions records, from each replica's OnChange, when each shard's keys
// began and stopped being admitted where, and checks at each gain that the
// replica's cache holds every object of the shard.
type admissions struct {
	t       *testing.T
	perShrd map[int]int // objects per shard
	mu      sync.Mutex
	reps    map[string]*sharding.Replica
	last    map[string][]int
	events  [][]admission // by shard
	unfill  []string      // gains whose cache lacked objects
}

type admission struct {
	at     time.Time
	id     string
	gained bool
}

func newAdmissions(t *testing.T, rg *ring) *admissions {
	a := &admissions{t: t, perShrd: map[int]int{}, reps: map[string]*sharding.Replica{},
		last: map[string][]int{}, events: make([][]admission, rg.shards)}
	list, err := rg.objs.AppsV1().Deployments(objectsNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing: %v", err)
	}
	for _, d := range list.Items {
		a.perShrd[sharding.ShardOf(sharding.Hash(string(d.UID)), rg.shards)]++
	}
	rg.config = func(id string, cfg *sharding.Config) {
		cfg.ListerWatcher = slowLists{lw: cfg.ListerWatcher.(*fakeshards.ListerWatcher), delay: listDelay}
		cfg.OnChange = func(shards []int) { a.change(id, shards) }
	}
	rg.created = func(id string, r *sharding.Replica) {
		a.mu.Lock()
		a.reps[id] = r
		a.mu.Unlock()
	}
	return a
}

// listDelay is how long a list of the sharded resource takes in
// TestPlannedMoveGap: more than any bound the test asserts on planned
// moves, so a planned move that waited for a list fails it.
const listDelay = 5 * time.Second

func (a *admissions) change(id string, shards []int) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := a.last[id]
	a.last[id] = shards
	r := a.reps[id]
	for _, s := range shards {
		if slices.Contains(prev, s) {
			continue
		}
		a.events[s] = append(a.events[s], admission{at: now, id: id, gained: true})
		if r != nil {
			if got, want := countShard(r, s), a.perShrd[s]; got != want {
				a.unfill = append(a.unfill, fmt.Sprintf("%s admitted shard %d with %d of its %d objects cached", id, s, got, want))
			}
		}
	}
	for _, s := range prev {
		if !slices.Contains(shards, s) {
			a.events[s] = append(a.events[s], admission{at: now, id: id})
		}
	}
}

func countShard(r *sharding.Replica, s int) int {
	n := 0
	for _, obj := range r.Informer().GetStore().List() {
		if got, ok := r.ShardOfObject(obj); ok && got == s {
			n++
		}
	}
	return n
}

// gaps returns, for every shard that moved after since, how long no
// replica admitted its keys between its holder's last admission and its
// taker's first; and every instant two replicas admitted one shard.
func (a *admissions) gaps(since time.Time) (gaps []time.Duration, overlaps []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for s, evs := range a.events {
		admitting := map[string]bool{}
		var emptyAt time.Time
		for _, e := range evs {
			if !e.gained {
				delete(admitting, e.id)
				if len(admitting) == 0 {
					emptyAt = e.at
				}
				continue
			}
			if len(admitting) > 0 {
				overlaps = append(overlaps, fmt.Sprintf("%v: shard %d admitted by %s while %v admit it", e.at.Format("15:04:05.000"), s, e.id, admitting))
			}
			if len(admitting) == 0 && !emptyAt.IsZero() && !emptyAt.Before(since) {
				gaps = append(gaps, e.at.Sub(emptyAt))
			}
			admitting[e.id] = true
		}
	}
	slices.Sort(gaps)
	return gaps, overlaps
}

// TestPlannedMoveGap measures the gap of each planned move (a join, a
// graceful leave) against a crash move (a kill), with lists that take
// listDelay: a planned move's taker fills its cache before the holder
// stops admitting, so the gap, from the holder's last admission to the
// taker's first, is the drain (a run takes workTime) plus the handover's
// Lease writes, within 1 s; a crash move's taker still lists after the
// fence. One shard is never admitted by two replicas at once, and a
// taker's cache holds every object of a shard when it admits it.
func TestPlannedMoveGap(t *testing.T) {
	for _, mode := range []string{"server", "client"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rg := newRing(t, 16, objects)
				rg.clientFilter = mode == "client"
				defer rg.stopAll()
				adm := newAdmissions(t, rg)
				rg.start(false)
				leaver := rg.start(false)
				victim := rg.start(true)
				rg.waitBalanced(leaseDuration + listDelay)
				time.Sleep(2 * retryPeriod)

				bound := workTime + time.Second
				check := func(what string, since time.Time, planned bool) string {
					gaps, overlaps := adm.gaps(since)
					if len(overlaps) > 0 {
						t.Errorf("%s: %d overlaps, first: %v", what, len(overlaps), overlaps[0])
					}
					if len(gaps) == 0 {
						t.Errorf("%s: no shard moved", what)
						return what + ": none"
					}
					p50, top := gaps[len(gaps)/2], gaps[len(gaps)-1]
					switch {
					case planned && top > bound:
						t.Errorf("%s: gaps %v, want each within the drain + 1 s (%v); a list takes %v", what, gaps, bound, listDelay)
					case !planned && gaps[0] < listDelay:
						t.Errorf("%s: gaps %v, want each at least a list (%v): a crash move's taker lists after the fence", what, gaps, listDelay)
					}
					return fmt.Sprintf("%s %d moves p50 %v max %v", what, len(gaps), p50, top)
				}

				mark := time.Now()
				go rg.churn(3 * retryPeriod)
				rg.start(false)
				rg.waitBalanced(leaseDuration + gracePeriod + 4*retryPeriod + listDelay)
				join := check("join", mark, true)
				time.Sleep(3 * retryPeriod)

				mark = time.Now()
				go rg.churn(3 * retryPeriod)
				rg.stop(leaver)
				rg.waitBalanced(leaseDuration + listDelay)
				leave := check("graceful leave", mark, true)
				time.Sleep(3 * retryPeriod)

				mark = time.Now()
				adm.change(victim, nil) // a killed replica tells no one
				rg.stop(victim)
				rg.waitBalanced(2*leaseDuration + listDelay)
				kill := check("kill", mark, false)

				adm.mu.Lock()
				if len(adm.unfill) > 0 {
					t.Errorf("%d shards admitted before their cache was filled, first: %v", len(adm.unfill), adm.unfill[0])
				}
				adm.mu.Unlock()
				rg.quiet()
				rg.checkExclusive()
				t.Logf("FIGURES planned moves (%s filtering, 16 shards, %d objects, a list takes %v, a run %v): %s; %s; %s",
					mode, objects, listDelay, workTime, join, leave, kill)
			})
		})
	}
}

// TestReadyWaitsForShare checks that Ready waits until the replica admits
// its share, so that a Deployment counts a new pod available only once it
// does its part: a lone replica of a new ring until every shard it took
// is in its cache (a list of listDelay after the acquisitions), a
// newcomer until its planned share has moved to it (filled ahead, then
// handed over). Sampled every 50 ms, Ready is never nil while fewer shards
// than the share are admitted, and it is nil within a list of the share
// being taken.
func TestReadyWaitsForShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rg := newRing(t, 16, 200)
		defer rg.stopAll()
		newAdmissions(t, rg) // lists take listDelay
		watch := func(id string, share int, limit time.Duration) time.Duration {
			t.Helper()
			rg.mu.Lock()
			r := rg.members[id].r
			rg.mu.Unlock()
			start := time.Now()
			for time.Since(start) < limit {
				err, admitted := r.Ready(nil), len(r.Shards())
				if err == nil {
					if admitted < share {
						t.Errorf("%s: Ready nil with %d shards admitted, share %d", id, admitted, share)
					}
					return time.Since(start)
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Fatalf("%s: not Ready after %v: %v (admitted %v)", id, limit, r.Ready(nil), r.Shards())
			return 0
		}
		first := rg.start(false)
		// Counted at its first renewal, it takes every shard at its third
		// tick and lists them: at least that list.
		if took := watch(first, 16, 4*retryPeriod+2*listDelay); took < listDelay {
			t.Errorf("the first replica was Ready %v after its start, before a list (%v) could have filled its shards", took, listDelay)
		}
		joiner := rg.start(false)
		if took := watch(joiner, 8, leaseDuration+2*listDelay); took < listDelay {
			t.Errorf("the joiner was Ready %v after its start, before a list (%v) could have filled its share", took, listDelay)
		}
		rg.checkExclusive()
	})
}

// TestHandoffTimeout checks Config.HandoffTimeout with fills that take
// longer than LeaseDuration (a list of 20 s, as a list of the whole
// resource may take where the server does not filter): by default a
// graceful leaver hands its shards over LeaseDuration after its leave
// and their keys wait for the rest of the taker's list; with a
// HandoffTimeout above the list's time it waits for the taker's sync and
// the keys wait for the drain only.
func TestHandoffTimeout(t *testing.T) {
	const slowList = 20 * time.Second
	for _, tc := range []struct {
		timeout time.Duration
		gapped  bool // the leave's gaps are a list's rest, not the drain
	}{{0, true}, {30 * time.Second, false}} {
		t.Run(fmt.Sprintf("timeout=%v", tc.timeout), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rg := newRing(t, 16, 200)
				defer rg.stopAll()
				adm := newAdmissions(t, rg)
				admit := rg.config
				rg.config = func(id string, cfg *sharding.Config) {
					admit(id, cfg)
					cfg.ListerWatcher = slowLists{lw: cfg.ListerWatcher.(slowLists).lw, delay: slowList}
					cfg.HandoffTimeout = tc.timeout
				}
				rg.start(false)
				leaver := rg.start(false)
				rg.waitBalanced(leaseDuration + 3*slowList)
				time.Sleep(2 * retryPeriod)

				mark := time.Now()
				go rg.churn(3 * retryPeriod)
				rg.stop(leaver)
				rg.waitBalanced(leaseDuration + 2*slowList)
				gaps, overlaps := adm.gaps(mark)
				if len(overlaps) > 0 {
					t.Errorf("%d overlaps, first: %v", len(overlaps), overlaps[0])
				}
				if len(gaps) == 0 {
					t.Fatal("no shard moved")
				}
				top := gaps[len(gaps)-1]
				switch {
				case tc.gapped && gaps[0] < slowList-leaseDuration-time.Second:
					t.Errorf("gaps %v with the default HandoffTimeout, want each the list's rest (about %v)", gaps, slowList-leaseDuration)
				case !tc.gapped && top > workTime+time.Second:
					t.Errorf("gaps %v with HandoffTimeout %v, want each within the drain + 1 s", gaps, tc.timeout)
				}
				rg.quiet()
				rg.checkExclusive()
				t.Logf("FIGURES graceful leave, a list takes %v, HandoffTimeout %v: %d moves, gaps %v", slowList, tc.timeout, len(gaps), gaps)
			})
		})
	}
}
