package fakeleases_test

import (
	"context"
	"errors"
	"testing"

	"github.com/go-coalesce/workqueue/sharding/fakeleases"
	"go.uber.org/goleak"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestConflicts checks what the fake's own tracker does not: a write that
// carries a stale resourceVersion fails with a Conflict, so exactly one of
// two writers that read the same version wins.
func TestConflicts(t *testing.T) {
	ctx := context.Background()
	s := fakeleases.New()
	a := s.Clientset("a").CoordinationV1().Leases("ns")
	b := s.Clientset("b").CoordinationV1().Leases("ns")
	holder := "a"
	l, err := a.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{"ring": "r"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}, metav1.CreateOptions{})
	if err != nil || l.ResourceVersion == "" {
		t.Fatalf("create: %v, resourceVersion %q", err, l.ResourceVersion)
	}
	if _, err := b.Create(ctx, l, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) && !apierrors.IsBadRequest(err) {
		t.Errorf("second create: %v, want AlreadyExists", err)
	}

	// Both read version v; a writes first, b's write must fail.
	la, lb := l.DeepCopy(), l.DeepCopy()
	ha, hb := "a2", "b2"
	la.Spec.HolderIdentity, lb.Spec.HolderIdentity = &ha, &hb
	if _, err := a.Update(ctx, la, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("first update: %v", err)
	}
	if _, err := b.Update(ctx, lb, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("update with a stale resourceVersion: %v, want Conflict", err)
	}
	stale := l.ResourceVersion
	if err := b.Delete(ctx, "x", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &stale}}); !apierrors.IsConflict(err) {
		t.Errorf("delete with a stale precondition: %v, want Conflict", err)
	}
	cur, err := b.Get(ctx, "x", metav1.GetOptions{})
	if err != nil || *cur.Spec.HolderIdentity != "a2" {
		t.Fatalf("get: %v, %v", err, cur)
	}

	s.CutOff("b", true)
	if _, err := b.Update(ctx, cur, metav1.UpdateOptions{}); !errors.Is(err, fakeleases.ErrCutOff) {
		t.Errorf("update while cut off: %v, want ErrCutOff", err)
	}
	if _, err := b.Get(ctx, "x", metav1.GetOptions{}); err != nil {
		t.Errorf("reads go on while cut off: %v", err)
	}
	s.CutOff("b", false)

	list, err := a.List(ctx, metav1.ListOptions{LabelSelector: "ring=r"})
	if err != nil || len(list.Items) != 1 {
		t.Errorf("list by label: %v, %d items", err, len(list.Items))
	}
	if list, _ := a.List(ctx, metav1.ListOptions{LabelSelector: "ring=other"}); len(list.Items) != 0 {
		t.Errorf("list of another ring: %d items", len(list.Items))
	}
	rv := cur.ResourceVersion
	if err := b.Delete(ctx, "x", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}); err != nil {
		t.Errorf("delete with the current precondition: %v", err)
	}
	if got, want := s.Writes("a")+s.Writes("b"), s.TotalWrites(); got != want || want != 7 {
		t.Errorf("writes: a+b %d, total %d, want 7", got, want)
	}
}

// TestCases runs the table of writes that the integration module runs
// against a real kube-apiserver: the Store must answer each as the server
// does.
func TestCases(t *testing.T) {
	fakeleases.CheckCases(t, fakeleases.New().Clientset("writer"), "ns", nil)
}
