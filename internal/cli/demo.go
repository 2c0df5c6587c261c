package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/mockllm"
	"github.com/outlast-llm/outlast/timeline"
)

// The demo's provider is the mock, down then rate-limited then up:
//
//	0 s to 1.5 s   502 Bad Gateway, after 200 ms
//	1.5 s to 3 s   429 Too Many Requests, Retry-After: 1
//	from 3 s       answers: 300 ms of work; streams, 3 chunks 100 ms apart
const demoScript = "502:delay=200ms for 1.5s,429:retry-after=1 for 1.5s,ok:delay=300ms"

// demoRun is one host run in the demo, and what it is expected to end as.
type demoRun struct {
	name     string
	startAt  time.Duration // after the demo starts
	deadline time.Duration
	stream   bool
	want     string // "ok", "failed" or "refused"

	// filled in as it runs
	got    string
	detail string
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
	keep := fs.Bool("keep", false, "leave the gateway and the mock running after the summary, until interrupted")
	plain := fs.Bool("plain", false, "print plain timeline lines even on a terminal")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `Usage: outlast demo [flags]

Runs a provider outage in one process, with nothing to install: a mock
provider that is down, then rate-limited, then up; the outlast gateway in
front of it with one slot and a queue of 2; and five host runs, one of
them with a deadline too short to survive and one over the queue bound.
A timeline shows each queue, attempt and wait as it happens, then a
summary. Exits 0 when every run ends as expected and the mock saw exactly
the attempts the record holds, 1 otherwise.

Flags:`)
		fs.PrintDefaults()
	}
	if done, err := parseFlags(fs, args, stderr); done {
		return err
	}
	d, err := startDemo(newTimeline(stdout, !*plain && isTerminal(stdout)))
	if err != nil {
		return err
	}
	defer d.close()
	d.tl.intro()
	d.runAll(ctx)
	err = d.summary()
	if *keep && ctx.Err() == nil {
		fmt.Fprintf(stdout, "\nThe timeline page is at %s/outlast/ (open it in a browser).\nThe record: %s/outlast/requests, a run: %s/outlast/runs/chat-1, health: %s/outlast/health, metrics: none in the demo.\nThe mock is at %s (%s/mock/stats). Press Ctrl-C to stop.\n", d.gwURL, d.gwURL, d.gwURL, d.gwURL, d.mock.URL, d.mock.URL)
		<-ctx.Done()
	}
	return err
}

type demo struct {
	tl    *demoTimeline
	mock  *mockllm.Server
	gw    *http.Server
	gwURL string
	runs  []*demoRun

	dir      string        // the journal's temporary folder
	store    journal.Store // the embedded journal: the record
	writer   *journal.Writer
	finished atomic.Int32 // requests the gateway finished, and handed to the writer
	feed     *timeline.Feed
}

// endpoints are the record's API and the timeline page, under /outlast/.
func (d *demo) endpoints() map[string]http.Handler {
	e := (&journal.API{Store: d.store}).Endpoints()
	for k, h := range d.feed.Endpoints() {
		e[k] = h
	}
	return e
}

// startDemo starts the mock and the gateway in front of it.
func startDemo(tl *demoTimeline) (*demo, error) {
	d := &demo{tl: tl, runs: demoRuns(), feed: timeline.New(0)}
	script, err := mockllm.ParseScript(demoScript)
	if err != nil {
		return nil, err
	}
	if err := d.openJournal(); err != nil {
		return nil, err
	}
	d.mock = &mockllm.Server{Script: script, Chunks: 3, ChunkDelay: 100 * time.Millisecond}
	if err := d.mock.Start(""); err != nil {
		return nil, err
	}
	u, _ := url.Parse(d.mock.URL)
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{
			Name:             "mock",
			URL:              u,
			Policy:           &outlast.Policy{Waits: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}, Reserve: time.Second},
			Slots:            1,
			Queue:            2,
			FirstByteTimeout: 10 * time.Second,
		}},
		Logger:    slog.New(slog.DiscardHandler), // the timeline says it instead
		Observer:  gateway.Observers(d.observer(), journal.Observer(d.writer, journal.ObserverConfig{}), d.feed.Observer()),
		Endpoints: d.endpoints(),
	})
	if err != nil {
		d.mock.Close()
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		d.mock.Close()
		return nil, err
	}
	d.feed.SetHealth(g.Health)
	d.gw = &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	d.gwURL = "http://" + l.Addr().String()
	go d.gw.Serve(l)
	return d, nil
}

// openJournal opens the embedded journal, SQLite in a temporary folder.
func (d *demo) openJournal() error {
	dir, err := os.MkdirTemp("", "outlast-demo-")
	if err != nil {
		return err
	}
	d.dir = dir
	if d.store, err = journal.Open(context.Background(), "sqlite:"+filepath.Join(dir, "outlast.db")); err != nil {
		os.RemoveAll(dir)
		return err
	}
	d.writer = journal.NewWriter(d.store, journal.WriterConfig{FlushInterval: 50 * time.Millisecond})
	return nil
}

