package ringpage_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/fakeleases"
	"github.com/go-coalesce/workqueue/sharding/fakeshards"
	"github.com/go-coalesce/workqueue/sharding/ringpage"
)

func TestMain(m *testing.M) {
	fs := flag.NewFlagSet("klog", flag.PanicOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
	// As in package sharding's tests: utilruntime's error backoff
	// measures from before the synctest bubble.
	utilruntime.ErrorHandlers = utilruntime.ErrorHandlers[:1]
	goleak.VerifyTestMain(m)
}

const (
	ns      = "apps"
	objects = 40
	shards  = 8
)

// A key whose object is in the cache, and one that is markup.
const scriptKey = `<script>document.body.setAttribute("data-pwned","1")</script>`

// ring runs two replicas, r-0 and r-1, over objects Deployments until
// they have shared the shards and reported them, then calls check with
// r-0, its queue and the keys' UIDs, and stops them.
func ring(t *testing.T, check func(r *sharding.Replica, uids map[string]string)) {
	ringOf(t, []int{shards, shards}, func(rs []*sharding.Replica, uids map[string]string) { check(rs[0], uids) })
}

// ringOf is ring with replicas of the given shard counts; check gets
// them all.
func ringOf(t *testing.T, counts []int, check func(rs []*sharding.Replica, uids map[string]string)) {
	synctest.Test(t, func(t *testing.T) {
		objs := fake.NewSimpleClientset() //nolint:staticcheck // the simple clientset, as sharding's tests
		uids := map[string]string{}
		for i := range objects {
			name := fmt.Sprintf("d-%02d", i)
			// UIDs that differ in their last bytes only share their
			// hash's top bits: spread them as real UIDs are.
			uid := fmt.Sprintf("uid-%016x", sharding.Hash(name))
			uids[ns+"/"+name] = uid
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
			if _, err := objs.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		srv := fakeshards.NewServer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return objs.AppsV1().Deployments(ns).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return objs.AppsV1().Deployments(ns).Watch(ctx, o)
			},
		}, true)
		defer srv.Close()
		leases := fakeleases.New()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var rs []*sharding.Replica
		for i, n := range counts {
			id := fmt.Sprintf("r-%d", i)
			lw := srv.Client()
			defer lw.Close()
			q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
			r, err := sharding.New(sharding.Config{
				Client: leases.Clientset(id), Namespace: "ring", Name: "ctl", Identity: id,
				Shards: n, Object: &appsv1.Deployment{}, ListerWatcher: lw, Queue: q,
			})
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
			wg.Go(func() { _ = r.Run(ctx) })
			wg.Go(func() {
				_ = workqueue.Run(ctx, q, 2, r.Handler(func(context.Context, string) error { return nil }))
			})
		}
		// Joined (two periods), dealt (the third), listed, and reported
		// at a renewal after that.
		time.Sleep(20 * time.Second)
		check(rs, uids)
		cancel()
		wg.Wait()
	})
}

func getPage(t *testing.T, h http.Handler, target string) ringpage.Page {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %s", target, rec.Code, rec.Header().Get("Content-Type"))
	}
	var p ringpage.Page
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	return p
}

