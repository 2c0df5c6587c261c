package timeline_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/mockllm"
	"github.com/outlast-llm/outlast/record"
	"github.com/outlast-llm/outlast/timeline"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the browser test's screenshot to testdata/screenshot.png")

// chromium finds a Chromium to drive. Without one the test is skipped,
// unless OUTLAST_TEST_CHROMIUM=1 (as in CI), when it fails.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("OUTLAST_TEST_CHROMIUM") == "1" {
		t.Fatal("OUTLAST_TEST_CHROMIUM=1 but no chromium, chromium-browser or google-chrome is on PATH (Debian: apt-get install chromium)")
	}
	t.Skip("no chromium on PATH; set OUTLAST_TEST_CHROMIUM=1 to make that a failure")
	return ""
}

// browser starts a headless Chromium and returns a tab's context. The
// flags keep it off the network, which is closed here, and let it run as
// root.
func browser(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 600),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tab, cancelTab := chromedp.NewContext(actx)
	// Cleanups run last first: the tab closes, then the browser, whose
	// cancel waits for the process to exit, then TempDir is removed.
	t.Cleanup(cancelAlloc)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(tab, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return tab
}

// jsErrors collects the page's uncaught exceptions and console errors.
func jsErrors(t *testing.T, tab context.Context) func() []string {
	t.Helper()
	var mu sync.Mutex
	var errs []string
	err := chromedp.Listen(tab, func(ev any) {
		var msg string
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = ev.ExceptionDetails.Text
			if ex := ev.ExceptionDetails.Exception; ex != nil {
				msg += " " + ex.Description
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type != runtime.ConsoleAPICalledTypeError {
				return
			}
			msg = "console.error"
			for _, a := range ev.Args {
				msg += " " + string(a.Value)
			}
		default:
			return
		}
		mu.Lock()
		errs = append(errs, msg)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

// TestBrowser drives the page in a real headless Chromium, one tab per
// case.
func TestBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := browser(t, ctx)
	t.Run("outage", func(t *testing.T) { testOutage(t, newTab(t, b)) })
	t.Run("thousand", func(t *testing.T) { testThousand(t, newTab(t, b)) })
	t.Run("admission", func(t *testing.T) { testAdmission(t, newTab(t, b)) })
	t.Run("continuation", func(t *testing.T) { testContinuation(t, newTab(t, b)) })
	t.Run("hedge", func(t *testing.T) { testHedge(t, newTab(t, b)) })
	t.Run("first paint", func(t *testing.T) { testFirstPaint(t, newTab(t, b)) })
	t.Run("pool", func(t *testing.T) { testPool(t, newTab(t, b)) })
}

// newTab opens a tab in b's browser, closed when the test ends.
func newTab(t *testing.T, b context.Context) context.Context {
	t.Helper()
	tab, cancel := chromedp.NewContext(b)
	t.Cleanup(cancel)
	return tab
}

// open loads the page at base and waits for its event stream.
func open(t *testing.T, tab context.Context, base string) {
	t.Helper()
	if err := chromedp.Do(tab, chromedp.Navigate(base+"/outlast/")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(tab, chromedp.Poll[bool](`document.querySelector('#conn').dataset.state === "live"`,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the page did not connect to its event stream: %v", err)
	}
}

// poll waits up to timeout for a JavaScript expression to be true.
func poll(tab context.Context, timeout time.Duration, expr string) error {
	_, err := chromedp.Run(tab, chromedp.Poll[bool](expr,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	return err
}

// filter sets the page's filters, and tells the page as a person's
// typing and choosing would.
func filter(t *testing.T, tab context.Context, run, status string) {
	t.Helper()
	js := fmt.Sprintf(`(() => {
		const run = document.getElementById('filter-run'), status = document.getElementById('filter-status');
		run.value = %q;
		run.dispatchEvent(new Event('input'));
		status.value = %q;
		status.dispatchEvent(new Event('change'));
	})()`, run, status)
	if err := chromedp.Do(tab, chromedp.Evaluate[chromedp.Void](js)); err != nil {
		t.Fatal(err)
	}
}

// testOutage loads the page while an outage runs through the gateway:
// five requests, one slot, a queue of four, and an upstream that fails
// with 502s, then 429s with Retry-After, then answers slowly. The page
// must show the queue as it forms, and then a bar for every attempt the
// gateway made, coloured by outcome, with the waits between them.
func testOutage(t *testing.T, tab context.Context) {
	errs := jsErrors(t, tab)

	// The script counts requests, not time, so that the browser's start
	// cannot move the outage: five 502s, two 429s, then slow successes
	// that hold the one slot long enough for a queue to show.
	mock := mockllm.NewServer("502x5,429:retry-after=1x2,ok:delay=300ms")
	t.Cleanup(mock.Close)
	feed := timeline.New(0, 0)
	base := outageGateway(t, feed, mock.URL)

	open(t, tab, base)
	finished := sendRequests(t, base, map[string]int{"summarize": 3, "translate": 2})

	queued, err := chromedp.Run(tab, chromedp.Poll[int](
		`Math.max(0, ...[...document.querySelectorAll('#slots .upstream[data-name="mock"] .queued[data-queued]')].map(e => Number(e.dataset.queued)))`,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second)))
	if err != nil {
		t.Errorf("the slots panel never showed a queue: %v", err)
	} else {
		t.Logf("the slots panel showed %d queued", queued)
	}

	select {
	case <-finished:
	case <-time.After(20 * time.Second):
		t.Fatal("the requests did not finish in 20s")
	}

	want := 0
	for _, r := range feed.Snapshot().Requests {
		want += len(r.Attempts)
	}
	if saw := mock.Stats().Total; want != saw {
		t.Errorf("the feed has %d attempts, the mock saw %d", want, saw)
	}
	// The page has drawn every attempt, and none is in flight.
	check := fmt.Sprintf(`document.querySelectorAll('.bar').length === %d && !document.querySelector('.bar[data-outcome="inflight"]')`, want)
	if _, err := chromedp.Run(tab, chromedp.Poll[bool](check,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		got, _ := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('.bar').length`))
		t.Errorf("the page shows %d bars (or some in flight), want %d, one per attempt: %v", got, want, err)
	}

	counts, err := chromedp.Run(tab, chromedp.Evaluate[map[string]int](`(() => {
		const n = (s) => document.querySelectorAll(s).length;
		return {
			ok: n('.bar[data-outcome="ok"]'),
			"4xx": n('.bar[data-outcome="4xx"]'),
			"5xx": n('.bar[data-outcome="5xx"]'),
			gaps: n('.gap'),
			labelled: [...document.querySelectorAll('.gap span')].filter(e => /^[0-9.]+(ms|s)$/.test(e.textContent)).length,
			retryAfter: n('.retry-after'),
			runs: n('.run[data-run]'),
			legend: n('#legend .swatch[data-outcome]'),
			ticks: n('#ticks .tick'),
		};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the page shows %v", counts)
	for _, c := range []struct {
		key  string
		want int
	}{
		{"5xx", 5}, {"4xx", 2}, {"ok", 5}, // the script's outcomes, one bar each
		{"gaps", 7}, {"labelled", 7}, // one wait after each failed attempt
		{"retryAfter", 2}, // after each 429
		{"runs", 2},
		{"legend", 8},
	} {
		if counts[c.key] != c.want {
			t.Errorf("%s: got %d, want %d", c.key, counts[c.key], c.want)
		}
	}
	if counts["ticks"] < 3 {
		t.Errorf("the axis has %d ticks, want 3 or more", counts["ticks"])
	}

	// The filters work in the page: no request failed in the end.
	filter(t, tab, "", "failed")
	if err := poll(tab, 5*time.Second, `document.querySelectorAll('.row').length === 0 && !document.getElementById('empty').hidden`); err != nil {
		t.Errorf("filtering by failed still shows rows: %v", err)
	}
	filter(t, tab, "translate", "ok")
	if err := poll(tab, 5*time.Second, `document.querySelectorAll('.row').length === 2`); err != nil {
		t.Errorf("filtering by run translate did not show its 2 requests: %v", err)
	}
	filter(t, tab, "", "all")
	if err := poll(tab, 5*time.Second, fmt.Sprintf(`document.querySelectorAll('.bar').length === %d`, want)); err != nil {
		t.Errorf("clearing the filters did not bring the bars back: %v", err)
	}

	screenshot(t, tab, "screenshot", "timeline")
	if e := errs(); len(e) > 0 {
		t.Errorf("the page's script failed: %q", e)
	}
}

// outageGateway starts a gateway with one slot and a queue of four in
// front of upstream, feeding feed, and returns its URL.
func outageGateway(t *testing.T, feed *timeline.Feed, upstream string) string {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{
			Name:   "mock",
			URL:    u,
			Slots:  1,
			Queue:  4,
			Policy: &outlast.Policy{Waits: []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, time.Second}},
		}},
		Transport: tr,
		Logger:    slog.New(slog.DiscardHandler),
		Observer:  feed.Observer(),
		Endpoints: feed.Endpoints(),
	})
	if err != nil {
		t.Fatal(err)
	}
	feed.SetLoads(g.Loads)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	t.Cleanup(feed.Close) // before srv.Close, which waits for the event stream
	return srv.URL
}

// sendRequests sends requests at once through the gateway, so many per
// run, and returns a channel closed when all are answered.
func sendRequests(t *testing.T, base string, runs map[string]int) <-chan struct{} {
	t.Helper()
	c := client(t)
	var wg sync.WaitGroup
	for run, n := range runs {
		for range n {
			wg.Go(func() {
				req, _ := http.NewRequest("POST", base+"/v1/chat/completions",
					strings.NewReader(`{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(gateway.HeaderRun, run)
				resp, err := c.Do(req)
				if err != nil {
					t.Errorf("run %s: %v", run, err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("run %s: got %d, want 200 after the retries", run, resp.StatusCode)
				}
			})
		}
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t.Cleanup(func() { <-done }) // the client has a timeout: this ends
	return done
}

// screenshot saves the whole page as a PNG: to testdata/golden.png with
// -update-screenshot, to $OUTLAST_SCREENSHOT_DIR/artefact.png (for CI to
// keep) if that is set, else to a temporary directory.
func screenshot(t *testing.T, tab context.Context, golden, artefact string) {
	t.Helper()
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	var path string
	switch dir := os.Getenv("OUTLAST_SCREENSHOT_DIR"); {
	case *updateScreenshot:
		path = filepath.Join("testdata", golden+".png")
	case dir != "":
		path = filepath.Join(dir, artefact+".png")
	default:
		path = filepath.Join(t.TempDir(), artefact+".png")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// testThousand fills the feed with 1,000 requests in 20 runs, and checks
// that the page stays readable: it draws the newest 200 rows and says so,
// and the filters reach the others.
func testThousand(t *testing.T, tab context.Context) {
	errs := jsErrors(t, tab)
	up := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(up.Close)
	feed := timeline.New(0, 0)
	base, _ := serve(t, feed, up.URL)
	inFlight := fill(feed, 1000, 20)

	open(t, tab, base)
	if err := poll(tab, 10*time.Second, `document.querySelectorAll('.row').length === 200 && !document.getElementById('cap-note').hidden`); err != nil {
		got, _ := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('.row').length`))
		t.Errorf("the page draws %d rows, want the newest 200 and a note: %v", got, err)
	}
	note, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.getElementById('cap-note').textContent`))
	if err != nil || !strings.Contains(note, "200 of 1000") {
		t.Errorf("got the note %q, want it to say 200 of 1000", note)
	}

	filter(t, tab, "run-07", "all")
	if err := poll(tab, 5*time.Second, `document.querySelectorAll('.row').length === 50 && document.getElementById('cap-note').hidden`); err != nil {
		t.Errorf("filtering by run-07 did not show its 50 requests: %v", err)
	}
	filter(t, tab, "", "inflight")
	if err := poll(tab, 5*time.Second, fmt.Sprintf(`document.querySelectorAll('.row').length === %d`, inFlight)); err != nil {
		t.Errorf("filtering by in flight did not show the %d in flight: %v", inFlight, err)
	}
	filter(t, tab, "", "all")
	if err := poll(tab, 5*time.Second, `document.querySelectorAll('.row').length === 200`); err != nil {
		t.Errorf("clearing the filters did not bring the rows back: %v", err)
	}
	screenshot(t, tab, "screenshot-1000", "timeline-1000")
	if e := errs(); len(e) > 0 {
		t.Errorf("the page's script failed: %q", e)
	}
}

// fill tells f of n requests over runs runs, as the gateway would, with
// a mix of outcomes that repeats every seven requests, and one in fifty
// still in flight. It returns how many are in flight.
func fill(f *timeline.Feed, n, runs int) (inFlight int) {
	obs := f.Observer()
	base := time.Now().Add(-time.Duration(n) * 100 * time.Millisecond)
	for i := range n {
		r := &record.Request{
			ID: fmt.Sprintf("req-%04d", i), Run: fmt.Sprintf("run-%02d", i%runs),
			Method: "POST", Path: "/v1/chat/completions", Upstream: "mock", Model: "gpt-test",
			Start: base.Add(time.Duration(i) * 100 * time.Millisecond),
		}
		at, gate := r.Start, time.Duration(0)
		try := func(status int, err error, took, retryAfter, wait time.Duration) {
			a := outlast.Attempt{CallID: r.ID, N: len(r.Attempts) + 1, Start: at, GateWait: gate, Ahead: 2}
			gate = 0
			obs.AttemptStart(r, record.NewAttempt(a))
			a.End, a.Status, a.Err, a.Class, a.RetryAfter, a.RetryIn = at.Add(took), status, err, outlast.Classify(err), retryAfter, wait
			end := record.NewAttempt(a)
			r.Attempts = append(r.Attempts, end)
			obs.AttemptEnd(r, end)
			at = a.End.Add(wait)
		}
		refused := &url.Error{Op: "Post", URL: "http://mock", Err: &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
		r.Status = 200
		switch i % 7 {
		case 0:
			try(200, nil, 400*time.Millisecond, 0, 0)
		case 1:
			try(502, &outlast.StatusError{StatusCode: 502}, 50*time.Millisecond, 0, 300*time.Millisecond)
			try(200, nil, 500*time.Millisecond, 0, 0)
		case 2:
			try(429, &outlast.StatusError{StatusCode: 429, RetryAfter: time.Second}, 30*time.Millisecond, time.Second, time.Second)
			try(200, nil, 300*time.Millisecond, 0, 0)
		case 3:
			try(0, refused, 5*time.Millisecond, 0, 300*time.Millisecond)
			try(0, refused, 5*time.Millisecond, 0, 600*time.Millisecond)
			try(0, refused, 5*time.Millisecond, 0, 0)
			r.Status, r.Error = 502, "unreachable"
		case 4:
			obs.Queued(r, "", 2)
			gate = 700 * time.Millisecond
			at = at.Add(gate)
			try(200, nil, 600*time.Millisecond, 0, 0)
		case 5:
			for range 2 {
				try(529, &outlast.StatusError{StatusCode: 529}, 80*time.Millisecond, 0, 500*time.Millisecond)
			}
			try(529, &outlast.StatusError{StatusCode: 529}, 80*time.Millisecond, 0, 0)
			r.Status = 529
		case 6:
			r.Status, r.Error = 503, "busy"
		}
		if i%50 == 49 {
			obs.AttemptStart(r, record.Attempt{CallID: r.ID, N: len(r.Attempts) + 1, Start: at})
			inFlight++
			continue
		}
		r.End = at
		obs.Done(r)
	}
	return inFlight
}

// testAdmission shows an outage that an Admission handled: the upstream's
// row of states above the runs, with a band for each stretch it was down,
// probing and recovering and a mark at each change; the waits for the
// upstream before the attempts; the probe's bar marked; and the slots
// panel's badge, which follows a change that comes live.
func testAdmission(t *testing.T, tab context.Context) {
	errs := jsErrors(t, tab)
	base, obs := recordedPage(t)
	at := time.Now().Add(-10 * time.Second)
	ms := func(n int) time.Time { return at.Add(time.Duration(n) * time.Millisecond) }
	change := func(n int, from, to outlast.UpstreamState) {
		obs.UpstreamState(record.StateChange{Upstream: "mock", At: ms(n), From: from, To: to})
	}
	// Three 503s mark it down; the fourth attempt waits a second for the
	// probe, and is it. A second request waits out the recovery.
	r := &record.Request{ID: "probed", Run: "outage", Method: "POST", Path: "/v1/chat/completions", Upstream: "mock", Start: ms(0)}
	try := func(n, start, took, wait int, probe bool, status int) {
		a := outlast.Attempt{CallID: r.ID, N: n, Start: ms(start), End: ms(start + took), Status: status,
			AdmissionWait: time.Duration(wait) * time.Millisecond, Probe: probe}
		if status != 200 {
			a.Err, a.RetryIn = &outlast.StatusError{StatusCode: status}, 100*time.Millisecond
			a.Class = outlast.Classify(a.Err)
		}
		r.Attempts = append(r.Attempts, record.NewAttempt(a))
		obs.AttemptEnd(r, r.Attempts[len(r.Attempts)-1])
	}
	try(1, 0, 50, 0, false, 503)
	try(2, 150, 50, 0, false, 503)
	try(3, 300, 50, 0, false, 503)
	change(350, outlast.Healthy, outlast.Down)
	change(1450, outlast.Down, outlast.Probing)
	try(4, 1450, 150, 1000, true, 200)
	change(1600, outlast.Probing, outlast.Recovering)
	r.Status, r.End = 200, ms(1600)
	obs.Done(r)
	r = &record.Request{ID: "waited", Run: "outage", Method: "POST", Path: "/v1/chat/completions", Upstream: "mock", Start: ms(1400)}
	try(1, 1650, 100, 250, false, 200)
	r.Status, r.End = 200, ms(1750)
	obs.Done(r)
	change(1750, outlast.Recovering, outlast.Healthy)

	open(t, tab, base)
	counts := `(() => {
		const n = (s) => document.querySelectorAll(s).length;
		return {
			rows: n('.row'), stateRows: n('.state-row[data-upstream="mock"]'),
			down: n('.state-band[data-state="down"]'), probing: n('.state-band[data-state="probing"]'),
			recovering: n('.state-band[data-state="recovering"]'), marks: n('.state-mark'),
			admission: n('.admission-wait'), probes: n('.bar[data-probe]'),
			healthy: n('#slots .upstream[data-name="mock"] .up-state[data-state="healthy"]'),
			down_badge: n('#slots .upstream[data-name="mock"] .up-state[data-state="down"]'),
			legend: n('#legend .swatch[data-state]'),
		};
	})()`
	want := map[string]int{"rows": 2, "stateRows": 1, "down": 1, "probing": 1, "recovering": 1, "marks": 4,
		"admission": 2, "probes": 1, "healthy": 1, "down_badge": 0, "legend": 3}
	check := func(when string, want map[string]int) {
		t.Helper()
		var got map[string]int
		err := poll(tab, 5*time.Second, fmt.Sprintf(`(() => { const c = %s; return %s; })()`, counts, matchAll(want)))
		got, _ = chromedp.Run(tab, chromedp.Evaluate[map[string]int](counts))
		if err != nil {
			t.Errorf("%s: the page shows %v, want %v", when, got, want)
		}
	}
	check("the outage", want)
	title, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector('.bar[data-probe]').title + "|" + document.querySelector('.admission-wait').title`))
	if err != nil || !strings.Contains(title, "probe") || !strings.Contains(title, "waited 1s for the upstream") {
		t.Errorf("got the titles %q (%v), want the probe's and the wait's", title, err)
	}

	// A change that comes live, as an event: the badge and a new mark.
	obs.UpstreamState(record.StateChange{Upstream: "mock", At: time.Now(), From: outlast.Healthy, To: outlast.Down})
	want["marks"], want["healthy"], want["down_badge"], want["down"] = 5, 0, 1, 2
	check("a live change", want)
	screenshot(t, tab, "screenshot-admission", "timeline-admission")
	if e := errs(); len(e) > 0 {
		t.Errorf("the page's script failed: %q", e)
	}
}

// recordedPage serves the page of a feed that the test gives its records
// by hand, through obs, in front of an upstream that is never called.
func recordedPage(t *testing.T) (base string, obs record.Observer) {
	up := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(up.Close)
	feed := timeline.New(0, 0)
	base, _ = serve(t, feed, up.URL)
	return base, feed.Observer()
}

// testContinuation marks the splice: the attempt that continued a stream
// that broke is a bar of its own, marked, whose title says what it
// carried.
func testContinuation(t *testing.T, tab context.Context) {
	errs := jsErrors(t, tab)
	base, obs := recordedPage(t)
	at := time.Now().Add(-5 * time.Second)
	r := &record.Request{ID: "spliced", Method: "POST", Path: "/v1/chat/completions", Upstream: "mock", Start: at, Stream: true}
	for i, cont := range []bool{false, true} {
		a := record.Attempt{N: i + 1, Start: at.Add(time.Duration(i) * time.Second), End: at.Add(time.Duration(i)*time.Second + 100*time.Millisecond), Status: 200, Continued: cont}
		if cont {
			a.PrefillBytes = 321
		}
		r.Attempts = append(r.Attempts, a)
		obs.AttemptEnd(r, a)
	}
	r.Status, r.End, r.Committed = 200, at.Add(2*time.Second), true
	r.Continuations = []record.Continuation{{Upstream: "mock", After: 500, Prefill: 321, Outcome: record.ContinuationOK}}
	obs.Done(r)
	open(t, tab, base)
	if err := poll(tab, 5*time.Second, `document.querySelectorAll('.bar[data-continued]').length === 1 && document.querySelectorAll('.bar').length === 2`); err != nil {
		t.Fatalf("the page shows no marked continuation: %v", err)
	}
	title, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector('.bar[data-continued]').title`))
	if err != nil || !strings.Contains(title, "continued the stream that broke, with 321 bytes") {
		t.Errorf("got the title %q (%v), want it to say what the continuation carried", title, err)
	}
	// The attempt whose stream broke is amber, not green, and says so.
	broke, err := chromedp.Run(tab, chromedp.Evaluate[string](`(() => { const b = document.querySelector('.bar[data-n="1"]'); return b.dataset.outcome + "|" + b.title; })()`))
	if err != nil || !strings.HasPrefix(broke, "broke|attempt 1: 200, broke after 500 bytes, continued") {
		t.Errorf("got the broken attempt's outcome and title %q (%v), want broke and its ending", broke, err)
	}
	if e := errs(); len(e) > 0 {
		t.Errorf("the page's script failed: %q", e)
	}
}

// testHedge marks a hedge: its attempt, beside the request's own and
// overlapping it, is a bar of its own, marked, whose title names where
// it went and why; no wait is drawn between the overlapping attempts.
func testHedge(t *testing.T, tab context.Context) {
	errs := jsErrors(t, tab)
	base, obs := recordedPage(t)
	at := time.Now().Add(-15 * time.Second)
	r := &record.Request{ID: "hedged", Method: "POST", Path: "/v1/chat/completions", Upstream: "primary", Start: at, Stream: true}
	for _, a := range []record.Attempt{
		{N: 1, Upstream: "fallback", Fallback: record.ReasonHedge, Start: at.Add(10 * time.Second), End: at.Add(11 * time.Second), Status: 200},
		{N: 2, Upstream: "primary", Start: at, End: at.Add(11 * time.Second), Class: outlast.ClassCanceled, Error: "outlast: hedged: the other attempt answered first"},
	} {
		r.Attempts = append(r.Attempts, a)
		obs.AttemptEnd(r, a)
	}
	r.Status, r.End, r.Committed = 200, at.Add(12*time.Second), true
	r.Moves = []record.Move{{From: "primary", To: "fallback", Reason: record.ReasonHedge}}
	obs.Done(r)
	open(t, tab, base)
	if err := poll(tab, 5*time.Second, `document.querySelectorAll('.bar[data-hedge]').length === 1 && document.querySelectorAll('.bar').length === 2`); err != nil {
		t.Fatalf("the page shows no marked hedge: %v", err)
	}
	got, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector('.bar[data-hedge]').title + "|" + document.querySelectorAll('.gap').length`))
	if err != nil || !strings.Contains(got, "at fallback, a hedge") || !strings.HasSuffix(got, "|0") {
		t.Errorf("got the title and gap count %q (%v), want the hedge named and no gap", got, err)
	}
	if e := errs(); len(e) > 0 {
		t.Errorf("the page's script failed: %q", e)
	}
}

// matchAll is a JavaScript condition that the object c has want's counts.
func matchAll(want map[string]int) string {
	var conds []string
	for k, v := range want {
		conds = append(conds, fmt.Sprintf("c[%q] === %d", k, v))
	}
	return strings.Join(conds, " && ")
}

// testFirstPaint loads the page while its event stream is held back, as
// a proxy that buffers it would, and finds the feed's requests drawn
// within a second of the navigation: the page draws the newest requests
// that its HTML carries, without waiting for the stream. Each attempt
// shows how it ended: a broken stream's first answer is amber, not
// green, and its title says where it broke; a hedge's loser is grey. The
// stream, once let through, takes over.
func testFirstPaint(t *testing.T, tab context.Context) {
	errs := jsErrors(t, tab)
	feed := timeline.New(0, 0)
	recordEndings(feed.Observer(), time.Now().Add(-10*time.Second))
	base, release := heldStream(t, feed)

	// When the rows first appear, and when the page first paints, from
	// the page's own clock: observers that run before the page's script,
	// and are not subject to its CSP.
	const watch = `new MutationObserver((_, o) => {
		if (document.querySelector('.row')) { window.outlastRowsAt = performance.now(); o.disconnect(); }
	}).observe(document, { childList: true, subtree: true });
	new PerformanceObserver((l) => {
		for (const e of l.getEntries()) if (e.name === "first-contentful-paint") window.outlastPaintAt = e.startTime;
	}).observe({ type: "paint", buffered: true });`
	if err := chromedp.Do(tab, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: watch})
		return err
	})); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	soon, cancel := context.WithDeadline(tab, start.Add(time.Second))
	defer cancel()
	if err := chromedp.Do(soon, chromedp.Navigate(base+"/outlast/")); err != nil {
		t.Fatalf("the page did not load within 1s: %v", err)
	}
	if _, err := chromedp.Run(soon, chromedp.Poll[bool](`document.querySelectorAll('.row').length === 4`, chromedp.WithPollingMutation())); err != nil {
		got, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelectorAll('.row').length + " rows, " + document.getElementById('empty').textContent`))
		t.Fatalf("1s after the navigation, with the event stream held back, the page shows %s; want the 4 requests: %v", got, err)
	}
	took := time.Since(start)
	times, err := chromedp.Run(tab, chromedp.Poll[map[string]float64](`window.outlastPaintAt !== undefined && { rows: window.outlastRowsAt, paint: window.outlastPaintAt }`,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(5*time.Second)))
	if err != nil {
		t.Fatalf("the page's first paint was not reported: %v", err)
	}
	t.Logf("the rows were in the DOM %.0f ms after the navigation began, and the page's first contentful paint was at %.0f ms; the test saw the rows %v after it sent the navigation",
		times["rows"], times["paint"], took.Round(time.Millisecond))
	if times["rows"] > times["paint"] {
		t.Errorf("the page first painted at %.0f ms, before its rows were drawn at %.0f ms", times["paint"], times["rows"])
	}
	if conn, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.getElementById('conn').dataset.state`)); conn == "live" {
		t.Errorf("the page says it is live, though its event stream is held back")
	}

	checkEndings(t, tab)
	checkPainted(t, tab)

	release()
	if err := poll(tab, 5*time.Second, `document.getElementById('conn').dataset.state === "live" && document.querySelectorAll('.row').length === 4`); err != nil {
		t.Errorf("the page did not go live with the same rows once its stream was let through: %v", err)
	}
	checkEndings(t, tab)
	if e := errs(); len(e) > 0 {
		t.Errorf("the page's script failed: %q", e)
	}
}

