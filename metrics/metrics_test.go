package metrics_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/metrics"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// The fixed label sets, as the package documents them.
var (
	outcomes = []string{"ok", "rate_limited", "overloaded", "status_4xx", "status_5xx", "error_event",
		"stalled", "closed_early", "refused", "reset", "timeout", "canceled", "other"}
	reasons = outcomes[1:] // every outcome but ok
	codes   = []string{"200", "499", "502", "503", "504"}
)

// zeroSeries returns every series New must export for the upstreams, each
// at zero.
func zeroSeries(upstreams ...string) map[string]float64 {
	want := map[string]float64{"outlast_journal_dropped_total": 0}
	for _, u := range upstreams {
		for _, c := range codes {
			want[fmt.Sprintf(`outlast_requests_total{code=%q,upstream=%q}`, c, u)] = 0
		}
		for _, o := range outcomes {
			want[fmt.Sprintf(`outlast_attempts_total{outcome=%q,upstream=%q}`, o, u)] = 0
		}
		for _, r := range reasons {
			want[fmt.Sprintf(`outlast_retries_total{reason=%q,upstream=%q}`, r, u)] = 0
		}
		for _, name := range []string{
			"outlast_retry_wait_seconds_total", "outlast_busy_total",
			"outlast_upstream_latency_seconds_count", "outlast_upstream_latency_seconds_sum",
			"outlast_gate_wait_seconds_count", "outlast_gate_wait_seconds_sum",
		} {
			want[fmt.Sprintf(`%s{upstream=%q}`, name, u)] = 0
		}
		want[fmt.Sprintf(`outlast_gate_queue_depth{slot="",upstream=%q}`, u)] = 0
	}
	return want
}

func TestNewExportsKnownSeriesAtZero(t *testing.T) {
	t.Parallel()
	got := scrape(t, metrics.New([]string{"api", "llama", "api"}).Handler())
	want := zeroSeries("api", "llama")
	checkSeries(t, got, want)
	// Nothing else: no "other" upstream until one is seen, no code but the
	// pre-created ones, and the duplicate name made no second set.
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: got %v, want no such series", k, v)
		}
	}
}

func TestExpositionGolden(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	metrics.New([]string{"api"}).Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	got := rec.Body.String()
	path := filepath.Join("testdata", "new.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("exposition of a new Metrics:\ngot:\n%s\nwant (%s):\n%s", got, path, want)
	}
}

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// at returns t0 plus ms milliseconds.
func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// drive tells o of each request as the gateway would: each attempt's start
// and end, then the request's end.
func drive(o gateway.Observer, reqs ...gateway.Request) {
	for _, req := range reqs {
		r := req
		r.Attempts = nil
		for _, a := range req.Attempts {
			if o.AttemptStart != nil {
				start := a
				start.End, start.Status, start.Err, start.RetryIn = time.Time{}, 0, nil, 0
				o.AttemptStart(&r, start)
			}
			r.Attempts = append(r.Attempts, a)
			if o.AttemptEnd != nil {
				o.AttemptEnd(&r, a)
			}
		}
		if o.Done != nil {
			o.Done(&r)
		}
	}
}

func status(code int) error { return &outlast.StatusError{StatusCode: code} }

