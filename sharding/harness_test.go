package sharding_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/exclusion"
	"github.com/go-coalesce/workqueue/sharding/fakeleases"
	"github.com/go-coalesce/workqueue/sharding/fakeshards"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// appsLW lists and watches the Deployments (or ReplicaSets) of namespace
// ns ("" for every namespace) in the fake clientset, which ignores
// ShardSelector: fakeshards answers it.
func appsLW(objs *fake.Clientset, ns string, replicaSets bool) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if replicaSets {
				return objs.AppsV1().ReplicaSets(ns).List(ctx, o)
			}
			return objs.AppsV1().Deployments(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if replicaSets {
				return objs.AppsV1().ReplicaSets(ns).Watch(ctx, o)
			}
			return objs.AppsV1().Deployments(ns).Watch(ctx, o)
		},
	}
}

// Timing of the test rings: client-go's leader election defaults.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
	maxPeriod     = retryPeriod + retryPeriod/10 // the longest loop period, with its jitter
	gracePeriod   = 3 * time.Second
	workTime      = 20 * time.Millisecond // one handler run
	workers       = 4
	objectsNS     = "apps"
)

// tracker records the versions each key was reconciled at, and checks
// invariant 1 at every handler entry and exit through the exclusion
// oracle it embeds (Enter, Exit, Violations, Runs). It is shared by every
// replica of a ring.
type tracker struct {
	exclusion.Tracker

	mu     sync.Mutex           // protects the fields below
	latest map[string]int64     // key → newest generation written
	done   map[string]int64     // key → newest generation reconciled
	doneAt map[string]time.Time // key → when done reached latest
	// cancels: replica → the first time one of its runs saw its context
	// cancelled with ErrLeaseLost.
	lostAt map[string]time.Time
}

func (t *tracker) cancelled(id string, cause error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.lostAt[id]; !ok && errors.Is(cause, sharding.ErrLeaseLost) {
		t.lostAt[id] = time.Now()
	}
}

func (t *tracker) lostTime(id string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.lostAt[id]
	return at, ok
}

func newTracker() *tracker {
	return &tracker{
		latest: make(map[string]int64),
		done:   make(map[string]int64),
		doneAt: make(map[string]time.Time),
		lostAt: make(map[string]time.Time),
	}
}

func (t *tracker) wrote(key string, gen int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.latest[key] = gen
	if t.done[key] < gen {
		delete(t.doneAt, key)
	}
}

func (t *tracker) reconciled(key string, gen int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if gen > t.done[key] {
		t.done[key] = gen
	}
	if t.done[key] >= t.latest[key] {
		if _, ok := t.doneAt[key]; !ok {
			t.doneAt[key] = time.Now()
		}
	}
}

// behind returns the keys not reconciled at their newest generation, and
// when the last of the others got there.
func (t *tracker) behind() (keys []string, last time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, g := range t.latest {
		if t.done[k] < g {
			keys = append(keys, k)
		} else if t.doneAt[k].After(last) {
			last = t.doneAt[k]
		}
	}
	slices.Sort(keys)
	return keys, last
}

func (t *tracker) violationList() []string { return t.Violations() }

// ring is a set of replicas of one controller in one process: one shared
// Lease store (with resourceVersion conflicts), one shared object store
// that each replica watches through its own informer.
type ring struct {
	t      *testing.T
	shards int
	leases *fakeleases.Store
	objs   *fake.Clientset
	// shardSrv serves the Deployments to every replica (a client each),
	// as one API server: see fakeshards.
	shardSrv *fakeshards.Server
	tr       *tracker
	rng      *rand.Rand
	names    []string
	timing   sharding.Config // only the timing fields are used
	retDly   time.Duration   // how long a handler takes to return once cancelled
	block    bool            // handlers work until cancelled
	// blocks, if set, tells whether replica id's handlers work until
	// cancelled, asked at each run's start (from the replicas'
	// goroutines).
	blocks  func(id string) bool
	workers int // per replica; 0 means the constant workers
	// cost, if set, is how long a run of a key of shard s takes (else
	// workTime).
	cost func(s int) time.Duration
	// clientFilter makes the replicas' ListerWatchers ignore the shard
	// selector, as a server with the ShardedListAndWatch gate off does.
	clientFilter bool
	// hold, if not nil, is called with each replica's ListerWatcher
	// before the replica starts (to hold back LISTs).
	hold func(id string, lw *fakeshards.ListerWatcher)
	// config, if not nil, edits each replica's Config before New;
	// created, if not nil, is called with each replica before it runs.
	config  func(id string, cfg *sharding.Config)
	created func(id string, r *sharding.Replica)
	// react, if not nil, is called with each replica's clientset before
	// the replica starts, to prepend reactors (faults) to its Lease
	// requests; they run before the store's, under the clientset's lock.
	react func(id string, cs *fake.Clientset)
	// onWrite, if not nil, is called after every Lease write, as
	// fakeleases.Store.OnWrite's function (the store's lock held).
	onWrite func(id, verb string, l *coordinationv1.Lease, err error)
	mu      sync.Mutex
	members map[string]*member
	seq     int

	// acquisitions counts shard Lease writes that gave a shard to a
	// holder (a move or a first assignment); renewals records when each
	// replica's membership Lease updates succeeded.
	acqMu        sync.Mutex
	acquisitions int
	renewals     map[string][]time.Time
}

