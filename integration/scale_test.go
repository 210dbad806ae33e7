package integration

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
)

// scaleObjects is the data set of TestScaleShardedCache: issue #31 asks
// for 100,000 ConfigMaps of about 1 KiB.
var scaleObjects = flag.Int("scale.objects", 100_000, "ConfigMaps in the data set of TestScaleShardedCache")

// scaleSettleTimeout bounds each phase of TestScaleShardedCache.
var scaleSettleTimeout = flag.Duration("scale.settle", 15*time.Minute, "how long each phase of TestScaleShardedCache may take to settle")

const (
	// scaleReplicas replicas share the ring's proofShards (64) shards, by
	// namespace, over the data set of dataset_test.go (two namespaces per
	// shard, so every shard holds the same number of objects).
	scaleReplicas = 16
	// scaleKilled is the replica killed in the second phase (SkipRelease),
	// scaleReader the one whose reads are timed (never killed).
	scaleKilled = "r1"
	scaleReader = "r0"
	// scaleLeaver leaves gracefully in the last phase; it is one of the
	// replicas the rollout starts (u0 … u15), and u0 reads.
	scaleLeaver = "u3"
	// scalePoll is how often the parent asks every replica for its
	// status while it waits for the ring to settle.
	scalePoll = 250 * time.Millisecond
)

// TestScaleShardedCache (issue #31) measures the sharded cache at scale on
// the real API server of this binary: 100,000 ConfigMaps of about 1 KiB,
// 16 replicas, 64 shards by namespace, the default timing (LeaseDuration
// 15 s, RenewDeadline 10 s, RetryPeriod 2 s, GracePeriod 5 s), with the
// ShardedListAndWatch gate on (filter=server) and off (filter=client).
// Each replica is a process of its own (scalechild_test.go), so that its
// heap is its own and this process's heap is the API server's and etcd's.
//
// Five phases: the 16 replicas start together; one is killed (its Run
// skips the release, as a crash: the others wait out its Lease); a new
// one joins; a rolling update replaces all 16 by new identities, as the
// manifests' Deployment strategy does it (scaleRollout); one of the new
// replicas leaves gracefully (its Run's context cancelled: it drains and
// releases its shards by plan). Each phase ends when the ring has
// settled: every shard admitted (Replica.Shards) by exactly one live
// replica, none above its fair share ⌈S/N⌉, every replica in the mode's
// Filtering, and every replica's cache exactly the objects of its
// admitted shards (as many of each shard as the data set holds, nothing
// else).
//
// For each phase the FIGURES table gives: the time to settle, from the
// moment of the change (the start of every Run, the kill, the start of
// the newcomer's Run, the start of the new replicas, the leave) to the
// first poll (every 250 ms) that found the ring settled; the shards that
// moved and, per moved shard, the gap from the holder's last admitted run
// to the taker's first (p50 and max; see scaleMoves); per moved shard,
// how long the parent's polls found it in no live replica's Shards()
// (scaleGaps); this process's heap (see apiHeap); the bytes each replica
// received from the change to the settle, min/median/max over the live
// replicas, on the wire (TLS, after the server's gzip) and decoded; each
// replica's live heap after two collections at the settle minus its
// baseline (as TestShardedCacheProofHeap), and the largest live heap a
// collection found in it during the phase; and the longest read
// (Informer().GetIndexer().GetByKey) by the reader of an object of a
// shard it held before and after the phase.
//
// It takes tens of minutes and gigabytes, so it runs only with
// SHARDING_SCALE=1, and should run without -race for figures that mean
// anything:
//
//	SHARDING_SCALE=1 go test -race=false -run TestScaleShardedCache -timeout 60m -v ./...
//
// The data set is written to etcd directly (dataset_test.go, putInEtcd);
// -proof.loadapi creates it through the API server instead, which at
// 100,000 objects takes far longer.
func TestScaleShardedCache(t *testing.T) {
	if os.Getenv("SHARDING_SCALE") == "" {
		t.Skip("set SHARDING_SCALE=1 (and -race=false -timeout 60m) to measure 16 replicas over 100,000 ConfigMaps")
	}
	admin, err := kubernetes.NewForConfig(server.restConfig())
	require.NoError(t, err)
	t.Logf("FIGURES loadavg before the load: %s", loadavg())
	d, err := newDataset(*scaleObjects)
	require.NoError(t, err, "loading the data set")
	perShard := d.perShard()
	t.Logf("FIGURES loaded %d ConfigMaps of %d B of data in %d namespaces (%d shards by namespace, %d-%d objects each) in %v; loadavg %s",
		d.objects, proofPadding+2, len(d.namespaces), proofShards, slices.Min(perShard), slices.Max(perShard), d.load.Round(time.Millisecond), loadavg())

	heap := startAPIHeap()
	defer heap.close()
	for _, mode := range []string{"server", "client"} {
		t.Run("filter="+mode, func(t *testing.T) {
			if mode == "client" {
				withoutShardedListAndWatch(t)
			}
			g := &scaleRing{t: t, d: d, mode: mode, perShard: perShard, heap: heap, ns: createNamespace(t, admin, "scale-"+mode), children: map[string]*scaleChild{}}
			t.Cleanup(g.stopAll)
			began := time.Now()
			var ids []string
			for i := range scaleReplicas {
				ids = append(ids, fmt.Sprintf("r%d", i))
			}
			g.start(ids...)
			g.phase("16 replicas start together", func() { g.each(ids, "run") })
			g.phase("r1 killed (no release)", func() { g.kill(scaleKilled) })
			newcomer := fmt.Sprintf("r%d", scaleReplicas)
			g.start(newcomer)
			g.phase("r16 joins", func() { g.each([]string{newcomer}, "run") })
			g.phase(fmt.Sprintf("rolling update of all 16 (maxSurge 100%%, maxUnavailable 0, minReadySeconds %v)", scaleMinReady.Seconds()), func() { g.rollout() })
			g.phase(scaleLeaver+" leaves gracefully", func() { g.leave(scaleLeaver) })
			g.logTable(time.Since(began))
		})
	}
}