func TestObserver(t *testing.T) {
	t.Parallel()
	refused := &url.Error{Op: "Post", URL: "http://127.0.0.1:1/v1/chat/completions",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	errorEvent := &outlast.StatusError{StatusCode: 529, Err: fmt.Errorf("%w: overloaded_error", outlast.ErrErrorEvent)}
	cases := []struct {
		name string
		reqs []gateway.Request
		want map[string]float64 // every series that must not be zero
	}{{
		// The issue's own example: a 503 retried after 1.5 s, then a 200.
		name: "503 then 200",
		reqs: []gateway.Request{{Upstream: "api", Status: 200, Attempts: []outlast.Attempt{
			{N: 1, Start: at(0), End: at(250), Status: 503, Err: status(503), RetryIn: 1500 * time.Millisecond},
			{N: 2, Start: at(1750), End: at(2000), Status: 200},
		}}},
		want: map[string]float64{
			`outlast_requests_total{code="200",upstream="api"}`:           1,
			`outlast_attempts_total{outcome="status_5xx",upstream="api"}`: 1,
			`outlast_attempts_total{outcome="ok",upstream="api"}`:         1,
			`outlast_retries_total{reason="status_5xx",upstream="api"}`:   1,
			`outlast_retry_wait_seconds_total{upstream="api"}`:            1.5,
			`outlast_upstream_latency_seconds_count{upstream="api"}`:      2,
			`outlast_upstream_latency_seconds_sum{upstream="api"}`:        0.5,
		},
	}, {
		// A refused dial is an attempt with no status; the gateway answers
		// 502 itself.
		name: "refused dial",
		reqs: []gateway.Request{{Upstream: "api", Status: 502, Error: "unreachable", Attempts: []outlast.Attempt{
			{N: 1, Start: at(0), End: at(1), Err: refused},
		}}},
		want: map[string]float64{
			`outlast_requests_total{code="502",upstream="api"}`:        1,
			`outlast_attempts_total{outcome="refused",upstream="api"}`: 1,
			`outlast_upstream_latency_seconds_count{upstream="api"}`:   1,
			`outlast_upstream_latency_seconds_sum{upstream="api"}`:     0.001,
		},
	}, {
		// A busy refusal never reaches an attempt: it counts as busy and
		// as a 503, and nothing else.
		name: "busy",
		reqs: []gateway.Request{{Upstream: "api", Status: 503, Error: "busy"}},
		want: map[string]float64{
			`outlast_requests_total{code="503",upstream="api"}`: 1,
			`outlast_busy_total{upstream="api"}`:                1,
		},
	}, {
		// A stalled attempt in a named slot: the gate wait is observed
		// because the attempt held a key; the last attempt has no retry.
		name: "stalled in a named slot",
		reqs: []gateway.Request{{Upstream: "api", Status: 504, Error: "timeout", Attempts: []outlast.Attempt{
			{N: 1, Key: "slot 0", GateWait: 2 * time.Second, Start: at(2000), End: at(32000),
				Err: fmt.Errorf("outlast: attempt 1: %w", outlast.ErrStalled)},
		}}},
		want: map[string]float64{
			`outlast_requests_total{code="504",upstream="api"}`:        1,
			`outlast_attempts_total{outcome="stalled",upstream="api"}`: 1,
			`outlast_gate_wait_seconds_count{upstream="api"}`:          1,
			`outlast_gate_wait_seconds_sum{upstream="api"}`:            2,
			`outlast_upstream_latency_seconds_count{upstream="api"}`:   1,
			`outlast_upstream_latency_seconds_sum{upstream="api"}`:     30,
		},
	}, {
		// An upstream's bound has the key "": a wait at it is still a gate
		// wait. A zero wait with no key is no gate, and is not observed.
		name: "gate wait at the bound",
		reqs: []gateway.Request{
			{Upstream: "api", Status: 200, Attempts: []outlast.Attempt{{N: 1, GateWait: 500 * time.Millisecond, Start: at(500), End: at(750), Status: 200}}},
			{Upstream: "api", Status: 200, Attempts: []outlast.Attempt{{N: 1, Start: at(0), End: at(250), Status: 200}}},
		},
		want: map[string]float64{
			`outlast_requests_total{code="200",upstream="api"}`:      2,
			`outlast_attempts_total{outcome="ok",upstream="api"}`:    2,
			`outlast_gate_wait_seconds_count{upstream="api"}`:        1,
			`outlast_gate_wait_seconds_sum{upstream="api"}`:          0.5,
			`outlast_upstream_latency_seconds_count{upstream="api"}`: 2,
			`outlast_upstream_latency_seconds_sum{upstream="api"}`:   0.5,
		},
	}, {
		// Each retry's reason is the failure before it: 429 and an error
		// event; the last failure, a 529, is not retried.
		name: "rate limited, error event, overloaded",
		reqs: []gateway.Request{{Upstream: "api", Status: 529, Attempts: []outlast.Attempt{
			{N: 1, Start: at(0), End: at(250), Status: 429, Err: status(429), RetryIn: 500 * time.Millisecond},
			{N: 2, Start: at(750), End: at(1000), Status: 529, Err: errorEvent, RetryIn: 250 * time.Millisecond},
			{N: 3, Start: at(1250), End: at(1500), Status: 529, Err: status(529)},
		}}},
		want: map[string]float64{
			`outlast_requests_total{code="529",upstream="api"}`:             1,
			`outlast_attempts_total{outcome="rate_limited",upstream="api"}`: 1,
			`outlast_attempts_total{outcome="error_event",upstream="api"}`:  1,
			`outlast_attempts_total{outcome="overloaded",upstream="api"}`:   1,
			`outlast_retries_total{reason="rate_limited",upstream="api"}`:   1,
			`outlast_retries_total{reason="error_event",upstream="api"}`:    1,
			`outlast_retry_wait_seconds_total{upstream="api"}`:              0.75,
			`outlast_upstream_latency_seconds_count{upstream="api"}`:        3,
			`outlast_upstream_latency_seconds_sum{upstream="api"}`:          0.75,
		},
	}, {
		// The caller left mid-attempt: the attempt is canceled and the
		// request is a 499.
		name: "caller left",
		reqs: []gateway.Request{{Upstream: "api", Status: 499, Error: "client-closed", Attempts: []outlast.Attempt{
			{N: 1, Start: at(0), End: at(250), Err: fmt.Errorf("outlast: attempt 1: %w", context.Canceled)},
		}}},
		want: map[string]float64{
			`outlast_requests_total{code="499",upstream="api"}`:         1,
			`outlast_attempts_total{outcome="canceled",upstream="api"}`: 1,
			`outlast_upstream_latency_seconds_count{upstream="api"}`:    1,
			`outlast_upstream_latency_seconds_sum{upstream="api"}`:      0.25,
		},
	}, {
		// A name New was not given must not make a series of its own, and
		// a status no server sends must not make a code.
		name: "unknown upstream and status",
		reqs: []gateway.Request{
			{Upstream: "mystery", Status: 200},
			{Upstream: "api", Status: 1000},
		},
		want: map[string]float64{
			`outlast_requests_total{code="200",upstream="other"}`: 1,
			`outlast_requests_total{code="other",upstream="api"}`: 1,
		},
	}, {
		// Two configured upstreams keep their counts apart.
		name: "two upstreams",
		reqs: []gateway.Request{
			{Upstream: "api", Status: 200},
			{Upstream: "llama", Status: 404},
			{Upstream: "llama", Status: 404},
		},
		want: map[string]float64{
			`outlast_requests_total{code="200",upstream="api"}`:   1,
			`outlast_requests_total{code="404",upstream="llama"}`: 2,
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := metrics.New([]string{"api", "llama"})
			drive(m.Observer(), c.reqs...)
			got := scrape(t, m.Handler())
			checkSeries(t, got, c.want)
			for k, v := range got {
				if _, ok := c.want[k]; !ok && v != 0 {
					t.Errorf("%s: got %v, want 0", k, v)
				}
				if strings.Contains(k, "mystery") {
					t.Errorf("%s: got a series for an unknown upstream, want it counted as other", k)
				}
			}
		})
	}
}

// timeoutError is a net.Error that timed out, as a dial or read deadline
// gives.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// headerTimeout mimics net/http's response header timeout, which claims to
// be context.DeadlineExceeded through Is although it is the server's.
type headerTimeout struct{ timeoutError }

func (headerTimeout) Is(target error) bool { return target == context.DeadlineExceeded }

func TestOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		want string
	}{
		// A result that was returned.
		{"success", nil, "ok"},
		// 429 and 529 get their own outcome: they ask the client to slow
		// down, unlike other failures.
		{"429", status(429), "rate_limited"},
		{"529", status(529), "overloaded"},
		{"other 4xx", status(404), "status_4xx"},
		{"other 5xx", status(500), "status_5xx"},
		// A StatusError from a custom attempt may name any code.
		{"status outside 4xx and 5xx", status(302), "other"},
		// An error event is carried by a StatusError; it wins over its
		// status.
		{"error event", &outlast.StatusError{StatusCode: 529, Err: fmt.Errorf("%w: overloaded_error", outlast.ErrErrorEvent)}, "error_event"},
		// A stall is also a timeout; the stall wins.
		{"stalled", fmt.Errorf("%w: %w", outlast.ErrStalled, timeoutError{}), "stalled"},
		{"closed early", fmt.Errorf("read: %w", outlast.ErrClosedEarly), "closed_early"},
		{"refused", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, "refused"},
		// A dial that failed for another reason (a name that did not
		// resolve) is still no connection.
		{"dial failed", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "x.invalid"}}, "refused"},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, "reset"},
		// net/http's word for a connection closed before the response.
		{"EOF", &url.Error{Op: "Post", URL: "http://x", Err: io.EOF}, "reset"},
		{"timeout", &net.OpError{Op: "read", Net: "tcp", Err: timeoutError{}}, "timeout"},
		// The server's header timeout is not the caller's deadline.
		{"header timeout", headerTimeout{}, "timeout"},
		{"caller canceled", fmt.Errorf("outlast: %w", context.Canceled), "canceled"},
		// The caller's deadline wraps the very sentinel, through both
		// Unwrap forms.
		{"caller deadline", &url.Error{Op: "Post", URL: "http://x", Err: context.DeadlineExceeded}, "canceled"},
		{"caller deadline, joined", errors.Join(errors.New("send"), context.DeadlineExceeded), "canceled"},
		{"unknown", errors.New("something else"), "other"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := metrics.New([]string{"api"})
			drive(m.Observer(), gateway.Request{Upstream: "api", Status: 502, Attempts: []outlast.Attempt{{N: 1, Err: c.err}}})
			got := scrape(t, m.Handler())
			for _, o := range outcomes {
				k := fmt.Sprintf(`outlast_attempts_total{outcome=%q,upstream="api"}`, o)
				want := 0.0
				if o == c.want {
					want = 1
				}
				if got[k] != want {
					t.Errorf("%s: got %v, want %v", k, got[k], want)
				}
			}
		})
	}
}

