package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gate"
)

// The demo's provider is down, then rate-limited, then up:
//
//	0 s to 1.5 s   502 Bad Gateway
//	1.5 s to 3 s   429 Too Many Requests, Retry-After: 1
//	from 3 s       200, after 300 ms of work (streams: 3 events, 100 ms apart)
const (
	demoDownUntil    = 1500 * time.Millisecond
	demoLimitedUntil = 3 * time.Second
)

// demoRun is one host run in the demo, and what it is expected to end as.
type demoRun struct {
	name     string
	startAt  time.Duration // after the demo starts
	deadline time.Duration
	stream   bool
	want     string // "ok", "failed" or "refused"

	// filled in as it runs
	got      string
	detail   string
	attempts atomic.Int32
}

func demoRuns() []*demoRun {
	return []*demoRun{
		{name: "chat-1", startAt: 0, deadline: 20 * time.Second, want: "ok"},
		{name: "stream-1", startAt: 20 * time.Millisecond, deadline: 20 * time.Second, stream: true, want: "ok"},
		{name: "chat-2", startAt: 40 * time.Millisecond, deadline: 20 * time.Second, want: "ok"},
		{name: "over-queue", startAt: 60 * time.Millisecond, deadline: 20 * time.Second, want: "refused"},
		{name: "short-deadline", startAt: 700 * time.Millisecond, deadline: 2500 * time.Millisecond, want: "failed"},
	}
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: outlast demo\n\nRuns a provider outage in one process: five host runs share one slot\n(queue 2) through outlast, and a timeline shows each queue, attempt and\nwait. Exits 0 when every run ends as expected, 1 otherwise.")
		fs.PrintDefaults()
	}
	if done, err := parseFlags(fs, args, stderr); done {
		return err
	}
	d := newDemo(stdout)
	defer d.provider.Close()
	fmt.Fprintf(stdout, "outlast demo: a provider that is down (502) until %v, rate-limited (429, Retry-After: 1) until %v, then up.\n", demoDownUntil, demoLimitedUntil)
	fmt.Fprintln(stdout, "Five runs share one slot with a queue of 2; policy: waits 500ms, 1s, 2s (the last repeats under a deadline), reserve 1s.")
	fmt.Fprintln(stdout)
	d.runAll(ctx)
	return d.summary()
}

type demo struct {
	start    time.Time
	provider *httptest.Server
	client   *http.Client
	runs     []*demoRun
	seen     atomic.Int32 // attempts the provider saw

	mu  sync.Mutex // guards out
	out io.Writer
}

func newDemo(out io.Writer) *demo {
	d := &demo{start: time.Now(), out: out, runs: demoRuns()}
	d.provider = httptest.NewServer(http.HandlerFunc(d.serve))
	d.client = &http.Client{Transport: &outlast.Transport{
		Policy: &outlast.Policy{
			Waits:   []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second},
			Reserve: time.Second,
		},
		Gate:   gate.New(1, 2),
		Logger: slog.New(slog.DiscardHandler), // the timeline says it instead
	}}
	return d
}

