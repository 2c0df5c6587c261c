package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/journal"
)

// canary is a key that must appear nowhere outlast writes: it is sent in
// every credential header and in a query, is the gateway's token, is in
// the upstreams' URLs, and comes back in the upstream's answers as
// providers echo a key they refuse.
const canary = "sk-canary-5e1f0c9a"

// The credential the gateway holds for the upstream "held" is the canary
// too: it must reach that upstream and nothing else.
func init() { os.Setenv("OUTLAST_TEST_CANARY_AUTH", canary) }

// A canary key sent every way a key travels appears in no log line,
// journal row, SQLite file or its WAL, metric, page, feed, journal API
// answer, `outlast requests` output, or error body the gateway writes.
func TestCanaryAppearsNowhere(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		echo := fmt.Sprintf("Incorrect API key provided: %s (%s)", r.Header.Get("Authorization"), r.URL.RawQuery)
		w.Header().Set("Set-Cookie", "session="+canary)
		switch {
		case strings.Contains(r.URL.Path, "stream"):
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: error\ndata: {\"error\":{\"type\":\"overloaded_error\",\"message\":%q}}\n\n", echo)
		case n.Add(1)%2 == 1:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"error":{"message":%q}}`, echo)
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"ok":true}`)
		}
	}))
	t.Cleanup(upstream.Close)
	// Nothing listens on port 1, and no listener on port 0 is given it;
	// a port just closed could be given to a parallel test's listener.
	down := "127.0.0.1:1"
	config := filepath.Join(t.TempDir(), "outlast.yaml")
	os.WriteFile(config, []byte(fmt.Sprintf(`token: %s
journal_headers: true
upstreams:
  - name: down
    prefix: /down
    url: http://%s/v1?key=%s
    waits: [1ms]
    max_attempts: 2
  - name: up
    url: %s/v1?key=%s
    waits: [1ms, 1ms]
    max_attempts: 3
  - name: down2
    prefix: /down2
    url: http://%s/v1
    waits: [1ms]
    max_attempts: 2
    fallbacks: [held]
  - name: held
    prefix: /held
    url: %s/v1
    waits: [1ms, 1ms]
    auth: env:OUTLAST_TEST_CANARY_AUTH
    auth_header: x-api-key
`, canary, down, canary, upstream.URL, canary, down, upstream.URL)), 0o600)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	addr, spec, done, stderr := startServeLogged(t, ctx, "--config", config)

	// seen collects every text outlast wrote, by where it came from.
	seen := map[string]string{}
	client := newClient(t)
	do := func(name, method, path, body string, token string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, addr+path, strings.NewReader(body))
		req.Header.Set("Outlast-Token", token)
		for _, h := range []string{"Authorization", "Proxy-Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key"} {
			req.Header.Set(h, "Bearer "+canary)
		}
		req.Header.Set("Cookie", "session="+canary)
		req.Header.Set("X-Caller", "kept")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Header.Get("Outlast-Error") != "" {
			seen["the error body of "+name] = string(b)
			seen["the error headers of "+name] = fmt.Sprint(resp.Header)
		}
		return resp
	}
	var ids []string
	for _, c := range []struct{ name, path, body string }{
		{"a request retried to success", "/chat/completions?key=" + canary + "&api_key=" + canary, `{"model":"m"}`},
		{"a stream that opens with an error event", "/stream?key=" + canary, `{"model":"m","stream":true}`},
		{"an unreachable upstream", "/down/chat?key=" + canary, `{"model":"m"}`},
		{"a fallback to an upstream with a held key", "/down2/chat", `{"model":"m"}`},
	} {
		resp := do(c.name, http.MethodPost, c.path, c.body, canary)
		ids = append(ids, resp.Header.Get("Outlast-Request-Id"))
	}
	if resp := do("a wrong token", http.MethodPost, "/chat", "{}", canary+"-wrong"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong token: got %d, want 401", resp.StatusCode)
	}
	// The journal has the requests once its writer has flushed them.
	for _, id := range ids {
		for deadline := time.Now().Add(20 * time.Second); ; {
			if do("the record of "+id, http.MethodGet, "/outlast/requests/"+id, "", canary).StatusCode == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the journal did not hold request %s within 20s", id)
			}
			time.Sleep(50 * time.Millisecond) // polls the journal, which flushes each second
		}
	}
	for _, path := range []string{"/outlast/requests", "/outlast/requests?run=", "/outlast/recent", "/outlast/metrics", "/outlast/health", "/outlast/", "/outlast/requests/" + ids[0]} {
		req, _ := http.NewRequest(http.MethodGet, addr+path, nil)
		req.Header.Set("Outlast-Token", canary)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: got %d, want 200", path, resp.StatusCode)
		}
		seen[path] = string(b)
	}
	seen["the page's event stream"] = firstEvent(t, addr+"/outlast/events")
	path := strings.TrimPrefix(spec, "sqlite:")
	wal, err := os.ReadFile(path + "-wal")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	seen["the journal's WAL, while serving"] = string(wal)
	cancel()
	waitServe(t, done)
	seen["serve's log"] = stderr.all()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, _ := os.ReadFile(path + suffix)
		seen["the journal's file "+filepath.Base(path+suffix)] = string(b)
	}
	var out, errOut bytes.Buffer
	if err := Run(t.Context(), []string{"requests", "--journal", spec, "--json"}, &out, &errOut); err != nil {
		t.Fatalf("outlast requests: %v\n%s", err, errOut.String())
	}
	seen["outlast requests --json"] = out.String() + errOut.String()
	s, err := journal.OpenExisting(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range ids {
		rec, err := s.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		seen["the journal's row of "+id] = fmt.Sprintf("%+v", rec)
	}

	// What was read holds what the requests carried, less the secrets.
	if !strings.Contains(seen["serve's log"], "upstream") || !strings.Contains(seen["/outlast/requests/"+ids[0]], ids[0]) || !strings.Contains(seen["the journal's row of "+ids[0]], "X-Caller") {
		t.Fatalf("the test read too little to mean anything: %v", seen)
	}
	for where, text := range seen {
		for _, secret := range []string{canary, strings.TrimPrefix(canary, "sk-")} {
			if i := strings.Index(text, secret); i >= 0 {
				t.Errorf("%s holds the canary: …%s…", where, text[max(0, i-80):min(len(text), i+len(secret)+20)])
			}
		}
	}
}

// firstEvent returns the first event of an event stream.
func firstEvent(t *testing.T, target string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	req.Header.Set("Outlast-Token", canary)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 16<<20)
	for lines.Scan() && lines.Text() != "" {
		b.WriteString(lines.Text() + "\n")
	}
	return b.String()
}