// TestRingJSON checks the page's data on a settled ring: every shard held
// by a live holder, synced and admitted, the other replica's shards from
// its report, the objects all counted once, and a key's shard, holder
// and queue state.
func TestRingJSON(t *testing.T) {
	ring(t, func(r *sharding.Replica, uids map[string]string) {
		q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
		defer q.ShutDown()
		h := ringpage.New(r, ringpage.Options{Queue: q})
		p := getPage(t, h, "/debug/ring?format=json")
		if p.Identity != "r-0" || p.ShardCount != shards || len(p.Shards) != shards || !p.Alive || p.Ready != "" {
			t.Fatalf("page of %q: %d shards of %d, alive %v, ready %q", p.Identity, len(p.Shards), p.ShardCount, p.Alive, p.Ready)
		}
		total, by := 0, map[string]int{}
		for _, s := range p.Shards {
			if !s.Held || !s.HolderLive || !s.Synced || !s.Admitted || s.State != "admitted" {
				t.Errorf("shard %d: %+v; want held by a live holder, synced and admitted", s.Shard, s)
			}
			if s.Holder == "r-0" && s.Local != "admitted" || s.Holder != "r-0" && s.Local != "" {
				t.Errorf("shard %d held by %s: local state %q", s.Shard, s.Holder, s.Local)
			}
			if !strings.HasPrefix(s.Range, "[0x") || !strings.Contains(s.Selector, "shardRange(") {
				t.Errorf("shard %d: range %q selector %q", s.Shard, s.Range, s.Selector)
			}
			total += s.Objects
			by[s.Holder]++
		}
		if total != objects {
			t.Errorf("objects over the shards: %d, want %d (each counted once, by its holder)", total, objects)
		}
		if by["r-0"] != shards/2 || by["r-1"] != shards/2 {
			t.Errorf("shards by holder: %v", by)
		}
		if len(p.Members) != 2 || !p.Members[0].Live || !p.Members[1].Live || p.Members[1].Share != shards/2 {
			t.Errorf("members: %+v", p.Members)
		}

		// A key of each replica: r-0 finds its own in its cache; r-1's is
		// not there (sharded by UID), and found by its UID.
		var mine, theirs string
		for key := range uids {
			if r.Owns(key) {
				mine = key
			} else {
				theirs = key
			}
		}
		q.AddRateLimited(mine)
		k := getPage(t, h, "/debug/ring?format=json&key="+mine).Key
		if k == nil || !k.Found || k.Holder != "r-0" || !k.HolderLive || !k.HolderSynced || !k.Owned || k.Queue != "waiting" || k.Due == nil || k.Requeues == nil || *k.Requeues != 1 {
			t.Errorf("own key %s: %+v", mine, k)
		}
		k = getPage(t, h, "/debug/ring?format=json&key="+theirs).Key
		if k == nil || k.Found || k.Owned || k.Queue != "absent" || !strings.Contains(k.Why, "?uid=") {
			t.Errorf("other replica's key %s: %+v", theirs, k)
		}
		k = getPage(t, h, "/debug/ring?format=json&uid="+uids[theirs]).Key
		if k == nil || !k.Found || k.Holder != "r-1" || !k.HolderLive || !k.HolderSynced {
			t.Errorf("other replica's key by UID %s: %+v", uids[theirs], k)
		}
		if want := sharding.ShardOf(sharding.Hash(uids[theirs]), shards); k.Shard != want {
			t.Errorf("shard by UID: %d, want %d", k.Shard, want)
		}
	})
}

// TestRingHTML checks the HTML form: the shards' table, the key's
// section, markup in a key shown as text, and a bad format refused.
func TestRingHTML(t *testing.T) {
	ring(t, func(r *sharding.Replica, _ map[string]string) {
		h := ringpage.New(r, ringpage.Options{})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/ring?key="+urlQuery(scriptKey), nil))
		body := rec.Body.String()
		if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("HTML: %d %s", rec.Code, rec.Header().Get("Content-Type"))
		}
		for _, want := range []string{"<h1>Ring ctl</h1>", `data-shard="7"`, "8 of 8 shards held, 8 admitted by a live holder", "&lt;script&gt;"} {
			if !strings.Contains(body, want) {
				t.Errorf("HTML lacks %q", want)
			}
		}
		if strings.Contains(body, scriptKey) {
			t.Error("a key was written raw")
		}
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/ring?format=xml", nil))
		if rec.Code != http.StatusBadRequest {
			t.Errorf("format=xml: %d, want 400", rec.Code)
		}
	})
}

func urlQuery(s string) string {
	r := strings.NewReplacer("<", "%3C", ">", "%3E", `"`, "%22", " ", "%20", "(", "%28", ")", "%29", ",", "%2C", "=", "%3D", "/", "%2F")
	return r.Replace(s)
}

