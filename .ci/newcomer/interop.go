package main

import (
	"fmt"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/crpriority"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// The interop module, through the package users import from it: a queue
// that controller-runtime takes as its priority queue hands out the higher
// priority first.
func init() {
	register("interop", func() (string, error) {
		var q priorityqueue.PriorityQueue[string] = crpriority.New(nil, workqueue.Config[string]{})
		defer q.ShutDown()
		high := 10
		q.AddWithOpts(priorityqueue.AddOpts{}, "default/resync")
		q.AddWithOpts(priorityqueue.AddOpts{Priority: &high}, "default/changed")
		key, prio, _ := q.GetWithPriority()
		if key != "default/changed" || prio != high {
			return "", fmt.Errorf("GetWithPriority = %q at %d, want %q at %d", key, prio, "default/changed", high)
		}
		q.Done(key)
		return "crpriority is a controller-runtime PriorityQueue; priority 10 went first", nil
	})
}