type member struct {
	id      string
	r       *sharding.Replica
	lw      *fakeshards.ListerWatcher
	q       *workqueue.RateLimitingQueue[string]
	cancel  context.CancelFunc
	done    chan struct{}
	killed  bool // SkipRelease
	leaveEr error
}

func newRing(t *testing.T, shards, objects int) *ring {
	rg := &ring{
		t:      t,
		shards: shards,
		leases: fakeleases.New(),
		// The simple clientset: NewClientset's field-managed tracker
		// builds a REST mapper on every write, which made 2,000 creates
		// take most of a test's time.
		objs:     fake.NewSimpleClientset(), //nolint:staticcheck // see above
		tr:       newTracker(),
		rng:      rand.New(rand.NewPCG(uint64(shards), uint64(objects))),
		members:  make(map[string]*member),
		renewals: make(map[string][]time.Time),
		timing: sharding.Config{
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline,
			RetryPeriod: retryPeriod, GracePeriod: gracePeriod,
		},
	}
	rg.leases.OnWrite(func(id, verb string, l *coordinationv1.Lease, err error) {
		if rg.onWrite != nil {
			rg.onWrite(id, verb, l, err)
		}
		if err != nil || l == nil || verb == "delete" {
			return
		}
		if l.Labels[sharding.LabelRole] == "member" {
			rg.acqMu.Lock()
			rg.renewals[id] = append(rg.renewals[id], time.Now())
			rg.acqMu.Unlock()
			return
		}
		if l.Labels[sharding.LabelRole] != "shard" {
			return
		}
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			rg.acqMu.Lock()
			rg.acquisitions++
			rg.acqMu.Unlock()
		}
	})
	ctx := context.Background()
	for i := range objects {
		name := fmt.Sprintf("d-%05d", i)
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{
			Namespace: objectsNS, Name: name, Generation: 1,
			UID: types.UID(fmt.Sprintf("uid-%05d-%x", i, rg.rng.Uint64())),
		}}
		if _, err := rg.objs.AppsV1().Deployments(objectsNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
		rg.names = append(rg.names, name)
		rg.tr.wrote(objectsNS+"/"+name, 1)
	}
	// Start the fake server's cache now, so that a test measuring the
	// replicas' heap from here counts only theirs.
	rg.shardSrv = fakeshards.NewServer(appsLW(rg.objs, objectsNS, false), true)
	if _, err := rg.shardSrv.Client().List(metav1.ListOptions{Limit: 1}); err != nil {
		t.Fatalf("starting the fake server: %v", err)
	}
	return rg
}

// renewedAt returns when replica id's membership writes succeeded.
func (rg *ring) renewedAt(id string) []time.Time {
	rg.acqMu.Lock()
	defer rg.acqMu.Unlock()
	return slices.Clone(rg.renewals[id])
}

func (rg *ring) acquired() int {
	rg.acqMu.Lock()
	defer rg.acqMu.Unlock()
	return rg.acquisitions
}

