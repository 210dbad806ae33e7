package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	workqueue "github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// A replica of TestScaleShardedCache is a process of its own, as in
// TestShardedCacheProofHeap (child_test.go), for two reasons: its heap can
// only be measured alone in a process, and the parent's heap is then the
// API server's and etcd's (plus the test's small bookkeeping), which the
// scale test samples. The parent re-executes the test binary with
// scaleChildEnv set to a JSON scaleSpec; TestMain runs runScaleChild
// instead of the tests.
//
// The child builds its replica, answers "ready", and then answers one JSON
// scaleReport per line it reads on stdin:
//
//	run      start Replica.Run (once)
//	phase    zero the byte counters, the peak heap and the runs' spans;
//	         the reader starts timing reads of the shards it holds now
//	status   shards, cached objects per shard, bytes since "phase", Ready
//	measure  stop the reads; live heap after two collections, peak since
//	         "phase", the reads' figures, the runs' spans since "phase"
//	leave    cancel Run's context and wait for Run to return: a graceful
//	         leave (its shards drained and released by plan), or, when
//	         its spec says SkipRelease, a crash as far as the ring can
//	         tell (nothing released); then answer the runs' spans
//
// From "run" on, the child adds its spec's Probes (one key per shard) to
// its queue every scaleProbeEvery, so that every admitted shard has runs
// all the time: the handler (wrapped by Replica.Handler, which runs a key
// only while its shard is admitted) records, per shard, the spans of time
// in which it ran the shard's keys (scaleRuns). The parent joins the spans
// of every replica to find, per moved shard, the gap from the holder's
// last admitted run to the taker's first.
//
// It stops when stdin is closed (after "leave", or at the end).
//
// Only the public API of sharding is used here (Config, New, Run, Shards,
// Informer, Filtering, ShardOf, Hash), so the test runs unchanged on
// another implementation of the package.
const scaleChildEnv = "INTEGRATION_SCALE31_CHILD"

// scaleSpec is what a scale child is told by its parent.
type scaleSpec struct {
	Host       string
	Token      string
	CA         []byte
	ServerName string

	LabelSelector string // the data set's objects
	Namespace     string // the ring's Leases
	Ring          string
	Identity      string
	Shards        int
	SkipRelease   bool
	Reader        bool     // time reads of unmoved shards during each phase
	Probes        []string // one key of each shard, added every scaleProbeEvery
	// HandoffTimeout is Config.HandoffTimeout (-scale.handoff); 0 the
	// default, LeaseDuration.
	HandoffTimeout time.Duration
}

// scaleProbeEvery is how often a scale child adds its probe keys: an
// admitted shard runs at least this often, so a gap between two replicas'
// runs of a shard is measured at most this much (plus the queue's latency)
// over the true one.
const scaleProbeEvery = 100 * time.Millisecond

// scaleSpanBreak: runs of one shard on one replica further apart than this
// start a new span.
const scaleSpanBreak = time.Second

// scaleSpan is a span of time in which a replica ran keys of a shard:
// the start of the first run and the end of the last, in Unix
// nanoseconds (one clock: every process runs on this machine).
type scaleSpan struct{ From, To int64 }

// scaleRuns records a replica's admitted runs, shard by shard, as spans.
type scaleRuns struct {
	mu    sync.Mutex
	spans map[int][]scaleSpan
}

func (s *scaleRuns) ran(shard int, from, to time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.spans[shard]
	if n := len(sp); n > 0 && from.UnixNano()-sp[n-1].To <= int64(scaleSpanBreak) {
		sp[n-1].To = max(sp[n-1].To, to.UnixNano())
		return
	}
	s.spans[shard] = append(sp, scaleSpan{From: from.UnixNano(), To: to.UnixNano()})
}

// take returns the spans recorded since the last take and starts again.
func (s *scaleRuns) take() map[int][]scaleSpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.spans
	s.spans = map[int][]scaleSpan{}
	return sp
}

