package sharding

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// This file is the replica's configuration: Config, its defaults, and the
// checks New makes of it (validate). Every error names the field that is
// missing or invalid.

// Defaults of the timing fields of Config: client-go's leader election
// defaults, with the same meaning.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	DefaultGracePeriod   = 5 * time.Second
	DefaultShards        = 16

	// MinRetryPeriod is the shortest RetryPeriod New accepts: a replica
	// writes its membership Lease once per period, so it writes at most
	// 1/MinRetryPeriod (5) of them a second, whatever its Config, plus
	// the shard Leases that move.
	MinRetryPeriod = 200 * time.Millisecond
)

// Queue is what the replica needs of the controller's queue: it adds the
// keys of the shards it gains and removes those of the shards it gives up.
// A *workqueue.RateLimitingQueue[string] satisfies it. A gained shard's
// keys (one per object: the catch-up a move owes) are added a few at a
// time, one more as each run begins in Replica.Handler, so that events
// never wait behind a whole shard, whatever the queue's order.
type Queue interface {
	Add(key string)
	Remove(key string) bool
}

// Config configures a Replica. Client, Namespace, Name, Identity, Object
// and Queue are required, and ListerWatcher unless the primary informer is
// built through Replica.NewInformer; every other field has a zero value
// that works.
type Config struct {
	// Client is used for Leases only, in Namespace.
	Client kubernetes.Interface
	// Namespace holds the ring's Leases.
	Namespace string
	// Name names the ring: every replica of one controller uses the same
	// Name, and its Leases are "<Name>-member-<Identity>" and
	// "<Name>-shard-<i>", labelled sharding.go-coalesce.io/ring=<Name>.
	// It must be a valid label value and a DNS subdomain.
	Name string
	// Identity names this replica; it must be unique among the live
	// replicas of the ring (a pod name is), as in leader election.
	Identity string

	// Shards is the number of shards S of the ring, a power of two from 1
	// to 65536, the same on every replica; zero means DefaultShards (16).
	// Choose it above the largest replica count you expect: a ring of S
	// shards spreads over at most S replicas. The first replica of a ring
	// records S in the ring's Lease ("<Name>-ring"). A replica configured
	// with another S joins the ring but holds nothing (Status().Mode is
	// "waiting", Metrics.Mismatch 1) until no replica of the ring's S
	// remains; the ring then switches to its S online, so a rolling
	// update that changes S changes the ring's (docs/operate.md).
	Shards int
	// Field is the object field that is hashed: FieldUID (the default,
	// when empty) or FieldNamespace. It is the ring's, recorded with S:
	// a replica configured with another Field refuses to join (Run
	// returns an error that wraps ErrRingMismatch and names both). To
	// change it, stop every replica and delete the ring's Leases first.
	Field string

	// Object is the sharded resource's type, e.g. &corev1.ConfigMap{}.
	Object runtime.Object
	// ListerWatcher lists and watches the sharded resource, e.g. over the
	// typed client (which works with client-go's fake clientset too, whose
	// RESTClient is nil):
	//
	//	&cache.ListWatch{
	//		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	//			return client.CoreV1().ConfigMaps(namespace).List(ctx, o)
	//		},
	//		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	//			return client.CoreV1().ConfigMaps(namespace).Watch(ctx, o)
	//		},
	//	}
	//
	// The replica builds
	// its sharded informer on it (Informer) and runs it in Run; the
	// replica adds KEP-5866's ShardSelector to each LIST and watch.
	// It may be nil only if the primary informer is built through
	// NewInformer (controller-runtime's cache.Options.NewInformer), which
	// then gives the ListerWatcher, before Run: New accepts a nil one, as
	// NewInformer may come later, and Run returns an error naming this
	// field if neither is there.
	ListerWatcher cache.ListerWatcher
	// ShardedWith are other namespaced types (e.g. the ReplicaSets and
	// Pods of a Deployment controller) whose informers, built through
	// NewInformer, hold only the objects of the held shards, by the same
	// ranges. Only with Field = FieldNamespace: with FieldUID, a
	// secondary object's shard would be that of its own UID, not its
	// owner's, so its owner's holder would not have it.
	ShardedWith []runtime.Object
	// Queue is the controller's queue. The replica adds keys of the shards
	// it holds (a gained shard's a few at a time: see the type Queue) and
	// removes a shard's keys when it gives the shard up.
	Queue Queue
	// Metrics, if set, are kept up to date: who filters, shards held,
	// objects cached.
	Metrics Metrics

	// LeaseDuration is how long another replica waits, after it last saw
	// this replica's membership Lease change, before it takes the shards
	// away. Zero means DefaultLeaseDuration.
	LeaseDuration time.Duration
	// RenewDeadline is how long after the start of its last successful
	// (answered) renewal a replica keeps processing its shards' keys when
	// renewals fail; then it stops admitting them, cancels their runs and
	// stops renewing its session: it only tries to join again, with a new
	// session that the others count only once renewed. It must
	// be below LeaseDuration, by enough to cover clock drift and the time
	// a cancelled handler takes to return. Zero means DefaultRenewDeadline.
	RenewDeadline time.Duration
	// RetryPeriod is the period of the replica's loop, at least
	// MinRetryPeriod: it renews its
	// membership Lease once per period (it watches the ring, and acts on
	// a change when the watch delivers it, not at the period). Each period
	// is RetryPeriod plus a jitter of up to a tenth of it (and of half
	// of RenewDeadline − RetryPeriod), so that replicas started together
	// do not write in lockstep; the loop never runs more often than once
	// per RetryPeriod. It must be below RenewDeadline. Zero means
	// DefaultRetryPeriod.
	RetryPeriod time.Duration
	// GracePeriod is how long the in-flight runs of a shard that the
	// replica gives up voluntarily (to balance, or when leaving) may go on
	// before their context is cancelled. The shard is released once they
	// have returned. Zero means DefaultGracePeriod.
	GracePeriod time.Duration
	// HandoffTimeout is how long a holder keeps admitting a shard the
	// ring plans to move (a join, a graceful leave, a rebalance) while its
	// taker fills its cache for it: the holder hands the shard over once
	// the taker says it has synced it, or once HandoffTimeout has passed
	// (the move then costs the taker's list after the release, as a crash
	// move does). A graceful leave takes up to HandoffTimeout +
	// GracePeriod + RenewDeadline, which the pod's
	// terminationGracePeriodSeconds must cover. Raise it where a fill
	// takes longer than LeaseDuration: with the server not filtering, a
	// taker's fill is a list of the whole resource (docs/operate.md,
	// "Planned moves"). Zero means LeaseDuration.
	HandoffTimeout time.Duration

	// Balance is how the ring deals its shards out: by count (every
	// replica holds ⌊S/N⌋ or ⌈S/N⌉ shards) or by the load the holders
	// measure and publish (load.go). The zero value is BalanceDefault.
	Balance Balance
	// Workers is the number of the controller's workers (goroutines that
	// run keys), published with the load so that the ring's busy fraction
	// (the time its handlers ran over workers × time) can be computed.
	// Zero: not published.
	Workers int
	// TargetBusy and TargetOldest are what the ring's scaling signal
	// (signal.go, Metrics.DesiredReplicas) aims at: the busy fraction of
	// the workers (zero: DefaultTargetBusy), and the oldest ready key's age
	// beyond which the ring is behind and asks for more replicas than its
	// work alone does (zero: DefaultTargetOldest).
	TargetBusy   float64
	TargetOldest time.Duration

	// SkipRelease makes Run, when its context ends, stop at once without
	// releasing anything, as a crashed process would: the runs in flight
	// are cancelled and the other replicas take the shards after
	// LeaseDuration. The zero value leaves gracefully: the shards are
	// drained and released, then the membership Lease is deleted.
	SkipRelease bool

	// SkipEventKeys stops the replica from adding the keys of its
	// informer's events to Queue: it adds only the keys of a shard it
	// gains (once synced), and still records deleted objects' shards. Set
	// it when the controller's own event handlers enqueue the events, with
	// their own filters (controller-runtime's predicates: interop/crsharding
	// sets it), so that a change those filters drop is not reconciled.
	// Those handlers check each key with Replica.Admit, which counts it
	// as ready in the load the replica reports (the ring's backlog):
	// with Owns, their keys would wait unseen.
	SkipEventKeys bool

	// OnChange, if not nil, is called with the sorted shards the replica
	// holds every time that set changes. It runs on the replica's loop
	// goroutine, which it must not block.
	OnChange func(shards []int)
}