// TestRingWaiting checks what the page says of a replica whose count is
// not the ring's: its mode, the ring's count, and a line that says so.
func TestRingWaiting(t *testing.T) {
	ringOf(t, []int{shards, 2 * shards}, func(rs []*sharding.Replica, _ map[string]string) {
		var waiting *sharding.Replica
		for _, r := range rs {
			if r.Status().Mode == "waiting" {
				waiting = r
			}
		}
		if waiting == nil {
			t.Fatalf("no replica waits in a ring of replicas with %d and %d shards", shards, 2*shards)
		}
		h := ringpage.New(waiting, ringpage.Options{})
		p := getPage(t, h, "/debug/ring?format=json")
		if p.Mode != "waiting" || p.RingShards == p.ShardCount || p.RingShards == 0 {
			t.Errorf("a waiting replica's page: mode %q, ring's count %d, its own %d", p.Mode, p.RingShards, p.ShardCount)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/ring", nil))
		want := fmt.Sprintf("The ring's shard count is %d (generation 0); this replica has %d and is waiting.", p.RingShards, p.ShardCount)
		if body := rec.Body.String(); !strings.Contains(body, want) {
			i := strings.Index(body, "shard count is")
			t.Errorf("HTML lacks %q: %q", want, body[max(0, i-80):max(0, i)+200])
		}
		if p := getPage(t, ringpage.New(rs[0], ringpage.Options{}), "/debug/ring?format=json"); p.Mode == "waiting" && rs[0] != waiting {
			t.Errorf("both replicas wait")
		}
	})
}

// TestRingBalance checks what the page says of the balance: by load, the
// band, the planned moves and why no further one is made, each member's
// load against the band and each shard's; by count, why.
func TestRingBalance(t *testing.T) {
	st := sharding.Status{Ring: "ctl", ShardCount: 2, Time: time.Unix(100, 0),
		Balance: sharding.BalanceStatus{By: "load", Mean: 20 * time.Second, Heaviest: 12 * time.Second,
			Bound: 23 * time.Second, Gain: 2 * time.Second, InFlight: 1, Budget: 2, Held: "hysteresis",
			Moves: []sharding.MoveStatus{{Shard: 1, From: "a", To: "b", Work: 9 * time.Second, Cause: "load"}}},
		Members: []sharding.MemberStatus{{Identity: "a", Load: 31 * time.Second, OverBound: true, Workers: 4}, {Identity: "b", Load: 9 * time.Second}},
		Shards: []sharding.ShardStatus{{Shard: 0, Held: true, Holder: "a", LoadKnown: true, Work: 22 * time.Second, Ready: 7, Oldest: 1500 * time.Millisecond},
			{Shard: 1, Held: true, Holder: "a", LoadKnown: true, Work: 9 * time.Second, MoveTo: "b"}},
	}
	body := func(st sharding.Status) string {
		rec := httptest.NewRecorder()
		ringpage.New(frozen{st: st}, ringpage.Options{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/ring", nil))
		return rec.Body.String()
	}
	b := body(st)
	for _, want := range []string{
		"By load: mean 20s/min, heaviest shard 12s/min, band up to <b>23s</b>/min",
		"a move must gain 2s/min (hysteresis); 1 of 2 moves in flight.",
		"Move shard 1 (9s/min) from a to b (load).",
		"No further move: none would lower the larger",
		`<span class="bad">31s (over the band)</span>`,
		`<td class="num">22s</td><td class="num">7</td><td class="num">1.5s</td><td></td>`,
		"<td>→ b</td>",
	} {
		if !strings.Contains(b, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	st.Balance = sharding.BalanceStatus{By: "count", Fallback: "member c publishes no load"}
	if b := body(st); !strings.Contains(b, "By count (member c publishes no load)") {
		t.Error("HTML does not say why the ring balances by count")
	}
}