func TestQueueDepth(t *testing.T) {
	t.Parallel()
	health := gateway.Health{Upstreams: []gateway.UpstreamHealth{
		{Name: "api", Slots: 4, Queued: 7, Named: map[string]int{"slot 0": 2, "slot 63": 1, "slot 64": 1, "slot 01": 1}},
		{Name: "llama", Slots: 0, Queued: 0},
		{Name: "stranger", Slots: 1, Queued: 3},
		{Name: "unknown", Slots: 1, Queued: 1, Named: map[string]int{"slot 1": 4}},
	}}
	cases := []struct {
		name   string
		health func() gateway.Health
		want   map[string]float64 // the whole gauge
	}{{
		// Before SetHealth, each configured upstream's bound is at zero,
		// so the series exist from the start.
		name: "no health",
		want: map[string]float64{
			`outlast_gate_queue_depth{slot="",upstream="api"}`:   0,
			`outlast_gate_queue_depth{slot="",upstream="llama"}`: 0,
		},
	}, {
		// The bound's depth is Queued less the named slots' waiters. Slot
		// numbers past 63, or written oddly, share "other"; so do unknown
		// upstreams, whose depths add up.
		name:   "health",
		health: func() gateway.Health { return health },
		want: map[string]float64{
			`outlast_gate_queue_depth{slot="",upstream="api"}`:         2,
			`outlast_gate_queue_depth{slot="slot 0",upstream="api"}`:   2,
			`outlast_gate_queue_depth{slot="slot 63",upstream="api"}`:  1,
			`outlast_gate_queue_depth{slot="other",upstream="api"}`:    2,
			`outlast_gate_queue_depth{slot="",upstream="llama"}`:       0,
			`outlast_gate_queue_depth{slot="",upstream="other"}`:       3,
			`outlast_gate_queue_depth{slot="slot 1",upstream="other"}`: 4,
		},
	}, {
		// A configured upstream missing from Health still has its series.
		name:   "upstream missing from health",
		health: func() gateway.Health { return gateway.Health{} },
		want: map[string]float64{
			`outlast_gate_queue_depth{slot="",upstream="api"}`:   0,
			`outlast_gate_queue_depth{slot="",upstream="llama"}`: 0,
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := metrics.New([]string{"api", "llama"})
			m.SetHealth(c.health)
			got := scrape(t, m.Handler())
			checkSeries(t, got, c.want)
			for k, v := range got {
				if _, ok := c.want[k]; strings.HasPrefix(k, "outlast_gate_queue_depth") && !ok {
					t.Errorf("%s: got %v, want no such series", k, v)
				}
			}
		})
	}
}

