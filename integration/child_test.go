package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	workqueue "github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Replicas in one process share one heap, so the heap of one replica can
// only be measured in a process of its own. The proof re-executes this
// test binary as a child with childEnv set to a JSON childSpec: TestMain
// then starts no server, runs runChild instead of the tests, and exits.
// The child connects to the parent's API server with the parent's
// credentials, builds what its role says (one sharding replica, or one
// unsharded informer caching the whole data set), and answers on stdout
// each "measure" line it reads on stdin; it stops (a replica leaves
// gracefully) when stdin is closed.
const childEnv = "INTEGRATION_PROOF26_CHILD"

// childSpec is what a child is told by its parent.
type childSpec struct {
	Role       string // "replica" or "unsharded"
	Host       string
	Token      string
	CA         []byte
	ServerName string

	LabelSelector string // the data set's objects

	// For a replica: its ring.
	Namespace, Ring, Identity string
	Shards                    int
	LeaseDuration             time.Duration
	RenewDeadline             time.Duration
	RetryPeriod               time.Duration
	GracePeriod               time.Duration
	Share                     int // shards it holds at balance: it measures once it holds that many
}

// childReport is a child's answer to "measure": what it caches and its
// heap, after two garbage collections.
type childReport struct {
	Identity  string
	Filtering string // the replica's Filtering(); "" for the unsharded informer
	Shards    []int
	Objects   int    // objects in its cache
	Heap      uint64 // live heap now (HeapAlloc after GC)
	Baseline  uint64 // live heap before it built anything: the test binary's own
	Err       string
}

// childConfig returns the parent's client configuration for a child.
func childConfig(s childSpec) *rest.Config {
	return &rest.Config{
		Host:            s.Host,
		BearerToken:     s.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.CA, ServerName: s.ServerName},
		QPS:             -1,
	}
}

// runChild is TestMain for a child: it returns the exit code.
func runChild(specJSON string) int {
	var spec childSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "integration: child: %v\n", err)
		return 2
	}
	quietKlog(io.Discard)
	baseline := liveHeap()
	client, err := kubernetes.NewForConfig(childConfig(spec))
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: child: %v\n", err)
		return 2
	}
	lw := cache.NewFilteredListWatchFromClient(client.CoreV1().RESTClient(), "configmaps", metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = spec.LabelSelector })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done sync.WaitGroup
	var measure func() childReport
	switch spec.Role {
	case "unsharded":
		inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
		done.Go(func() { inf.Run(ctx.Done()) })
		measure = func() childReport {
			cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
			waitStable(func() int { return len(inf.GetStore().ListKeys()) })
			return childReport{Identity: "unsharded", Objects: len(inf.GetStore().ListKeys())}
		}
	case "replica":
		q := workqueue.NewRateLimitingQueue(workqueue.NewItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Second))
		r, err := sharding.New(sharding.Config{
			Client:        client,
			Namespace:     spec.Namespace,
			Name:          spec.Ring,
			Identity:      spec.Identity,
			Object:        &corev1.ConfigMap{},
			ListerWatcher: lw,
			Queue:         q,
			Shards:        spec.Shards,
			Field:         sharding.FieldNamespace,
			LeaseDuration: spec.LeaseDuration,
			RenewDeadline: spec.RenewDeadline,
			RetryPeriod:   spec.RetryPeriod,
			GracePeriod:   spec.GracePeriod,
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "integration: child: %v\n", err)
			return 2
		}
		store := r.Informer().GetStore()
		done.Go(func() { _ = r.Run(ctx) })
		// A controller's work: read the object from the cache.
		done.Go(func() {
			_ = workqueue.Run(ctx, q, 2, r.Handler(func(ctx context.Context, key string) error {
				_, _, err := store.GetByKey(key)
				return err
			}))
		})
		measure = func() childReport {
			for len(r.Shards()) != spec.Share || !allOwned(r, store) {
				time.Sleep(50 * time.Millisecond)
			}
			waitStable(func() int { return len(store.ListKeys()) })
			return childReport{Identity: spec.Identity, Filtering: r.Filtering().String(), Shards: r.Shards(), Objects: len(store.ListKeys())}
		}
	default:
		fmt.Fprintf(os.Stderr, "integration: child: unknown role %q\n", spec.Role)
		return 2
	}
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if in.Text() != "measure" {
			continue
		}
		rep := measure()
		rep.Baseline = baseline
		rep.Heap = liveHeap()
		if err := out.Encode(rep); err != nil {
			break
		}
	}
	cancel()
	done.Wait()
	return 0
}

// allOwned reports whether the replica owns every key in its cache: true
// once every shard it holds has synced.
func allOwned(r *sharding.Replica, store cache.Store) bool {
	for _, key := range store.ListKeys() {
		if !r.Owns(key) {
			return false
		}
	}
	return true
}

// waitStable waits until count gives the same answer twice, a second apart.
func waitStable(count func() int) {
	last := count()
	for {
		time.Sleep(time.Second)
		n := count()
		if n == last {
			return
		}
		last = n
	}
}

// liveHeap returns the heap in use after two garbage collections (the
// second frees what the first's finalizers released).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// child is a running child process, seen from its parent.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *json.Decoder
	stderr strings.Builder
}

// startChild re-executes the test binary as a child with spec.
func startChild(t *testing.T, spec childSpec) *child {
	t.Helper()
	cfg := server.restConfig()
	spec.Host, spec.Token, spec.CA, spec.ServerName = cfg.Host, cfg.BearerToken, cfg.CAData, cfg.ServerName
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: exec.Command(os.Args[0])}
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	c.cmd.Stderr = &c.stderr
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.out = json.NewDecoder(stdout)
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop(t) })
	return c
}

// measure asks the child to measure and returns its report. The child
// answers once it holds its share and has synced it; the caller bounds
// the wait with its own deadline by killing the child.
func (c *child) measure() (childReport, error) {
	var rep childReport
	if _, err := io.WriteString(c.stdin, "measure\n"); err != nil {
		return rep, err
	}
	err := c.out.Decode(&rep)
	return rep, err
}

// stop closes the child's stdin (a replica leaves gracefully) and waits
// for it to exit, killing it after a while.
func (c *child) stop(t *testing.T) {
	if c.cmd.ProcessState != nil {
		return
	}
	c.stdin.Close()
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("child %v: %v\n%s", c.cmd.Env[len(c.cmd.Env)-1][:60], err, c.stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-exited
		t.Errorf("child did not stop within 30s; killed\n%s", c.stderr.String())
	}
}
