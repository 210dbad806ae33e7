// Package fakeleases is an in-memory store of coordination.k8s.io/v1
// Leases behind client-go's fake clientset that, unlike the fake's object
// tracker, answers Lease writes as the API server does: an Update or
// Delete that carries a stale resourceVersion, or a UID that is not the
// Lease's (it was deleted, or deleted and created again), fails with a
// Conflict, so two replicas cannot both win one Lease; an Update of a
// Lease that does not exist creates it, unless it carries a UID. Cases is
// the table of writes that pins this, run against the Store and against a
// real API server. The Store also counts writes and can cut a replica off
// (its writes fail), for tests and examples of the sharding package. It
// serves WATCH as the API server does (watch.go): events in
// resourceVersion order from any resourceVersion it still has, 410 Gone
// from one it has not, bookmarks and timeouts; and it counts requests by
// verb.
package fakeleases

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// ErrCutOff is the error of a write by a replica that is cut off.
var ErrCutOff = errors.New("fakeleases: cut off from the API server")

// ErrResponseLost is the error of a request by a replica whose responses
// are lost (see LoseResponses): the store served the request, and a write
// may have taken effect, but the caller cannot know it.
var ErrResponseLost = errors.New("fakeleases: response lost")

// Loss says which responses of a replica are lost; see LoseResponses.
type Loss int

const (
	// LoseNone answers every request.
	LoseNone Loss = iota
	// LoseApplied loses the response of every write that took effect;
	// writes that fail (a Conflict, a NotFound) and reads are answered.
	// This is a server that applies writes but answers them after the
	// client has given up, while it answers failures and reads at once.
	LoseApplied
	// LoseAll loses every response, reads and failed writes included.
	LoseAll
)

var leaseResource = coordinationv1.Resource("leases")

// Store holds Leases for any number of clientsets. The zero Store is not
// usable; make one with New. It is safe for concurrent use.
type Store struct {
	mu      sync.Mutex // protects the fields below
	rv      int64
	leases  map[types.NamespacedName]*coordinationv1.Lease
	writes  map[string]int64 // by identity, every write request
	cut     map[string]bool
	lossy   map[string]Loss // LoseResponses
	onWrite func(identity string, verb string, lease *coordinationv1.Lease, err error)

	// requests counts every request by identity and verb (get, list,
	// watch, create, update, delete), failed ones included.
	requests map[string]map[string]int64

	// Watches (watch.go).
	history   []change // the last HistoryLimit changes, in resourceVersion order
	compacted int64    // changes up to this resourceVersion are gone from history
	watchers  map[*watcher]struct{}
	held      map[string]bool // HoldWatches
}

// New returns an empty Store.
func New() *Store {
	return &Store{
		leases: make(map[types.NamespacedName]*coordinationv1.Lease),
		writes: make(map[string]int64),
		cut:    make(map[string]bool),
		lossy:  make(map[string]Loss),

		requests: make(map[string]map[string]int64),
		watchers: make(map[*watcher]struct{}),
		held:     make(map[string]bool),
	}
}

// Clientset returns a fake clientset whose Lease requests go to s, on
// behalf of identity (which names it in Writes and CutOff). Other
// resources are the fake's own, with objs in them.
func (s *Store) Clientset(identity string, objs ...runtime.Object) *fake.Clientset {
	// The simple clientset: the field-managed one that NewClientset makes
	// costs a REST mapper per write, and Leases never reach its tracker.
	cs := fake.NewSimpleClientset(objs...) //nolint:staticcheck // see above
	cs.PrependReactor("*", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		obj, err := s.serve(identity, a)
		switch s.loss(identity) {
		case LoseAll:
			return true, nil, ErrResponseLost
		case LoseApplied:
			if err == nil && a.GetVerb() != "get" && a.GetVerb() != "list" {
				return true, nil, ErrResponseLost
			}
		}
		return true, obj, err
	})
	cs.PrependWatchReactor("leases", func(a clienttesting.Action) (bool, watch.Interface, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.countLocked(identity, "watch")
		if s.lossy[identity] == LoseAll {
			return true, nil, ErrResponseLost
		}
		w, err := s.watchLocked(identity, a.(clienttesting.WatchAction))
		return true, w, err
	})
	return cs
}