func (d *demo) close() {
	d.feed.Close()
	d.gw.Close()
	d.mock.Close()
	d.writer.Close(context.Background())
	d.store.Close()
	os.RemoveAll(d.dir)
}

// observer turns the gateway's view of each request into timeline lines.
func (d *demo) observer() gateway.Observer {
	return gateway.Observer{
		Queued: func(r *gateway.Request, _ string, ahead int) {
			d.tl.event(r.Run, stateQueued, "queued at the slot, %d ahead", ahead)
		},
		AttemptStart: func(r *gateway.Request, a outlast.Attempt) {
			d.tl.event(r.Run, stateSending, "attempt %d sent", a.N)
		},
		AttemptEnd: func(r *gateway.Request, a outlast.Attempt) {
			state := stateSending
			if a.RetryIn > 0 {
				state = stateWaiting
			}
			d.tl.event(r.Run, state, "attempt %d %s", a.N, describe(a))
		},
		Done: func(*gateway.Request) { d.finished.Add(1) },
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
	d.tl.finish()
}

// run sends one host run's request to the gateway, as a host in any
// language would, and records how it ended.
func (d *demo) run(ctx context.Context, r *demoRun) {
	d.tl.event(r.name, stateSending, "starts, deadline %v", r.deadline)
	body := `{"model":"demo","messages":[{"role":"user","content":"hi"}]}`
	if r.stream {
		body = `{"model":"demo","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.gwURL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(gateway.HeaderRun, r.name)
	req.Header.Set(gateway.HeaderTimeout, r.deadline.String())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.got, r.detail = "failed", err.Error()
	} else {
		r.got, r.detail = finish(r, resp)
	}
	state := map[string]runState{"ok": stateDone, "refused": stateRefused}[r.got]
	if r.got != "ok" && r.got != "refused" {
		state = stateFailed
	}
	d.tl.event(r.name, state, "ends: %s (%s)", r.got, r.detail)
}

// finish reads a response to its end, as the host would.
func finish(r *demoRun, resp *http.Response) (string, string) {
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return "failed", err.Error()
	case resp.Header.Get(gateway.HeaderError) == "busy":
		return "refused", fmt.Sprintf("%s: the slot's queue was full; Retry-After %ss", resp.Status, resp.Header.Get("Retry-After"))
	case resp.StatusCode != http.StatusOK:
		return "failed", fmt.Sprintf("%s after %s attempts: the deadline left no room for another wait", resp.Status, resp.Header.Get(gateway.HeaderAttempts))
	case r.stream:
		return "ok", fmt.Sprintf("streamed %d events", strings.Count(string(body), "data: "))
	}
	return "ok", fmt.Sprintf("%d bytes after %s attempts", len(body), resp.Header.Get(gateway.HeaderAttempts))
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
	switch {
	case a.RetryIn > 0:
		s += fmt.Sprintf(", retrying in %v", a.RetryIn.Round(time.Millisecond))
	case a.Err != nil:
		s += ", no retry left"
	}
	return s
}

// summary prints the table, and reports whether every run ended as
// expected and the record matches what the mock saw.
func (d *demo) summary() error {
	out := d.tl.out
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "run\toutcome\texpected\tattempts\tdetail")
	bad := 0
	recorded := d.attempts()
	total := 0
	for _, r := range d.runs {
		mark := ""
		if r.got != r.want {
			bad++
			mark = "  <-- unexpected"
		}
		total += recorded[r.name]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s%s\n", r.name, r.got, r.want, recorded[r.name], r.detail, mark)
	}
	tw.Flush()
	seen := d.mock.Stats().Total
	fmt.Fprintf(out, "\nThe mock saw %d attempts; the journal holds %d.\n", seen, total)
	if seen != total {
		bad++
	}
	if bad > 0 {
		fmt.Fprintf(out, "demo: %d unexpected outcome(s)\n", bad)
		return ErrFailed
	}
	fmt.Fprintln(out, "demo: every run ended as expected.")
	return nil
}

// attempts returns the attempts the journal holds, per run, once it holds
// every request the gateway finished: the writer writes in batches.
func (d *demo) attempts() map[string]int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, requests, err := d.read()
		if err == nil && requests == int(d.finished.Load()) {
			return n
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(d.tl.out, "demo: the journal holds %d of %d requests (%v)\n", requests, d.finished.Load(), err)
			return n
		}
		time.Sleep(20 * time.Millisecond) // the next batch is at most 50 ms away
	}
}

// read returns the attempts per run and the requests in the journal.
func (d *demo) read() (map[string]int, int, error) {
	n, requests := map[string]int{}, 0
	for _, r := range d.runs {
		recs, err := d.store.Run(context.Background(), r.name)
		if err != nil && !errors.Is(err, journal.ErrNotFound) {
			return n, requests, err
		}
		requests += len(recs)
		for _, rec := range recs {
			n[r.name] += len(rec.Attempts)
		}
	}
	return n, requests, nil
}
