package integration

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	workqueue "github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/exclusion"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// The timing of TestLoadBalance, as flags so that a run can be made
// shorter or longer without editing the test.
var (
	lbSteady   = flag.Duration("lb.steady", 2*time.Minute, "TestLoadBalance: the steady window in which the balance and the moves are measured, after each convergence")
	lbQuiet    = flag.Duration("lb.quiet", 75*time.Second, "TestLoadBalance: how long no replica's shards may change before the ring counts as converged")
	lbConverge = flag.Duration("lb.converge", 4*time.Minute, "TestLoadBalance: the longest wait for the ring to converge")
	// lbFirstWait is the least time after the start before the ring may
	// count as converged: a balance by load has no load to go by before
	// the holders have measured a window of it.
	lbFirstWait = flag.Duration("lb.first", 2*time.Minute, "TestLoadBalance: the least time after the start before the ring counts as converged")
)

const (
	lbShards     = proofShards // 64, by namespace: dataset's shardOfKey and perShard apply
	lbReplicas   = 8
	lbObjects    = 20_000
	lbNamespaces = 100
	lbZipf       = 1.1 // namespace k (from 1) holds objects in proportion to k^-lbZipf
	lbWorkers    = 8   // the controller's workers per replica
	// lbPass is how often each replica adds every key it caches: a key
	// whose object index is i is added in the seconds where
	// second mod lbPass = i mod lbPass, so that the adds, and the work,
	// are spread evenly over time rather than in bursts.
	lbPass = 20
	// lbUnit is how long a run of an object of weight 1 sleeps. With
	// every weight 1 the ring's demand is lbObjects × lbUnit / lbPass =
	// 8 worker-seconds a second, 1 per replica on average, against
	// lbWorkers = 8 per replica: no replica is saturated, even the most
	// loaded one under count balance, so each one's measured load is its
	// demand.
	lbUnit = 8 * time.Millisecond
	// lbBand is the goal of the balance: the most loaded replica at most
	// lbBand × max(mean, heaviest shard).
	lbBand = 1.15
	// lbBurstGap separates rebalances: moves closer than this in time are
	// one rebalance.
	lbBurstGap = 10 * time.Second
	// lbWindow is the trailing window over which the time to converge by
	// load is read.
	lbWindow = time.Minute
)

// TestLoadBalance measures on the real API server how a ring of 8
// replicas shares the work of 20,000 ConfigMaps in 100 namespaces of Zipf
// sizes (lbZipf), sharded by namespace over 64 shards, when a run's cost
// is in proportion to its object's weight (the handler sleeps weight ×
// lbUnit): with Config.Balance = BalanceCount and BalanceLoad.
//
// Each replica is in this process with clients, informer, queue and
// lbWorkers workers of its own; it adds the keys it caches once every
// lbPass seconds, spread over them, and its handler (wrapped by
// Replica.Handler) records the time it ran per replica and per shard, so
// the load is measured by the test, not read from the library. Every run
// enters and exits the exclusion tracker: no key, and no two keys of
// overlapping shards, may run on two replicas at once.
//
// The scenario: the 8 replicas start together; the ring converges (no
// replica's shards change for lb.quiet, at least lbFirstWait after the
// start); a steady window of lb.steady; then the load shifts (the
// largest namespace's weight drops to 0.25 and one of the next nine, in
// another shard, takes the weight that makes it carry what the largest
// carried); the ring converges again; another steady window.
// Figures, per phase: the most loaded replica against the mean and
// against the bound max(mean, heaviest shard) (handler seconds per
// minute, over the steady window); the moves, grouped into rebalances
// (moves less than lbBurstGap apart), with the share of the objects each
// rebalance moved, and the most objects moved within a minute (what the
// share budget bounds) with the planned moves begun, by cause
// (Metrics.Moves); the moves in the steady window (per hour, extrapolated
// from the window); the time from the change to the last move, and to
// the first moment from which the trailing minute's most loaded replica
// stays within lbBand of the bound. Every object must have run in the
// last two passes before the end.
//
// It takes about 10 minutes per mode, so it runs only with
// SHARDING_LOAD=1:
//
//	SHARDING_LOAD=1 go test -race=false -count=1 -run 'TestLoadBalance/balance=count' -timeout 30m -v .
func TestLoadBalance(t *testing.T) {
	if os.Getenv("SHARDING_LOAD") == "" {
		t.Skip("set SHARDING_LOAD=1 (and -race=false -timeout 30m) to measure balance by count and by load: 8 replicas over 20,000 ConfigMaps in 100 namespaces of Zipf sizes, about 10 minutes a mode")
	}
	d := lbDataset(t)
	for _, mode := range []struct {
		name    string
		balance sharding.Balance
	}{{"count", sharding.BalanceCount}, {"load", sharding.BalanceLoad}} {
		t.Run("balance="+mode.name, func(t *testing.T) { runLoadBalance(t, d, mode.name, mode.balance) })
	}
}