// start adds a replica. kill makes it a replica that, when stopped, stops
// without releasing (SkipRelease), as a crash would.
func (rg *ring) start(kill bool) string {
	rg.mu.Lock()
	id := "r-" + strconv.Itoa(rg.seq)
	rg.seq++
	rg.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	rg.shardSrv.SetHonour(!rg.clientFilter)
	lw := rg.shardSrv.Client()
	if rg.hold != nil {
		rg.hold(id, lw)
	}
	q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
	cfg := rg.timing
	cs := rg.leases.Clientset(id)
	if rg.react != nil {
		rg.react(id, cs)
	}
	cfg.Client = cs
	cfg.Namespace = "ring"
	cfg.Name = "ctl"
	cfg.Identity = id
	cfg.Shards = rg.shards
	cfg.Object = &appsv1.Deployment{}
	cfg.ListerWatcher = lw
	cfg.Queue = q
	cfg.SkipRelease = kill
	if rg.config != nil {
		rg.config(id, &cfg)
	}
	r, err := sharding.New(cfg)
	if err != nil {
		rg.t.Fatalf("sharding.New: %v", err)
	}
	if rg.created != nil {
		rg.created(id, r)
	}
	inf := r.Informer()
	m := &member{id: id, r: r, lw: lw, q: q, cancel: cancel, done: make(chan struct{}), killed: kill}
	count := r.Status().ShardCount
	handle := func(ctx context.Context, key string) error {
		// The key's shard as this replica tells it, in its own count:
		// the oracle compares hash ranges across counts.
		var in exclusion.Shard
		if i, ok := r.ShardOfKey(key); ok {
			in = exclusion.Shard{Index: i, Count: count}
		}
		rg.tr.Enter(id, key, in)
		defer rg.tr.Exit(id, key)
		obj, ok, _ := inf.GetStore().GetByKey(key)
		if !ok {
			return nil
		}
		gen := obj.(*appsv1.Deployment).Generation
		took := workTime
		if rg.cost != nil {
			took = rg.cost(in.Index)
		}
		work := time.After(took)
		if rg.block || rg.blocks != nil && rg.blocks(id) {
			work = nil
		}
		select {
		case <-work:
		case <-ctx.Done():
			rg.tr.cancelled(id, context.Cause(ctx))
			if rg.retDly > 0 {
				time.Sleep(rg.retDly)
			}
			return ctx.Err()
		}
		rg.tr.reconciled(key, gen)
		return nil
	}
	var wg sync.WaitGroup
	wg.Go(func() { m.leaveEr = r.Run(ctx) })
	nw := workers
	if rg.workers > 0 {
		nw = rg.workers
	}
	wg.Go(func() { _ = workqueue.Run(ctx, q, nw, r.Handler(handle)) })
	go func() {
		wg.Wait()
		close(m.done)
	}()
	rg.mu.Lock()
	rg.members[id] = m
	rg.mu.Unlock()
	return id
}

// stop stops replica id (gracefully unless it was started with kill) and
// waits until all its goroutines have returned.
func (rg *ring) stop(id string) {
	rg.mu.Lock()
	m := rg.members[id]
	delete(rg.members, id)
	rg.mu.Unlock()
	m.cancel()
	<-m.done
	m.lw.Close()
	// A handler that takes longer than GracePeriod + RenewDeadline to
	// return makes a graceful leave give up, as documented.
	if m.leaveEr != nil && rg.retDly < gracePeriod+renewDeadline {
		rg.t.Errorf("%s: Run: %v", id, m.leaveEr)
	}
}

// stopAll stops every replica, then the fake API server: stopping one
// replica leaves it running for the others (see fakeshards'
// ListerWatcher.Close).
func (rg *ring) stopAll() {
	for _, id := range rg.ids() {
		rg.stop(id)
	}
	rg.shardSrv.Close()
}

