package sharding_test

import (
	"flag"
	"io"
	"testing"

	"go.uber.org/goleak"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
)

func TestMain(m *testing.M) {
	// The replicas log the filtering mode they choose (klog, as
	// client-go): hundreds of lines in a scenario run. TestModeLogged
	// reads them.
	fs := flag.NewFlagSet("klog", flag.PanicOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
	// A reflector hands a failed LIST or WATCH (a 403 in TestForbidden)
	// to utilruntime.HandleError, whose rate limiter sleeps until 1 ms
	// after the last error it saw, a time first taken when the package
	// was initialised, outside any synctest bubble: inside one, whose
	// clock starts in 2000, that sleep lasts until today and the bubble's
	// clock jumps there. Keep only the logging handler.
	utilruntime.ErrorHandlers = utilruntime.ErrorHandlers[:1]
	goleak.VerifyTestMain(m)
}