func TestSetHealthNil(t *testing.T) {
	t.Parallel()
	m := metrics.New([]string{"api"})
	m.SetHealth(func() gateway.Health {
		return gateway.Health{Upstreams: []gateway.UpstreamHealth{{Name: "api", Slots: 1, Queued: 5}}}
	})
	m.SetHealth(nil) // back to no health: the depth is zero, not stale
	k := `outlast_gate_queue_depth{slot="",upstream="api"}`
	if got := scrape(t, m.Handler())[k]; got != 0 {
		t.Errorf("%s after SetHealth(nil): got %v, want 0", k, got)
	}
}

func TestJournalDropped(t *testing.T) {
	t.Parallel()
	const k = "outlast_journal_dropped_total"
	m := metrics.New(nil)
	var dropped uint64 = 7
	m.SetJournalDropped(func() uint64 { return dropped })
	if got := scrape(t, m.Handler())[k]; got != 7 {
		t.Errorf("%s: got %v, want 7", k, got)
	}
	dropped = 9 // read at each scrape, not copied
	if got := scrape(t, m.Handler())[k]; got != 9 {
		t.Errorf("%s after the journal dropped more: got %v, want 9", k, got)
	}
	m.SetJournalDropped(nil)
	if got := scrape(t, m.Handler())[k]; got != 0 {
		t.Errorf("%s after SetJournalDropped(nil): got %v, want 0", k, got)
	}
}