func (rg *ring) ids() []string {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	ids := make([]string, 0, len(rg.members))
	for id := range rg.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// holders returns, for each shard, the replicas that hold it now.
func (rg *ring) holders() [][]string {
	out := make([][]string, rg.shards)
	rg.mu.Lock()
	defer rg.mu.Unlock()
	for id, m := range rg.members {
		for _, s := range m.r.Shards() {
			out[s] = append(out[s], id)
		}
	}
	return out
}

// owner maps each shard to its single holder ("" if none or several).
func (rg *ring) owner() []string {
	h := rg.holders()
	out := make([]string, len(h))
	for i, ids := range h {
		if len(ids) == 1 {
			out[i] = ids[0]
		}
	}
	return out
}

// balanced reports whether every shard has one holder and every replica
// holds ⌊S/N⌋ or ⌈S/N⌉ shards.
func (rg *ring) balanced() (bool, string) {
	h := rg.holders()
	count := map[string]int{}
	for i, ids := range h {
		if len(ids) != 1 {
			return false, fmt.Sprintf("shard %d held by %v", i, ids)
		}
		count[ids[0]]++
	}
	ids := rg.ids()
	n := len(ids)
	lo, hi := rg.shards/n, (rg.shards+n-1)/n
	for _, id := range ids {
		if c := count[id]; c < lo || c > hi {
			return false, fmt.Sprintf("%s holds %d shards, want %d..%d", id, c, lo, hi)
		}
	}
	return true, ""
}

// waitBalanced waits (in simulated time) until the ring is balanced and
// returns how long that took, or fails the test after limit.
func (rg *ring) waitBalanced(limit time.Duration) time.Duration {
	start := time.Now()
	for {
		if ok, _ := rg.balanced(); ok {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			_, why := rg.balanced()
			rg.t.Fatalf("ring not balanced after %v: %s", limit, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// update bumps the generation of n random objects.
func (rg *ring) update(n int) {
	for i := range n {
		if i%20 == 19 {
			// Let the informers drain their watches: the fake's
			// watch channels hold 100 events and panic when full.
			synctest.Wait()
		}
		if !rg.bump(rg.names[rg.rng.IntN(len(rg.names))]) {
			return
		}
	}
}

// bump bumps the generation of object name, and reports whether it did.
func (rg *ring) bump(name string) bool {
	ctx := context.Background()
	d, err := rg.objs.AppsV1().Deployments(objectsNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		rg.t.Errorf("get %s: %v", name, err) // not Fatal: churn runs on its own goroutine
		return false
	}
	d.Generation++
	if _, err := rg.objs.AppsV1().Deployments(objectsNS).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		rg.t.Errorf("update %s: %v", name, err)
		return false
	}
	rg.tr.wrote(objectsNS+"/"+name, d.Generation)
	return true
}

// churn updates a few objects every 100ms for d, so handlers run while
// shards move.
func (rg *ring) churn(d time.Duration) { rg.churnEvery(d, 100*time.Millisecond) }

// churnEvery updates three objects every period for d.
func (rg *ring) churnEvery(d, period time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		rg.update(3)
		time.Sleep(period)
	}
}

// quiet waits LeaseDuration + 2 periods (+ the work of the keys that
// changed last) and checks invariants 2 and 3; it returns when the last
// key was reconciled, counted from the start of the quiet.
func (rg *ring) quiet() time.Duration {
	q := time.Now()
	bound := leaseDuration + 2*maxPeriod
	time.Sleep(bound + time.Second)
	behind, last := rg.tr.behind()
	if len(behind) > 0 {
		rg.t.Errorf("invariant 2: %d keys not reconciled at their latest version %v after the quiet started (first: %v)",
			len(behind), bound+time.Second, behind[:min(5, len(behind))])
	}
	took := max(0, last.Sub(q))
	if took > bound+time.Second {
		rg.t.Errorf("invariant 2: last key reconciled %v after the quiet started, bound %v", took, bound)
	}
	if ok, why := rg.balanced(); !ok {
		rg.t.Errorf("invariant 3: quiet ring not balanced: %s", why)
	}
	return took
}

// writesPerSecond measures the Lease writes of a quiet ring over 10 retry
// periods and checks invariant 4.
func (rg *ring) writesPerSecond() float64 {
	// Replicas started together first tick at the same instants (and
	// drift apart with the jitter); starting the window half a period off
	// them counts each period's renewal once.
	time.Sleep(retryPeriod / 2)
	window := 10 * retryPeriod
	before := rg.leases.TotalWrites()
	time.Sleep(window)
	w := rg.leases.TotalWrites() - before
	n := int64(len(rg.ids()))
	if limit := n * int64(window/retryPeriod); w > limit {
		rg.t.Errorf("invariant 4: %d Lease writes in %v by %d replicas, limit %d (one per replica per RetryPeriod)", w, window, n, limit)
	}
	return float64(w) / window.Seconds()
}

func (rg *ring) checkExclusive() {
	if v := rg.tr.violationList(); len(v) > 0 {
		rg.t.Errorf("invariant 1: %d violations, first: %v", len(v), v[:min(5, len(v))])
	}
}

// waitCovered waits until every shard has exactly one holder among the
// running replicas and returns how long that took, or fails after limit.
func (rg *ring) waitCovered(limit time.Duration) time.Duration {
	start := time.Now()
	for {
		ok := true
		for _, ids := range rg.holders() {
			if len(ids) != 1 {
				ok = false
				break
			}
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			rg.t.Fatalf("shards not all held after %v: %v", limit, rg.holders())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitTaken waits until every shard has exactly one holder other than
// victim and returns how long that took, or fails after limit.
func (rg *ring) waitTaken(victim string, limit time.Duration) time.Duration {
	start := time.Now()
	for {
		ok := true
		for _, ids := range rg.holders() {
			if len(ids) != 1 || ids[0] == victim {
				ok = false
				break
			}
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			rg.t.Fatalf("shards not all taken from %s after %v: %v", victim, limit, rg.holders())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// moved counts the shards whose holder differs between two owner maps.
func moved(before, after []string) int {
	n := 0
	for i := range before {
		if before[i] != after[i] {
			n++
		}
	}
	return n
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
