package debug_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/debug"
)

// browser returns the path of a Chromium-family browser that can run
// headless, or "" if none is installed. WORKQUEUE_BROWSER names one
// explicitly.
func browser() string {
	if b := os.Getenv("WORKQUEUE_BROWSER"); b != "" {
		return b
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// dumpDOM loads url in a headless browser and returns the document as the
// browser built it, after its scripts (if any) ran.
func dumpDOM(t *testing.T, bin, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin,
		"--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
		"--user-data-dir="+t.TempDir(), // no profile shared with anyone
		"--dump-dom", url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s --dump-dom failed; its stderr:\n%s", bin, stderr.String())
	return string(out)
}

// TestBrowserRendersPage loads the page in a real headless browser and
// checks the tables it rendered: the keys in their order, markup in keys
// shown as text and never run. CI installs Debian's chromium for it
// (.ci/install-browser); elsewhere it is skipped when no browser is found.
func TestBrowserRendersPage(t *testing.T) {
	bin := browser()
	if bin == "" && os.Getenv("CI") != "" {
		// CI installs one (.ci/install-browser): a skip there would hide
		// that the page was never checked.
		t.Fatal("CI is set but no headless browser was found; .ci/run must run .ci/install-browser first")
	}
	if bin == "" {
		t.Skip("no headless browser found (chromium, chromium-browser, google-chrome or WORKQUEUE_BROWSER): " +
			"the page is not checked in a browser; on Debian, apt-get install chromium (see .ci/install-browser)")
	}
	q := workqueue.NewRateLimitingQueueWithConfig(
		workqueue.NewItemExponentialFailureRateLimiter[string](time.Hour, time.Hour),
		workqueue.Config[string]{Name: "deployments", Metrics: nopProvider{}})
	defer q.ShutDown()
	q.Add("default/slow")
	q.Add(scriptKey)
	q.Get()
	q.Get()
	q.AddRateLimited("default/broken")
	q.AddRateLimited("default/broken")
	q.AddRateLimited(quoteKey)
	q.Add("default/next")

	srv := httptest.NewServer(debug.NewHandler(debug.Options{}, debug.Queue("deployments", q, nil)))
	defer srv.Close()
	dom := dumpDOM(t, bin, srv.URL+"/debug/workqueue")

	require.Contains(t, dom, "<h2>deployments</h2>", "the browser rendered the page")
	require.NotContains(t, dom, `data-pwned="1"`, "a key's script never ran: it would have set this attribute")
	require.NotContains(t, dom, "<script", "no key became a script element")
	// The browser puts rows in a tbody; cells finds them inside it.
	require.Equal(t, []string{"default/slow", scriptKey}, cells(dom, "processing"),
		"processing keys, oldest first, shown as text")
	require.Equal(t, []string{"default/broken", quoteKey}, cells(dom, "waiting"),
		"waiting keys, due soonest first, quotes and markup shown as text")
	require.Equal(t, []string{"default/broken", quoteKey}, cells(dom, "requeues"),
		"the keys with the most requeues first")
	require.Equal(t, []string{"default/next"}, cells(dom, "ready"))
	require.Equal(t, []string{"0"}, column(dom, "ages", "prio"),
		"the ready age of the one level, priority 0 for a FIFO")
	require.Len(t, column(dom, "ages", "age"), 1)
}

// The browser test skips, rather than fails, where no browser is found,
// and WORKQUEUE_BROWSER picks one explicitly.
func TestBrowserLookup(t *testing.T) {
	t.Setenv("WORKQUEUE_BROWSER", "")
	t.Setenv("PATH", t.TempDir())
	require.Empty(t, browser(), "no browser on an empty PATH")
	t.Setenv("WORKQUEUE_BROWSER", "/opt/chrome/headless_shell")
	require.Equal(t, "/opt/chrome/headless_shell", browser())
}
