package timeline_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/outlast-llm/outlast/timeline"
)

func TestPageThroughGateway(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	base, _ := serve(t, timeline.New(0, 0), up.URL)
	c := client(t)

	cases := []struct {
		path, method string
		status       int
		contentType  string
		contains     []string
	}{
		// The page, with its legend, the filters and the stream's URL filled in.
		{"/outlast/", "GET", 200, "text/html; charset=utf-8", []string{`id="legend"`, "Legend", "Retry-After", `id="filter-status"`, `data-events="events"`, "timeline/timeline.js?v="}},
		// Its script and style, embedded.
		{"/outlast/timeline/timeline.js", "GET", 200, "text/javascript; charset=utf-8", []string{"EventSource"}},
		{"/outlast/timeline/timeline.css", "GET", 200, "text/css; charset=utf-8", []string{"--ok"}},
		// Nothing else of the embedded files, and no listing.
		{"/outlast/timeline/index.html", "GET", 404, "", nil},
		{"/outlast/timeline/", "GET", 404, "", nil},
		// The snapshot.
		{"/outlast/recent", "GET", 200, "application/json", []string{`"keep":1000`, `"requests":[]`, `"name":"mock"`, `"states":[]`}},
		// The page is read-only.
		{"/outlast/", "POST", 405, "", nil},
		{"/outlast/events", "POST", 405, "", nil},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(tc.method, base+tc.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: got %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
			continue
		}
		if ct := resp.Header.Get("Content-Type"); tc.contentType != "" && ct != tc.contentType {
			t.Errorf("%s %s: got Content-Type %q, want %q", tc.method, tc.path, ct, tc.contentType)
		}
		for _, s := range tc.contains {
			if !strings.Contains(string(b), s) {
				t.Errorf("%s %s: the body lacks %q", tc.method, tc.path, s)
			}
		}
	}
	resp, _ := get(t, c, base+"/outlast/")
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("got Content-Security-Policy %q, want the page's own scripts only", csp)
	}
}

// TestRecentHasNoSecrets sends requests that carry credentials through
// the gateway, to an upstream that fails and to one that is not there,
// and looks for the credentials in what the page reads.
func TestRecentHasNoSecrets(t *testing.T) {
	t.Parallel()
	attempts := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts++
		if attempts == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(up.Close)
	f := timeline.New(0, 0)
	base, done := serve(t, f, up.URL)

	// An upstream that refuses: the transport's error text holds the URL.
	// Nothing listens on port 1, and no listener on port 0 is given it;
	// a port just closed could be given to a parallel test's listener.
	gone := "http://127.0.0.1:1"
	baseGone, doneGone := serve(t, f, gone)

	secrets := []string{"sk-secret-bearer", "secret-api-key", "secret-cookie", "secret-custom", "secret-query"}
	c := client(t)
	for _, target := range []string{base, baseGone} {
		req, _ := http.NewRequest("POST", target+"/v1/chat/completions?key=secret-query", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Authorization", "Bearer sk-secret-bearer")
		req.Header.Set("X-Api-Key", "secret-api-key")
		req.Header.Set("Cookie", "session=secret-cookie")
		req.Header.Set("X-Custom", "secret-custom")
		req.Header.Set("Outlast-Run", "secrets")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	await(t, done, 1)
	await(t, doneGone, 1)
	_, body := get(t, c, base+"/outlast/recent")
	for _, s := range secrets {
		if strings.Contains(body, s) {
			t.Errorf("/outlast/recent shows %q: %s", s, body)
		}
	}
	snap := decode[timeline.Snapshot](t, body)
	if len(snap.Requests) != 2 {
		t.Fatalf("got %d requests, want 2", len(snap.Requests))
	}
	// The record is still useful: what failed, and how.
	if got := snap.Requests[0]; got.Run != "secrets" || len(got.Attempts) != 2 || got.Attempts[0].Status != 502 || got.Status != 200 {
		t.Errorf("first request: got run %q, %d attempts, status %d, want secrets, 2, 200", got.Run, len(got.Attempts), got.Status)
	}
	if got := snap.Requests[1]; len(got.Attempts) == 0 || got.Attempts[0].Error != "refused" || got.Outcome != timeline.OutcomeNetwork {
		t.Errorf("second request: got %+v, want refused attempts and a network outcome", got)
	}
}
