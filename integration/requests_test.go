package integration

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// requestCounter counts the requests a set of clients sends, by verb and
// resource ("LIST configmaps", "UPDATE leases", "WATCH leases"), as the API
// server's apiserver_request_total would, but for these clients only: the
// test's own reads and writes go through other clients and are not
// counted. A watch counts once, when it is opened.
type requestCounter struct {
	mu      sync.Mutex // protects the fields below
	counts  map[string]int
	slowest map[string]time.Duration // of the requests answered, watches aside
}

func newRequestCounter() *requestCounter {
	return &requestCounter{counts: map[string]int{}, slowest: map[string]time.Duration{}}
}

// wrap is a rest.Config.WrapTransport that counts every request sent
// through rt (also those a link later fails: they were attempted).
func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		verb, resource := classify(req)
		what := verb + " " + resource
		c.mu.Lock()
		c.counts[what]++
		c.mu.Unlock()
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		if took := time.Since(start); err == nil && verb != "WATCH" {
			c.mu.Lock()
			c.slowest[what] = max(c.slowest[what], took)
			c.mu.Unlock()
		}
		if err == nil && resp.StatusCode >= 300 {
			c.mu.Lock()
			c.counts[fmt.Sprintf("%s answered %d", what, resp.StatusCode)]++
			c.mu.Unlock()
		}
		return resp, err
	})
}

// reset returns the counts so far and starts again from zero.
func (c *requestCounter) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.counts
	c.counts = map[string]int{}
	c.slowest = map[string]time.Duration{}
	return old
}

// slowestLeaseWrite returns the longest a Lease write took to be answered
// since the last reset.
func (c *requestCounter) slowestLeaseWrite() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.slowest["CREATE leases"], c.slowest["UPDATE leases"], c.slowest["DELETE leases"])
}

// format prints counts sorted by name.
func formatCounts(counts map[string]int) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(counts)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, counts[k])
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// classify returns a request's verb, in the API server's words (LIST and
// WATCH for GETs of a collection, GET of one object, CREATE, UPDATE, PATCH,
// DELETE), and its resource.
func classify(req *http.Request) (verb, resource string) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return req.Method, req.URL.Path
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	if len(rest) == 0 {
		return req.Method, req.URL.Path
	}
	resource, named := rest[0], len(rest) > 1
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			return "WATCH", resource
		case named:
			return "GET", resource
		default:
			return "LIST", resource
		}
	case http.MethodPost:
		return "CREATE", resource
	case http.MethodPut:
		return "UPDATE", resource
	case http.MethodPatch:
		return "PATCH", resource
	case http.MethodDelete:
		return "DELETE", resource
	}
	return req.Method, resource
}

// leaseWrites is how many Lease writes counts holds.
func leaseWrites(counts map[string]int) int {
	return counts["CREATE leases"] + counts["UPDATE leases"] + counts["PATCH leases"] + counts["DELETE leases"]
}

// lists is how many LISTs counts holds, of any resource.
func lists(counts map[string]int) int {
	n := 0
	for k, v := range counts {
		if strings.HasPrefix(k, "LIST ") {
			n += v
		}
	}
	return n
}
