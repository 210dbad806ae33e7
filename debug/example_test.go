package debug_test

import (
	"fmt"
	"net/http"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/debug"
)

// A Handler shows the queues it is given, by name; mount it next to pprof.
// Snapshot returns what the page shows, as ?format=json does.
func ExampleNewHandler() {
	q := workqueue.New[int]()
	q.Add(42)
	q.Add(7)
	h := debug.NewHandler(debug.Options{}, debug.Queue("numbers", q, nil))

	mux := http.NewServeMux()
	mux.Handle("/debug/workqueue", h)

	v := h.Snapshot(0).Queues[0]
	fmt.Println(v.Name, v.Stats.Ready, v.Ready[0].Key, v.Ready[1].Key)
	// Output:
	// numbers 2 42 7
}