// serve is the provider.
func (d *demo) serve(w http.ResponseWriter, r *http.Request) {
	d.seen.Add(1)
	io.Copy(io.Discard, r.Body)
	switch since := time.Since(d.start); {
	case since < demoDownUntil:
		time.Sleep(200 * time.Millisecond)
		http.Error(w, `{"error":{"type":"server_error","message":"upstream connect error"}}`, http.StatusBadGateway)
	case since < demoLimitedUntil:
		w.Header().Set("Retry-After", "1")
		http.Error(w, `{"error":{"type":"rate_limit_error","message":"slow down"}}`, http.StatusTooManyRequests)
	case r.Header.Get("Accept") == "text/event-stream":
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			time.Sleep(100 * time.Millisecond)
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"part %d\"}}]}\n\n", i+1)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	default:
		time.Sleep(300 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"message":{"role":"assistant","content":"hello"}}]}`)
	}
}

func (d *demo) runAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, r := range d.runs {
		wg.Go(func() {
			t := time.NewTimer(r.startAt)
			defer t.Stop()
			select {
			case <-ctx.Done():
				r.got, r.detail = "failed", ctx.Err().Error()
				return
			case <-t.C:
			}
			d.run(ctx, r)
		})
	}
	wg.Wait()
}

// run sends one host run's request and records how it ended.
func (d *demo) run(ctx context.Context, r *demoRun) {
	ctx, cancel := context.WithTimeout(ctx, r.deadline)
	defer cancel()
	d.say(r, "starts, deadline %v", r.deadline)
	ctx = outlast.WithHooks(ctx, outlast.Hooks{
		Queued: func(_ string, ahead int) { d.say(r, "queued at the slot, %d ahead", ahead) },
		AttemptStart: func(a outlast.Attempt) {
			r.attempts.Add(1)
			d.say(r, "attempt %d sent", a.N)
		},
		AttemptEnd: func(a outlast.Attempt) { d.say(r, "attempt %d %s", a.N, describe(a)) },
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.provider.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"demo","messages":[{"role":"user","content":"hi"}]}`))
	if r.stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	resp, err := d.client.Do(req)
	switch {
	case errors.Is(err, outlast.ErrBusy):
		r.got, r.detail = "refused", "busy: the slot's queue was full"
	case err != nil:
		r.got, r.detail = "failed", err.Error()
	default:
		r.got, r.detail = d.finish(r, resp)
	}
	d.say(r, "ends: %s (%s)", r.got, r.detail)
}

// finish reads a response to its end, as the host would.
func (d *demo) finish(r *demoRun, resp *http.Response) (string, string) {
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "failed", err.Error()
	}
	if resp.StatusCode != http.StatusOK {
		return "failed", fmt.Sprintf("%s, the deadline left no room for another wait", resp.Status)
	}
	if r.stream {
		return "ok", fmt.Sprintf("streamed %d events", strings.Count(string(body), "data: "))
	}
	return "ok", fmt.Sprintf("%d bytes", len(body))
}

func describe(a outlast.Attempt) string {
	var s string
	if a.Status != 0 {
		s = fmt.Sprintf("got %d %s", a.Status, http.StatusText(a.Status))
	} else {
		s = "failed: " + a.Err.Error()
	}
	if a.RetryAfter > 0 {
		s += fmt.Sprintf(" (Retry-After %v)", a.RetryAfter)
	}
	if a.RetryIn > 0 {
		s += fmt.Sprintf(", retrying in %v", a.RetryIn.Round(time.Millisecond))
	} else if a.Err != nil {
		s += ", no retry left"
	}
	return s
}

// say prints one timeline line.
func (d *demo) say(r *demoRun, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	elapsed := time.Since(d.start).Seconds()
	fmt.Fprintf(d.out, "%6.2fs  %-15s %s\n", elapsed, r.name, fmt.Sprintf(format, args...))
}

// summary prints the table and reports whether every run ended as
// expected and the record matches what the provider saw.
func (d *demo) summary() error {
	fmt.Fprintln(d.out)
	tw := tabwriter.NewWriter(d.out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "run\toutcome\texpected\tattempts\tdetail")
	bad := 0
	var recorded int32
	for _, r := range d.runs {
		mark := ""
		if r.got != r.want {
			bad++
			mark = "  <-- unexpected"
		}
		recorded += r.attempts.Load()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s%s\n", r.name, r.got, r.want, r.attempts.Load(), r.detail, mark)
	}
	tw.Flush()
	fmt.Fprintf(d.out, "\nthe provider saw %d attempts; the record has %d.\n", d.seen.Load(), recorded)
	if d.seen.Load() != recorded {
		bad++
	}
	if bad > 0 {
		fmt.Fprintf(d.out, "demo: %d unexpected outcome(s)\n", bad)
		return ErrFailed
	}
	fmt.Fprintln(d.out, "demo: every run ended as expected.")
	return nil
}
