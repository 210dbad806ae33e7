package integration

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-coalesce/workqueue/sharding/fakeleases"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// TestLeaseUpdateConflict is why this module exists. Two clients read the
// same Lease, then race to write it back with the resourceVersion they read:
// the real API server (etcd's compare-and-swap underneath) lets exactly one
// through and answers the other 409 Conflict. client-go's fake clientset,
// given the same two writes, accepts both: it keeps resourceVersions but
// never compares them, so a test of Lease-based exclusion against it would
// pass with two holders of one Lease.
func TestLeaseUpdateConflict(t *testing.T) {
	t.Run("kube-apiserver", func(t *testing.T) {
		ctx := t.Context()
		// Two clientsets, two connections: two replicas of a controller.
		a, err := kubernetes.NewForConfig(server.restConfig())
		require.NoError(t, err)
		b, err := kubernetes.NewForConfig(server.restConfig())
		require.NoError(t, err)
		wins, conflicts := raceLeaseUpdates(t, ctx, a, b, "conflict-real")
		require.Equal(t, 1, wins, "exactly one of two writes with the same resourceVersion must succeed")
		require.Equal(t, 1, conflicts, "the other write must be refused with 409 Conflict")
	})
	t.Run("fake clientset", func(t *testing.T) {
		ctx := t.Context()
		c := fake.NewClientset()
		wins, conflicts := raceLeaseUpdates(t, ctx, c, c, "conflict-fake")
		require.Equal(t, 2, wins, "the fake clientset accepts both writes (if this fails, client-go's fake now checks resourceVersion)")
		require.Equal(t, 0, conflicts)
	})
}

// TestLeaseCases runs fakeleases.Cases, the table of Lease writes that
// fakeleases' own TestCases runs against its Store, against the real API
// server, checking each answer's HTTP status as the server sent it. The
// two runs together keep the fake answering every write a ring makes as
// the server does: create-on-update of a deleted Lease (201), and the 409
// of a write whose UID precondition names a Lease that is gone or was
// re-created, are the ones the fake once got wrong (issue #24).
func TestLeaseCases(t *testing.T) {
	admin, err := kubernetes.NewForConfig(server.restConfig())
	require.NoError(t, err)
	ns := createNamespace(t, admin, "lease-cases")
	var last atomic.Int32
	cfg := server.restConfig()
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && strings.Contains(req.URL.Path, "/leases") {
				last.Store(int32(resp.StatusCode))
			}
			return resp, err
		})
	}
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	fakeleases.CheckCases(t, client, ns, func() int { return int(last.Load()) })
}

// raceLeaseUpdates creates a Lease with a, reads it with a and with b, then
// writes it back from both at once, each claiming it for itself with the
// resourceVersion it read, and counts the successes and the conflicts. Any
// other error fails the test.
func raceLeaseUpdates(t *testing.T, ctx context.Context, a, b kubernetes.Interface, name string) (wins, conflicts int) {
	t.Helper()
	const ns = "default"
	_, err := a.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = a.CoordinationV1().Leases(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})

	clients := []kubernetes.Interface{a, b}
	read := make([]*coordinationv1.Lease, len(clients))
	for i, c := range clients {
		read[i], err = c.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
	}
	require.Equal(t, read[0].ResourceVersion, read[1].ResourceVersion, "both clients read the same version")

	errs := make([]error, len(clients))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			l := read[i].DeepCopy()
			holder := []string{"replica-a", "replica-b"}[i]
			now := metav1.NewMicroTime(time.Now())
			l.Spec.HolderIdentity = &holder
			l.Spec.AcquireTime = &now
			l.Spec.RenewTime = &now
			<-start
			_, errs[i] = c.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
		})
	}
	close(start)
	wg.Wait()

	for i, err := range errs {
		switch {
		case err == nil:
			wins++
		case apierrors.IsConflict(err):
			conflicts++
		default:
			t.Errorf("client %d: unexpected error: %v", i, err)
		}
	}
	return wins, conflicts
}
