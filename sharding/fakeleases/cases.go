package fakeleases

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// This file is the contract between the Store and the API server: one
// table of Lease writes, each on a Lease in a given state, with the answer
// the API server gives. The Store's own test runs it against the Store, and
// the integration module runs the same table against a real kube-apiserver
// and etcd, so a difference between the two fails a test on one side or
// the other instead of hiding a bug (as create-on-update once did: the
// Store answered NotFound to an update of a deleted Lease, which the
// server re-creates).

// State is the history of a Lease when a Case's write is made.
type State int

const (
	// Missing: the Lease was never created.
	Missing State = iota
	// Present: created, unchanged since.
	Present
	// Updated: created, then updated once; the first version is stale.
	Updated
	// Deleted: created, then deleted.
	Deleted
	// Recreated: created, deleted, and created again; the first version's
	// UID names an object that no longer exists.
	Recreated
)

var stateNames = []string{"missing", "present", "updated", "deleted", "recreated"}

func (s State) String() string { return stateNames[s] }

// Version says which version of the Lease a precondition of a write names.
type Version int

const (
	// None: the write has no such precondition.
	None Version = iota
	// First: the version created first, the one a writer that read the
	// Lease before its later changes holds.
	First
	// Current: the version the Lease has now.
	Current
)

func (v Version) String() string { return []string{"none", "first", "current"}[v] }

// Case is one Lease write on a Lease in a given state and the answer of
// the API server.
type Case struct {
	Name  string
	State State
	// Verb is "create", "update" or "delete".
	Verb string
	// RV and UID are the preconditions the write carries: on an update,
	// the object's metadata.resourceVersion and metadata.uid; on a
	// delete, DeleteOptions.Preconditions. A create carries neither.
	RV, UID Version
	// Code is the HTTP status of the answer: 200 for an update or delete
	// of the existing object, 201 for a write that created a new object
	// (a new UID), 404, 409 or 422 for a refusal, with Reason.
	Code   int
	Reason metav1.StatusReason
}

// Cases covers every kind of write a sharding ring makes (a join's
// create, conditional updates of membership and shard Leases, conditional
// deletes) on a Lease in each state it can be found in, and the unsafe
// forms a ring must not use (an update without a UID re-creates a deleted
// Lease).
var Cases = []Case{
	{Name: "create a new Lease", State: Missing, Verb: "create", Code: http.StatusCreated},
	{Name: "create an existing Lease", State: Present, Verb: "create", Code: http.StatusConflict, Reason: metav1.StatusReasonAlreadyExists},
	{Name: "create a deleted Lease again", State: Deleted, Verb: "create", Code: http.StatusCreated},

	{Name: "update at the current resourceVersion", State: Present, Verb: "update", RV: Current, Code: http.StatusOK},
	{Name: "update at the current resourceVersion and UID", State: Present, Verb: "update", RV: Current, UID: Current, Code: http.StatusOK},
	{Name: "update without a resourceVersion", State: Present, Verb: "update", Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid},
	{Name: "update at a stale resourceVersion", State: Updated, Verb: "update", RV: First, Code: http.StatusConflict, Reason: metav1.StatusReasonConflict},
	{Name: "update at a stale resourceVersion and the current UID", State: Updated, Verb: "update", RV: First, UID: First, Code: http.StatusConflict, Reason: metav1.StatusReasonConflict},
	{Name: "update of a deleted Lease without a UID creates it again", State: Deleted, Verb: "update", RV: First, Code: http.StatusCreated},
	{Name: "update of a deleted Lease with its UID", State: Deleted, Verb: "update", RV: First, UID: First, Code: http.StatusConflict, Reason: metav1.StatusReasonConflict},
	{Name: "update of a re-created Lease with the old UID", State: Recreated, Verb: "update", RV: First, UID: First, Code: http.StatusConflict, Reason: metav1.StatusReasonConflict},
	{Name: "update of a re-created Lease with the old UID and the current resourceVersion", State: Recreated, Verb: "update", RV: Current, UID: First, Code: http.StatusConflict, Reason: metav1.StatusReasonConflict},
	{Name: "update of a missing Lease without a resourceVersion creates it", State: Missing, Verb: "update", Code: http.StatusCreated},

	{Name: "delete without preconditions", State: Present, Verb: "delete", Code: http.StatusOK},
	{Name: "delete at the current resourceVersion and UID", State: Present, Verb: "delete", RV: Current, UID: Current, Code: http.StatusOK},
	{Name: "delete at a stale resourceVersion", State: Updated, Verb: "delete", RV: First, UID: First, Code: http.StatusConflict, Reason: metav1.StatusReasonConflict},
	{Name: "delete of a re-created Lease with the old UID", State: Recreated, Verb: "delete", RV: Current, UID: First, Code: http.StatusConflict, Reason: metav1.StatusReasonConflict},
	{Name: "delete of a deleted Lease", State: Deleted, Verb: "delete", RV: First, UID: First, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound},
	{Name: "delete of a missing Lease", State: Missing, Verb: "delete", Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound},
}