// lbShared is the data set of TestLoadBalance, loaded once per binary and
// shared by its modes (they change no object).
var lbShared struct {
	once sync.Once
	ds   *dataset
	err  error
}

func lbDataset(t *testing.T) *dataset {
	t.Helper()
	lbShared.once.Do(func() {
		before := loadavg()
		lbShared.ds, lbShared.err = newZipfDataset(lbObjects, lbNamespaces, lbZipf)
		if lbShared.err == nil {
			d := lbShared.ds
			per := d.perShard()
			empty := 0
			for _, c := range per {
				if c == 0 {
					empty++
				}
			}
			t.Logf("FIGURES loaded %d ConfigMaps in %d namespaces of Zipf sizes (s %.1f: %d … %d objects), %d shards by namespace (%d empty, heaviest %d objects) in %v; loadavg %s → %s",
				d.objects, len(d.namespaces), lbZipf, lbCount(d, d.namespaces[0]), lbCount(d, d.namespaces[len(d.namespaces)-1]),
				lbShards, empty, slices.Max(per), d.load.Round(time.Millisecond), before, loadavg())
		}
	})
	require.NoError(t, lbShared.err, "loading the data set")
	return lbShared.ds
}

// lbCount returns the number of objects of namespace ns.
func lbCount(d *dataset, ns string) int {
	n := 0
	for _, o := range d.objectNS {
		if o == ns {
			n++
		}
	}
	return n
}

// zipfSizes returns the sizes of n namespaces holding total objects in
// proportion to k^-s (k from 1), rounded by largest remainder so that
// they sum to total: the same sizes on every run.
func zipfSizes(n, total int, s float64) []int {
	w := make([]float64, n)
	var sum float64
	for k := range n {
		w[k] = math.Pow(float64(k+1), -s)
		sum += w[k]
	}
	sizes := make([]int, n)
	rem := make([]float64, n)
	left := total
	for k := range n {
		exact := w[k] / sum * float64(total)
		sizes[k] = int(exact)
		rem[k] = exact - float64(sizes[k])
		left -= sizes[k]
	}
	order := make([]int, n)
	for k := range order {
		order[k] = k
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rem[b], rem[a]) })
	for _, k := range order[:left] {
		sizes[k]++
	}
	return sizes
}

// newZipfDataset creates namespaces zipf00-load … zipf99-load of
// zipfSizes, largest first, and their objects (object i in the namespace
// its index falls in, in that order), written to etcd as the proof's data
// set is (putInEtcd). Names and sizes are fixed, so every run shards the
// same objects the same way. The names vary ahead of a common suffix:
// FNV-1a's top bits, the shard, barely depend on a name's last bytes, so
// names that differ only at their end would all fall into one shard;
// these fall into 52 of the 64 shards, about as many as random names
// would (64 × (1 − (63/64)^100) ≈ 50).
func newZipfDataset(objects, namespaces int, s float64) (*dataset, error) {
	cfg := server.restConfig()
	cfg.QPS, cfg.Burst = -1, 0
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	d := &dataset{label: fmt.Sprintf("lb%d", time.Now().UnixNano()), objects: objects, shardOfNS: map[string]int{}}
	for k, size := range zipfSizes(namespaces, objects, s) {
		name := fmt.Sprintf("zipf%02d-load", k)
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		d.namespaces = append(d.namespaces, name)
		d.shardOfNS[name] = sharding.ShardOf(sharding.Hash(name), lbShards)
		for range size {
			d.objectNS = append(d.objectNS, name)
		}
	}
	start := time.Now()
	if err := d.putInEtcd(ctx, admin, ""); err != nil {
		return nil, err
	}
	d.load = time.Since(start)
	return d, nil
}

