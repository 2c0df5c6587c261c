package timeline_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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

// TestPageCarriesTheNewest checks the page's first paint: its HTML holds
// the newest requests, as many as it draws, as JSON in a data element,
// so that the page shows them before its event stream delivers; and a
// request's path cannot end that element early.
func TestPageCarriesTheNewest(t *testing.T) {
	t.Parallel()
	f := timeline.New(0, 0)
	obs := f.Observer()
	const n = 250
	evil := "/v1/</script><script>alert(1)</script><!--"
	for i := range n {
		r := request(fmt.Sprintf("r%03d", i), "run")
		if i == n-1 {
			r.Path = evil
		}
		r.Attempts = append(r.Attempts, attempt(1, 0, time.Second, 200, nil))
		obs.AttemptEnd(r, r.Attempts[0])
		r.Status, r.End = 200, t0.Add(time.Second)
		obs.Done(r)
	}
	srv := httptest.NewServer(f.Endpoints()[""])
	t.Cleanup(srv.Close)
	resp, body := get(t, client(t), srv.URL)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d, want 200", resp.StatusCode)
	}
	if strings.Contains(body, "<script>alert") || strings.Count(body, "</script>") != 2 {
		t.Errorf("a request's path ends the page's data element early:\n%s", body)
	}
	const open = `<script type="application/json" id="first">`
	_, data, ok := strings.Cut(body, open)
	data, _, ok2 := strings.Cut(data, "</script>")
	if !ok || !ok2 {
		t.Fatalf("the page has no %s element", open)
	}
	snap := decode[timeline.Snapshot](t, data)
	if got, want := len(snap.Requests), 200; got != want || snap.Elided != n-want {
		t.Fatalf("the page carries %d requests and elides %d, want the newest %d and %d", got, snap.Elided, want, n-want)
	}
	if first, last := snap.Requests[0], snap.Requests[len(snap.Requests)-1]; first.ID != "r050" || last.ID != "r249" || last.Path != evil {
		t.Errorf("the page carries %s to %s (path %q), want r050 to r249 (path %q)", first.ID, last.ID, last.Path, evil)
	}
	if got := snap.Requests[0].Attempts[0].Ending; got != "200" {
		t.Errorf("got the ending %q, want %q", got, "200")
	}
	if !strings.Contains(body, `<p id="empty" hidden>`) {
		t.Errorf("the page says it has no requests before its script runs")
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self';") {
		t.Errorf("got Content-Security-Policy %q, want the page's own scripts only", csp)
	}
}