// CheckCases runs every case of Cases as a subtest of t against client,
// each on a Lease of its own in namespace. status, if not nil, returns the
// HTTP status code of the last Lease request client made; it is checked
// against the case's Code too (the fake clientset has no HTTP status, so
// there a success is told 200 from 201 by whether the answer is a new
// object, which the real server's cases check both ways).
func CheckCases(t *testing.T, client kubernetes.Interface, namespace string, status func() int) {
	for i, c := range Cases {
		t.Run(c.Name, func(t *testing.T) {
			name := fmt.Sprintf("case-%d-%d", i, time.Now().UnixNano())
			leases := client.CoordinationV1().Leases(namespace)
			if err := c.check(t.Context(), leases, name, status); err != nil {
				t.Errorf("%s %s (state %v, resourceVersion %v, UID %v): %v", c.Verb, name, c.State, c.RV, c.UID, err)
			}
			_ = leases.Delete(context.WithoutCancel(t.Context()), name, metav1.DeleteOptions{})
		})
	}
}

type leaseClient interface {
	Create(context.Context, *coordinationv1.Lease, metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(context.Context, *coordinationv1.Lease, metav1.UpdateOptions) (*coordinationv1.Lease, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
	Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error)
}

// check brings the Lease called name to c.State, makes c's write and
// compares the answer with c's, then checks that a refused write left the
// Lease as it was.
func (c Case) check(ctx context.Context, leases leaseClient, name string, status func() int) error {
	newLease := func(holder string) *coordinationv1.Lease {
		secs := int32(15)
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs},
		}
	}
	// first is the version a writer read first; cur the one stored now
	// (nil when there is none); uids every object the name has had.
	var first, cur *coordinationv1.Lease
	var uids []types.UID
	var err error
	if c.State != Missing {
		if first, err = leases.Create(ctx, newLease("first"), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("setting up: create: %w", err)
		}
		cur = first
		uids = append(uids, first.UID)
	}
	switch c.State {
	case Updated:
		l := first.DeepCopy()
		l.Spec.HolderIdentity = ptr("second")
		if cur, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("setting up: update: %w", err)
		}
	case Deleted, Recreated:
		if err = leases.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("setting up: delete: %w", err)
		}
		cur = nil
		if c.State == Recreated {
			if cur, err = leases.Create(ctx, newLease("again"), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("setting up: create again: %w", err)
			}
			uids = append(uids, cur.UID)
		}
	}
	pick := func(v Version) *coordinationv1.Lease {
		switch v {
		case First:
			return first
		case Current:
			return cur
		}
		return nil
	}
	rv, uid := pick(c.RV), pick(c.UID)

	var out *coordinationv1.Lease
	switch c.Verb {
	case "create":
		out, err = leases.Create(ctx, newLease("writer"), metav1.CreateOptions{})
	case "update":
		l := newLease("writer")
		if rv != nil {
			l.ResourceVersion = rv.ResourceVersion
		}
		if uid != nil {
			l.UID = uid.UID
		}
		out, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	case "delete":
		var p *metav1.Preconditions
		if rv != nil || uid != nil {
			p = &metav1.Preconditions{}
			if rv != nil {
				p.ResourceVersion = &rv.ResourceVersion
			}
			if uid != nil {
				p.UID = &uid.UID
			}
		}
		err = leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: p})
	default:
		return fmt.Errorf("fakeleases: unknown verb %q", c.Verb)
	}

	var code int
	var reason metav1.StatusReason
	switch {
	case err != nil:
		s, ok := err.(apierrors.APIStatus)
		if !ok {
			return fmt.Errorf("answered %v, not an API status", err)
		}
		code, reason = int(s.Status().Code), s.Status().Reason
	case out == nil: // a delete: nothing to tell a new object by
		code = http.StatusOK
	case cur != nil && out.UID == cur.UID:
		code = http.StatusOK
	case out.UID != "" && !slices.Contains(uids, out.UID):
		code = http.StatusCreated
	default:
		return fmt.Errorf("answered an object with UID %q, neither the current one nor a new one", out.UID)
	}
	if code != c.Code || reason != c.Reason {
		return fmt.Errorf("answered %d %q (%v), want %d %q", code, reason, err, c.Code, c.Reason)
	}
	if status != nil {
		if got := status(); got != code {
			return fmt.Errorf("answered with HTTP status %d, the answer says %d", got, code)
		}
	}
	if err == nil {
		return nil
	}
	// A refused write changes nothing.
	now, gerr := leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case cur == nil && !apierrors.IsNotFound(gerr):
		return fmt.Errorf("the refused write left a Lease behind (%v)", gerr)
	case cur != nil && (gerr != nil || now.UID != cur.UID || now.ResourceVersion != cur.ResourceVersion):
		return fmt.Errorf("the refused write changed the Lease (%v)", gerr)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
