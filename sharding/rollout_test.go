package sharding_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue/sharding"
)

// A rollout replaces every replica of a ring, as the Deployment
// controller does when the pod template changes: the pod name is the
// identity, so each new pod is a newcomer (a join) and each old one a
// leaver (a graceful leave, on SIGTERM). These tests play the Deployment
// controller's rolling update against the simulated ring and count what
// it costs the ring: shard moves (each a list of the shard and a time
// its keys run nowhere), and the longest of those times.
//
// strategy is a Deployment's .spec.strategy and .spec.minReadySeconds.
type strategy struct {
	name           string
	recreate       bool // type: Recreate
	surge, unavail int  // rollingUpdate maxSurge / maxUnavailable, absolute
	// surgePct and unavailPct are given as percentages instead (rounded
	// as the Deployment controller does: maxSurge up, maxUnavailable
	// down); 0 means the absolute fields.
	surgePct, unavailPct int
	minReady             time.Duration
	// sameName recreates each pod under its old name, one at a time
	// (a StatefulSet's rolling update).
	sameName bool
	// restart, if not zero, is no rollout: one pod's container crashes
	// (no release) and starts again under the same pod name after restart,
	// as the kubelet restarts a container.
	restart time.Duration
	// shards, if not zero, is Config.Shards in the new pod template: the
	// rollout changes the ring's count (shardcount.go).
	shards int
}

// count is Config.Shards of the new pods in a ring of s shards.
func (st strategy) count(s int) int {
	switch {
	case st.shards > 0:
		return s * st.shards
	case st.shards < 0:
		return s / -st.shards
	}
	return s
}

func (st strategy) bounds(n int) (surge, unavail int) {
	surge, unavail = st.surge, st.unavail
	if st.surgePct > 0 {
		surge = (n*st.surgePct + 99) / 100
	}
	if st.unavailPct > 0 {
		unavail = n * st.unavailPct / 100
	}
	if surge == 0 && unavail == 0 {
		unavail = 1 // as the API server's validation requires one of them
	}
	return surge, unavail
}

// rolloutMinReady is the minReadySeconds of the manifests: longer than a
// newcomer takes to hold its share (its third tick, 4.4 s with the default
// timing, plus the list of its shards).
const rolloutMinReady = 10 * time.Second

var rolloutStrategies = []strategy{
	{name: "surge=1,unavailable=0", surge: 1},
	{name: "surge=1,unavailable=0,minReady=10s", surge: 1, minReady: rolloutMinReady},
	{name: "surge=0,unavailable=1", unavail: 1},
	{name: "surge=0,unavailable=1,minReady=10s", unavail: 1, minReady: rolloutMinReady},
	{name: "surge=25%,unavailable=25%", surgePct: 25, unavailPct: 25},
	{name: "surge=25%,unavailable=25%,minReady=10s", surgePct: 25, unavailPct: 25, minReady: rolloutMinReady},
	{name: "surge=100%,unavailable=0", surgePct: 100},
	{name: "surge=100%,unavailable=0,minReady=10s", surgePct: 100, minReady: rolloutMinReady},
	{name: "recreate", recreate: true},
	{name: "statefulset", sameName: true, unavail: 1},
	{name: "container restart after 1s", restart: time.Second},
	{name: "container restart after 20s", restart: 20 * time.Second},
	{name: "surge=100%,unavailable=0,minReady=10s,shards×2", surgePct: 100, minReady: rolloutMinReady, shards: 2},
	{name: "surge=100%,unavailable=0,minReady=10s,shards÷2", surgePct: 100, minReady: rolloutMinReady, shards: -2},
	{name: "surge=25%,unavailable=25%,minReady=10s,shards×2", surgePct: 25, unavailPct: 25, minReady: rolloutMinReady, shards: 2},
	{name: "surge=1,unavailable=0,shards×2", surge: 1, shards: 2},
}

// rolloutSizes: the other sizes run with SHARDING_ROLLOUT=1 (about four
// minutes without -race on a loaded 2-core machine).
var rolloutSizes = []struct{ replicas, shards int }{{3, 16}, {3, 64}, {16, 16}, {16, 64}}

