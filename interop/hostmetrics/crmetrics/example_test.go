package crmetrics_test

import (
	"fmt"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/hostmetrics/crmetrics"
	"github.com/go-coalesce/workqueue/interop/hostmetrics/internal/scrape"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// A queue reports into controller-runtime's metrics.Registry, under the
// controller's name, with one line of setup.
func ExampleProvider() {
	q := workqueue.NewRateLimitingQueueWithConfig(workqueue.DefaultControllerRateLimiter[string](),
		workqueue.Config[string]{Name: "example-controller", Metrics: crmetrics.Provider()})
	defer q.ShutDown()
	q.Add("default/a")
	q.Add("default/b")

	series, _ := scrape.Of(metrics.Registry, "example-controller")
	fmt.Println(series[`workqueue_depth{controller=Q,name=Q,priority=0}`].Value)
	fmt.Println(series[`workqueue_adds_total{controller=Q,name=Q}`].Value)
	// Output:
	// 2
	// 2
}
