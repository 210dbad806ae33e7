package sharding

import (
	"maps"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRingViewReplace checks a relist against the rules a watch event
// follows: a listed Lease replaces an older version in the view, never a
// newer one (the answer to our own write, which the list predates), and an
// unchanged one keeps when it was first seen (the fence counts from it); a
// Lease missing from the list is gone unless the view holds it at a newer
// version than the list.
func TestRingViewReplace(t *testing.T) {
	g := newRingView("r", 4)
	member := func(id string, rv int) any {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "r-member-" + id, ResourceVersion: strconv.Itoa(rv),
				Labels: map[string]string{LabelRole: roleMember}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &id},
		}
	}
	shard := func(i, rv int) any {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: shardLeaseName("r", 4, i), ResourceVersion: strconv.Itoa(rv),
				Labels:      map[string]string{LabelRole: roleShard},
				Annotations: map[string]string{AnnotationShards: "4"}},
		}
	}
	for _, le := range []any{
		member("a", 5), member("b", 20), member("c", 8), member("e", 4), member("f", 12),
		shard(0, 6), shard(1, 30), shard(2, 3),
	} {
		if err := g.Add(le); err != nil {
			t.Fatal(err)
		}
	}
	seenC := g.members["c"].at

	if err := g.Replace([]any{
		member("a", 9), member("c", 8), member("d", 7), member("f", 9), shard(0, 9),
	}, "10"); err != nil {
		t.Fatal(err)
	}

	rvs := map[string]string{}
	for id, m := range g.members {
		rvs[id] = m.ref.rv
	}
	want := map[string]string{
		"a": "9",  // listed newer than the view's
		"b": "20", // not listed, but newer than the list: kept
		"c": "8",  // unchanged
		"d": "7",  // new
		"f": "12", // listed older than the view's: the view's kept
	} // and e, not listed and older than the list, is gone
	if !maps.Equal(rvs, want) {
		t.Errorf("members' versions after the relist: %v, want %v", rvs, want)
	}
	if at := g.members["c"].at; !at.Equal(seenC) {
		t.Errorf("unchanged member c: first seen %v, now %v; want it kept", seenC, at)
	}
	if rv := g.shards[0].ref.rv; rv != "9" {
		t.Errorf("shard 0 (listed newer): version %q, want 9", rv)
	}
	if rv := g.shards[1].ref.rv; rv != "30" {
		t.Errorf("shard 1 (not listed, newer than the list): version %q, want 30", rv)
	}
	if g.shards[2].exists {
		t.Errorf("shard 2 (not listed, older than the list) is still in the view")
	}
	select {
	case <-g.synced:
	default:
		t.Fatal("the first Replace marks the view synced")
	}
}

// TestRingViewRejoined: a join (acquireTime = renewTime) is marked
// rejoined when the view's previous version of that member was a
// confirmed session, or the same rejoined session; a second join in a new
// session (the first went unanswered) is not, nor is a newcomer's.
func TestRingViewRejoined(t *testing.T) {
	g := newRingView("r", 1)
	start := metav1.NewMicroTime(t0)
	rv := 0
	write := func(id, session string, join bool) memberInfo {
		t.Helper()
		rv++
		renew := metav1.NewMicroTime(t0.Add(time.Duration(rv) * time.Second))
		if join {
			renew = start
		}
		le := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "r-member-" + id, ResourceVersion: strconv.Itoa(rv),
				Labels: map[string]string{LabelRole: roleMember}, Annotations: map[string]string{AnnotationSession: session}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, AcquireTime: &start, RenewTime: &renew},
		}
		if err := g.Update(le); err != nil {
			t.Fatal(err)
		}
		return g.members[id]
	}
	for _, step := range []struct {
		name          string
		session       string
		join          bool
		wantConfirmed bool
		wantRejoined  bool
	}{
		{"newcomer's join", "s1", true, false, false},
		{"its renewal", "s1", false, true, false},
		{"join after the lapse", "s2", true, false, true},
		{"the same join again", "s2", true, false, true},
		{"unanswered: another join", "s3", true, false, false},
		{"renewal of the new session", "s3", false, true, false},
	} {
		m := write("a", step.session, step.join)
		if m.confirmed != step.wantConfirmed || m.rejoined != step.wantRejoined {
			t.Errorf("%s: confirmed %v rejoined %v, want %v %v", step.name, m.confirmed, m.rejoined, step.wantConfirmed, step.wantRejoined)
		}
	}
}
