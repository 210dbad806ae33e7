// Package adapterseries holds the Prometheus adapter's side of the hosts'
// series comparison (interop/hostmetrics/kubemetrics holds kubemetrics'
// side). It lives in this test-only module because it needs client-go and
// component-base beside the adapter: in interop/ it would make interop/go.mod
// require the adapter's module, a dependency a user of interop/crpriority
// did not ask for; in prometheus/ it would make the adapter's module require
// client-go. It is a package of its own, not a file of package integration,
// because that package's binary runs kube-apiserver: the server registers
// collectors in component-base's legacy registry that dial etcd when first
// gathered, and a goroutine waiting on a socket inside the synctest bubble
// stops the bubble's clock for good.
package adapterseries

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue"
	wqprom "github.com/go-coalesce/workqueue/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	clientworkqueue "k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/metrics/prometheus/workqueue" // client-go's queues report to the legacy registry, as in kube-controller-manager
)

// TestMain fails the package if a test leaves a goroutine behind (the
// queues' own goroutines must end with ShutDown).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// seriesOf returns the workqueue_* series of the queue named name in g, keyed
// by family and labels (the queue's name written as Q), each with its type
// and value (a histogram's sample count, and its bucket bounds in the key),
// help left out: component-base writes its stability level into the help.
func seriesOf(t *testing.T, g prometheus.Gatherer, name string) map[string]string {
	t.Helper()
	fams, err := g.Gather()
	require.NoError(t, err, "gather")
	out := map[string]string{}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "workqueue_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			mine := false
			for _, lp := range m.GetLabel() {
				v := lp.GetValue()
				if lp.GetName() == "name" && v == name {
					mine, v = true, "Q"
				}
				labels = append(labels, lp.GetName()+"="+v)
			}
			if !mine {
				continue
			}
			sort.Strings(labels)
			key := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			var value string
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				value = fmt.Sprint(m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				value = fmt.Sprint(m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				var bounds []string
				for _, b := range h.GetBucket() {
					bounds = append(bounds, fmt.Sprint(b.GetUpperBound()))
				}
				value = fmt.Sprintf("count=%d bounds=%s", h.GetSampleCount(), strings.Join(bounds, " "))
			}
			out[key] = f.GetType().String() + " " + value
		}
	}
	return out
}

// TestAdapterSeriesLikeClientGoAtIdleAfterWorkAndAfterShutDown puts a
// client-go queue reporting through component-base's provider (the legacy
// registry) beside ours reporting through the Prometheus adapter (a fresh
// registry), under their own names, and compares their series for series
// at idle, once all work is done, and after ShutDown, on synctest's clock
// so that client-go's age gauges (refreshed every 500 ms) are current. The
// adapter must show client-go's names, types, labels, buckets and values,
// and its workqueue_delayed_items besides; every gauge reads 0 in both at
// idle, after the work and after ShutDown; no series goes away.
func TestAdapterSeriesLikeClientGoAtIdleAfterWorkAndAfterShutDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		theirsName := fmt.Sprintf("adapter-theirs-%d", time.Now().UnixNano())
		oursName := fmt.Sprintf("adapter-ours-%d", time.Now().UnixNano())
		limiter := func() clientworkqueue.TypedRateLimiter[string] {
			return clientworkqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 10*time.Millisecond)
		}
		theirs := clientworkqueue.NewTypedRateLimitingQueueWithConfig(limiter(),
			clientworkqueue.TypedRateLimitingQueueConfig[string]{Name: theirsName})
		reg := prometheus.NewRegistry()
		ours := workqueue.NewRateLimitingQueueWithConfig(limiter(),
			workqueue.Config[string]{Name: oursName, Metrics: wqprom.NewProvider(reg)})

		check := func(phase string) {
			t.Helper()
			theirsS := seriesOf(t, legacyregistry.DefaultGatherer, theirsName)
			oursS := seriesOf(t, reg, oursName)
			require.Len(t, theirsS, 7, "%s: client-go's seven series through component-base (is component-base the provider of client-go's queues in this binary?)", phase)
			delayed, ok := oursS["workqueue_delayed_items{name=Q}"]
			require.True(t, ok, "%s: the adapter's delayed items", phase)
			require.Equal(t, "GAUGE 0", delayed, "%s: delayed items", phase)
			delete(oursS, "workqueue_delayed_items{name=Q}")
			require.Equal(t, theirsS, oursS, "%s: the adapter's series and values must be client-go's", phase)
			for k, v := range theirsS {
				if strings.HasPrefix(v, "GAUGE") {
					require.Equal(t, "GAUGE 0", v, "%s: %s", phase, k)
				}
			}
		}

		time.Sleep(time.Second) // a refresh of client-go's age gauges
		check("idle")
		for _, q := range []clientworkqueue.TypedRateLimitingInterface[string]{theirs, ours} {
			workSeven(q)
		}
		time.Sleep(time.Second)
		check("all work done")
		theirs.ShutDown()
		ours.ShutDown()
		time.Sleep(time.Second)
		check("shut down")
		check("shut down, scraped again")
	})
}

// workSeven runs five keys on q with one worker in the calling goroutine:
// default/b fails once (AddRateLimited), default/c asks to run again in 1ms
// (AddAfter); seven runs in all. The delays pass on synctest's clock while
// Get waits.
func workSeven(q clientworkqueue.TypedRateLimitingInterface[string]) {
	keys := []string{"default/a", "default/b", "default/c", "default/d", "default/e"}
	for _, k := range keys {
		q.Add(k)
	}
	calls := map[string]int{}
	for range len(keys) + 2 {
		key, _ := q.Get()
		calls[key]++
		switch {
		case key == "default/b" && calls[key] == 1:
			q.AddRateLimited(key)
		case key == "default/c" && calls[key] == 1:
			q.Forget(key)
			q.AddAfter(key, time.Millisecond)
		default:
			q.Forget(key)
		}
		q.Done(key)
	}
}
