package ringpage_test

import (
	"context"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-coalesce/workqueue"
	"github.com/go-coalesce/workqueue/sharding"
	"github.com/go-coalesce/workqueue/sharding/ringpage"
)

// browser returns the path of a Chromium-family browser that can run
// headless, or "" if none is installed; WORKQUEUE_BROWSER names one
// explicitly (as for the queue's debug page, debug/browser_test.go).
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

// headless runs the browser on url with args (--dump-dom, --screenshot)
// and returns its standard output.
func headless(t *testing.T, bin, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all := append([]string{"--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
		"--user-data-dir=" + t.TempDir()}, args...)
	cmd := exec.CommandContext(ctx, bin, append(all, url)...)
	cmd.Dir = t.TempDir()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v failed: %v; its stderr:\n%s", bin, args, err, stderr.String())
	}
	return string(out)
}

// frozen is a replica's answers taken once, inside a synctest bubble, and
// served from outside it to a real browser.
type frozen struct {
	st    sharding.Status
	shard map[string]int
	owns  map[string]bool
}

func (f frozen) Status() sharding.Status { return f.st }
func (f frozen) ShardOfKey(key string) (int, bool) {
	s, ok := f.shard[key]
	return s, ok
}
func (f frozen) Owns(key string) bool { return f.owns[key] }

// waitingQueue answers that every key waits for a retry due at due.
type waitingQueue struct{ due time.Time }

func (q waitingQueue) State(string) workqueue.KeyState { return workqueue.KeyWaiting }
func (q waitingQueue) InspectLimited(workqueue.InspectLimits) []workqueue.KeyInfo[string] {
	return nil // filled in per key by keyQueue
}

type keyQueue struct {
	waitingQueue
	key string
}

func (q keyQueue) InspectLimited(workqueue.InspectLimits) []workqueue.KeyInfo[string] {
	return []workqueue.KeyInfo[string]{{Key: q.key, State: workqueue.KeyWaiting, Due: q.due}}
}
func (q keyQueue) NumRequeues(string) int { return 3 }

// TestBrowserRendersRing loads the page of a settled two-replica ring in
// a real headless browser and checks what it rendered: a row per shard,
// each held, live and admitted, the summary, and a key's holder and queue
// state. CI installs Debian's chromium for it (.ci/install-browser);
// elsewhere it is skipped when no browser is found. With
// RINGPAGE_SCREENSHOT=file.png it also saves a screenshot there
// (sharding/docs/ring-page.png).
func TestBrowserRendersRing(t *testing.T) {
	bin := browser()
	if bin == "" && os.Getenv("CI") != "" {
		t.Fatal("CI is set but no headless browser was found; .ci/run must run .ci/install-browser first")
	}
	if bin == "" {
		t.Skip("no headless browser found (chromium, chromium-browser, google-chrome or WORKQUEUE_BROWSER): " +
			"the page is not checked in a browser; on Debian, apt-get install chromium (see .ci/install-browser)")
	}
	var f frozen
	var key string
	ring(t, func(r *sharding.Replica, uids map[string]string) {
		f = frozen{st: r.Status(), shard: map[string]int{}, owns: map[string]bool{}}
		for k := range uids {
			if s, ok := r.ShardOfKey(k); ok && (key == "" || k < key) {
				key = k
				f.shard[k], f.owns[k] = s, r.Owns(k)
			}
		}
	})
	if key == "" {
		t.Fatal("r-0 holds no key")
	}
	q := keyQueue{waitingQueue{f.st.Time.Add(4 * time.Second)}, key}
	srv := httptest.NewServer(ringpage.New(f, ringpage.Options{Queue: q}))
	defer srv.Close()
	target := srv.URL + "/debug/ring?key=" + url.QueryEscape(key)
	dom := headless(t, bin, target, "--dump-dom")

	if !strings.Contains(dom, "<h1>Ring ctl</h1>") {
		t.Fatalf("the browser did not render the page:\n%s", dom)
	}
	if rows := regexp.MustCompile(`<tr data-shard="\d+">`).FindAllString(dom, -1); len(rows) != shards {
		t.Errorf("%d shard rows, want %d", len(rows), shards)
	}
	for _, want := range []string{
		"8 of 8 shards held, 8 admitted by a live holder",
		`<span class="state state-admitted">admitted</span>`,
		"<h2>Key " + key + "</h2>",
		"<th>holder</th><td>r-0</td>",
		"yes: this replica admits it",
		`<span class="state">waiting</span> · due in 4s · 3 requeues`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}
	if path := os.Getenv("RINGPAGE_SCREENSHOT"); path != "" {
		dir := t.TempDir()
		cmdArgs := []string{"--hide-scrollbars", "--window-size=1280,860", "--screenshot=" + dir + "/page.png"}
		headless(t, bin, target, cmdArgs...)
		png, err := os.ReadFile(dir + "/page.png")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
