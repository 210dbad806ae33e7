package integration

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-coalesce/workqueue/sharding"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
)

// The proof's data set: the proof is of 20,000 ConfigMaps of about 1 KiB
// under 64 shards; that is the measurement, run with
// SHARDING_SCALE=1 (or -proof.objects=20000). CI runs 2,000, the same
// scenarios and checks on a tenth of the objects, to fit its time budget
// on two shared cores under -race: 30 to 32 objects in every shard, still
// four pages of 500 in every list of the whole set (the client-filtered
// fallback's), and the size at which the proof caught a replica admitting
// a gained shard before its cache had it.
var proofObjects = flag.Int("proof.objects", 0, "ConfigMaps in the data set of the sharded-cache proof (0: 2000, or 20000, the measurement, with SHARDING_SCALE=1)")

// proofSize returns the number of objects of the proof's data set.
func proofSize() int {
	switch {
	case *proofObjects > 0:
		return *proofObjects
	case os.Getenv("SHARDING_SCALE") != "":
		return 20000
	}
	return 2000
}

const (
	proofShards = 64
	// proofNamespacesPerShard namespaces hash into each shard (see
	// newDataset), so every shard holds the same number of objects.
	proofNamespacesPerShard = 2
	proofPadding            = 1000          // bytes of data per ConfigMap besides its value
	proofLabel              = "proof26-set" // every object of the data set carries it
	loadWorkers             = 32            // parallel creates while loading
)

// dataset is the ConfigMaps of the proof, spread over namespaces that hash
// (sharding.FieldNamespace) into the proof's shards evenly, and labelled
// so that a cluster-wide list or watch selects them and nothing else.
//
// The namespaces are chosen, not random: with 64 shards, namespaces named
// at random would leave some shards with three times the objects of
// others, and the proof's bound (each replica caches at most 1.25 × O/N
// objects at balance) would measure the hash's luck rather than the
// cache. Choosing names that fill every shard equally makes the bound a
// check of the cache alone: any excess is objects a replica should not
// hold.
type dataset struct {
	label      string   // value of proofLabel on every object
	namespaces []string // proofNamespacesPerShard per shard, shard by shard
	// objectNS, if not nil, is the namespace of each object, for a data
	// set laid out otherwise than one object per namespace in turn.
	objectNS  []string
	objects   int
	load      time.Duration // how long the creates took
	shardOfNS map[string]int
}

// shared is the one data set of the test binary: loading it is the
// costliest step of the proof, and the scenarios change the objects only
// through updates, so every test that needs it shares it.
var shared struct {
	once sync.Once
	ds   *dataset
	err  error
}

// proofDataset returns the binary's data set, loading it on first use.
func proofDataset(t *testing.T) *dataset {
	t.Helper()
	shared.once.Do(func() { shared.ds, shared.err = newDataset(proofSize()) })
	require.NoError(t, shared.err, "loading the data set")
	return shared.ds
}

// key returns the key of object i.
func (d *dataset) key(i int) string {
	if d.objectNS != nil {
		return d.objectNS[i] + "/" + fmt.Sprintf("obj-%d", i)
	}
	return d.namespaces[i%len(d.namespaces)] + "/" + fmt.Sprintf("obj-%d", i)
}

// shardOfKey returns the shard of a key of the data set.
func (d *dataset) shardOfKey(key string) int {
	ns, _, _ := strings.Cut(key, "/")
	return d.shardOfNS[ns]
}

// proofLoadAPI makes the data set go through the API server's creates
// instead of etcd directly: the honest path, and slow.
var proofLoadAPI = flag.Bool("proof.loadapi", false, "create the proof's data set through the API server rather than in etcd")

// newDataset creates the namespaces and n ConfigMaps, object i in
// namespace i mod len(namespaces), with loadWorkers creates in flight.
func newDataset(n int) (*dataset, error) {
	cfg := server.restConfig()
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit: the server is the bound
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	d := &dataset{label: fmt.Sprintf("p%d", time.Now().UnixNano()), objects: n, shardOfNS: map[string]int{}}
	perShard := make([][]string, proofShards)
	for k, found := 0, 0; found < proofShards*proofNamespacesPerShard; k++ {
		name := fmt.Sprintf("%s-ns-%d", d.label, k)
		s := sharding.ShardOf(sharding.Hash(name), proofShards)
		if len(perShard[s]) < proofNamespacesPerShard {
			perShard[s] = append(perShard[s], name)
			found++
		}
	}
	for s, names := range perShard {
		for _, name := range names {
			if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				return nil, err
			}
			d.namespaces = append(d.namespaces, name)
			d.shardOfNS[name] = s
		}
	}
	pad := strings.Repeat("x", proofPadding)
	start := time.Now()
	if *proofLoadAPI {
		err = d.createThroughAPI(ctx, admin, pad)
	} else {
		err = d.putInEtcd(ctx, admin, pad)
	}
	if err != nil {
		return nil, err
	}
	d.load = time.Since(start)
	return d, nil
}

