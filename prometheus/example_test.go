package prometheus_test

import (
	"bufio"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/go-coalesce/workqueue"
	wqprom "github.com/go-coalesce/workqueue/prometheus"
)

func ExampleNewProvider() {
	reg := prometheus.NewRegistry()
	q := workqueue.NewWithConfig(workqueue.Config[string]{
		Name:    "deployments",
		Metrics: wqprom.NewProvider(reg),
	})
	defer q.ShutDown()

	q.Add("default/web")
	q.Add("default/api")
	q.Add("default/web") // already queued: not an add
	key, _ := q.Get()
	q.Done(key)
	q.AddAfter("default/db", time.Hour) // a retry, waiting

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()

	// Print the samples, leaving out histogram buckets and sums, and
	// the value of the ready age, which is a clock reading: how long
	// default/api has been ready.
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "workqueue_oldest_ready_seconds") {
			line, _, _ = strings.Cut(line, " ")
		}
		if strings.HasPrefix(line, "workqueue_") &&
			!strings.Contains(line, "_bucket") && !strings.Contains(line, "_sum") {
			fmt.Println(line)
		}
	}
	// Output:
	// workqueue_adds_total{name="deployments"} 2
	// workqueue_delayed_items{name="deployments"} 1
	// workqueue_depth{name="deployments"} 1
	// workqueue_longest_running_processor_seconds{name="deployments"} 0
	// workqueue_oldest_ready_seconds{name="deployments",priority="0"}
	// workqueue_queue_duration_seconds_count{name="deployments"} 1
	// workqueue_retries_total{name="deployments"} 1
	// workqueue_unfinished_work_seconds{name="deployments"} 0
	// workqueue_work_duration_seconds_count{name="deployments"} 1
}