// scaleReport is a child's answer to a command. Fields a command does not
// fill are zero.
type scaleReport struct {
	Identity  string
	Filtering string
	Shards    []int       // Replica.Shards(): admitted (held and synced)
	PerShard  map[int]int // cached objects by shard
	Objects   int         // cached objects in all
	Foreign   int         // cached objects of shards not in Shards

	// Bytes received since "phase": on the wire (TLS records, after the
	// server's gzip) and as bodies read by the client (after gunzip), for
	// the ConfigMap cache's connections and the Lease client's.
	CacheWire, CacheBody, LeaseWire, LeaseBody int64

	Baseline uint64 // live heap before the replica was built (the test binary's own)
	Heap     uint64 // live heap after two collections, at "measure"
	PeakLive uint64 // largest live heap a collection found since "phase"

	// Reads of the reader (Reader) since "phase", of shards it held then
	// and still holds at "measure": how many, the longest, the 99.9th
	// percentile (upper bound of its power-of-two bucket), and how many
	// found nothing.
	Reads       int
	MaxRead     time.Duration
	P999Read    time.Duration
	ReadMisses  int
	ReadsShards []int // the unmoved shards read

	Ready bool                // Replica.Ready returned nil ("status")
	Spans map[int][]scaleSpan // admitted runs by shard since "phase" ("measure", "leave")
	Err   string
}

// byteCounter counts bytes received by one client: on its connections, and
// in the bodies of its responses.
type byteCounter struct{ wire, body atomic.Int64 }

func (c *byteCounter) reset() { c.wire.Store(0); c.body.Store(0) }

// countingConn counts what is read from a connection.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// countingBody counts what is read from a response body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// countedConfig returns the parent's client configuration for a child,
// counting what its connections and response bodies receive into c. A
// custom Dial gives the client a transport of its own, so the counts are
// this client's alone.
func countedConfig(s scaleSpec, c *byteCounter) *rest.Config {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return &rest.Config{
		// JSON unless scaleContentTypeEnv names another (protobuf, as
		// kube-controller-manager's clients use for built-in types).
		ContentConfig:   rest.ContentConfig{ContentType: os.Getenv(scaleContentTypeEnv)},
		Host:            s.Host,
		BearerToken:     s.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.CA, ServerName: s.ServerName},
		QPS:             -1,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countingConn{Conn: conn, n: &c.wire}, nil
		},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(req)
				if err == nil {
					resp.Body = countingBody{ReadCloser: resp.Body, n: &c.body}
				}
				return resp, err
			})
		},
	}
}

// peakLive samples the runtime's live heap (as found by the last
// collection) and keeps the largest since reset.
type peakLive struct {
	peak atomic.Uint64
	stop chan struct{}
	done sync.WaitGroup
}

func startPeakLive(every time.Duration) *peakLive {
	p := &peakLive{stop: make(chan struct{})}
	p.done.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			p.sample()
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	})
	return p
}

func (p *peakLive) sample() {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	v := s[0].Value.Uint64()
	for {
		old := p.peak.Load()
		if v <= old || p.peak.CompareAndSwap(old, v) {
			return
		}
	}
}

func (p *peakLive) reset() uint64 { p.sample(); return p.peak.Swap(0) }

func (p *peakLive) close() { close(p.stop); p.done.Wait() }

// readTimer times reads of one replica's cache, shard by shard, in a
// loop bounded in time.
type readTimer struct {
	stop chan struct{}
	done sync.WaitGroup
	// Written by the loop, read after done.
	reads  map[int]int
	misses map[int]int
	max    map[int]time.Duration
	hist   map[int]*[64]int // by bits.Len64 of the nanoseconds
}

// scaleReadLimit bounds a reader's loop: a phase that takes longer is
// reported with the reads of its first ten minutes.
const scaleReadLimit = 10 * time.Minute

// startReads starts reading keys, round and round, from the indexer: at
// most 2,000 keys of the shards held now, ten reads between pauses of a
// millisecond (about 10,000 reads a second, a small part of one core).
func startReads(r *sharding.Replica, shards int) *readTimer {
	rt := &readTimer{stop: make(chan struct{}), reads: map[int]int{}, misses: map[int]int{}, max: map[int]time.Duration{}, hist: map[int]*[64]int{}}
	held := r.Shards()
	indexer := r.Informer().GetIndexer()
	var keys []string
	var shardOf []int
	for _, key := range indexer.ListKeys() {
		s := scaleShardOfKey(key, shards)
		if slices.Contains(held, s) {
			keys = append(keys, key)
			shardOf = append(shardOf, s)
		}
	}
	if len(keys) > 2000 {
		step := len(keys) / 2000
		var k []string
		var so []int
		for i := 0; i < len(keys); i += step {
			k, so = append(k, keys[i]), append(so, shardOf[i])
		}
		keys, shardOf = k, so
	}
	rt.done.Go(func() {
		if len(keys) == 0 {
			return
		}
		deadline := time.Now().Add(scaleReadLimit)
		for i := 0; ; i++ {
			if i%10 == 0 {
				select {
				case <-rt.stop:
					return
				default:
				}
				if time.Now().After(deadline) {
					return
				}
				time.Sleep(time.Millisecond)
			}
			j := i % len(keys)
			start := time.Now()
			_, exists, _ := indexer.GetByKey(keys[j])
			took := time.Since(start)
			s := shardOf[j]
			rt.reads[s]++
			if !exists {
				rt.misses[s]++
			}
			rt.max[s] = max(rt.max[s], took)
			h := rt.hist[s]
			if h == nil {
				h = &[64]int{}
				rt.hist[s] = h
			}
			h[bits.Len64(uint64(took))]++
		}
	})
	return rt
}

