package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-coalesce/workqueue/debug"
	"github.com/go-coalesce/workqueue/sharding/ringpage"
)

// TestStoryPages runs the story with its pages mounted and, while Hold
// keeps the surviving replicas running, reads them as a browser would:
// the ring page shows every shard held by a survivor (as any replica sees
// it, and as each sees it), and the queues' page shows each replica's
// queue. The URL is printed with the pages.
func TestStoryPages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		mux := http.NewServeMux()
		get := func(path string) (int, string) {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			return rec.Code, rec.Body.String()
		}
		held := false
		var out bytes.Buffer
		_, err := Story(ctx, &out, StoryOptions{ServerFilter: true, Pages: mux, URL: "http://127.0.0.1:8080", Hold: func() {
			held = true
			time.Sleep(time.Second) // the pages are live while the story holds
			for _, path := range []string{"/debug/ring", "/debug/ring/replica-c"} {
				code, body := get(path + "?format=json")
				var p ringpage.Page
				if err := json.Unmarshal([]byte(body), &p); code != http.StatusOK || err != nil {
					t.Errorf("GET %s?format=json: %d %v\n%s", path, code, err, body)
					continue
				}
				if want := map[string]string{"/debug/ring": "replica-a", "/debug/ring/replica-c": "replica-c"}[path]; p.Identity != want {
					t.Errorf("GET %s: the ring as %s sees it, want %s", path, p.Identity, want)
				}
				if len(p.Shards) != shards {
					t.Errorf("GET %s: %d shards, want %d", path, len(p.Shards), shards)
				}
				for _, s := range p.Shards {
					if !s.Held || (s.Holder != "replica-a" && s.Holder != "replica-c") {
						t.Errorf("GET %s: shard %d held %v by %q, want held by a survivor", path, s.Shard, s.Held, s.Holder)
					}
				}
			}
			if code, body := get("/debug/ring?key=default/web-007"); code != http.StatusOK || !strings.Contains(body, "web-007") {
				t.Errorf("GET /debug/ring?key=default/web-007: %d, the page does not name the key:\n%s", code, body)
			}
			code, body := get("/debug/workqueue?format=json")
			var p debug.Page
			if err := json.Unmarshal([]byte(body), &p); code != http.StatusOK || err != nil {
				t.Errorf("GET /debug/workqueue?format=json: %d %v\n%s", code, err, body)
			}
			var names []string
			for _, q := range p.Queues {
				names = append(names, q.Name)
			}
			if strings.Join(names, ",") != strings.Join(replicaNames, ",") {
				t.Errorf("GET /debug/workqueue: queues %v, want every replica's, %v", names, replicaNames)
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		if !held {
			t.Error("Story never called Hold")
		}
		for _, line := range []string{
			"the ring: http://127.0.0.1:8080/debug/ring (as replica-a sees it",
			"the queues: http://127.0.0.1:8080/debug/workqueue",
			"until interrupted (Ctrl-C)",
		} {
			if !strings.Contains(out.String(), line) {
				t.Errorf("output lacks %q:\n%s", line, out.String())
			}
		}
	})
}

// TestListenHelp: -listen's help names the pages it serves.
func TestListenHelp(t *testing.T) {
	fs := flag.NewFlagSet("deployments", flag.ContinueOnError)
	defineFlags(fs)
	help := fs.Lookup("listen").Usage
	for _, want := range []string{"/debug/ring", "/debug/workqueue", "127.0.0.1", "/metrics"} {
		if !strings.Contains(help, want) {
			t.Errorf("-listen's help lacks %q: %s", want, help)
		}
	}
}