// lbRing is one mode's ring of TestLoadBalance.
type lbRing struct {
	t        *testing.T
	d        *dataset
	perShard []int
	weights  map[string]*atomic.Int64 // per namespace, in thousandths
	rec      *lbRecorder
	track    *exclusion.Tracker
	replicas map[string]*lbReplica
}

type lbReplica struct {
	r      *sharding.Replica
	cancel context.CancelFunc
	done   sync.WaitGroup
	runErr atomic.Pointer[error]
}

// lbRecorder is the test's own measure of the ring: handler time per
// second (since start) per replica and per shard, each key's last run,
// and every change of a replica's shards (OnChange).
type lbRecorder struct {
	start time.Time

	mu      sync.Mutex // protects the fields below
	replica map[string][]time.Duration
	shard   [lbShards][]time.Duration
	lastRun map[string]time.Time
	changes []lbChange
	begun   []lbBegun
}

// lbBegun is a planned move begun (its holder's drain), by cause
// (Metrics.Moves).
type lbBegun struct {
	at    time.Time
	cause string
}

// lbCause counts a planned move's drain for the recorder.
type lbCause struct {
	r     *lbRecorder
	cause string
}

func (c lbCause) Inc() {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	c.r.begun = append(c.r.begun, lbBegun{at: time.Now(), cause: c.cause})
}

// causes returns the planned moves begun in [from, to), by cause.
func (r *lbRecorder) causes(from, to time.Time) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, b := range r.begun {
		if !b.at.Before(from) && b.at.Before(to) {
			out[b.cause]++
		}
	}
	return out
}

type lbChange struct {
	at     time.Time
	id     string
	shards []int
}

func newLBRecorder() *lbRecorder {
	return &lbRecorder{start: time.Now(), replica: map[string][]time.Duration{}, lastRun: map[string]time.Time{}}
}

// add adds d to xs[i], growing xs as needed.
func addAt(xs []time.Duration, i int, d time.Duration) []time.Duration {
	for len(xs) <= i {
		xs = append(xs, 0)
	}
	xs[i] += d
	return xs
}

func (r *lbRecorder) ran(id string, shard int, key string, from, to time.Time) {
	i := int(to.Sub(r.start) / time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replica[id] = addAt(r.replica[id], i, to.Sub(from))
	r.shard[shard] = addAt(r.shard[shard], i, to.Sub(from))
	r.lastRun[key] = to
}

func (r *lbRecorder) changed(id string, shards []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, lbChange{at: time.Now(), id: id, shards: shards})
}

func (r *lbRecorder) lastChange() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.changes) == 0 {
		return r.start
	}
	return r.changes[len(r.changes)-1].at
}

// lbLoad is the load of a window: handler seconds per minute per replica
// and per shard.
type lbLoad struct {
	replica map[string]float64
	shard   []float64
}

func (l lbLoad) max() (string, float64) {
	var id string
	top := -1.0
	for _, k := range slices.Sorted(maps.Keys(l.replica)) {
		if l.replica[k] > top {
			id, top = k, l.replica[k]
		}
	}
	return id, top
}

func (l lbLoad) mean() float64 {
	var sum float64
	for _, v := range l.replica {
		sum += v
	}
	return sum / float64(len(l.replica))
}