// finish stops the loop and fills rep with the reads of the shards in
// still (those held at the start and at the end: they did not move).
func (rt *readTimer) finish(still []int, rep *scaleReport) {
	close(rt.stop)
	rt.done.Wait()
	var hist [64]int
	for s, n := range rt.reads {
		if !slices.Contains(still, s) {
			continue
		}
		rep.ReadsShards = append(rep.ReadsShards, s)
		rep.Reads += n
		rep.ReadMisses += rt.misses[s]
		rep.MaxRead = max(rep.MaxRead, rt.max[s])
		for b, c := range rt.hist[s] {
			hist[b] += c
		}
	}
	slices.Sort(rep.ReadsShards)
	seen, want := 0, rep.Reads-rep.Reads/1000
	for b, c := range hist {
		seen += c
		if c > 0 && seen >= want {
			rep.P999Read = time.Duration(uint64(1) << b)
			break
		}
	}
}

// scaleShardOfKey is the shard of a "namespace/name" key under
// sharding.FieldNamespace.
func scaleShardOfKey(key string, shards int) int {
	ns, _, _ := strings.Cut(key, "/")
	return sharding.ShardOf(sharding.Hash(ns), shards)
}

// scaleProfileEnv, set to a folder in the parent's environment, makes
// every scale child write its CPU profile there (child-<pid>.pprof), for
// `go tool pprof` of the replicas' side of a phase:
//
//	SHARDING_SCALE=1 INTEGRATION_SCALE_CPUPROFILE=/tmp/prof go test -race=false -run TestScaleShardedCache/filter=client -v .
const scaleProfileEnv = "INTEGRATION_SCALE_CPUPROFILE"

// scaleContentTypeEnv, set in the parent's environment, is the content
// type of every scale child's requests, e.g.
// application/vnd.kubernetes.protobuf; JSON if unset.
const scaleContentTypeEnv = "INTEGRATION_SCALE_CONTENT_TYPE"

// scaleKlogEnv, set to a folder in the parent's environment, makes every
// scale child write client-go's klog there (child-<pid>.log) at
// verbosity 4 (the Reflectors' lists, watches, bookmarks and restarts),
// instead of discarding it.
const scaleKlogEnv = "INTEGRATION_SCALE_KLOG"

// withCPUProfile runs child, profiling its CPU if scaleProfileEnv is set.
func withCPUProfile(child func() int) int {
	dir := os.Getenv(scaleProfileEnv)
	if dir == "" {
		return child()
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("child-%d.pprof", os.Getpid())))
	if err == nil && pprof.StartCPUProfile(f) == nil {
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	return child()
}

// scaleKlog sends klog to the file scaleKlogEnv asks for, or nowhere.
func scaleKlog() error {
	dir := os.Getenv(scaleKlogEnv)
	if dir == "" {
		quietKlog(io.Discard)
		return nil
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("child-%d.log", os.Getpid())))
	if err != nil {
		return err
	}
	quietKlog(f) // the file stays open until the child exits
	var v klog.Level
	return v.Set("4")
}