func (s *Store) countLocked(identity, verb string) {
	m := s.requests[identity]
	if m == nil {
		m = make(map[string]int64)
		s.requests[identity] = m
	}
	m[verb]++
}

// Requests returns the number of Lease requests identity made, by verb
// (get, list, watch, create, update, delete), failed ones included.
func (s *Store) Requests(identity string) map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.requests[identity])
}

// TotalRequests returns the number of Lease requests everyone made, by verb.
func (s *Store) TotalRequests() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64)
	for _, m := range s.requests {
		for v, n := range m {
			out[v] += n
		}
	}
	return out
}

// CutOff makes the writes of identity fail with ErrCutOff (cut true) or
// succeed again (cut false). Its reads still succeed.
func (s *Store) CutOff(identity string, cut bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut[identity] = cut
}

// LoseResponses makes the Lease requests of identity be served as usual
// (a write takes effect, or fails on its preconditions) and then, for the
// responses that loss selects, fail with ErrResponseLost instead of being
// answered: the replica's requests reach the API server but it never
// learns what became of them. LoseNone answers them all again.
func (s *Store) LoseResponses(identity string, loss Loss) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lossy[identity] = loss
	for w := range s.watchers {
		if w.identity == identity {
			w.poke()
		}
	}
}

func (s *Store) loss(identity string) Loss {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lossy[identity]
}

// Writes returns the number of write requests (create, update, delete)
// made by identity, failed ones included.
func (s *Store) Writes(identity string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes[identity]
}

// TotalWrites returns the number of write requests made by everyone.
func (s *Store) TotalWrites() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, w := range s.writes {
		n += w
	}
	return n
}

