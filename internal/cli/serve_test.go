package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/journal"
)

// TestServeHelp checks that --help shows every flag with its default
// (STYLE rule 13), and that asking for it is not an error.
func TestServeHelp(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	if err := runServe(t.Context(), []string{"--help"}, io.Discard, &stderr); err != nil {
		t.Fatalf("got %v, want nil", err)
	}
	help := stderr.String()
	for _, s := range []string{
		"-config file", "(default: none)",
		"-listen address", `(default "127.0.0.1:8700")`,
		"-upstream URL",
		"-slots int", "no bound (default 0)",
		"-queue int", "(default 16)",
		"-waits list", `(default "15s,45s,120s,240s")`,
		"-reserve duration", "(default 1m0s)",
		"-max-attempts int", "no cap (default 0)",
		"-first-byte-timeout duration", "(default 5m0s)",
		"-idle-timeout duration", "(default 2m0s)",
		"-max-body bytes", "(default 33554432)",
		"-grace duration", "(default 30s)",
	} {
		if !strings.Contains(help, s) {
			t.Errorf("got help without %q, want it:\n%s", s, help)
		}
	}
}

// startServe runs serve on a loopback port of its own with args, and
// returns the gateway's URL and a channel that receives serve's result.
func startServe(t *testing.T, ctx context.Context, args ...string) (string, <-chan error) {
	t.Helper()
	cfg := loadServe(t, args...)
	if cfg.journal == journal.DefaultSpec {
		cfg.journal = "sqlite:" + filepath.Join(t.TempDir(), "journal.db") // not the package's folder
	}
	stderr := new(lockedBuffer)
	rec, err := openRecord(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.close(stderr) })
	g, err := newGateway(cfg, rec, stderr)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve(ctx, l, g, cfg, stderr) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve's stderr:\n%s", stderr.String())
		}
	})
	return "http://" + l.Addr().String(), done
}

// waitServe fails the test unless serve returns nil within 10 s.
func waitServe(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: got %v, want nil after the drain", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return within 10s of its context ending")
	}
}

// lockedBuffer is a bytes.Buffer that the gateway's handlers may write to
// while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// A request through serve is retried past a 503, and serve ends cleanly
// when its context does.
func TestServeEndToEnd(t *testing.T) {
	t.Parallel()
	var seen atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if seen.Add(1) == 1 {
			http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, `{"choices":[]}`)
	}))
	t.Cleanup(upstream.Close)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	addr, done := startServe(t, ctx, "--upstream", upstream.URL, "--waits", "1ms", "--grace", "10s")

	resp, err := newClient(t).Post(addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != `{"choices":[]}` {
		t.Errorf("got %d %q, want 200 {\"choices\":[]}", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Outlast-Attempts"); got != "2" {
		t.Errorf("got Outlast-Attempts %q, want 2", got)
	}
	if got := seen.Load(); got != 2 {
		t.Errorf("got %d attempts at the upstream, want 2", got)
	}
	// The journal keeps the request with both attempts.
	id := resp.Header.Get("Outlast-Request-Id")
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := newClient(t).Get(addr + "/outlast/requests/" + id)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode == http.StatusOK {
			if !strings.Contains(string(b), `"retry_in_ms": 1`) {
				t.Errorf("the record lacks the first attempt's wait:\n%s", b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the record never showed request %s: %d %s", id, r.StatusCode, b)
		}
		time.Sleep(50 * time.Millisecond) // the writer flushes every second
	}
	// The metrics are served, and counted the retry.
	resp, err = newClient(t).Get(addr + "/outlast/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `outlast_retries_total{reason="status_5xx",upstream="` + strings.TrimPrefix(upstream.URL, "http://") + `"} 1`; !strings.Contains(string(body), want) {
		t.Errorf("/outlast/metrics lacks %s:\n%s", want, body)
	}
	cancel()
	waitServe(t, done)
}

// A request in flight when the context ends still gets its answer before
// serve returns: SIGTERM drains, it does not cut.
func TestServeDrain(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		io.WriteString(w, "done")
	}))
	t.Cleanup(upstream.Close)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	addr, done := startServe(t, ctx, "--upstream", upstream.URL, "--grace", "10s")

	type result struct {
		status int
		body   string
		err    error
	}
	answered := make(chan result, 1)
	client := newClient(t)
	go func() {
		resp, err := client.Get(addr + "/slow")
		if err != nil {
			answered <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		answered <- result{resp.StatusCode, string(body), err}
	}()
	<-started
	cancel()
	select {
	case err := <-done:
		t.Fatalf("serve returned %v with a request in flight, want it to wait", err)
	case <-time.After(50 * time.Millisecond): // a bounded look, not a synchronization
	}
	close(release)
	r := <-answered
	if r.err != nil || r.status != http.StatusOK || r.body != "done" {
		t.Errorf("got %d %q, error %v; want 200 \"done\"", r.status, r.body, r.err)
	}
	waitServe(t, done)
}
