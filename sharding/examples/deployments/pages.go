package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-coalesce/workqueue/debug"
	"github.com/go-coalesce/workqueue/sharding/ringpage"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// mountPages mounts the story's pages on mux: the ring page as each
// replica sees it (/debug/ring/<replica>; /debug/ring is the first
// replica's view, which the story never kills: any replica shows the
// whole ring, with its own queue's state of a key), and the debug page of
// every replica's queue (/debug/workqueue).
func mountPages(mux *http.ServeMux, replicas map[string]*replica) {
	var queues []debug.Source
	for i, name := range replicaNames {
		rp := replicas[name]
		page := ringpage.New(rp.shard, ringpage.Options{Queue: rp.queue})
		if i == 0 {
			mux.Handle("GET /debug/ring", page)
		}
		mux.Handle("GET /debug/ring/"+name, page)
		queues = append(queues, debug.Queue(name, rp.queue, nil))
	}
	mux.Handle("GET /debug/workqueue", debug.NewHandler(debug.Options{}, queues...))
}

// servePages listens on addr and sets so to mount the story's pages there
// and to hold the replicas, once the story is told, until the process is
// interrupted. stop closes the server.
func servePages(addr string, so *StoryOptions) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "serving the pages")
		}
	}()
	so.Pages, so.URL = mux, "http://"+l.Addr().String()
	so.Hold = func() {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		<-ctx.Done()
	}
	return func() {
		_ = srv.Close()
		<-done
	}, nil
}

// lastRenewal returns when replica name last renewed its membership Lease
// ("<ring>-member-<identity>").
func lastRenewal(ctx context.Context, c kubernetes.Interface, name string) (time.Time, error) {
	l, err := c.CoordinationV1().Leases("kube-system").Get(ctx, "deployments-member-"+name, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, err
	}
	if l.Spec.RenewTime == nil {
		return time.Time{}, fmt.Errorf("%s's membership Lease has no renewTime", name)
	}
	return l.Spec.RenewTime.Time, nil
}