// rolloutResult is what one rollout cost the ring.
type rolloutResult struct {
	cells        int             // what moves count: the shards of the finer of the two counts
	moves        int             // changes of a cell's admitting replica process
	nameMoves    int             // of the admitting replica's identity (pod name)
	acquisitions int             // shard Lease writes naming a holder
	gaps         []time.Duration // per move: from the last admission by the old holder to the first by the new
	took         time.Duration   // from the first pod change to the last pod available
	peakPods     int
}

// TestRollout replaces every replica of a balanced ring by each
// strategy, and checks at most 2·S shard moves per rolling update of a
// Deployment, whatever its strategy (each replaced replica's share moves at most twice: to
// the others when it leaves, from them when its successor joins; planned
// moves keep a leaver's shards until their takers have synced them, so
// one pod at a time no longer outruns the ring; a StatefulSet's pods come
// back under their names, as rejoining members, and at N = 3, S = 16 move
// 2.6·S); for every strategy, that no key runs twice
// (invariant 1 throughout) and every key is reconciled after it
// (invariant 2).
func TestRollout(t *testing.T) {
	all := os.Getenv("SHARDING_ROLLOUT") != ""
	for i, sz := range rolloutSizes {
		for _, st := range rolloutStrategies {
			name := fmt.Sprintf("N=%d/S=%d/%s", sz.replicas, sz.shards, st.name)
			// CI: every strategy at the first size, and the manifests' at
			// N = S = 16.
			manifests := st.surgePct == 100 && st.minReady > 0 && sz.replicas == 16 && sz.shards == 16
			if i > 0 && !all && !manifests {
				continue
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					res := rollout(t, sz.replicas, sz.shards, st)
					slices.Sort(res.gaps)
					p50, worst := time.Duration(0), time.Duration(0)
					if len(res.gaps) > 0 {
						p50, worst = res.gaps[len(res.gaps)/2], res.gaps[len(res.gaps)-1]
					}
					if limit := 2 * res.cells; st.shards != 0 && res.moves > limit {
						t.Errorf("a rolling update of %d replicas from %d to %d shards moved %d of %d cells, limit 2 per cell", sz.replicas, sz.shards, st.count(sz.shards), res.moves, res.cells)
					}
					if limit := 2 * sz.shards; !st.sameName && st.shards == 0 && (res.moves > limit || res.acquisitions > limit) {
						t.Errorf("a rolling update of %d replicas moved %d shards (%d acquisitions), limit 2·S = %d", sz.replicas, res.moves, res.acquisitions, limit)
					}
					// A container back within LeaseDuration gets its own
					// shards back: listed by the new process, no other
					// replica takes them.
					if st.restart > 0 && st.restart < leaseDuration && (res.nameMoves > 0 || res.moves > ceilDiv(sz.shards, sz.replicas)) {
						t.Errorf("a container restarted after %v: %d shards moved to other replicas, %d re-admitted in all; want none moved, at most its share (%d) re-admitted",
							st.restart, res.nameMoves, res.moves, ceilDiv(sz.shards, sz.replicas))
					}
					// Every new pod first, with minReadySeconds: each shard
					// moves once, give or take a leaver's shard that goes to
					// an old pod about to leave.
					if limit := res.cells + ceilDiv(res.cells, sz.replicas); st.surgePct == 100 && st.minReady > 0 && (res.moves > limit || st.shards == 0 && res.acquisitions > limit) {
						t.Errorf("all new pods first moved %d of %d cells (%d acquisitions), limit C + ⌈C/N⌉ = %d", res.moves, res.cells, res.acquisitions, limit)
					}
					// A change of the count, all new pods first: the old
					// pods' drain and a few Lease writes, as a planned move.
					if st.shards != 0 && st.surgePct == 100 && worst > gracePeriod {
						t.Errorf("a rolling update from %d to %d shards, all new pods first: a cell waited %v, more than the drain bound (GracePeriod %v)", sz.shards, st.count(sz.shards), worst, gracePeriod)
					}
					t.Logf("FIGURES rollout N=%d S=%d %s: %d moves (%.2f·C, C = %d cells; %d between pod names), %d acquisitions; gap per move p50 %v max %v; rollout took %v, at most %d pods",
						sz.replicas, sz.shards, st.name, res.moves, float64(res.moves)/float64(res.cells), res.cells, res.nameMoves, res.acquisitions,
						p50.Round(10*time.Millisecond), worst.Round(10*time.Millisecond), res.took.Round(100*time.Millisecond), res.peakPods)
				})
			})
		}
	}
}