// TestConcurrent observes from many goroutines while others scrape and
// set the health; under -race it finds unguarded state, and the totals
// find lost counts.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	const workers, perWorker = 16, 200
	m := metrics.New([]string{"api", "llama"})
	o := m.Observer()
	var wg sync.WaitGroup
	for w := range workers {
		// Unknown names and fresh codes race to make their series.
		upstream := []string{"api", "llama", fmt.Sprintf("stranger-%d", w)}[w%3]
		wg.Go(func() {
			for i := range perWorker {
				drive(o, gateway.Request{Upstream: upstream, Status: 200 + i%3, Attempts: []outlast.Attempt{
					{N: 1, Start: at(0), End: at(250), Status: 503, Err: status(503), RetryIn: time.Second},
					{N: 2, Key: "slot 0", GateWait: time.Millisecond, Start: at(1250), End: at(1500), Status: 200},
				}})
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for range 20 {
				m.SetHealth(func() gateway.Health { return gateway.Health{} })
				// Not scrape: t.Fatal belongs to the test's goroutine.
				rec := httptest.NewRecorder()
				m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
				if rec.Code != http.StatusOK {
					t.Errorf("scrape during observing: got status %d, want 200", rec.Code)
				}
			}
		})
	}
	wg.Wait()
	got := scrape(t, m.Handler())
	var requests, attempts, retries, waits, gated float64
	for k, v := range got {
		switch {
		case strings.HasPrefix(k, "outlast_requests_total"):
			requests += v
		case strings.HasPrefix(k, "outlast_attempts_total"):
			attempts += v
		case strings.HasPrefix(k, "outlast_retries_total"):
			retries += v
		case strings.HasPrefix(k, "outlast_retry_wait_seconds_total"):
			waits += v
		case strings.HasPrefix(k, "outlast_gate_wait_seconds_count"):
			gated += v
		}
	}
	const n = workers * perWorker
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"requests", requests, n},
		{"attempts", attempts, 2 * n},
		{"retries", retries, n},
		{"retry wait seconds", waits, n},
		{"gate waits", gated, n},
	} {
		if c.got != c.want {
			t.Errorf("%s summed over every series: got %v, want %v", c.name, c.got, c.want)
		}
	}
}
