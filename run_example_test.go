package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-coalesce/workqueue"
)

// Run replaces a controller's hand-written worker loop. Here one key fails
// once and is retried by the rate limiter; the handle stops Run once every
// key has been handled. A real controller would cancel ctx on a signal.
func ExampleRun() {
	q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	failed := map[string]bool{}
	synced := 0
	handle := func(ctx context.Context, key string) error {
		if key == "default/b" && !failed[key] {
			failed[key] = true
			return errors.New("conflict")
		}
		fmt.Println("synced", key)
		if synced++; synced == 3 {
			cancel()
		}
		return nil
	}

	q.Add("default/a")
	q.Add("default/b")
	q.Add("default/c")
	// One worker, so that the output has a fixed order; with more, handle
	// would need a lock for failed and synced.
	err := workqueue.Run(ctx, q, 1, handle, workqueue.RunConfig[string]{
		MaxRetries: 5,
		OnError: func(key string, err error, retry bool) {
			fmt.Printf("sync %s: %v (retry: %t)\n", key, err, retry)
		},
	})
	fmt.Println("Run returned:", err)
	// Output:
	// synced default/a
	// sync default/b: conflict (retry: true)
	// synced default/c
	// synced default/b
	// Run returned: <nil>
}

// RequeueAfter asks for another look at a key later without counting a
// failure, for example to poll something that is not ready yet.
func ExampleRequeueAfter() {
	q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	polls := 0
	handle := func(ctx context.Context, key string) error {
		polls++
		if polls < 3 {
			fmt.Println(key, "not ready, requeues:", q.NumRequeues(key))
			return workqueue.RequeueAfter(time.Millisecond)
		}
		fmt.Println(key, "ready")
		cancel()
		return nil
	}
	q.Add("job")
	_ = workqueue.Run(ctx, q, 1, handle)
	// Output:
	// job not ready, requeues: 0
	// job not ready, requeues: 0
	// job ready
}