// recordEndings tells obs of four requests from at on, one for each way
// an answer ends that the page tells apart: whole; a stream that broke
// after 300 bytes and was continued, at the second try; a stream that
// broke and was not continued; and a hedge whose other side answered.
func recordEndings(obs record.Observer, at time.Time) {
	ms := func(n int) time.Time { return at.Add(time.Duration(n) * time.Millisecond) }
	add := func(r *record.Request, as ...record.Attempt) {
		for _, a := range as {
			r.Attempts = append(r.Attempts, a)
			obs.AttemptEnd(r, a)
		}
	}
	req := func(id string, start int, stream bool) *record.Request {
		return &record.Request{ID: id, Run: "endings", Method: "POST", Path: "/v1/chat/completions", Upstream: "mock", Start: ms(start), Stream: stream}
	}

	r := req("whole", 0, false)
	add(r, record.Attempt{N: 1, Start: ms(0), End: ms(800), Status: 200})
	r.Status, r.End = 200, ms(1000)
	obs.Done(r)

	r = req("continued", 1500, true)
	add(r, record.Attempt{N: 1, Start: ms(1500), End: ms(2000), Status: 200},
		record.Attempt{N: 2, Start: ms(3500), End: ms(3600), Status: 529, Class: outlast.ClassOverloaded, RetryIn: 200 * time.Millisecond},
		record.Attempt{N: 3, Start: ms(3800), End: ms(4300), Status: 200, Continued: true, PrefillBytes: 280})
	r.Status, r.End, r.Committed, r.Bytes = 200, ms(5500), true, 900
	r.Continuations = []record.Continuation{{Upstream: "mock", After: 300, Prefill: 280, Outcome: record.ContinuationOK}}
	obs.Done(r)

	r = req("broke", 6000, true)
	add(r, record.Attempt{N: 1, Start: ms(6000), End: ms(6500), Status: 200})
	r.Status, r.End, r.Committed, r.Bytes, r.Error = 200, ms(7500), true, 1234, record.ErrorUpstreamBroke
	obs.Done(r)

	r = req("hedged", 7000, true)
	add(r, record.Attempt{N: 1, Upstream: "fallback", Fallback: record.ReasonHedge, Start: ms(8000), End: ms(8600), Status: 200},
		record.Attempt{N: 2, Upstream: "mock", Start: ms(7000), End: ms(8600), Class: outlast.ClassCanceled, Error: record.HedgedError})
	r.Status, r.End, r.Committed = 200, ms(9500), true
	r.Moves = []record.Move{{From: "mock", To: "fallback", Reason: record.ReasonHedge}}
	obs.Done(r)
}

