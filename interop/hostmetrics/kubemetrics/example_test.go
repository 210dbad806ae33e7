package kubemetrics_test

import (
	"fmt"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/interop/hostmetrics/internal/scrape"
	"github.com/go-coalesce/workqueue/interop/hostmetrics/kubemetrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// A queue reports into component-base's legacy registry, as the client-go
// queue of the same name would, with one line of setup.
func ExampleProvider() {
	q := workqueue.NewRateLimitingQueueWithConfig(workqueue.DefaultControllerRateLimiter[string](),
		workqueue.Config[string]{Name: "example-deployment", Metrics: kubemetrics.Provider()})
	defer q.ShutDown()
	q.Add("default/a")
	q.Add("default/b")

	series, _ := scrape.Of(legacyregistry.DefaultGatherer, "example-deployment")
	fmt.Println(series[`workqueue_depth{name=Q}`].Value)
	fmt.Println(series[`workqueue_adds_total{name=Q}`].Help)
	// Output:
	// 2
	// [BETA] Total number of adds handled by workqueue
}