// OnWrite sets a function called after every write request, with the
// store's lock held (it must not call the Store): identity, the verb, the
// Lease as stored (nil if the write failed or deleted it) and the error.
func (s *Store) OnWrite(f func(identity, verb string, lease *coordinationv1.Lease, err error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onWrite = f
}

// Leases returns copies of the stored Leases, sorted by namespace and name.
func (s *Store) Leases() []coordinationv1.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]coordinationv1.Lease, 0, len(s.leases))
	for _, l := range s.leases {
		out = append(out, *l.DeepCopy())
	}
	slices.SortFunc(out, func(a, b coordinationv1.Lease) int {
		if a.Namespace != b.Namespace {
			if a.Namespace < b.Namespace {
				return -1
			}
			return 1
		}
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

func (s *Store) serve(identity string, a clienttesting.Action) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := a.GetNamespace()
	s.countLocked(identity, a.GetVerb())
	switch a.GetVerb() {
	case "get":
		name := a.(clienttesting.GetAction).GetName()
		l, ok := s.leases[types.NamespacedName{Namespace: ns, Name: name}]
		if !ok {
			return nil, apierrors.NewNotFound(leaseResource, name)
		}
		return l.DeepCopy(), nil
	case "list":
		sel := a.(clienttesting.ListAction).GetListRestrictions().Labels
		if sel == nil {
			sel = labels.Everything()
		}
		list := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(s.rv, 10)}}
		for _, l := range s.matchingLocked(ns, sel) {
			list.Items = append(list.Items, *l.DeepCopy())
		}
		return list, nil
	case "create", "update", "delete":
	default:
		return nil, apierrors.NewMethodNotSupported(leaseResource, a.GetVerb())
	}

	s.writes[identity]++
	var stored *coordinationv1.Lease
	var err error
	defer func() {
		if s.onWrite != nil {
			var cp *coordinationv1.Lease
			if stored != nil {
				cp = stored.DeepCopy()
			}
			s.onWrite(identity, a.GetVerb(), cp, err)
		}
	}()
	if s.cut[identity] {
		err = ErrCutOff
		return nil, err
	}
	switch a.GetVerb() {
	case "create":
		l := a.(clienttesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		if l.Namespace == "" {
			l.Namespace = ns
		}
		k := types.NamespacedName{Namespace: l.Namespace, Name: l.Name}
		if _, ok := s.leases[k]; ok {
			err = apierrors.NewAlreadyExists(leaseResource, l.Name)
			return nil, err
		}
		if l.ResourceVersion != "" {
			err = apierrors.NewBadRequest("resourceVersion should not be set on objects to be created")
			return nil, err
		}
		stored = s.createLocked(k, l)
		return stored.DeepCopy(), nil
	case "update":
		l := a.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		if l.Namespace == "" {
			l.Namespace = ns
		}
		k := types.NamespacedName{Namespace: l.Namespace, Name: l.Name}
		cur, ok := s.leases[k]
		// The API server's order: a UID in the object is a precondition,
		// checked first, against nothing when the Lease is gone; then a
		// missing Lease is created (Leases allow create-on-update, and
		// the resourceVersion is not compared with anything), and only
		// an existing one needs the resourceVersion it carries.
		if l.UID != "" && (!ok || l.UID != cur.UID) {
			var have types.UID
			if ok {
				have = cur.UID
			}
			err = uidConflict(l.Name, l.UID, have)
			return nil, err
		}
		if !ok {
			stored = s.createLocked(k, l)
			return stored.DeepCopy(), nil
		}
		if l.ResourceVersion == "" {
			err = apierrors.NewInvalid(coordinationv1.SchemeGroupVersion.WithKind("Lease").GroupKind(), l.Name, field.ErrorList{
				field.Invalid(field.NewPath("metadata", "resourceVersion"), l.ResourceVersion, "must be specified for an update"),
			})
			return nil, err
		}
		if l.ResourceVersion != cur.ResourceVersion {
			err = apierrors.NewConflict(leaseResource, l.Name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
			return nil, err
		}
		s.rv++
		l.ResourceVersion = strconv.FormatInt(s.rv, 10)
		l.UID = cur.UID
		l.CreationTimestamp = cur.CreationTimestamp
		s.leases[k] = l
		s.recordLocked(watch.Modified, cur, l)
		stored = l
		return l.DeepCopy(), nil
	default: // delete
		d := a.(clienttesting.DeleteAction)
		k := types.NamespacedName{Namespace: ns, Name: d.GetName()}
		cur, ok := s.leases[k]
		if !ok {
			err = apierrors.NewNotFound(leaseResource, d.GetName())
			return nil, err
		}
		if p := d.GetDeleteOptions().Preconditions; p != nil {
			if p.UID != nil && *p.UID != cur.UID {
				err = uidConflict(d.GetName(), *p.UID, cur.UID)
				return nil, err
			}
			if p.ResourceVersion != nil && *p.ResourceVersion != cur.ResourceVersion {
				err = apierrors.NewConflict(leaseResource, d.GetName(), fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, cur.ResourceVersion))
				return nil, err
			}
		}
		delete(s.leases, k)
		s.rv++ // as etcd's revision: a watch sees the delete at a new resourceVersion
		s.recordLocked(watch.Deleted, cur, nil)
		return cur.DeepCopy(), nil
	}
}

// uidConflict is the API server's answer to a write whose UID precondition
// (want) is not the Lease's UID (have; empty when the Lease is gone), for an
// update and a delete alike.
func uidConflict(name string, want, have types.UID) error {
	return apierrors.NewConflict(leaseResource, name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", want, have))
}

// createLocked stores l as a new object at k, as the API server creates
// one: a new resourceVersion, a new UID (whatever l carried) and a
// creation time. s.mu must be held.
func (s *Store) createLocked(k types.NamespacedName, l *coordinationv1.Lease) *coordinationv1.Lease {
	s.rv++
	l.ResourceVersion = strconv.FormatInt(s.rv, 10)
	l.UID = types.UID("lease-" + l.ResourceVersion)
	l.CreationTimestamp = metav1.Now()
	s.leases[k] = l
	s.recordLocked(watch.Added, nil, l)
	return l
}

// matchingLocked returns the Leases of namespace ns whose labels sel
// matches, by name: what a LIST returns, and what a WATCH from "" or "0"
// starts with. s.mu must be held.
func (s *Store) matchingLocked(ns string, sel labels.Selector) []*coordinationv1.Lease {
	var out []*coordinationv1.Lease
	for k, l := range s.leases {
		if k.Namespace == ns && sel.Matches(labels.Set(l.Labels)) {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b *coordinationv1.Lease) int { return strings.Compare(a.Name, b.Name) })
	return out
}
