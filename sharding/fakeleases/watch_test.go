package fakeleases_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue/sharding/fakeleases"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestWatch checks the Store's WATCH against what the API server does: a
// watch from a resourceVersion gets every later change that matches its
// namespace and label selector, in resourceVersion order, a DELETED event
// at the delete's own resourceVersion, and a Lease whose labels stop
// matching as DELETED; one from "" first gets the Leases as they are; one
// from a compacted resourceVersion gets 410 Gone and ends; held events
// come in order once resumed; bookmarks and the timeout are honoured; and
// requests are counted by verb.
func TestWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := fakeleases.New()
		a := s.Clientset("a").CoordinationV1().Leases("ns")
		other := s.Clientset("a").CoordinationV1().Leases("other")
		mk := func(name, ring string) *coordinationv1.Lease {
			h := name
			return &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"ring": ring}},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &h},
			}
		}
		x, err := a.Create(ctx, mk("x", "r"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		timeout := int64(600)
		w, err := a.Watch(ctx, metav1.ListOptions{LabelSelector: "ring=r", ResourceVersion: x.ResourceVersion,
			AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
		if err != nil {
			t.Fatal(err)
		}
		all, err := s.Clientset("b").CoordinationV1().Leases("ns").Watch(ctx, metav1.ListOptions{LabelSelector: "ring=r"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Create(ctx, mk("y", "r"), metav1.CreateOptions{}); err != nil { // ADDED
			t.Fatal(err)
		}
		if _, err := a.Create(ctx, mk("z", "other"), metav1.CreateOptions{}); err != nil { // not seen
			t.Fatal(err)
		}
		if _, err := other.Create(ctx, mk("x", "r"), metav1.CreateOptions{}); err != nil { // other namespace
			t.Fatal(err)
		}
		x2 := x.DeepCopy()
		x2.Labels["ring"] = "moved"
		if _, err := a.Update(ctx, x2, metav1.UpdateOptions{}); err != nil { // DELETED for this selector
			t.Fatal(err)
		}
		if err := a.Delete(ctx, "y", metav1.DeleteOptions{}); err != nil { // DELETED
			t.Fatal(err)
		}
		want := []string{"ADDED y 2", "DELETED x 5", "DELETED y 6"}
		if got := take(t, w, len(want)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("watch from resourceVersion %s: %v, want %v", x.ResourceVersion, got, want)
		}
		// A watch from "" first gets the state it started at.
		want = []string{"ADDED x 1", "ADDED y 2", "DELETED x 5", "DELETED y 6"}
		if got := take(t, all, len(want)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("watch from \"\": %v, want %v", got, want)
		}

		// Held events arrive in order once resumed.
		s.HoldWatches("a", true)
		for _, n := range []string{"p", "q"} {
			if _, err := a.Create(ctx, mk(n, "r"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		select {
		case ev := <-w.ResultChan():
			t.Errorf("held watch delivered %v", describe(ev))
		default:
		}
		s.HoldWatches("a", false)
		want = []string{"ADDED p 7", "ADDED q 8"}
		if got := take(t, w, len(want)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("resumed watch: %v, want %v", got, want)
		}

		// A bookmark every BookmarkInterval, then the timeout ends it.
		time.Sleep(fakeleases.BookmarkInterval)
		if got := take(t, w, 1); fmt.Sprint(got) != "[BOOKMARK  8]" {
			t.Errorf("after %v: %v, want a bookmark at 8", fakeleases.BookmarkInterval, got)
		}
		time.Sleep(time.Duration(timeout) * time.Second)
		for ev := range w.ResultChan() {
			if ev.Type != watch.Bookmark {
				t.Errorf("after the timeout: %v", describe(ev))
			}
		}

		// Expired: 410 Gone, and a watch from before the compaction too.
		s.ExpireWatches("b")
		ev := <-all.ResultChan()
		for ev.Type == watch.Added { // in flight before the expiry
			ev = <-all.ResultChan()
		}
		if st, ok := ev.Object.(*metav1.Status); ev.Type != watch.Error || !ok || !apierrors.IsResourceExpired(apierrors.FromObject(st)) {
			t.Errorf("expired watch: %v, want ERROR 410 Gone", describe(ev))
		}
		if _, ok := <-all.ResultChan(); ok {
			t.Errorf("the expired watch goes on")
		}
		old, err := a.Watch(ctx, metav1.ListOptions{ResourceVersion: x.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		ev = <-old.ResultChan()
		if ev.Type != watch.Error || ev.Object.(*metav1.Status).Code != 410 {
			t.Errorf("watch from a compacted resourceVersion: %v, want ERROR 410", describe(ev))
		}
		old.Stop()

		if got := s.Requests("a"); got["watch"] != 2 || got["create"] != 6 || got["list"] != 0 {
			t.Errorf("requests of a: %v", got)
		}
	})
}

// take reads n events of w as "TYPE name resourceVersion".
func take(t *testing.T, w watch.Interface, n int) []string {
	t.Helper()
	var out []string
	for range n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Errorf("watch ended after %v", out)
				return out
			}
			out = append(out, describe(ev))
		case <-time.After(time.Second):
			t.Errorf("no event after %v", out)
			return out
		}
	}
	return out
}

func describe(ev watch.Event) string {
	if l, ok := ev.Object.(*coordinationv1.Lease); ok {
		return fmt.Sprintf("%s %s %s", ev.Type, l.Name, l.ResourceVersion)
	}
	return fmt.Sprintf("%s %v", ev.Type, ev.Object)
}