// scaleRing is the ring of one mode of TestScaleShardedCache.
type scaleRing struct {
	t        *testing.T
	d        *dataset
	mode     string
	perShard []int
	heap     *apiHeap
	ns       string
	children map[string]*scaleChild // the live ones
	rows     []scaleRow
	probes   []string // one key of each shard

	// Of the phase under way: the polls' gaps, and the answers of the
	// replicas that left or were killed during it (their runs' spans).
	gaps     *scaleGaps
	mu       sync.Mutex
	departed []scaleReport
	leaving  sync.WaitGroup
}

// scaleRow is one phase's figures.
type scaleRow struct {
	phase                 string
	settled               time.Duration
	gaps                  string // scaleGaps
	moves                 scaleMoves
	apiBase, apiLivePeak  uint64
	apiInUsePeak, apiLive uint64
	wire, body            [3]int64 // min, median, max over the live replicas
	heap, peak            [3]uint64
	read                  scaleReport // the reader's
	loadBefore, loadAfter string
	perReplica            []string
}

// start starts children (replicas not yet running) and waits until each
// has built its replica.
func (g *scaleRing) start(ids ...string) {
	t := g.t
	t.Helper()
	cfg := server.restConfig()
	if g.probes == nil {
		g.probes = make([]string, proofShards)
		for i := 0; i < g.d.objects && slices.Contains(g.probes, ""); i++ {
			if k := g.d.key(i); g.probes[g.d.shardOfKey(k)] == "" {
				g.probes[g.d.shardOfKey(k)] = k
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	for i, id := range ids {
		spec := scaleSpec{
			Host: cfg.Host, Token: cfg.BearerToken, CA: cfg.CAData, ServerName: cfg.ServerName,
			LabelSelector: g.d.selector(), Namespace: g.ns, Ring: "scale", Identity: id, Shards: proofShards,
			SkipRelease: id == scaleKilled, Reader: id == scaleReader || id == "u0", Probes: g.probes,
			HandoffTimeout: *scaleHandoff,
		}
		c, err := startScaleChild(spec)
		require.NoError(t, err)
		g.children[id] = c
		wg.Go(func() { _, errs[i] = c.read() }) // "ready"
	}
	g.wait(&wg, 2*time.Minute, "children to start")
	for i, err := range errs {
		require.NoError(t, err, "%s: %s", ids[i], g.children[ids[i]].stderr.String())
	}
}

// wait waits for wg, killing every child if it takes longer than d: a
// child that hangs would block its answer forever; killed, it answers an
// error.
func (g *scaleRing) wait(wg *sync.WaitGroup, d time.Duration, what string) {
	timer := time.AfterFunc(d, func() {
		g.t.Errorf("waited %v for %s: killing every child", d, what)
		for _, c := range g.children {
			_ = c.cmd.Process.Kill()
		}
	})
	wg.Wait()
	timer.Stop()
}

// each sends command to the children ids, all at once, and returns their
// answers in the order of ids.
func (g *scaleRing) each(ids []string, command string) []scaleReport {
	t := g.t
	t.Helper()
	reps := make([]scaleReport, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		c := g.children[id]
		wg.Go(func() { reps[i], errs[i] = c.ask(command) })
	}
	g.wait(&wg, 5*time.Minute, command)
	for i, err := range errs {
		require.NoError(t, err, "%s %s: %s", ids[i], command, g.children[ids[i]].stderr.String())
		require.Empty(t, reps[i].Err, "%s %s", ids[i], command)
	}
	return reps
}

// live returns the identities of the live children, sorted.
func (g *scaleRing) live() []string {
	ids := make([]string, 0, len(g.children))
	for id := range g.children {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// kill stops a replica started with SkipRelease: its Run returns without
// releasing anything, as a crash (see scalechild_test.go, "leave").
func (g *scaleRing) kill(id string) { g.leave(id) }

// leave cancels the Run of replica id and waits for it to return and the
// process to exit: a graceful leave (drained, released by plan), or a
// crash if it was started with SkipRelease. Its answer (its runs' spans)
// joins the phase's.
func (g *scaleRing) leave(id string) {
	g.leaveAsync(id)
	g.leaving.Wait()
}

// leaveAsync is leave in the background: the phase waits for it before
// its figures (g.leaving).
func (g *scaleRing) leaveAsync(id string) {
	c := g.children[id]
	delete(g.children, id)
	g.leaving.Go(func() {
		rep, err := c.ask("leave")
		switch {
		case err != nil:
			g.t.Errorf("%s leave: %v\n%s", id, err, c.stderr.String())
		case rep.Err != "":
			g.t.Errorf("%s leave: %s", id, rep.Err)
		}
		g.mu.Lock()
		g.departed = append(g.departed, rep)
		g.mu.Unlock()
		_ = c.stdin.Close()
		if err := c.wait(time.Minute); err != nil {
			g.t.Errorf("%s: %v\n%s", id, err, c.stderr.String())
		}
	})
}

// scaleMinReady is the rollout's minReadySeconds: the manifests' 10 s
// (sharding/examples/deployments/deploy/20-deployment.yaml) by default.
// scaleHandoff is the replicas' Config.HandoffTimeout (0: LeaseDuration).
var scaleHandoff = flag.Duration("scale.handoff", 0, "the replicas' Config.HandoffTimeout in TestScaleShardedCache (0: LeaseDuration)")

var scaleMinReady = flag.Duration("scale.minready", 10*time.Second, "the minReadySeconds of TestScaleShardedCache's rolling update")

// rollout replaces every live replica by a new identity (u0, u1, …) as
// the Deployment controller's rolling update does with the manifests'
// strategy (maxSurge 100%, maxUnavailable 0, minReadySeconds 10, or
// -scale.minready), as
// sharding/rollout_test.go plays it: every new pod is created at once;
// an old pod is deleted (a graceful leave: SIGTERM cancels Run's context)
// while at least as many pods as the Deployment's replicas stay
// available, a new pod counting once Ready (Replica.Ready, the readiness
// probe) for minReadySeconds; an old pod stops counting once deleted.
func (g *scaleRing) rollout() {
	old := g.live()
	n := len(old)
	var fresh []string
	for i := range n {
		fresh = append(fresh, fmt.Sprintf("u%d", i))
	}
	g.start(fresh...)
	g.each(fresh, "run")
	readyAt := map[string]time.Time{}
	start := time.Now()
	var events []string
	for len(old) > 0 {
		reps := g.each(g.live(), "status")
		g.gaps.poll(reps)
		avail := 0
		for _, rep := range reps {
			if !slices.Contains(fresh, rep.Identity) {
				continue
			}
			if _, ok := readyAt[rep.Identity]; !ok && rep.Ready {
				readyAt[rep.Identity] = time.Now()
				events = append(events, fmt.Sprintf("%s Ready %v", rep.Identity, time.Since(start).Round(10*time.Millisecond)))
			}
			if at, ok := readyAt[rep.Identity]; ok && time.Since(at) >= *scaleMinReady {
				avail++
			}
		}
		for len(old) > 0 && avail+len(old)-1 >= n {
			events = append(events, fmt.Sprintf("%s deleted %v", old[0], time.Since(start).Round(10*time.Millisecond)))
			g.leaveAsync(old[0])
			old = old[1:]
		}
		if time.Since(start) > *scaleSettleTimeout {
			g.t.Fatalf("rollout: %d old replicas left after %v", len(old), *scaleSettleTimeout)
		}
		time.Sleep(scalePoll)
	}
	g.t.Logf("FIGURES filter=%s rollout, from the start of the new replicas: %s", g.mode, strings.Join(events, ", "))
}

// stopAll stops every child still running, gracefully.
func (g *scaleRing) stopAll() {
	var wg sync.WaitGroup
	for _, id := range g.live() {
		c := g.children[id]
		delete(g.children, id)
		_ = c.stdin.Close()
		wg.Go(func() {
			if err := c.wait(2 * time.Minute); err != nil {
				g.t.Errorf("%s: %v\n%s", id, err, c.stderr.String())
			}
		})
	}
	wg.Wait()
}

// phase runs change, waits until the ring settles and records the phase's
// figures.
func (g *scaleRing) phase(name string, change func()) {
	t := g.t
	t.Helper()
	row := scaleRow{phase: name, loadBefore: loadavg()}
	g.each(g.live(), "phase")
	row.apiBase = g.heap.reset()
	gaps := newScaleGaps(g.each(g.live(), "status"))
	g.gaps = gaps
	g.departed = nil
	start := time.Now()
	change()
	var last []scaleReport
	for {
		last = g.each(g.live(), "status")
		gaps.poll(last)
		why := g.settled(last)
		if why == "" {
			row.settled = time.Since(start)
			break
		}
		if time.Since(start) > *scaleSettleTimeout {
			t.Fatalf("%s: the ring did not settle in %v: %s", name, *scaleSettleTimeout, why)
		}
		time.Sleep(scalePoll)
	}
	row.apiLivePeak, row.apiInUsePeak = g.heap.peaks()
	row.apiLive = liveHeap()
	row.loadAfter = loadavg()
	measured := g.each(g.live(), "measure")
	g.leaving.Wait()
	row.moves = newScaleMoves(append(slices.Clone(g.departed), measured...), last, start)
	for _, o := range row.moves.overlaps {
		t.Errorf("%s: %s", name, o)
	}
	var wire, body []int64
	var heaps, peaks []uint64
	for i, st := range last {
		m := measured[i]
		wire = append(wire, st.CacheWire+st.LeaseWire)
		body = append(body, st.CacheBody+st.LeaseBody)
		heaps = append(heaps, m.Heap-min(m.Baseline, m.Heap))
		peaks = append(peaks, m.PeakLive-min(m.Baseline, m.PeakLive))
		row.perReplica = append(row.perReplica, fmt.Sprintf("%s %v %d objects, %s on the wire (%s of it Leases), %s decoded, heap %s, peak %s",
			st.Identity, st.Shards, st.Objects, mib(st.CacheWire+st.LeaseWire), mib(st.LeaseWire), mib(st.CacheBody+st.LeaseBody), mib(heaps[i]), mib(peaks[i])))
		if m.Reads > 0 {
			row.read = m // the reader's (r0, then u0 once r0 is gone)
		}
	}
	row.wire, row.body = spread(wire), spread(body)
	row.heap, row.peak = spread(heaps), spread(peaks)
	row.gaps = gaps.String()
	t.Logf("FIGURES filter=%s %s: settled in %v; %s; moved shards in no replica's Shards() (to the poll): %s; API server process heap: live %s at the change, peak live %s, peak in use %s, live %s after; replicas: %s; reads by %q of %d unmoved shards: %d, longest %v, p99.9 ≤ %v, %d found nothing; loadavg %s → %s",
		g.mode, name, row.settled.Round(time.Millisecond), row.moves, row.gaps, mib(row.apiBase), mib(row.apiLivePeak), mib(row.apiInUsePeak), mib(row.apiLive),
		strings.Join(row.perReplica, "; "), row.read.Identity, len(row.read.ReadsShards), row.read.Reads, row.read.MaxRead, row.read.P999Read, row.read.ReadMisses,
		row.loadBefore, row.loadAfter)
	if row.read.ReadMisses > 0 {
		t.Errorf("%s: %d reads of objects of unmoved shards found nothing", name, row.read.ReadMisses)
	}
	g.rows = append(g.rows, row)
}

// scaleGaps measures, from the parent's status polls, how long each shard
// that moved was admitted (Replica.Shards: held and synced) by no live
// replica: from the last poll that
// found it admitted to the first that found it admitted again. The polls
// are scalePoll apart, so each gap is an upper bound, at most scalePoll
// (and a poll's round trip) over the true one; a shard that was never
// admitted before (the start) has none.
type scaleGaps struct {
	lastAt map[int]time.Time // when a poll last found the shard admitted
	was    map[int]bool      // admitted at the previous poll
	gaps   []time.Duration
}

func newScaleGaps(reps []scaleReport) *scaleGaps {
	g := &scaleGaps{lastAt: map[int]time.Time{}, was: map[int]bool{}}
	g.poll(reps)
	return g
}

func (g *scaleGaps) poll(reps []scaleReport) {
	now := time.Now()
	is := map[int]bool{}
	for _, rep := range reps {
		for _, s := range rep.Shards {
			is[s] = true
		}
	}
	for s := range is {
		if at, ok := g.lastAt[s]; ok && !g.was[s] {
			g.gaps = append(g.gaps, now.Sub(at))
		}
		g.lastAt[s] = now
	}
	g.was = is
}

func (g *scaleGaps) String() string {
	if len(g.gaps) == 0 {
		return "none"
	}
	slices.Sort(g.gaps)
	return fmt.Sprintf("%d, p50 %v, max %v", len(g.gaps), g.gaps[len(g.gaps)/2].Round(10*time.Millisecond), g.gaps[len(g.gaps)-1].Round(10*time.Millisecond))
}

// scaleMoves are the moves of a phase as the replicas' runs show them
// (scalechild_test.go, scaleRuns): for each shard, the spans of every
// replica's admitted runs of its keys, in order of time; two consecutive
// spans of different replicas are a move, and its gap is from the end of
// the holder's last run to the start of the taker's first. Every admitted
// shard runs its probe key at least every scaleProbeEvery (100 ms), so a
// gap is measured at most that much (plus the queue's latency) over the
// time in which the shard's keys could run nowhere. A taker's first run
// before the holder's last ended is an overlap: two replicas ran one
// shard at once.
type scaleMoves struct {
	gaps     []time.Duration
	slow     []string // the moves whose gap is over a second, in order of time
	overlaps []string
	missing  int // shards held at the settle by a replica that ran none of their keys
}

func newScaleMoves(reps, last []scaleReport, start time.Time) scaleMoves {
	type run struct {
		id string
		scaleSpan
	}
	byShard := map[int][]run{}
	for _, rep := range reps {
		for s, spans := range rep.Spans {
			for _, sp := range spans {
				byShard[s] = append(byShard[s], run{rep.Identity, sp})
			}
		}
	}
	var m scaleMoves
	type slow struct {
		at   int64
		what string
	}
	var slows []slow
	holder := map[int]string{}
	for _, rep := range last {
		for _, s := range rep.Shards {
			holder[s] = rep.Identity
		}
	}
	for s, runs := range byShard {
		slices.SortFunc(runs, func(a, b run) int { return cmp.Compare(a.From, b.From) })
		prev := runs[0]
		for _, r := range runs[1:] {
			if r.id == prev.id {
				prev.To = max(prev.To, r.To)
				continue
			}
			gap := time.Duration(r.From - prev.To)
			if gap < 0 {
				m.overlaps = append(m.overlaps, fmt.Sprintf("shard %d: %s ran it %v before %s's last run ended", s, r.id, -gap, prev.id))
			}
			m.gaps = append(m.gaps, gap)
			if gap > time.Second {
				rel := func(ns int64) time.Duration { return time.Unix(0, ns).Sub(start).Round(10 * time.Millisecond) }
				slows = append(slows, slow{prev.To, fmt.Sprintf("shard %d %s→%s %v→%v", s, prev.id, r.id, rel(prev.To), rel(r.From))})
			}
			prev = r
		}
		if h, ok := holder[s]; ok && h != prev.id {
			m.missing++
		}
	}
	slices.Sort(m.gaps)
	slices.SortFunc(slows, func(a, b slow) int { return cmp.Compare(a.at, b.at) })
	for _, sl := range slows {
		m.slow = append(m.slow, sl.what)
	}
	return m
}

func (m scaleMoves) String() string {
	if len(m.gaps) == 0 {
		return fmt.Sprintf("0 moves (%d unmeasured)", m.missing)
	}
	return fmt.Sprintf("%d moves, gap from the holder's last run to the taker's first p50 %v, max %v (%d unmeasured); over 1 s (holder's last run → taker's first, from the change): [%s]",
		len(m.gaps), m.gaps[len(m.gaps)/2].Round(10*time.Millisecond), m.gaps[len(m.gaps)-1].Round(10*time.Millisecond), m.missing, strings.Join(m.slow, ", "))
}

// settled describes the first way the ring is not settled, or returns "".
func (g *scaleRing) settled(reps []scaleReport) string {
	holder := make([]string, proofShards)
	fair := (proofShards + len(reps) - 1) / len(reps)
	for _, rep := range reps {
		if rep.Filtering != g.mode {
			return fmt.Sprintf("%s filters on the %s", rep.Identity, rep.Filtering)
		}
		if len(rep.Shards) > fair {
			return fmt.Sprintf("%s holds %d shards, fair share %d", rep.Identity, len(rep.Shards), fair)
		}
		if rep.Foreign > 0 {
			return fmt.Sprintf("%s caches %d objects of shards it does not admit", rep.Identity, rep.Foreign)
		}
		for _, s := range rep.Shards {
			if holder[s] != "" {
				return fmt.Sprintf("shard %d admitted by %s and %s", s, holder[s], rep.Identity)
			}
			holder[s] = rep.Identity
			if rep.PerShard[s] != g.perShard[s] {
				return fmt.Sprintf("%s caches %d objects of shard %d, which holds %d", rep.Identity, rep.PerShard[s], s, g.perShard[s])
			}
		}
	}
	for s, h := range holder {
		if h == "" {
			return fmt.Sprintf("shard %d admitted by no one", s)
		}
	}
	return ""
}

// logTable logs the mode's figures as a Markdown table, for the README.
func (g *scaleRing) logTable(took time.Duration) {
	var b strings.Builder
	fmt.Fprintf(&b, "FIGURES table, filter=%s, %d ConfigMaps, %d replicas, %d shards, %s, the mode's run took %v:\n",
		g.mode, g.d.objects, scaleReplicas, proofShards, runtime.Version(), took.Round(time.Second))
	b.WriteString("| phase | settled in | moves (runs) | gap per move, holder's last run → taker's first (p50 / max) | moved shards in no replica's Shards() (count, p50, max; to the 250 ms poll) | API server process heap: live at change / peak live / peak in use | bytes received per replica, wire (min / median / max) | decoded | replica live heap at settle (min / median / max) | replica peak live heap | longest read of an unmoved shard (p99.9) | loadavg |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range g.rows {
		read := "—"
		if r.read.Reads > 0 {
			read = fmt.Sprintf("%v (≤ %v), %d reads", r.read.MaxRead, r.read.P999Read, r.read.Reads)
		}
		moves, gap := fmt.Sprint(len(r.moves.gaps)), "—"
		if r.moves.missing > 0 {
			moves += fmt.Sprintf(" (+%d unmeasured)", r.moves.missing)
		}
		if n := len(r.moves.gaps); n > 0 {
			gap = fmt.Sprintf("%v / %v", r.moves.gaps[n/2].Round(10*time.Millisecond), r.moves.gaps[n-1].Round(10*time.Millisecond))
		}
		fmt.Fprintf(&b, "| %s | %v | %s | %s | %s | %s / %s / %s | %s / %s / %s | %s / %s / %s | %s / %s / %s | %s / %s / %s | %s | %s → %s |\n",
			r.phase, r.settled.Round(10*time.Millisecond), moves, gap, r.gaps,
			mib(r.apiBase), mib(r.apiLivePeak), mib(r.apiInUsePeak),
			mib(r.wire[0]), mib(r.wire[1]), mib(r.wire[2]),
			mib(r.body[0]), mib(r.body[1]), mib(r.body[2]),
			mib(r.heap[0]), mib(r.heap[1]), mib(r.heap[2]),
			mib(r.peak[0]), mib(r.peak[1]), mib(r.peak[2]),
			read, r.loadBefore, r.loadAfter)
	}
	g.t.Log(b.String())
}

// spread returns the min, median and max of xs.
func spread[T int64 | uint64](xs []T) [3]T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return [3]T{s[0], s[len(s)/2], s[len(s)-1]}
}

// mib formats a byte count.
func mib[T int64 | uint64](n T) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
}

// loadavg returns the first three fields of /proc/loadavg, or "?".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// apiHeap samples this process's heap while a phase runs. The process
// holds etcd and kube-apiserver, and besides them only the test's
// bookkeeping (the data set's names, the children's answers: kilobytes),
// since every replica runs in a child. Two figures, of the Go runtime's
// own metrics (runtime/metrics), sampled every 100 ms:
//
//   - peak live: the largest /gc/heap/live:bytes, the heap each
//     collection of the phase found reachable: what the server needed
//     at once;
//   - peak in use: the largest /memory/classes/heap/objects:bytes, live
//     plus garbage not yet collected: how far the heap grew (with
//     GOGC=100 up to about twice the live heap).
//
// Both include etcd's heap (its in-memory index and raft log of the
// writes of the data set), which is steady during a phase: the live heap
// at the change, after two collections, is the baseline to compare with.
type apiHeap struct {
	live, inUse atomic.Uint64
	stop        chan struct{}
	done        sync.WaitGroup
}

func startAPIHeap() *apiHeap {
	h := &apiHeap{stop: make(chan struct{})}
	h.done.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			h.sample()
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	})
	return h
}

func (h *apiHeap) sample() {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	raise(&h.live, s[0].Value.Uint64())
	raise(&h.inUse, s[1].Value.Uint64())
}

func raise(a *atomic.Uint64, v uint64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// reset collects garbage, returns the live heap and starts the peaks
// again from it.
func (h *apiHeap) reset() uint64 {
	base := liveHeap()
	h.live.Store(0)
	h.inUse.Store(0)
	h.sample()
	return base
}

// peaks returns the peaks since reset.
func (h *apiHeap) peaks() (live, inUse uint64) {
	h.sample()
	return h.live.Load(), h.inUse.Load()
}

func (h *apiHeap) close() { close(h.stop); h.done.Wait() }

// scaleChild is a running scale child, seen from its parent.
type scaleChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *json.Decoder
	stderr lockedBuffer
	mu     sync.Mutex // one command at a time
	exited chan error
}

// startScaleChild re-executes the test binary as a scale child with spec.
func startScaleChild(spec scaleSpec) (*scaleChild, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	c := &scaleChild{cmd: exec.Command(os.Args[0]), exited: make(chan error, 1)}
	c.cmd.Env = append(os.Environ(), scaleChildEnv+"="+string(b))
	c.cmd.Stderr = &c.stderr
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c.out = json.NewDecoder(stdout)
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	return c, nil
}

// ask sends a command and returns the answer.
func (c *scaleChild) ask(command string) (scaleReport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := io.WriteString(c.stdin, command+"\n"); err != nil {
		return scaleReport{}, err
	}
	return c.read()
}

// read reads one answer.
func (c *scaleChild) read() (scaleReport, error) {
	var rep scaleReport
	err := c.out.Decode(&rep)
	return rep, err
}

// wait waits for the child to exit (its stdin closed), killing it after d.
func (c *scaleChild) wait(d time.Duration) error {
	go func() { c.exited <- c.cmd.Wait() }()
	select {
	case err := <-c.exited:
		return err
	case <-time.After(d):
		_ = c.cmd.Process.Kill()
		<-c.exited
		return fmt.Errorf("did not stop within %v; killed", d)
	}
}
