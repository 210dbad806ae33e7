package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/go-coalesce/workqueue"
)

// The core module: keys coalesce, and Run retries a failing key and
// returns once ctx ends.
func init() {
	register(".", func() (string, error) {
		q := workqueue.NewRateLimitingQueue(workqueue.DefaultControllerRateLimiter[string]())
		for _, k := range []string{"default/web", "default/db", "default/web"} {
			q.Add(k)
		}
		if n := q.Len(); n != 2 {
			return "", fmt.Errorf("3 adds of 2 keys left %d keys ready, want 2", n)
		}

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var mu sync.Mutex
		var synced []string
		failed := false
		err := workqueue.Run(ctx, q, 2, func(ctx context.Context, key string) error {
			mu.Lock()
			defer mu.Unlock()
			if key == "default/db" && !failed {
				failed = true
				return errors.New("transient") // retried with backoff
			}
			synced = append(synced, key)
			if len(synced) == 2 {
				cancel()
			}
			return nil
		})
		if err != nil && !errors.Is(err, context.Canceled) {
			return "", fmt.Errorf("Run: %v", err)
		}
		sort.Strings(synced)
		if got := strings.Join(synced, ","); got != "default/db,default/web" {
			return "", fmt.Errorf("synced %q, want both keys once", got)
		}
		return "queue coalesced 3 adds into 2 keys; Run synced both, one after a retry", nil
	})
}
