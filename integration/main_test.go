package integration

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

// serverLogs streams the API server's and etcd's logs to stderr. They are
// discarded by default: a healthy server prints thousands of lines that
// drown the test's own output.
var serverLogs = flag.Bool("serverlogs", false, "stream kube-apiserver and etcd logs to stderr")

// server is the one etcd and kube-apiserver pair of this test binary,
// started by TestMain before any test and stopped after the last one.
// Starting it takes seconds (2 s idle, 7.5 s measured on a loaded machine)
// and close to 1 GB under -race, so tests share it; each test works in a
// namespace or on objects of its own.
var server *testServer

// TestMain starts etcd and the API server once, runs the tests, stops both
// and then checks for leaked goroutines: the servers' own goroutines must be
// gone too, since each one is stopped and waited for (see testServer.stop).
//
// The only goroutines allowed to outlive the tests are those that exist
// before the servers start (goleak.IgnoreCurrent, taken by ID at that
// moment): the testing package's, klog's flush daemon (started by klog's
// init), and the API server's "log" health check, started here on purpose:
// the first /healthz starts it with wait.Forever, it lives as long as the
// process and nothing can stop it. Starting it first lets goleak ignore that
// one goroutine by ID instead of by a function name that informers share.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec)) // a replica of the heap measurement: no server, no tests
	}
	if spec := os.Getenv(scaleChildEnv); spec != "" {
		os.Exit(withCPUProfile(func() int { return runScaleChild(spec) })) // a replica of TestScaleShardedCache (scalechild_test.go)
	}
	_ = healthz.LogHealthz.Check(nil)
	before := goleak.IgnoreCurrent()
	goleak.VerifyTestMain(withServer{m, before}, before)
}

// withServer wraps testing.M so that goleak.VerifyTestMain checks for leaks
// after the servers are stopped, not while they still run.
type withServer struct {
	m      *testing.M
	before goleak.Option // the goroutines that may outlive the tests
}

// Run starts the servers, runs the tests, stops the servers and waits for
// their last timers; it returns the tests' exit code, or 1 if the servers
// could not start or stop cleanly.
func (w withServer) Run() int {
	flag.Parse()
	if *serverLogs {
		quietKlog(io.MultiWriter(os.Stderr, klogLines))
	} else {
		quietKlog(klogLines) // kept only while TestRBAC captures
	}
	s, err := startTestServer()
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: cannot start etcd and kube-apiserver: %v\n", err)
		return 1
	}
	server = s
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "integration: etcd and kube-apiserver on 127.0.0.1, healthy in %v\n", s.started.Round(time.Millisecond))
	}
	code := w.m.Run()
	if err := s.stop(); err != nil {
		fmt.Fprintf(os.Stderr, "integration: stopping etcd and kube-apiserver: %v\n", err)
		code = 1
	}
	waitForServerTimers(w.before)
	if code != 0 && !*serverLogs {
		fmt.Fprintf(os.Stderr, "integration: the API server's test log (rerun with -serverlogs for everything):\n%s", s.tb.log.String())
	}
	return code
}

// waitForServerTimers waits, at most a few seconds, until no goroutine is
// left but those present before the servers started, so that goleak (which
// retries for under two seconds) sees the end state.
//
// The API server leaves goroutines that end on their own but that nothing
// can stop: for a read at a resourceVersion its watch cache has not reached
// yet, it starts one that waits for time.After(blockTimeout), 3 s in
// k8s.io/apiserver v0.37 (cacher/watch_cache.go, waitUntilFreshLocked), and
// it does not stop it when the read is answered sooner. Waiting for them is
// exact; ignoring their function would also hide a real leak of that kind.
func waitForServerTimers(before goleak.Option) {
	deadline := time.Now().Add(5 * time.Second)
	for goleak.Find(before) != nil && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
}

// quietKlog sends klog's output to w only. Not logging to stderr is not
// enough: klog still copies errors there unless the threshold says
// otherwise, and the API server logs a few harmless errors at start.
func quietKlog(w io.Writer) {
	fs := flag.NewFlagSet("klog", flag.PanicOnError)
	klog.InitFlags(fs)
	for name, value := range map[string]string{
		"logtostderr":                      "false",
		"alsologtostderr":                  "false",
		"legacy_stderr_threshold_behavior": "false",
		"stderrthreshold":                  "FATAL",
		"one_output":                       "true",
	} {
		if err := fs.Set(name, value); err != nil {
			panic(fmt.Sprintf("integration: klog flag %s: %v", name, err))
		}
	}
	klog.SetOutput(w)
}