// bound is max(mean, heaviest shard): the least the most loaded replica
// can carry, a shard being indivisible.
func (l lbLoad) bound() float64 { return max(l.mean(), slices.Max(l.shard)) }

// load returns the load of the whole seconds in [from, to), of the
// replicas ids.
func (r *lbRecorder) load(ids []string, from, to time.Time) lbLoad {
	a, b := int(from.Sub(r.start)/time.Second), int(to.Sub(r.start)/time.Second)
	perMin := func(xs []time.Duration) float64 {
		var sum time.Duration
		for i := a; i < b && i < len(xs); i++ {
			sum += xs[i]
		}
		return sum.Seconds() * 60 / float64(b-a)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	l := lbLoad{replica: map[string]float64{}, shard: make([]float64, lbShards)}
	for _, id := range ids {
		l.replica[id] = perMin(r.replica[id])
	}
	for s := range lbShards {
		l.shard[s] = perMin(r.shard[s])
	}
	return l
}

// lbMove is a shard gained by a replica after the ring first settled.
type lbMove struct {
	at    time.Time
	shard int
	to    string
}

// moves returns the shards gained in [from, to).
func (r *lbRecorder) moves(from, to time.Time) []lbMove {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := map[string][]int{}
	var out []lbMove
	for _, c := range r.changes {
		for _, s := range c.shards {
			if !slices.Contains(held[c.id], s) && !c.at.Before(from) && c.at.Before(to) {
				out = append(out, lbMove{at: c.at, shard: s, to: c.id})
			}
		}
		held[c.id] = c.shards
	}
	return out
}

// rebalances describes moves grouped into rebalances (moves less than
// lbBurstGap apart): for each, when (from since), its moves and the
// share of the objects they moved; and the largest share.
func (g *lbRing) rebalances(moves []lbMove, since time.Time) (string, float64) {
	if len(moves) == 0 {
		return "none", 0
	}
	var parts []string
	var worst float64
	flush := func(group []lbMove) {
		keys := 0
		for _, m := range group {
			keys += g.perShard[m.shard]
		}
		share := float64(keys) / float64(g.d.objects)
		worst = max(worst, share)
		parts = append(parts, fmt.Sprintf("at +%v %d moves, %d objects (%.1f%%)", group[0].at.Sub(since).Round(time.Second), len(group), keys, 100*share))
	}
	group := moves[:1]
	for _, m := range moves[1:] {
		if m.at.Sub(group[len(group)-1].at) >= lbBurstGap {
			flush(group)
			group = nil
		}
		group = append(group, m)
	}
	flush(group)
	return strings.Join(parts, "; "), worst
}

// perMinute describes the most objects that moves (in time order)
// carried within any minute (moves less than lbWindow apart), as a share
// of the objects, with the minute's moves and when its last one was, from
// since: what the share budget (loadShareMax) bounds, read as the test
// counts, with the data set's objects and the replicas' own times. The
// budget admits a minute's first move whatever it carries: a minute of
// one move is within it.
func (g *lbRing) perMinute(moves []lbMove, since time.Time) (string, float64) {
	var worst float64
	desc := "none"
	for k, m := range moves {
		keys, n := 0, 0
		for _, o := range moves[:k+1] {
			if m.at.Sub(o.at) < lbWindow {
				keys, n = keys+g.perShard[o.shard], n+1
			}
		}
		if share := float64(keys) / float64(g.d.objects); share > worst {
			worst = share
			desc = fmt.Sprintf("%.1f%% (%d moves, the minute up to +%v)", 100*share, n, m.at.Sub(since).Round(time.Second))
		}
	}
	return desc, worst
}

func runLoadBalance(t *testing.T, d *dataset, mode string, balance sharding.Balance) {
	admin, err := kubernetes.NewForConfig(server.restConfig())
	require.NoError(t, err)
	g := &lbRing{
		t: t, d: d, perShard: d.perShard(),
		weights:  map[string]*atomic.Int64{},
		rec:      newLBRecorder(),
		track:    &exclusion.Tracker{},
		replicas: map[string]*lbReplica{},
	}
	for _, ns := range d.namespaces {
		g.weights[ns] = &atomic.Int64{}
		g.weights[ns].Store(1000)
	}
	leases := createNamespace(t, admin, "lb-"+mode)
	t.Cleanup(g.stopAll)
	loadStart := loadavg()
	var ids []string
	for i := range lbReplicas {
		id := fmt.Sprintf("r%d", i)
		ids = append(ids, id)
		g.start(id, leases, balance)
	}
	start := g.rec.start
	g.waitSettled(2 * time.Minute)
	settled := time.Now()
	t.Logf("FIGURES balance=%s: the %d replicas hold every shard once after %v", mode, lbReplicas, settled.Sub(start).Round(time.Millisecond))

	var rows []string
	// phase waits for the ring to converge after a change (moves counted
	// from movesFrom), then measures a steady window.
	phase := func(name string, changed, movesFrom time.Time, minWait time.Duration) {
		before := loadavg()
		last, ok := g.converge(changed, minWait)
		from := time.Now()
		time.Sleep(*lbSteady)
		to := time.Now()
		l := g.rec.load(ids, from, to)
		top, maxLoad := l.max()
		moves := g.rec.moves(movesFrom, from)
		rebal, worst := g.rebalances(moves, changed)
		minuteDesc, minute := g.perMinute(moves, changed)
		causes := g.rec.causes(movesFrom, from)
		steady := g.rec.moves(from, to)
		steadyMoves := len(steady)
		for _, m := range steady {
			t.Logf("FIGURES balance=%s %s: a move in the steady window, +%v after its start (+%v after the change): shard %d (%d objects) to %s",
				mode, name, m.at.Sub(from).Round(time.Second), m.at.Sub(changed).Round(time.Second), m.shard, g.perShard[m.shard], m.to)
		}
		within := g.withinBand(ids, changed, to)
		converged := fmt.Sprintf("last move +%v", last.Sub(changed).Round(time.Second))
		if len(moves) == 0 {
			converged = "no move"
		}
		if !ok {
			converged += fmt.Sprintf(" (still moving after %v)", *lbConverge)
		}
		counts := map[string]int{}
		for id, rep := range g.replicas {
			counts[id] = len(rep.r.Shards())
		}
		t.Logf("FIGURES balance=%s %s: the most objects moved within a minute %s; planned moves begun by cause %v",
			mode, name, minuteDesc, causes)
		t.Logf("FIGURES balance=%s %s: %s; %d moves (%s); steady window %v: replica load (handler s/min) max %.1f (%s, %d shards), mean %.1f, heaviest shard %.1f, max/mean %.2f, max/bound %.2f; %d moves in the window (%.0f/h extrapolated); trailing-minute max/bound ≤ %.2f from %s; shards per replica %v; loadavg %s → %s",
			mode, name, converged, len(moves), rebal, to.Sub(from).Round(time.Second), maxLoad, top, counts[top], l.mean(), slices.Max(l.shard),
			maxLoad/l.mean(), maxLoad/l.bound(), steadyMoves, float64(steadyMoves)/to.Sub(from).Hours(), lbBand, within, counts, before, loadavg())
		rows = append(rows, fmt.Sprintf("| %s | %s | %d, largest %.1f%% of objects, %.1f%% within a minute | %.0f / %.0f / %.0f | %.2f | %.2f | %d in %v | %s | %s → %s |",
			name, converged, len(moves), 100*worst, 100*minute, maxLoad, l.mean(), slices.Max(l.shard), maxLoad/l.mean(), maxLoad/l.bound(), steadyMoves, to.Sub(from).Round(time.Second), within, before, loadavg()))
	}
	phase("start", start, settled, *lbFirstWait) // the shards first taken are no moves

	// The load shifts: the largest namespace's load moves to another of
	// the ten largest, in another shard: the first gets a weight of 0.25,
	// the second the weight that makes it carry what the first carried.
	// The second is the one whose shard's holder holds the most shards
	// (the most work besides it, on a ring converged by load), so that
	// its holder is left over the band and the ring has to move.
	fall := d.namespaces[0]
	holderOf := map[int]string{}
	for id, rep := range g.replicas {
		for _, s := range rep.r.Shards() {
			holderOf[s] = id
		}
	}
	var rise string
	for _, ns := range d.namespaces[1:10] {
		if d.shardOfNS[ns] == d.shardOfNS[fall] {
			continue
		}
		if rise == "" || len(g.replicas[holderOf[d.shardOfNS[ns]]].r.Shards()) > len(g.replicas[holderOf[d.shardOfNS[rise]]].r.Shards()) {
			rise = ns
		}
	}
	require.NotEmpty(t, rise, "every large namespace is in the shard of %s", fall)
	riseWeight := int64(1000 * lbCount(d, fall) / lbCount(d, rise))
	g.weights[fall].Store(250)
	g.weights[rise].Store(riseWeight)
	shifted := time.Now()
	t.Logf("FIGURES balance=%s: load shift: %s (%d objects, shard %d) weight 1 → 0.25, %s (%d objects, shard %d, held by %s with %d shards) weight 1 → %.2f",
		mode, fall, lbCount(d, fall), d.shardOfNS[fall], rise, lbCount(d, rise), d.shardOfNS[rise],
		holderOf[d.shardOfNS[rise]], len(g.replicas[holderOf[d.shardOfNS[rise]]].r.Shards()), float64(riseWeight)/1000)
	phase("load shift", shifted, shifted, lbWindow)

	g.checkAllRan(time.Now())
	t.Logf("FIGURES balance=%s, %d replicas, %d workers each, loadavg %s at the start:\n| phase | converged | moves, largest rebalance | load (s/min): max / mean / heaviest shard | max/mean | max/bound | moves in the steady window | trailing-minute max/bound ≤ %.2f | loadavg |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n%s",
		mode, lbReplicas, lbWorkers, loadStart, lbBand, strings.Join(rows, "\n"))
}

// start starts replica id.
func (g *lbRing) start(id, leases string, balance sharding.Balance) {
	t := g.t
	cfg := server.restConfig()
	cfg.QPS, cfg.Burst = -1, 0
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	lw := cache.NewFilteredListWatchFromClient(client.CoreV1().RESTClient(), "configmaps", metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = g.d.selector() })
	q := workqueue.NewRateLimitingQueue(workqueue.NewItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Second))
	r, err := sharding.New(sharding.Config{
		Client:        client,
		Namespace:     leases,
		Name:          "lb",
		Identity:      id,
		Object:        &corev1.ConfigMap{},
		ListerWatcher: lw,
		Queue:         q,
		Shards:        lbShards,
		Field:         sharding.FieldNamespace,
		Balance:       balance,
		Workers:       lbWorkers,
		OnChange:      func(shards []int) { g.rec.changed(id, shards) },
		Metrics:       sharding.Metrics{Moves: func(cause string) sharding.Counter { return lbCause{g.rec, cause} }},
		// The default timing, as in production.
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	rep := &lbReplica{r: r, cancel: cancel}
	rep.done.Go(func() {
		if err := r.Run(ctx); err != nil {
			rep.runErr.Store(&err)
		}
	})
	handle := func(ctx context.Context, key string) error {
		ns, name, _ := strings.Cut(key, "/")
		shard := g.d.shardOfNS[ns]
		g.track.Enter(id, key, shardOf(r, lbShards, key))
		defer g.track.Exit(id, key)
		w := g.weights[ns]
		if w == nil || !strings.HasPrefix(name, "obj-") {
			return nil // not of the data set
		}
		from := time.Now()
		select {
		case <-time.After(time.Duration(w.Load()) * lbUnit / 1000):
		case <-ctx.Done():
		}
		g.rec.ran(id, shard, key, from, time.Now())
		return nil
	}
	rep.done.Go(func() { _ = workqueue.Run(ctx, q, lbWorkers, r.Handler(handle)) })
	// The keys: every second, those of its cached objects whose index
	// falls in this second of the pass.
	store := r.Informer().GetStore()
	rep.done.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for sec := 0; ; sec++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, key := range store.ListKeys() {
				_, name, _ := strings.Cut(key, "/")
				if i, err := strconv.Atoi(strings.TrimPrefix(name, "obj-")); err == nil && i%lbPass == sec%lbPass {
					q.Add(key)
				}
			}
		}
	})
	g.replicas[id] = rep
}

