package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/server"
)

// TestMain lets the test binary be serve's journal writer, as the outlast
// binary is, and serve itself, for the restart test.
func TestMain(m *testing.M) {
	server.RunJournalWriter()
	runServeIfAsked()
	os.Exit(m.Run())
}

// TestServeHelp checks that --help shows every flag with what it takes,
// its default and its key in the config file, and that asking for it is
// not an error.
func TestServeHelp(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	if err := runServe(t.Context(), []string{"--help"}, io.Discard, &stderr); err != nil {
		t.Fatalf("got %v, want nil", err)
	}
	help := stderr.String()
	want := []string{"--config FILE", "(default none)"}
	for _, s := range settings {
		head := "--" + s.flag + " " + s.arg
		if s.bool {
			head = "--" + s.flag + "\n"
		}
		want = append(want, head, s.help, "in the file: "+s.key)
		if s.def != "" {
			want = append(want, "(default "+s.def+";")
		}
	}
	for _, s := range want {
		if !strings.Contains(help, s) {
			t.Errorf("got help without %q, want it:\n%s", s, help)
		}
	}
}

// startServe runs serve, as main does, on a loopback port of its own with
// args and a journal in a temporary folder, and returns the gateway's URL,
// the journal's spec, and a channel that receives serve's result.
func startServe(t *testing.T, ctx context.Context, args ...string) (addr, spec string, done <-chan error) {
	t.Helper()
	addr, spec, done, _ = startServeLogged(t, ctx, args...)
	return addr, spec, done
}

// startServeLogged is startServe, and also returns what serve writes to
// stderr: its first line and its log.
func startServeLogged(t *testing.T, ctx context.Context, args ...string) (addr, spec string, done <-chan error, stderr *serveLog) {
	t.Helper()
	spec = "sqlite:" + filepath.Join(t.TempDir(), "journal.db")
	args = append([]string{"--listen", "127.0.0.1:0", "--journal", spec}, args...)
	r, w := io.Pipe()
	result := make(chan error, 1)
	go func() {
		err := runServe(ctx, args, io.Discard, w)
		w.Close()
		result <- err
	}()
	// serve says where it listens in its first line, once it does.
	lines := bufio.NewScanner(r)
	if !lines.Scan() {
		t.Fatalf("serve stopped before it served: %v", <-result)
	}
	first := lines.Text()
	addr, _, _ = strings.Cut(strings.TrimPrefix(first, "outlast: serving on "), " ")
	if !strings.HasPrefix(addr, "http://127.0.0.1:") {
		t.Fatalf("serve's first line %q does not say where it serves", first)
	}
	stderr = &serveLog{eof: make(chan struct{})}
	stderr.Write([]byte(first + "\n"))
	go func() {
		defer close(stderr.eof)
		for lines.Scan() {
			stderr.Write([]byte(lines.Text() + "\n"))
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve's stderr:\n%s", stderr.String())
		}
	})
	return addr, spec, result, stderr
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
		var b strings.Builder
		pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Fatalf("serve did not return within 10s of its context ending; its goroutines:\n%s", b.String())
	}
}

// serveLog is what serve writes to stderr, as it writes it.
type serveLog struct {
	lockedBuffer
	eof chan struct{} // closed once serve has returned and its last line is in
}