// testServer is an etcd embedded in the test process, listening on
// 127.0.0.1, and a kube-apiserver (k8s.io/kubernetes's own test server, the
// real binary's code) that stores in it.
type testServer struct {
	etcd     *embed.Etcd
	etcdDir  string
	api      kubeapiservertesting.TestServer
	tb       *mainTB
	config   *rest.Config
	started  time.Duration // from the start of etcd to the API server's healthy /healthz
	stopOnce sync.Once
}

// restConfig returns a copy of the API server's client configuration
// (loopback, admin rights), for the caller to change at will.
func (s *testServer) restConfig() *rest.Config { return rest.CopyConfig(s.config) }

// startTestServer starts etcd, then the API server on it, and returns once
// the API server answers /healthz and has created the default namespace.
func startTestServer() (_ *testServer, err error) {
	t0 := time.Now()
	s := &testServer{tb: &mainTB{}}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fatal); !ok {
				panic(r)
			}
			err = fmt.Errorf("kube-apiserver: %s", s.tb.log.String())
		}
		if err != nil {
			_ = s.stop()
		}
	}()
	if s.etcdDir, err = os.MkdirTemp("", "integration-etcd"); err != nil {
		return nil, err
	}
	s.etcd, err = startEtcd(s.etcdDir)
	if err != nil {
		return nil, err
	}
	etcdURL := "http://" + s.etcd.Clients[0].Addr().String()

	storage := storagebackend.NewDefaultConfig("/registry", nil)
	storage.Transport.ServerList = []string{etcdURL}
	s.api, err = kubeapiservertesting.StartTestServer(s.tb,
		&kubeapiservertesting.TestServerInstanceOptions{
			// The invariant checks scrape the server's metrics at
			// teardown; they test the API server, not us.
			DisableInvariantChecks: true,
		},
		[]string{
			// These tests need no admission or flow control, and
			// both cost CPU on small machines.
			"--enable-priority-and-fairness=false",
			// RBAC, as a cluster enforces it: TestRBAC runs replicas
			// as a ServiceAccount bound to the examples' Roles. The
			// tests' own client is the loopback one (system:masters),
			// which RBAC allows everything. The ServiceAccount
			// tokens' issuer and key are the test server's own.
			"--authorization-mode=RBAC",
			// KEP-5866's shard selectors, alpha and off by default
			// in v1.37: the sharded cache lists and watches its
			// shards' ranges only where the server honours them.
			// Tests of the fallback switch the gate off for their
			// duration (withoutShardedListAndWatch), which the
			// server checks on every request.
			"--feature-gates=ShardedListAndWatch=true",
			"--disable-admission-plugins=ServiceAccount,Priority,DefaultTolerationSeconds,DefaultStorageClass,StorageObjectInUseProtection,PersistentVolumeClaimResize,RuntimeClass,CertificateApproval,CertificateSigning,ClusterTrustBundleAttest,CertificateSubjectRestriction,DefaultIngressClass,MutatingAdmissionPolicy,MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook,ResourceQuota",
		},
		storage)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver: %w", err)
	}
	s.config = rest.CopyConfig(s.api.ClientConfig)
	s.started = time.Since(t0)
	return s, nil
}

// startEtcd starts a one-member etcd in dir whose client and peer listeners
// take free ports on 127.0.0.1 (port 0, so no two test binaries collide),
// and waits until it serves.
func startEtcd(dir string) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "integration"
	cfg.Dir = dir
	local := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls = []url.URL{local}
	cfg.AdvertiseClientUrls = []url.URL{local}
	cfg.ListenPeerUrls = []url.URL{local}
	cfg.AdvertisePeerUrls = []url.URL{local}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ListenMetricsUrls = nil
	if *serverLogs {
		cfg.LogLevel = "info"
	} else {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd: %w", err)
	case <-time.After(time.Minute):
		e.Close()
		return nil, errors.New("etcd: not ready after a minute")
	}
}

// stop stops the API server (which waits for its goroutines and closes its
// etcd clients), then etcd, and removes their directories. It may be called
// more than once.
func (s *testServer) stop() error {
	var err error
	s.stopOnce.Do(func() {
		if s.api.TearDownFn != nil {
			s.api.TearDownFn()
		}
		s.tb.cleanup()
		if s.etcd != nil {
			s.etcd.Close()
		}
		if s.etcdDir != "" {
			err = os.RemoveAll(s.etcdDir)
		}
		if s.tb.Failed() {
			err = errors.Join(err, errors.New("the API server reported errors"))
		}
	})
	return err
}