// checkEndings checks what recordEndings's requests show: each bar's
// colour, in the page's computed style, and its title; and a tag on each
// stream's row.
func checkEndings(t *testing.T, tab context.Context) {
	t.Helper()
	got, err := chromedp.Run(tab, chromedp.Evaluate[map[string]string](`(() => {
		const out = {};
		for (const b of document.querySelectorAll('.row .bar')) {
			const id = b.closest('.row').dataset.id + "/" + b.dataset.n;
			out[id] = b.dataset.outcome + "|" + getComputedStyle(b).backgroundColor + "|" + b.title.split("\n")[0];
		}
		for (const r of document.querySelectorAll('.row')) {
			out[r.dataset.id + "/tag"] = r.querySelector('.tag')?.textContent || "";
			out[r.dataset.id + "/label"] = r.querySelector('.label').title;
		}
		return out;
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	const green, amber = "rgb(47, 158, 68)", "rgb(252, 196, 25)"
	for _, c := range []struct{ bar, outcome, colour, title string }{
		{"whole/1", "ok", green, "attempt 1: 200, 800ms"},
		{"continued/1", "broke", amber, "attempt 1: 200, broke after 300 bytes, continued, 500ms"},
		{"continued/2", "5xx", "", "attempt 2: 529, 100ms (overloaded)"},
		{"continued/3", "ok", green, "attempt 3: 200, stream whole, 500ms"},
		{"broke/1", "broke", amber, "attempt 1: 200, broke after 1234 bytes, 500ms"},
		{"hedged/2", "hedged", "", "attempt 2: hedged: the other attempt answered first, 1.6s"},
	} {
		parts := strings.SplitN(got[c.bar], "|", 3)
		if len(parts) != 3 {
			t.Errorf("%s: no bar in %v", c.bar, got)
			continue
		}
		if parts[0] != c.outcome || (c.colour != "" && parts[1] != c.colour) || parts[2] != c.title {
			t.Errorf("%s: got %s coloured %s, titled %q; want %s, %s, %q", c.bar, parts[0], parts[1], parts[2], c.outcome, c.colour, c.title)
		}
		if c.outcome != "ok" && parts[1] == green {
			t.Errorf("%s: a %s attempt is green", c.bar, c.outcome)
		}
	}
	// The row's tooltip lists how each attempt ended.
	if label, want := got["continued/label"], "\nattempt 1: 200, broke after 300 bytes, continued\nattempt 2: 529\nattempt 3: 200, stream whole"; !strings.HasSuffix(label, want) {
		t.Errorf("got the row's title %q, want it to end %q", label, want)
	}
	for id, want := range map[string]string{"whole": "", "continued": "stream", "broke": "stream", "hedged": "stream"} {
		if got := got[id+"/tag"]; got != want {
			t.Errorf("%s's row: got the tag %q, want %q", id, got, want)
		}
	}
}

// checkPainted takes a screenshot, which is kept nowhere, and checks that
// the rows are painted in it: green and amber bars where the page laid
// the rows out.
func checkPainted(t *testing.T, tab context.Context) {
	t.Helper()
	if err := chromedp.Do(tab, chromedp.Evaluate[chromedp.Void](`document.getElementById('timeline').scrollIntoView()`)); err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(tab, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("the screenshot: %v", err)
	}
	box, err := chromedp.Run(tab, chromedp.Evaluate[map[string]float64](`(() => {
		const r = document.getElementById('rows').getBoundingClientRect(), d = devicePixelRatio;
		return { x0: r.left * d, y0: r.top * d, x1: r.right * d, y1: Math.min(r.bottom, innerHeight) * d };
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	within := image.Rect(int(box["x0"]), int(box["y0"]), int(box["x1"]), int(box["y1"])).Intersect(img.Bounds())
	count := func(want color.RGBA) int {
		n := 0
		for y := within.Min.Y; y < within.Max.Y; y++ {
			for x := within.Min.X; x < within.Max.X; x++ {
				r, g, b, _ := img.At(x, y).RGBA()
				if uint8(r>>8) == want.R && uint8(g>>8) == want.G && uint8(b>>8) == want.B {
					n++
				}
			}
		}
		return n
	}
	green, amber := count(color.RGBA{47, 158, 68, 255}), count(color.RGBA{252, 196, 25, 255})
	t.Logf("the screenshot's rows, %v px, hold %d green and %d amber pixels", within.Size(), green, amber)
	// A bar is at least 3 px wide and 14 px high.
	if green < 3*14 || amber < 3*14 {
		t.Errorf("the screenshot shows %d green and %d amber pixels where the rows are, want the bars painted", green, amber)
	}
}

// heldStream serves feed's endpoints as the gateway mounts them, but
// holds back the event stream until release is called, as a proxy that
// buffers it would; and returns the server's URL.
func heldStream(t *testing.T, feed *timeline.Feed) (base string, release func()) {
	t.Helper()
	released := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	ends := feed.Endpoints()
	mux := http.NewServeMux()
	mux.Handle("/outlast/{$}", ends[""])
	mux.Handle("/outlast/timeline/", ends["timeline/"])
	mux.HandleFunc("/outlast/events", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-released:
			ends["events"].ServeHTTP(w, r)
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	// Before srv.Close, which waits for the streams: end them.
	t.Cleanup(feed.Close)
	t.Cleanup(release)
	return srv.URL, release
}

// testPool shows a pool's member with its pool and the limits its
// answers stated, as the pool counts them; a member whose answers stated
// none says so.
func testPool(t *testing.T, tab context.Context) {
	errs := jsErrors(t, tab)
	up := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(up.Close)
	feed := timeline.New(0, 0)
	base, _ := serve(t, feed, up.URL)
	unknown := outlast.Quota{Limit: -1, Remaining: -1}
	feed.SetLoads(func() []record.Load {
		return []record.Load{
			{Upstream: "gpt", Requests: unknown, Tokens: unknown},
			{Upstream: "key-a", Pool: "gpt", Requests: outlast.Quota{Limit: 60, Remaining: 12}, Tokens: outlast.Quota{Limit: 40000, Remaining: 3100}},
			{Upstream: "key-b", Pool: "gpt", Requests: unknown, Tokens: unknown},
		}
	})
	open(t, tab, base)
	if err := poll(tab, 5*time.Second, `document.querySelectorAll('#slots .upstream .headroom').length === 2`); err != nil {
		t.Fatalf("the page shows no members' headroom: %v", err)
	}
	got, err := chromedp.Run(tab, chromedp.Evaluate[string](`[...document.querySelectorAll('#slots .upstream')].map(u => u.dataset.name + ": " + (u.querySelector('.headroom')?.textContent ?? "-")).join(" | ")`))
	want := "gpt: - | key-a: in pool gpt · 12 of 60 requests left · 3,100 of 40,000 tokens left | key-b: in pool gpt · no limits stated yet"
	if err != nil || got != want {
		t.Errorf("the slots panel says %q (%v), want %q", got, err, want)
	}
	if e := errs(); len(e) > 0 {
		t.Errorf("the page's script failed: %q", e)
	}
}