// all returns the whole log, once serve has returned.
func (l *serveLog) all() string {
	<-l.eof
	return l.String()
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
	addr, spec, done := startServe(t, ctx, "--upstream", upstream.URL, "--waits", "1ms", "--jitter-spread", "0", "--grace", "10s")

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
	id := resp.Header.Get("Outlast-Request-Id")
	// The metrics are served, and counted the retry.
	resp, err = newClient(t).Get(addr + "/outlast/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	host := strings.TrimPrefix(upstream.URL, "http://")
	// Admission is on by default: its state and limit are exported too.
	for _, want := range []string{
		`outlast_retries_total{reason="status_5xx",upstream="` + host + `"} 1`,
		`outlast_upstream_state{state="healthy",upstream="` + host + `"} 1`,
		`outlast_upstream_state{state="down",upstream="` + host + `"} 0`,
		`outlast_admission_limit{upstream="` + host + `"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/outlast/metrics lacks %s:\n%s", want, body)
		}
	}
	// Serve writes what its journal holds before it returns: the record
	// keeps the request with both attempts.
	cancel()
	waitServe(t, done)
	s, err := journal.OpenExisting(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("the record of request %s: %v", id, err)
	}
	if len(rec.Attempts) != 2 || rec.Attempts[0].RetryIn != time.Millisecond || rec.Attempts[0].Class != outlast.ClassStatus5xx {
		t.Errorf("got attempts %+v, want a 503 retried after 1ms, then the answer", rec.Attempts)
	}
}

// A serve that cannot listen, its port taken, fails before it opens the
// journal: no outlast.db is left behind.
func TestServePortTakenLeavesNoJournal(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	t.Chdir(t.TempDir())
	var stderr strings.Builder
	err = runServe(t.Context(), []string{"--upstream", "http://127.0.0.1:1", "--listen", taken.Addr().String()}, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("got %v, want the port in use", err)
	}
	if _, err := os.Stat(journal.DefaultSpec[len("sqlite:"):]); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the journal: got %v, want none made", err)
	}
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
	addr, _, done, log := startServeLogged(t, ctx, "--upstream", upstream.URL, "--grace", "10s")

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
	// The operator who stopped it hears that it is draining, and for how
	// long at most.
	if l := log.all(); !strings.Contains(l, "outlast: stopping") || !strings.Contains(l, `"grace":"10s"`) {
		t.Errorf("the log says nothing of the drain:\n%s", l)
	}
}

// An upstream URL's query may hold a key: it is sent with every request,
// and shown nowhere: not in serve's first line, its log lines (a retry's
// warning quotes the transport's error, which quotes the URL), the health
// endpoint, or the error body the caller gets. Durations in the JSON log
// are written as Go writes them, not as nanoseconds.
func TestServeHidesUpstreamQuery(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1, and no listener on port 0 is given it;
	// a port just closed could be given to a parallel test's listener.
	closed := "127.0.0.1:1"
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	addr, _, done, stderr := startServeLogged(t, ctx, "--upstream", "http://"+closed+"/v1?key=sk-secret", "--waits", "1ms,2ms", "--jitter-spread", "0", "--max-attempts", "3")
	resp, err := newClient(t).Post(addr+"/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	errBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("got %d, want 502: the upstream is down", resp.StatusCode)
	}
	resp, err = newClient(t).Get(addr + "/outlast/health")
	if err != nil {
		t.Fatal(err)
	}
	health, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cancel()
	waitServe(t, done)
	log := stderr.all()
	for what, text := range map[string]string{"the error body": string(errBody), "health": string(health), "stderr": log} {
		if strings.Contains(text, "sk-secret") || strings.Contains(text, "key=") {
			t.Errorf("%s holds the upstream URL's query:\n%s", what, text)
		}
	}
	if !strings.Contains(string(health), `"url":"http://`+closed+`/v1"`) {
		t.Errorf("health: got %s, want the upstream's URL without its query", health)
	}
	if !strings.Contains(log, `"msg":"outlast: retrying"`) || !regexp.MustCompile(`"waited":"[0-9.]+[µm]?s"`).MatchString(log) || !strings.Contains(log, `"took":"`) {
		t.Errorf("want retry lines with their waits, and the request's line, durations as text:\n%s", log)
	}
}

// serve's first line names a pool's members, where an upstream's URL
// goes: a pool has none of its own.
func TestDescribePool(t *testing.T) {
	t.Parallel()
	a, _ := url.Parse("https://east.example.com")
	got := describeUpstreams([]gateway.Upstream{{Name: "gpt", Prefix: "/", Members: []gateway.Member{{Name: "east", URL: a}, {URL: a}}}})
	if want := "gpt (a pool of east, https://east.example.com)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