// probe adds keys to q every scaleProbeEvery until ctx ends.
func probe(ctx context.Context, q *workqueue.RateLimitingQueue[string], keys []string) {
	tick := time.NewTicker(scaleProbeEvery)
	defer tick.Stop()
	for {
		for _, k := range keys {
			q.Add(k)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// runScaleChild is TestMain for a scale child: it returns the exit code.
func runScaleChild(specJSON string) int {
	var spec scaleSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "integration: scale child: %v\n", err)
		return 2
	}
	if err := scaleKlog(); err != nil {
		fmt.Fprintf(os.Stderr, "integration: scale child: %v\n", err)
		return 2
	}
	baseline := liveHeap()
	var cacheBytes, leaseBytes byteCounter
	leaseClient, err := kubernetes.NewForConfig(countedConfig(spec, &leaseBytes))
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: scale child: %v\n", err)
		return 2
	}
	cacheClient, err := kubernetes.NewForConfig(countedConfig(spec, &cacheBytes))
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: scale child: %v\n", err)
		return 2
	}
	lw := cache.NewFilteredListWatchFromClient(cacheClient.CoreV1().RESTClient(), "configmaps", metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = spec.LabelSelector })
	q := workqueue.NewRateLimitingQueue(workqueue.NewItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Second))
	r, err := sharding.New(sharding.Config{
		Client:        leaseClient,
		Namespace:     spec.Namespace,
		Name:          spec.Ring,
		Identity:      spec.Identity,
		Object:        &corev1.ConfigMap{},
		ListerWatcher: lw,
		Queue:         q,
		Shards:        spec.Shards,
		Field:         sharding.FieldNamespace,
		SkipRelease:   spec.SkipRelease,
		// The default timing (LeaseDuration 15 s, RenewDeadline 10 s,
		// RetryPeriod 2 s, GracePeriod 5 s), as in production.
		HandoffTimeout: spec.HandoffTimeout,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: scale child: %v\n", err)
		return 2
	}
	store := r.Informer().GetStore()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runCtx, leave := context.WithCancel(ctx) // Run's: "leave" ends it first
	defer leave()
	runs := &scaleRuns{spans: map[int][]scaleSpan{}}
	var done sync.WaitGroup
	// A controller's work: read the object from the cache.
	done.Go(func() {
		_ = workqueue.Run(ctx, q, 2, r.Handler(func(ctx context.Context, key string) error {
			from := time.Now()
			_, _, err := store.GetByKey(key)
			runs.ran(scaleShardOfKey(key, spec.Shards), from, time.Now())
			return err
		}))
	})
	peak := startPeakLive(50 * time.Millisecond)
	defer peak.close()

	var reads *readTimer
	var started bool
	var runErr atomic.Pointer[error]
	ran := make(chan struct{}) // closed when Run has returned
	out := json.NewEncoder(os.Stdout)
	if err := out.Encode(scaleReport{Identity: spec.Identity, Baseline: baseline}); err != nil { // ready
		return 2
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		rep := scaleReport{Identity: spec.Identity, Baseline: baseline}
		switch in.Text() {
		case "run":
			if !started {
				started = true
				done.Go(func() {
					defer close(ran)
					if err := r.Run(runCtx); err != nil {
						runErr.Store(&err)
					}
				})
				done.Go(func() { probe(ctx, q, spec.Probes) })
			}
		case "leave":
			leave()
			if started {
				<-ran
			}
			rep.Shards = r.Shards()
			rep.Spans = runs.take()
		case "phase":
			cacheBytes.reset()
			leaseBytes.reset()
			peak.reset()
			runs.take()
			if spec.Reader && started {
				reads = startReads(r, spec.Shards)
			}
		case "status":
			rep.Filtering = r.Filtering().String()
			rep.Shards = r.Shards()
			rep.Ready = r.Ready(nil) == nil
			rep.PerShard = map[int]int{}
			for _, key := range store.ListKeys() {
				s := scaleShardOfKey(key, spec.Shards)
				rep.PerShard[s]++
				rep.Objects++
				if !slices.Contains(rep.Shards, s) {
					rep.Foreign++
				}
			}
			rep.CacheWire, rep.CacheBody = cacheBytes.wire.Load(), cacheBytes.body.Load()
			rep.LeaseWire, rep.LeaseBody = leaseBytes.wire.Load(), leaseBytes.body.Load()
		case "measure":
			rep.Shards = r.Shards()
			if reads != nil {
				reads.finish(rep.Shards, &rep)
				reads = nil
			}
			rep.PeakLive = peak.reset()
			rep.Heap = liveHeap()
			rep.Spans = runs.take()
		default:
			rep.Err = fmt.Sprintf("unknown command %q", in.Text())
		}
		if p := runErr.Load(); p != nil {
			rep.Err = fmt.Sprintf("sharding Run: %v", *p)
		}
		if err := out.Encode(rep); err != nil {
			break
		}
	}
	if reads != nil {
		reads.finish(nil, &scaleReport{})
	}
	cancel()
	done.Wait()
	if p := runErr.Load(); p != nil {
		fmt.Fprintf(os.Stderr, "integration: scale child %s: sharding Run: %v\n", spec.Identity, *p)
		return 1
	}
	return 0
}