// podNames gives pod names as a ReplicaSet does: the Deployment's name,
// the pod template's hash, a random suffix. The ring sorts identities,
// so the new pods all sort before the old ones or all after, by hash.
type podNames struct {
	rng  *rand.Rand
	used map[string]bool
}

func (p *podNames) next(hash string) string {
	const letters = "bcdfghjklmnpqrstvwxz2456789" // as apimachinery's rand.String
	for {
		b := make([]byte, 5)
		for i := range b {
			b[i] = letters[p.rng.IntN(len(letters))]
		}
		name := "ctl-" + hash + "-" + string(b)
		if !p.used[name] {
			p.used[name] = true
			return name
		}
	}
}

// rolloutPod is one pod of the simulated Deployment.
type rolloutPod struct {
	id      string // the harness's id of the replica
	readyAt time.Time
}

// rollout starts n replicas with the old template's pod names, waits for
// a balanced ring, replaces them all by strategy st, and returns the
// moves it saw. The Deployment controller is played as its rolling
// update does (a sync every 100 ms): new pods are created while the pods
// of both templates number at most n + maxSurge; old ones are deleted
// while at least n − maxUnavailable stay available, counting a new pod
// available once Ready (Replica.Ready, the manifests' readiness probe)
// for minReadySeconds; a deleted pod leaves gracefully (SIGTERM), and no
// longer counts at once (its ReplicaSet does not count terminating pods).
func rollout(t *testing.T, n, shards int, st strategy) rolloutResult {
	rg := newRing(t, shards, 200)
	defer rg.stopAll()
	names := &podNames{rng: rand.New(rand.NewPCG(uint64(n), uint64(shards))), used: map[string]bool{}}
	identity := map[string]string{} // harness id → pod name
	countOf := map[string]int{}     // harness id → Config.Shards
	var idMu sync.Mutex
	rg.config = func(id string, cfg *sharding.Config) {
		idMu.Lock()
		defer idMu.Unlock()
		cfg.Identity = identity[id]
		cfg.Shards = countOf[id]
	}
	newTemplate := false // pods started from now on are of the new template
	seq := 0             // the harness numbers its replicas r-0, r-1, …
	startPod := func(name string, kill ...bool) string {
		id := fmt.Sprintf("r-%d", seq)
		seq++
		idMu.Lock()
		identity[id] = name
		countOf[id] = shards
		if newTemplate {
			countOf[id] = st.count(shards)
		}
		idMu.Unlock()
		if got := rg.start(len(kill) > 0 && kill[0]); got != id {
			t.Fatalf("harness started %s, want %s", got, id)
		}
		return id
	}
	var old []*rolloutPod
	for i := range n {
		old = append(old, &rolloutPod{id: startPod(names.next("5d9c7b8f4"), i == 0 && st.restart > 0)})
	}
	rg.waitBalanced(leaseDuration + 4*retryPeriod)
	time.Sleep(3 * retryPeriod)
	acq0 := rg.acquired()

	// Watch the admitted shards every 50 ms, by cell (a shard of the
	// finer of the two counts, so that a rollout that changes the count
	// is measured too): a move is a cell admitted by a replica process
	// other than the one that admitted it last (the new process lists it:
	// a container restarted under its pod's name too); its gap is the
	// time between the two.
	cells := max(shards, st.count(shards))
	holders := func() [][]string {
		out := make([][]string, cells)
		rg.mu.Lock()
		defer rg.mu.Unlock()
		for id, m := range rg.members {
			idMu.Lock()
			per := cells / countOf[id]
			idMu.Unlock()
			for _, s := range m.r.Shards() {
				for c := s * per; c < (s+1)*per; c++ {
					out[c] = append(out[c], id)
				}
			}
		}
		return out
	}
	res := rolloutResult{cells: cells}
	last := make([]string, cells)
	for c, ids := range holders() {
		if len(ids) == 1 {
			last[c] = ids[0]
		}
	}
	lastName := make([]string, cells)
	for s, id := range last {
		lastName[s] = identity[id]
	}
	lastSeen := make([]time.Time, cells)
	for i := range lastSeen {
		lastSeen[i] = time.Now()
	}
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopWatch:
				return
			case <-tick.C:
			}
			now := time.Now()
			for s, ids := range holders() {
				if len(ids) != 1 {
					continue
				}
				if ids[0] != last[s] {
					res.moves++
					res.gaps = append(res.gaps, now.Sub(lastSeen[s]))
					last[s] = ids[0]
					idMu.Lock()
					if name := identity[ids[0]]; name != lastName[s] {
						res.nameMoves++
						lastName[s] = name
					}
					idMu.Unlock()
				}
				lastSeen[s] = now
			}
		}
	}()
	// Objects change throughout, so that handlers run while shards move
	// and the tracker sees any key run twice.
	stopChurn := make(chan struct{})
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for {
			select {
			case <-stopChurn:
				return
			case <-time.After(500 * time.Millisecond):
				rg.update(3)
			}
		}
	}()

	var stopping sync.WaitGroup
	stopPod := func(p *rolloutPod) {
		stopping.Go(func() { rg.stop(p.id) })
	}
	start := time.Now()
	newTemplate = true
	var cur []*rolloutPod
	available := func(p *rolloutPod) bool {
		if p.readyAt.IsZero() {
			rg.mu.Lock()
			m := rg.members[p.id]
			rg.mu.Unlock()
			if m != nil && m.r.Ready(nil) == nil {
				p.readyAt = time.Now()
			}
		}
		return !p.readyAt.IsZero() && time.Since(p.readyAt) >= st.minReady
	}
	deadline := time.Now().Add(time.Duration(n+2) * 2 * time.Minute)
	switch {
	case st.restart > 0:
		p := old[0]
		idMu.Lock()
		name := identity[p.id]
		idMu.Unlock()
		rg.stop(p.id)
		time.Sleep(st.restart)
		cur = append(old[1:], &rolloutPod{id: startPod(name)})
		old = nil
		res.peakPods = n
	case st.recreate:
		for _, p := range old {
			stopPod(p)
		}
		old = nil
		stopping.Wait() // Recreate waits for the old pods to be gone
		for range n {
			cur = append(cur, &rolloutPod{id: startPod(names.next("7f6b9d2c1"))})
		}
		res.peakPods = n
	case st.sameName:
		// A StatefulSet replaces its pods one at a time, highest ordinal
		// first, each under its old name once the old pod is gone.
		for i := len(old) - 1; i >= 0; i-- {
			p := old[i]
			idMu.Lock()
			name := identity[p.id]
			idMu.Unlock()
			rg.stop(p.id)
			np := &rolloutPod{id: startPod(name)}
			for !available(np) {
				time.Sleep(100 * time.Millisecond)
			}
			cur = append(cur, np)
		}
		old = nil
		res.peakPods = n
	default:
		surge, unavail := st.bounds(n)
		for len(old) > 0 || slices.ContainsFunc(cur, func(p *rolloutPod) bool { return !available(p) }) {
			if time.Now().After(deadline) {
				t.Fatalf("rollout not done after %v: %d old pods, %d new", time.Since(start), len(old), len(cur))
			}
			total := len(old) + len(cur)
			if add := min(n+surge-total, n-len(cur)); add > 0 {
				for range add {
					cur = append(cur, &rolloutPod{id: startPod(names.next("7f6b9d2c1"))})
				}
			}
			total = len(old) + len(cur)
			res.peakPods = max(res.peakPods, total)
			availNew := 0
			for _, p := range cur {
				if available(p) {
					availNew++
				}
			}
			minAvail := n - unavail
			down := min(total-minAvail-(len(cur)-availNew), len(old)+availNew-minAvail, len(old))
			for range max(down, 0) {
				// The ReplicaSet controller deletes the youngest pods
				// first among equals: the last started.
				p := old[len(old)-1]
				old = old[:len(old)-1]
				stopPod(p)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for slices.ContainsFunc(cur, func(p *rolloutPod) bool { return !available(p) }) {
		time.Sleep(100 * time.Millisecond)
	}
	stopping.Wait()
	res.took = time.Since(start)
	rg.shards = st.count(shards)
	rg.waitBalanced(leaseDuration + 4*retryPeriod)
	time.Sleep(3 * retryPeriod) // moves in flight land
	close(stopWatch)
	<-watched
	close(stopChurn)
	<-churned
	res.acquisitions = rg.acquired() - acq0
	rg.quiet()
	rg.checkExclusive()
	return res
}