// Balance is how a ring deals its shards out (Config.Balance).
type Balance int

const (
	// BalanceDefault is the library's choice: count balance, for now
	// (docs/contract.md "Balance by load" says why).
	BalanceDefault Balance = iota
	// BalanceCount deals every replica ⌊S/N⌋ or ⌈S/N⌉ shards, whatever
	// their load.
	BalanceCount
	// BalanceLoad moves shards from the most loaded replicas to the
	// least, within a band, with hysteresis and a budget of moves per
	// period; while any member publishes no load it balances by count.
	BalanceLoad
)

// defaultByLoad is what BalanceDefault means: false, count balance. By
// load, the most loaded replica is never far over the band, but it can
// be a little worse than a count balance that happens to fall within it
// (docs/contract.md "Balance by load").
const defaultByLoad = false

// byLoad reports whether a replica configured with b balances by load.
func (b Balance) byLoad() bool { return b == BalanceLoad || b == BalanceDefault && defaultByLoad }

// validate checks cfg and returns it with its defaults filled in. Each
// error names the field at fault.
func (cfg Config) validate() (Config, error) {
	for _, f := range []struct {
		name    string
		missing bool
	}{
		{"Client", cfg.Client == nil},
		{"Namespace", cfg.Namespace == ""},
		{"Name", cfg.Name == ""},
		{"Identity", cfg.Identity == ""},
		{"Object", cfg.Object == nil},
		{"Queue", cfg.Queue == nil},
	} {
		if f.missing {
			return cfg, fmt.Errorf("sharding: Config.%s is required", f.name)
		}
	}
	// An interface that holds a nil pointer is not nil, and would panic
	// at its first use, in New or later in the replica's goroutines.
	for _, f := range []struct {
		name string
		v    any
	}{
		{"Client", cfg.Client},
		{"Object", cfg.Object},
		{"Queue", cfg.Queue},
		{"ListerWatcher", cfg.ListerWatcher},
	} {
		if typedNil(f.v) {
			return cfg, fmt.Errorf("sharding: Config.%s is required: it holds a nil %T", f.name, f.v)
		}
	}
	m := reflect.ValueOf(cfg.Metrics)
	for i := range m.NumField() {
		if g := m.Field(i); g.Kind() == reflect.Interface && !g.IsNil() && typedNil(g.Interface()) {
			return cfg, fmt.Errorf("sharding: Config.Metrics.%s holds a nil %T: leave it nil for no metric", m.Type().Field(i).Name, g.Interface())
		}
	}
	if errs := validation.IsDNS1123Label(cfg.Namespace); len(errs) > 0 {
		return cfg, fmt.Errorf("sharding: Config.Namespace %q is not a namespace name: %v", cfg.Namespace, errs)
	}
	if errs := validation.IsValidLabelValue(cfg.Name); len(errs) > 0 {
		return cfg, fmt.Errorf("sharding: Config.Name %q is not a label value: %v", cfg.Name, errs)
	}
	if errs := validation.IsDNS1123Subdomain(memberLeaseName(cfg.Name, cfg.Identity)); len(errs) > 0 {
		return cfg, fmt.Errorf("sharding: Config.Identity %q (with Config.Name %q) makes no Lease name: %v", cfg.Identity, cfg.Name, errs)
	}
	if cfg.Shards == 0 {
		cfg.Shards = DefaultShards
	}
	if !validShards(cfg.Shards) {
		return cfg, fmt.Errorf("sharding: Config.Shards is %d, need a power of two from 1 to 65536", cfg.Shards)
	}
	switch cfg.Field {
	case "":
		cfg.Field = FieldUID
	case FieldUID, FieldNamespace:
	default:
		return cfg, fmt.Errorf("sharding: Config.Field %q, need %q or %q", cfg.Field, FieldUID, FieldNamespace)
	}
	if len(cfg.ShardedWith) > 0 && cfg.Field != FieldNamespace {
		return cfg, errors.New("sharding: Config.ShardedWith needs Field = FieldNamespace: sharded by UID, " +
			"another resource's object has its own UID, not its owner's, so it would not land in its owner's shard")
	}
	for i, o := range cfg.ShardedWith {
		if o == nil || typedNil(o) {
			return cfg, fmt.Errorf("sharding: Config.ShardedWith[%d] is nil", i)
		}
		if sameType(o, cfg.Object) {
			return cfg, fmt.Errorf("sharding: Config.ShardedWith[%d] is Config.Object's type", i)
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.LeaseDuration, DefaultLeaseDuration)
	def(&cfg.RenewDeadline, DefaultRenewDeadline)
	def(&cfg.RetryPeriod, DefaultRetryPeriod)
	def(&cfg.GracePeriod, DefaultGracePeriod)
	def(&cfg.HandoffTimeout, cfg.LeaseDuration)
	def(&cfg.TargetOldest, DefaultTargetOldest)
	switch {
	case cfg.RetryPeriod < MinRetryPeriod:
		return cfg, fmt.Errorf("sharding: Config.RetryPeriod is %v, need at least MinRetryPeriod (%v): the replica writes its membership Lease once per RetryPeriod",
			cfg.RetryPeriod, MinRetryPeriod)
	case cfg.RetryPeriod >= cfg.RenewDeadline:
		return cfg, fmt.Errorf("sharding: Config.RetryPeriod (%v) must be below Config.RenewDeadline (%v)", cfg.RetryPeriod, cfg.RenewDeadline)
	case cfg.RenewDeadline >= cfg.LeaseDuration:
		return cfg, fmt.Errorf("sharding: Config.RenewDeadline (%v) must be below Config.LeaseDuration (%v)", cfg.RenewDeadline, cfg.LeaseDuration)
	case cfg.GracePeriod < 0:
		return cfg, fmt.Errorf("sharding: Config.GracePeriod is %v, need it 0 or above", cfg.GracePeriod)
	case cfg.HandoffTimeout < 0:
		return cfg, fmt.Errorf("sharding: Config.HandoffTimeout is %v, need it 0 (LeaseDuration) or above", cfg.HandoffTimeout)
	case cfg.Balance < BalanceDefault || cfg.Balance > BalanceLoad:
		return cfg, fmt.Errorf("sharding: Config.Balance is %d, need BalanceDefault, BalanceCount or BalanceLoad", cfg.Balance)
	case cfg.Workers < 0:
		return cfg, fmt.Errorf("sharding: Config.Workers is %d, need it 0 (not published) or above", cfg.Workers)
	case !(cfg.TargetBusy >= 0 && cfg.TargetBusy <= 1): // NaN too
		return cfg, fmt.Errorf("sharding: Config.TargetBusy is %v, need it in (0, 1], or 0 (DefaultTargetBusy)", cfg.TargetBusy)
	case cfg.TargetOldest < 0:
		return cfg, fmt.Errorf("sharding: Config.TargetOldest is %v, need it 0 (DefaultTargetOldest) or above", cfg.TargetOldest)
	}
	if cfg.TargetBusy == 0 {
		cfg.TargetBusy = DefaultTargetBusy
	}
	return cfg, nil
}

// typedNil reports whether v is an interface value that holds a nil
// pointer, map, slice, channel or function.
func typedNil(v any) bool {
	if v == nil {
		return false
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
