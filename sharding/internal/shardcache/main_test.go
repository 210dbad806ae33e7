package shardcache_test

import (
	"flag"
	"io"
	"testing"

	"go.uber.org/goleak"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
)

func TestMain(m *testing.M) {
	fs := flag.NewFlagSet("klog", flag.PanicOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
	// A Reflector hands a failed watch to utilruntime.HandleError, whose
	// rate limiter sleeps until 1 ms after the last error it saw, a time
	// first taken when the package was initialised, outside any synctest
	// bubble: inside one, whose clock starts in 2000, that sleep lasts 26
	// years (TestRelistIsPaged). Keep only the logging handler, as
	// package sharding's tests do.
	utilruntime.ErrorHandlers = utilruntime.ErrorHandlers[:1]
	goleak.VerifyTestMain(m)
}
