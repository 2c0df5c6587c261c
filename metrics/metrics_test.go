package metrics_test

import (
	"context"
	"flag"
	"fmt"
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
	"github.com/outlast-llm/outlast/metrics"
	"github.com/outlast-llm/outlast/record"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// The fixed label sets, as the package documents them: an outcome is an
// outlast.Class's name, or ok for none.
var (
	outcomes = []string{"ok", "rate_limited", "overloaded", "status_4xx", "status_5xx", "error_event",
		"busy", "stalled", "closed_early", "refused", "reset", "timeout", "canceled", "other", "upstream_down"}
	reasons = outcomes[1:] // every outcome but ok
	codes   = []string{"200", "499", "502", "503", "504"}
)

// zeroSeries returns every series New must export for the upstreams, each
// at zero.
func zeroSeries(upstreams ...string) map[string]float64 {
	want := map[string]float64{"outlast_journal_dropped_total": 0, "outlast_journal_failed_total": 0, "outlast_gate_degraded": 0}
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
			"outlast_admission_wait_seconds_count", "outlast_admission_wait_seconds_sum", "outlast_probes_total",
		} {
			want[fmt.Sprintf(`%s{upstream=%q}`, name, u)] = 0
		}
		want[fmt.Sprintf(`outlast_gate_queue_depth{slot="",upstream=%q}`, u)] = 0
		for _, o := range []string{"continued", "resumed", "replayed", "refused", "failed", "restarted", "diverged", "unsupported"} {
			want[fmt.Sprintf(`outlast_continuations_total{outcome=%q,upstream=%q}`, o, u)] = 0
		}
		for _, o := range []string{"won", "lost"} {
			want[fmt.Sprintf(`outlast_hedges_total{outcome=%q,upstream=%q}`, o, u)] = 0
		}
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

// attempt returns the record of a as the gateway makes it: classified by
// outlast.Classify, as the Transport classifies an attempt at its end.
func attempt(a outlast.Attempt) record.Attempt {
	a.Class = outlast.Classify(a.Err)
	return record.NewAttempt(a)
}

// drive tells o of each request as the gateway would: each attempt's start
// and end, then the request's end.
func drive(o record.Observer, reqs ...record.Request) {
	for _, req := range reqs {
		r := req
		r.Attempts = nil
		for _, a := range req.Attempts {
			if o.AttemptStart != nil {
				start := a
				start.End, start.Status, start.Class, start.Error, start.RetryIn = time.Time{}, 0, outlast.ClassNone, "", 0
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
		reqs []record.Request
		want map[string]float64 // every series that must not be zero
	}{{
		// The issue's own example: a 503 retried after 1.5 s, then a 200.
		name: "503 then 200",
		reqs: []record.Request{{Upstream: "api", Status: 200, Attempts: []record.Attempt{
			attempt(outlast.Attempt{N: 1, Start: at(0), End: at(250), Status: 503, Err: status(503), RetryIn: 1500 * time.Millisecond}),
			attempt(outlast.Attempt{N: 2, Start: at(1750), End: at(2000), Status: 200}),
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
		reqs: []record.Request{{Upstream: "api", Status: 502, Error: "unreachable", Attempts: []record.Attempt{
			attempt(outlast.Attempt{N: 1, Start: at(0), End: at(1), Err: refused}),
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
		reqs: []record.Request{{Upstream: "api", Status: 503, Error: "busy"}},
		want: map[string]float64{
			`outlast_requests_total{code="503",upstream="api"}`: 1,
			`outlast_busy_total{upstream="api"}`:                1,
		},
	}, {
		// llama, api's fallback, refused the request busy, with no
		// attempt: the refusal is llama's, though the request and its
		// status are api's, whose path it came by.
		name: "busy at a fallback",
		reqs: []record.Request{{Upstream: "api", Status: 503, Error: "busy", Attempts: []record.Attempt{
			attempt(outlast.Attempt{N: 1, Start: at(0), End: at(1), Status: 503, Err: status(503)}),
		}, Moves: []record.Move{{From: "api", To: "llama", Reason: "spent"}}}},
		want: map[string]float64{
			`outlast_requests_total{code="503",upstream="api"}`:             1,
			`outlast_attempts_total{outcome="status_5xx",upstream="api"}`:   1,
			`outlast_upstream_latency_seconds_count{upstream="api"}`:        1,
			`outlast_upstream_latency_seconds_sum{upstream="api"}`:          0.001,
			`outlast_fallbacks_total{from="api",reason="spent",to="llama"}`: 1,
			`outlast_busy_total{upstream="llama"}`:                          1,
		},
	}, {
		// A stalled attempt in a named slot: the gate wait is observed
		// because the attempt held a key; the last attempt has no retry.
		name: "stalled in a named slot",
		reqs: []record.Request{{Upstream: "api", Status: 504, Error: "timeout", Attempts: []record.Attempt{
			attempt(outlast.Attempt{N: 1, Key: "slot 0", GateWait: 2 * time.Second, Start: at(2000), End: at(32000),
				Err: fmt.Errorf("outlast: attempt 1: %w", outlast.ErrStalled)}),
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
		reqs: []record.Request{
			{Upstream: "api", Status: 200, Attempts: []record.Attempt{attempt(outlast.Attempt{N: 1, GateWait: 500 * time.Millisecond, Start: at(500), End: at(750), Status: 200})}},
			{Upstream: "api", Status: 200, Attempts: []record.Attempt{attempt(outlast.Attempt{N: 1, Start: at(0), End: at(250), Status: 200})}},
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
		reqs: []record.Request{{Upstream: "api", Status: 529, Attempts: []record.Attempt{
			attempt(outlast.Attempt{N: 1, Start: at(0), End: at(250), Status: 429, Err: status(429), RetryIn: 500 * time.Millisecond}),
			attempt(outlast.Attempt{N: 2, Start: at(750), End: at(1000), Status: 529, Err: errorEvent, RetryIn: 250 * time.Millisecond}),
			attempt(outlast.Attempt{N: 3, Start: at(1250), End: at(1500), Status: 529, Err: status(529)}),
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
		reqs: []record.Request{{Upstream: "api", Status: 499, Error: "client-closed", Attempts: []record.Attempt{
			attempt(outlast.Attempt{N: 1, Start: at(0), End: at(250), Err: fmt.Errorf("outlast: attempt 1: %w", context.Canceled)}),
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
		reqs: []record.Request{
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
		reqs: []record.Request{
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

// TestOutcomes checks that an attempt counts under its class's name, as
// the record carries it: the metrics never judge the error, or the status,
// again. Which error is which class is outlast.Classify's to say.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		a    record.Attempt
		want string
	}{
		// A result that was returned.
		{"success", record.Attempt{N: 1, Status: 200}, "ok"},
		// 429 and 529 get their own outcome: they ask the client to slow
		// down, unlike other failures.
		{"429", record.Attempt{N: 1, Status: 429, Class: outlast.ClassRateLimited}, "rate_limited"},
		{"529", record.Attempt{N: 1, Status: 529, Class: outlast.ClassOverloaded}, "overloaded"},
		{"other 4xx", record.Attempt{N: 1, Status: 404, Class: outlast.ClassStatus4xx}, "status_4xx"},
		{"other 5xx", record.Attempt{N: 1, Status: 500, Class: outlast.ClassStatus5xx}, "status_5xx"},
		// An error event comes with a status; the class wins over it.
		{"error event", record.Attempt{N: 1, Status: 529, Class: outlast.ClassErrorEvent}, "error_event"},
		// A busy gate is a class of its own now, not other.
		{"busy", record.Attempt{N: 1, Class: outlast.ClassBusy}, "busy"},
		{"stalled", record.Attempt{N: 1, Class: outlast.ClassStalled}, "stalled"},
		{"closed early", record.Attempt{N: 1, Class: outlast.ClassClosedEarly}, "closed_early"},
		{"refused", record.Attempt{N: 1, Class: outlast.ClassRefused}, "refused"},
		{"reset", record.Attempt{N: 1, Class: outlast.ClassReset}, "reset"},
		{"timeout", record.Attempt{N: 1, Class: outlast.ClassTimeout}, "timeout"},
		{"caller canceled", record.Attempt{N: 1, Class: outlast.ClassCanceled}, "canceled"},
		// A status outside 4xx and 5xx, from a custom attempt, is other.
		{"other", record.Attempt{N: 1, Status: 302, Class: outlast.ClassOther}, "other"},
		// The class, not the status or the message: a 503 the record
		// calls rate limited counts as rate limited.
		{"class over status", record.Attempt{N: 1, Status: 503, Class: outlast.ClassRateLimited, Error: "outlast: status 503"}, "rate_limited"},
		// A class that is none of the constants, from a record made by
		// hand, counts as other rather than panicking.
		{"unknown class", record.Attempt{N: 1, Class: outlast.Class(200)}, "other"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := metrics.New([]string{"api"})
			drive(m.Observer(), record.Request{Upstream: "api", Status: 502, Attempts: []record.Attempt{c.a}})
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

// TestOutcomesAreClasses checks that the documented outcomes are the
// classes' names, in the classes' order, ok for none: a class added to the
// root must be added to the documented set too.
func TestOutcomesAreClasses(t *testing.T) {
	t.Parallel()
	var names []string
	for _, c := range outlast.Classes() {
		if c == outlast.ClassNone {
			names = append(names, "ok")
			continue
		}
		names = append(names, c.String())
	}
	if fmt.Sprint(names) != fmt.Sprint(outcomes) {
		t.Errorf("got classes %v, want the documented outcomes %v", names, outcomes)
	}
}

func TestQueueDepth(t *testing.T) {
	t.Parallel()
	loads := []record.Load{
		{Upstream: "api", Slots: 4, Queued: 7, Named: map[string]int{"slot 0": 2, "slot 63": 1, "slot 64": 1, "slot 01": 1}},
		{Upstream: "llama", Slots: 0, Queued: 0},
		{Upstream: "stranger", Slots: 1, Queued: 3},
		{Upstream: "unknown", Slots: 1, Queued: 1, Named: map[string]int{"slot 1": 4}},
	}
	cases := []struct {
		name  string
		loads func() []record.Load
		want  map[string]float64 // the whole gauge
	}{{
		// Before SetLoads, each configured upstream's bound is at zero,
		// so the series exist from the start.
		name: "no loads",
		want: map[string]float64{
			`outlast_gate_queue_depth{slot="",upstream="api"}`:   0,
			`outlast_gate_queue_depth{slot="",upstream="llama"}`: 0,
		},
	}, {
		// The bound's depth is Queued less the named slots' waiters. Slot
		// numbers past 63, or written oddly, share "other"; so do unknown
		// upstreams, whose depths add up.
		name:  "loads",
		loads: func() []record.Load { return loads },
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
		// A configured upstream missing from the loads still has its series.
		name:  "upstream missing from the loads",
		loads: func() []record.Load { return nil },
		want: map[string]float64{
			`outlast_gate_queue_depth{slot="",upstream="api"}`:   0,
			`outlast_gate_queue_depth{slot="",upstream="llama"}`: 0,
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := metrics.New([]string{"api", "llama"})
			m.SetLoads(c.loads)
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

func TestSetLoadsNil(t *testing.T) {
	t.Parallel()
	m := metrics.New([]string{"api"})
	m.SetLoads(func() []record.Load {
		return []record.Load{{Upstream: "api", Slots: 1, Queued: 5}}
	})
	m.SetLoads(nil) // back to no loads: the depth is zero, not stale
	k := `outlast_gate_queue_depth{slot="",upstream="api"}`
	if got := scrape(t, m.Handler())[k]; got != 0 {
		t.Errorf("%s after SetLoads(nil): got %v, want 0", k, got)
	}
}

// The journal's losses, records dropped from a full queue and records
// its store refused, each follow the func they are given, read at each
// scrape.
func TestJournalLosses(t *testing.T) {
	t.Parallel()
	for k, set := range map[string]func(*metrics.Metrics, func() uint64){
		"outlast_journal_dropped_total": (*metrics.Metrics).SetJournalDropped,
		"outlast_journal_failed_total":  (*metrics.Metrics).SetJournalFailed,
	} {
		m := metrics.New(nil)
		var n uint64 = 7
		set(m, func() uint64 { return n })
		if got := scrape(t, m.Handler())[k]; got != 7 {
			t.Errorf("%s: got %v, want 7", k, got)
		}
		n = 9 // read at each scrape, not copied
		if got := scrape(t, m.Handler())[k]; got != 9 {
			t.Errorf("%s after the journal lost more: got %v, want 9", k, got)
		}
		set(m, nil)
		if got := scrape(t, m.Handler())[k]; got != 0 {
			t.Errorf("%s after setting nil: got %v, want 0", k, got)
		}
	}
}

// outlast_gate_degraded follows the func it is given, read at each scrape.
func TestGateDegraded(t *testing.T) {
	t.Parallel()
	const k = "outlast_gate_degraded"
	m := metrics.New(nil)
	degraded := true
	m.SetGateDegraded(func() bool { return degraded })
	if got := scrape(t, m.Handler())[k]; got != 1 {
		t.Errorf("%s while degraded: got %v, want 1", k, got)
	}
	degraded = false
	if got := scrape(t, m.Handler())[k]; got != 0 {
		t.Errorf("%s once shared again: got %v, want 0", k, got)
	}
}

// TestConcurrent observes from many goroutines while others scrape and
// set the loads; under -race it finds unguarded state, and the totals
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
				drive(o, record.Request{Upstream: upstream, Status: 200 + i%3, Attempts: []record.Attempt{
					attempt(outlast.Attempt{N: 1, Start: at(0), End: at(250), Status: 503, Err: status(503), RetryIn: time.Second}),
					attempt(outlast.Attempt{N: 2, Key: "slot 0", GateWait: time.Millisecond, Start: at(1250), End: at(1500), Status: 200}),
				}})
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for range 20 {
				m.SetLoads(func() []record.Load { return nil })
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

// A request that fell back counts each of its moves, from the upstream it
// left to the one it moved to, by why, whether or not the upstream moved
// to made an attempt; the fallback's attempts count as the fallback's.
func TestFallbacks(t *testing.T) {
	t.Parallel()
	spent, azureBusy := record.Move{From: "api", To: "azure", Reason: "spent"}, record.Move{From: "azure", To: "bedrock", Reason: "busy"}
	for _, c := range []struct {
		name string
		rec  record.Request
		want map[string]float64 // every outlast_fallbacks_total series, with others
	}{
		// The plain case: api failed, azure answered.
		{"one move", record.Request{Status: 200, Attempts: []record.Attempt{
			{Upstream: "api", Class: outlast.ClassStatus5xx},
			{Upstream: "azure", Fallback: "down", Class: outlast.ClassNone},
		}, Moves: []record.Move{{From: "api", To: "azure", Reason: "down"}}}, map[string]float64{
			`outlast_fallbacks_total{from="api",reason="down",to="azure"}`: 1,
			`outlast_attempts_total{outcome="status_5xx",upstream="api"}`:  1,
			`outlast_attempts_total{outcome="ok",upstream="azure"}`:        1,
			`outlast_attempts_total{outcome="ok",upstream="api"}`:          0,
		}},
		// api spent its attempts and azure, busy, passed the request on
		// without one: both moves count, the one to azure though no
		// attempt tells of it, and none from api to bedrock.
		{"past an upstream with no attempt", record.Request{Status: 200, Attempts: []record.Attempt{
			{Upstream: "api", Class: outlast.ClassStatus5xx},
			{Upstream: "bedrock", Fallback: "busy", Class: outlast.ClassNone},
		}, Moves: []record.Move{spent, azureBusy}}, map[string]float64{
			`outlast_fallbacks_total{from="api",reason="spent",to="azure"}`:    1,
			`outlast_fallbacks_total{from="azure",reason="busy",to="bedrock"}`: 1,
			`outlast_attempts_total{outcome="ok",upstream="bedrock"}`:          1,
		}},
		// azure, the last of the chain, refused the request busy: no
		// attempt follows the move, which counts all the same.
		{"to the last upstream, which refused", record.Request{Status: 503, Error: "busy", Attempts: []record.Attempt{
			{Upstream: "api", Class: outlast.ClassStatus5xx},
		}, Moves: []record.Move{spent}}, map[string]float64{
			`outlast_fallbacks_total{from="api",reason="spent",to="azure"}`: 1,
		}},
		// A record from a newer outlast, or another configuration, may
		// name an upstream or a reason this one does not know: each is
		// other, so that labels stay bounded.
		{"unknown names", record.Request{Status: 200, Moves: []record.Move{{From: "api", To: "gemini", Reason: "quota"}}}, map[string]float64{
			`outlast_fallbacks_total{from="api",reason="other",to="other"}`: 1,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := metrics.New([]string{"api", "azure", "bedrock"})
			c.rec.Upstream = "api"
			drive(m.Observer(), c.rec)
			checkFallbacks(t, scrape(t, m.Handler()), c.want)
		})
	}
}

// Each continuation of a request's stream counts once, by the upstream
// whose stream broke and how it ended; an outcome this outlast does not
// know is other.
func TestContinuations(t *testing.T) {
	t.Parallel()
	m := metrics.New([]string{"api", "llama"})
	drive(m.Observer(), record.Request{Upstream: "api", Status: 200, Continuations: []record.Continuation{
		{Upstream: "api", Outcome: record.ContinuationOK},
		{Upstream: "api", Outcome: record.ContinuationOK},
		{Upstream: "llama", Outcome: record.ContinuationRefused},
		{Upstream: "api", Outcome: "teleported"},
	}})
	got := scrape(t, m.Handler())
	for k, want := range map[string]float64{
		`outlast_continuations_total{outcome="continued",upstream="api"}`: 2,
		`outlast_continuations_total{outcome="refused",upstream="llama"}`: 1,
		`outlast_continuations_total{outcome="other",upstream="api"}`:     1,
		`outlast_continuations_total{outcome="failed",upstream="api"}`:    0,
	} {
		if got[k] != want {
			t.Errorf("%s: got %v, want %v", k, got[k], want)
		}
	}
}

// A hedged stream counts once, by the upstream that was hedged and which
// side answered; the hedge that won is a move too, and the one that lost
// is not.
func TestHedges(t *testing.T) {
	t.Parallel()
	m := metrics.New([]string{"api", "azure"})
	drive(m.Observer(), record.Request{Upstream: "api", Status: 200, Attempts: []record.Attempt{
		{Upstream: "azure", Fallback: "hedge", Class: outlast.ClassNone},
		{Upstream: "api", Class: outlast.ClassCanceled},
	}, Moves: []record.Move{{From: "api", To: "azure", Reason: "hedge"}}})
	drive(m.Observer(), record.Request{Upstream: "api", Status: 200, Attempts: []record.Attempt{
		{Upstream: "api", Class: outlast.ClassNone},
		{Upstream: "azure", Fallback: "hedge", Class: outlast.ClassCanceled},
	}})
	drive(m.Observer(), record.Request{Upstream: "api", Status: 200, Attempts: []record.Attempt{
		{Upstream: "api", Class: outlast.ClassNone},
	}})
	got := scrape(t, m.Handler())
	for k, want := range map[string]float64{
		`outlast_hedges_total{outcome="won",upstream="api"}`:            1,
		`outlast_hedges_total{outcome="lost",upstream="api"}`:           1,
		`outlast_hedges_total{outcome="won",upstream="azure"}`:          0,
		`outlast_fallbacks_total{from="api",reason="hedge",to="azure"}`: 1,
	} {
		if got[k] != want {
			t.Errorf("%s: got %v, want %v", k, got[k], want)
		}
	}
}