// waitSettled waits until every shard is held by exactly one replica.
func (g *lbRing) waitSettled(limit time.Duration) {
	g.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		holder := make([]int, lbShards)
		for _, rep := range g.replicas {
			for _, s := range rep.r.Shards() {
				holder[s]++
			}
		}
		if !slices.ContainsFunc(holder, func(n int) bool { return n != 1 }) {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("the ring did not settle in %v: holders per shard %v", limit, holder)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// converge waits until no replica's shards have changed for lb.quiet, at
// least minWait after changed and at most lb.converge after it. It returns
// the last change and whether the ring converged.
func (g *lbRing) converge(changed time.Time, minWait time.Duration) (time.Time, bool) {
	for {
		now := time.Now()
		last := g.rec.lastChange()
		quietSince := last
		if quietSince.Before(changed) {
			quietSince = changed
		}
		if now.Sub(changed) >= minWait && now.Sub(quietSince) >= *lbQuiet {
			return last, true
		}
		if now.Sub(changed) >= *lbConverge {
			return last, false
		}
		time.Sleep(time.Second)
	}
}

// withinBand returns the time from changed from which the trailing
// minute's most loaded replica stays within lbBand × bound until to, read
// every 5 s, or "never".
func (g *lbRing) withinBand(ids []string, changed, to time.Time) string {
	var since time.Time
	for at := changed.Add(lbWindow); !at.After(to); at = at.Add(5 * time.Second) {
		l := g.rec.load(ids, at.Add(-lbWindow), at)
		_, top := l.max()
		if top <= lbBand*l.bound() {
			if since.IsZero() {
				since = at
			}
		} else {
			since = time.Time{}
		}
	}
	if since.IsZero() {
		return "never"
	}
	return fmt.Sprintf("+%v", since.Sub(changed).Round(time.Second))
}

// checkAllRan fails the test unless every object ran in the last two
// passes before now.
func (g *lbRing) checkAllRan(now time.Time) {
	g.rec.mu.Lock()
	defer g.rec.mu.Unlock()
	var stale []string
	for i := range g.d.objects {
		key := g.d.key(i)
		if now.Sub(g.rec.lastRun[key]) > 2*lbPass*time.Second {
			stale = append(stale, key)
		}
	}
	if len(stale) > 0 {
		g.t.Errorf("%d objects did not run in the last %ds, among them %v", len(stale), 2*lbPass, stale[:min(len(stale), 5)])
	}
}

// stopAll stops every replica, gracefully and at once, then reports their
// Runs' errors and the exclusion tracker's violations.
func (g *lbRing) stopAll() {
	var wg sync.WaitGroup
	for _, rep := range g.replicas {
		wg.Go(func() {
			rep.cancel()
			rep.done.Wait()
		})
	}
	wg.Wait()
	for _, id := range slices.Sorted(maps.Keys(g.replicas)) {
		if p := g.replicas[id].runErr.Load(); p != nil {
			g.t.Errorf("%s: sharding Run: %v", id, *p)
		}
	}
	g.t.Logf("%d handler runs", g.track.Runs())
	if v := g.track.Violations(); len(v) > 0 {
		g.t.Errorf("invariant 1: two replicas ran one key, or keys of overlapping shards, at once, %d times; the first ones:\n%s",
			len(v), strings.Join(v[:min(len(v), 10)], "\n"))
	}
}
