package metrics_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/metrics"
	"github.com/outlast-llm/outlast/record"
)

// stack is a gateway with metrics in front of one upstream, named "llm",
// with one slot.
type stack struct {
	m    *metrics.Metrics
	srv  *httptest.Server
	done chan struct{} // a value per request, after the metrics counted it
}

func newStack(t *testing.T, upstream http.Handler, extra record.Observer) *stack {
	t.Helper()
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{m: metrics.New([]string{"llm"}), done: make(chan struct{}, 16)}
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{
			Name:   "llm",
			URL:    u,
			Slots:  1,
			Policy: &outlast.Policy{Waits: []time.Duration{10 * time.Millisecond}},
		}},
		Logger: slog.New(slog.DiscardHandler),
		// The metrics' Done runs first, so a value on done means the
		// request is counted.
		Observer:  record.Observers(s.m.Observer(), extra, record.Observer{Done: func(*record.Request) { s.done <- struct{}{} }}),
		Endpoints: map[string]http.Handler{"metrics": s.m.Handler()},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.m.SetLoads(g.Loads)
	s.srv = httptest.NewServer(g)
	t.Cleanup(s.srv.Close)
	return s
}

// post sends a chat request through the gateway and returns its status.
func (s *stack) post(t *testing.T) int {
	t.Helper()
	resp, err := http.Post(s.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Error(err)
		return 0
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// scrape GETs /outlast/metrics through the gateway.
func (s *stack) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get(s.srv.URL + "/outlast/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /outlast/metrics: got %d %q, want 200 text/plain", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return parse(t, string(body))
}

func (s *stack) wait(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not end")
	}
}

// TestGatewayEndToEnd sends a request through a real gateway to an
// upstream that fails once, then reads the metrics through the gateway.
func TestGatewayEndToEnd(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	s := newStack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, `{"choices":[]}`)
	}), record.Observer{})
	if got := s.post(t); got != http.StatusOK {
		t.Fatalf("POST through the gateway: got %d, want 200", got)
	}
	s.wait(t)
	got := s.scrape(t)
	checkSeries(t, got, map[string]float64{
		`outlast_requests_total{code="200",upstream="llm"}`:           1,
		`outlast_attempts_total{outcome="status_5xx",upstream="llm"}`: 1,
		`outlast_attempts_total{outcome="ok",upstream="llm"}`:         1,
		`outlast_retries_total{reason="status_5xx",upstream="llm"}`:   1,
		`outlast_upstream_latency_seconds_count{upstream="llm"}`:      2,
		// Slots: 1 puts every attempt through the gate.
		`outlast_gate_wait_seconds_count{upstream="llm"}`:  2,
		`outlast_gate_queue_depth{slot="",upstream="llm"}`: 0,
	})
	// The wait is the policy's 10 ms, without jitter.
	if k := `outlast_retry_wait_seconds_total{upstream="llm"}`; got[k] != 0.01 {
		t.Errorf("%s: got %v, want 0.01", k, got[k])
	}
}

// TestGatewayQueueDepth holds the upstream's one slot and scrapes while a
// second request waits for it.
func TestGatewayQueueDepth(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	queued := make(chan struct{}, 1)
	s := newStack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		io.WriteString(w, `{}`)
	}), record.Observer{Queued: func(*record.Request, string, int) {
		select {
		case queued <- struct{}{}:
		default:
		}
	}})
	// Registered after newStack's, so it runs first: a failed test must
	// not leave the upstream's handler blocking its Close.
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)
	results := make(chan int, 2)
	for range 2 {
		go func() { results <- s.post(t) }()
	}
	select {
	case <-queued:
	case <-time.After(10 * time.Second):
		t.Fatal("no request queued")
	}
	k := `outlast_gate_queue_depth{slot="",upstream="llm"}`
	if got := s.scrape(t)[k]; got != 1 {
		t.Errorf("%s while one request waits: got %v, want 1", k, got)
	}
	open()
	for range 2 {
		if got := <-results; got != http.StatusOK {
			t.Errorf("POST through the gateway: got %d, want 200", got)
		}
		s.wait(t)
	}
	if got := s.scrape(t)[k]; got != 0 {
		t.Errorf("%s after both ended: got %v, want 0", k, got)
	}
}

// TestGatewayFallbackMoves sends requests through a real gateway whose
// upstream a fails and falls back to b, whose one slot another request
// holds and which queues none, and, in one chain, on to c: every move
// counts, the one to b too, though b refused the request without an
// attempt, and b's refusal, when it is the answer, counts as b's busy.
func TestGatewayFallbackMoves(t *testing.T) {
	for _, c := range []struct {
		name  string
		chain []string // a's fallbacks
		code  int
		want  map[string]float64
	}{
		// b is the last: its refusal is the answer, and b's busy.
		{"refused by the last", []string{"b"}, http.StatusServiceUnavailable, map[string]float64{
			`outlast_fallbacks_total{from="a",reason="spent",to="b"}`: 1,
			`outlast_busy_total{upstream="a"}`:                        0,
			`outlast_busy_total{upstream="b"}`:                        1,
		}},
		// b passes the request on to c, which answers: no one's busy.
		{"passed on", []string{"b", "c"}, http.StatusOK, map[string]float64{
			`outlast_fallbacks_total{from="a",reason="spent",to="b"}`: 1,
			`outlast_fallbacks_total{from="b",reason="busy",to="c"}`:  1,
			`outlast_busy_total{upstream="a"}`:                        0,
			`outlast_busy_total{upstream="b"}`:                        0,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := metrics.New([]string{"a", "b", "c"})
				policy := &outlast.Policy{Waits: []time.Duration{time.Second}, MaxAttempts: 1, Reserve: -1}
				g, err := gateway.New(gateway.Config{
					Upstreams: []gateway.Upstream{
						{Name: "a", URL: &url.URL{Scheme: "http", Host: "a.test"}, Policy: policy, Fallbacks: c.chain},
						{Name: "b", Prefix: "/b", URL: &url.URL{Scheme: "http", Host: "b.test"}, Policy: policy, Slots: 1, Queue: -1},
						{Name: "c", Prefix: "/c", URL: &url.URL{Scheme: "http", Host: "c.test"}, Policy: policy},
					},
					Transport: answerFunc(func(r *http.Request) (*http.Response, error) {
						code, wait := http.StatusOK, time.Duration(0)
						switch r.URL.Host {
						case "a.test":
							code = http.StatusServiceUnavailable
						case "b.test":
							wait = time.Minute // the holder's
						}
						select {
						case <-time.After(wait):
						case <-r.Context().Done():
							return nil, r.Context().Err()
						}
						return &http.Response{StatusCode: code, Header: http.Header{"Content-Type": {"application/json"}},
							Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
					}),
					Logger:   slog.New(slog.DiscardHandler),
					Observer: m.Observer(),
				})
				if err != nil {
					t.Fatal(err)
				}
				var holder sync.WaitGroup
				holder.Go(func() { serveAt(g, "/b/v1/chat/completions") }) // holds b's one slot
				synctest.Wait()
				if got := serveAt(g, "/v1/chat/completions"); got != c.code {
					t.Errorf("got %d, want %d", got, c.code)
				}
				holder.Wait()
				checkFallbacks(t, scrape(t, m.Handler()), c.want)
			})
		})
	}
}

// answerFunc is an http.RoundTripper that answers with a func.
type answerFunc func(*http.Request) (*http.Response, error)

func (f answerFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// serveAt serves a chat request to path with g and returns its status.
func serveAt(g http.Handler, path string) int {
	w := httptest.NewRecorder()
	g.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{}`)))
	return w.Code
}
