package workqueue_test

import (
	"fmt"
	"time"

	"github.com/go-coalesce/workqueue"
)

// Inspect lists the keys of a queue with their states: processing keys
// first, then waiting ones, then ready ones in the order Get takes them.
func ExampleQueue_Inspect() {
	q := workqueue.New[string]()
	defer q.ShutDown()
	q.Add("default/web")
	q.Add("default/api")
	k, _ := q.Get() // default/web is processing
	q.Add(k)        // and changed meanwhile: it runs again after Done
	q.AddAfter("default/db", time.Hour)

	for _, e := range q.Inspect(10) {
		fmt.Println(e.Key, e.State)
	}
	fmt.Println(q.State("default/api"), q.State("default/cache"))
	// Output:
	// default/web processing+dirty
	// default/db waiting
	// default/api ready
	// ready absent
}