// selector is the label selector of the data set's objects.
func (d *dataset) selector() string { return proofLabel + "=" + d.label }

// TestDatasetLoad loads the data set and checks that it is what the proof
// says: n objects, every shard the same number (within one), all listed by
// the data set's label. It reports how long the load took.
func TestDatasetLoad(t *testing.T) {
	d := proofDataset(t)
	admin, err := kubernetes.NewForConfig(server.restConfig())
	require.NoError(t, err)
	list, err := admin.CoreV1().ConfigMaps("").List(t.Context(), metav1.ListOptions{LabelSelector: d.selector(), ResourceVersion: "0"})
	require.NoError(t, err)
	require.Len(t, list.Items, d.objects)
	perShard := make([]int, proofShards)
	for _, cm := range list.Items {
		perShard[sharding.ShardOf(sharding.Hash(cm.Namespace), proofShards)]++
	}
	lo, hi := d.objects, 0
	for _, c := range perShard {
		lo, hi = min(lo, c), max(hi, c)
	}
	require.LessOrEqual(t, hi-lo, proofNamespacesPerShard, "objects per shard, from %d to %d", lo, hi)
	how := "written to etcd, 100 per transaction, until the API server lists them all"
	if *proofLoadAPI {
		how = fmt.Sprintf("created through the API server, %d in flight", loadWorkers)
	}
	t.Logf("FIGURES loaded %d ConfigMaps of %d B of data in %d namespaces, %s: %v (%.0f/s); %d-%d per shard",
		d.objects, proofPadding+2, len(d.namespaces), how, d.load.Round(time.Millisecond), float64(d.objects)/d.load.Seconds(), lo, hi)
}

// perShard returns how many objects of the data set each shard holds.
func (d *dataset) perShard() []int {
	counts := make([]int, proofShards)
	for i := range d.objects {
		counts[d.shardOfKey(d.key(i))]++
	}
	return counts
}

// object returns object i of the data set, as created.
func (d *dataset) object(i int, pad string) *corev1.ConfigMap {
	ns, name, _ := strings.Cut(d.key(i), "/")
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{proofLabel: d.label}},
		Data:       map[string]string{"value": "v0", "pad": pad},
	}
}

// createThroughAPI creates the objects through the API server, loadWorkers
// creates in flight. On the shared 2-core machines of this project under
// -race it made 47-80 objects a second (about 8 ms of CPU each, nearly all
// the API server's): 20,000 took 4 to 7 minutes, more than the proof's
// whole CI budget.
func (d *dataset) createThroughAPI(ctx context.Context, admin kubernetes.Interface, pad string) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, loadWorkers)
	for range loadWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= d.objects {
					return
				}
				cm := d.object(i, pad)
				if _, err := admin.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("creating %s/%s: %w", cm.Namespace, cm.Name, err)
					next.Store(int64(d.objects)) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// putInEtcd writes the objects into etcd directly, as the API server
// stores them (JSON, which its storage decoder reads as well as the
// protobuf it writes itself, under /registry/configmaps/<ns>/<name>, with a
// UID and a creation time, without resourceVersion, which the server takes
// from etcd), 100 to a transaction (etcd allows 128), and waits until the
// API server lists them all. The API server's watch cache receives them
// through its watch of etcd, as it receives any write; what this skips is
// only the API server's create path (admission, validation, defaulting),
// which a ConfigMap with data and labels passes unchanged.
func (d *dataset) putInEtcd(ctx context.Context, admin kubernetes.Interface, pad string) error {
	etcd := v3client.New(server.etcd.Server)
	defer etcd.Close()
	now := metav1.Now()
	const perTxn = 100
	for from := 0; from < d.objects; from += perTxn {
		var ops []clientv3.Op
		for i := from; i < min(from+perTxn, d.objects); i++ {
			cm := d.object(i, pad)
			cm.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
			cm.UID = uuid.NewUUID()
			cm.CreationTimestamp = now
			b, err := json.Marshal(cm)
			if err != nil {
				return err
			}
			ops = append(ops, clientv3.OpPut("/registry/configmaps/"+cm.Namespace+"/"+cm.Name, string(b)))
		}
		if _, err := etcd.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
	}
	// A consistent list is served once the watch cache has caught up with
	// etcd's revision, so this sees every object written above.
	for {
		list, err := admin.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{LabelSelector: d.selector()})
		if err != nil {
			return err
		}
		if len(list.Items) == d.objects {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}
