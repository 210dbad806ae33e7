package integration

import (
	"bytes"
	"fmt"
	"os"
	"sync"
)

// mainTB is the testing.TB that StartTestServer asks for, for a server that
// outlives every test: it is started in TestMain, where no *testing.T exists.
// It keeps the server's test log in memory (TestMain prints it if a test
// fails), records failures for TestMain to report, and runs its cleanups
// when the server is stopped.
//
// StartTestServer registers cleanups (cancelling its context, restoring
// feature gates) on the TB it is given; giving it a test's *testing.T would
// stop the shared server at the end of that test.
type mainTB struct {
	mu       sync.Mutex // protects the fields below
	log      lockedBuffer
	failed   bool
	cleanups []func()
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (tb *mainTB) Attr(key, value string) {}
func (tb *mainTB) Chdir(dir string)       { panic("integration: mainTB.Chdir is not supported") }
func (tb *mainTB) Setenv(key, value string) {
	panic("integration: mainTB.Setenv is not supported")
}
func (tb *mainTB) Helper()      {}
func (tb *mainTB) Name() string { return "TestMain" }

func (tb *mainTB) Cleanup(f func()) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.cleanups = append(tb.cleanups, f)
}

// cleanup runs the registered cleanups, last registered first, as testing does.
func (tb *mainTB) cleanup() {
	for {
		tb.mu.Lock()
		n := len(tb.cleanups)
		if n == 0 {
			tb.mu.Unlock()
			return
		}
		f := tb.cleanups[n-1]
		tb.cleanups = tb.cleanups[:n-1]
		tb.mu.Unlock()
		f()
	}
}

func (tb *mainTB) Log(args ...any) { fmt.Fprintln(&tb.log, args...) }
func (tb *mainTB) Logf(format string, args ...any) {
	fmt.Fprintf(&tb.log, format+"\n", args...)
}

func (tb *mainTB) Fail() {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.failed = true
}

func (tb *mainTB) Failed() bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.failed
}

func (tb *mainTB) Error(args ...any) { tb.Log(args...); tb.Fail() }
func (tb *mainTB) Errorf(format string, args ...any) {
	tb.Logf(format, args...)
	tb.Fail()
}

// FailNow stops the caller, as testing.T's does, but by panicking with
// fatal{} instead of ending the goroutine: StartTestServer calls it (through
// Fatalf) only while starting, on TestMain's goroutine, and startTestServer
// recovers it into an error.
func (tb *mainTB) FailNow() {
	tb.Fail()
	panic(fatal{})
}

// fatal is the panic value of mainTB.FailNow.
type fatal struct{}

func (tb *mainTB) Fatal(args ...any) { tb.Log(args...); tb.FailNow() }
func (tb *mainTB) Fatalf(format string, args ...any) {
	tb.Logf(format, args...)
	tb.FailNow()
}

func (tb *mainTB) Skip(args ...any)                 { tb.Fatal(args...) }
func (tb *mainTB) Skipf(format string, args ...any) { tb.Fatalf(format, args...) }
func (tb *mainTB) SkipNow()                         { tb.FailNow() }
func (tb *mainTB) Skipped() bool                    { return false }

func (tb *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "integration")
	if err != nil {
		tb.Fatalf("integration: TempDir: %v", err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
