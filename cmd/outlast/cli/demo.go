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
	"text/tabwriter"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/mockllm"
	"github.com/outlast-llm/outlast/record"
	"github.com/outlast-llm/outlast/server"
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
	after    string        // the run that must be queued, sent or over first; "" for none
	notAt    time.Duration // and not before this, after the demo starts
	deadline time.Duration
	stream   bool
	want     string // "ok", "failed" or "refused"

	// filled in as it runs
	got    string
	detail string
}

// demoRuns are the runs, each after the one before it is known to hold
// the slot, wait in its queue, or be over, so that they reach the gate in
// this order whatever the machine's load: chat-1 takes the slot, stream-1
// and chat-2 fill the queue of 2, over-queue finds it full, and
// short-deadline comes mid-outage with too little time to outlast it.
func demoRuns() []*demoRun {
	return []*demoRun{
		{name: "chat-1", deadline: 20 * time.Second, want: "ok"},
		{name: "stream-1", after: "chat-1", deadline: 20 * time.Second, stream: true, want: "ok"},
		{name: "chat-2", after: "stream-1", deadline: 20 * time.Second, want: "ok"},
		{name: "over-queue", after: "chat-2", deadline: 20 * time.Second, want: "refused"},
		{name: "short-deadline", after: "over-queue", notAt: 700 * time.Millisecond, deadline: 2500 * time.Millisecond, want: "failed"},
	}
}

const demoUsage = `Usage: outlast demo [flags]

Runs a provider outage in one process, with nothing to install: a mock
provider that is down, then rate-limited, then up; the outlast gateway in
front of it with one slot and a queue of 2; and five host runs, one of
them with a deadline too short to survive and one over the queue bound.
A timeline shows each queue, attempt and wait as it happens, then a
summary. Exits 0 when every run ends as expected and the mock saw exactly
the attempts the record holds, 1 otherwise.

Flags:`

// demoFlags are the demo command's flags, as given.
type demoFlags struct{ keep, plain bool }

// newDemoFlags defines the demo command's flags on fs.
func newDemoFlags(fs *flag.FlagSet) *demoFlags {
	f := &demoFlags{}
	fs.BoolVar(&f.keep, "keep", false, "leave the gateway and the mock running after the summary, until interrupted")
	fs.BoolVar(&f.plain, "plain", false, "print plain timeline lines even on a terminal")
	return f
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, done, err := parseCommand("demo", demoUsage, newDemoFlags, args, stderr)
	if done {
		return err
	}
	d, err := startDemo(ctx, newTimeline(stdout, !f.plain && isTerminal(stdout)))
	if err != nil {
		return err
	}
	defer d.close()
	d.tl.intro()
	d.runAll(ctx)
	err = d.summary(context.WithoutCancel(ctx))
	if f.keep && ctx.Err() == nil {
		fmt.Fprintf(stdout, "\nThe timeline page is at %s/outlast/ (open it in a browser).\nThe record: %s/outlast/requests, a run: %s/outlast/runs/chat-1, health: %s/outlast/health, metrics: %s/outlast/metrics.\nThe mock is at %s (%s/mock/stats). Press Ctrl-C to stop.\n", d.gwURL, d.gwURL, d.gwURL, d.gwURL, d.gwURL, d.mock.URL, d.mock.URL)
		<-ctx.Done()
	}
	return err
}

type demo struct {
	tl    *demoTimeline
	mock  *mockllm.Server
	srv   *server.Server
	gw    *http.Server
	gwURL string
	runs  []*demoRun

	dir     string                   // the journal's temporary folder
	reached map[string]chan struct{} // closed when a run is first queued, sent or over
	once    map[string]*sync.Once    // closes reached once
	done    chan struct{}            // a request the gateway finished and gave to the journal
	// recorded has, per run, its request's record once the gateway has
	// finished it: its attempts' ends told, which a host may read its
	// answer before.
	recorded map[string]chan struct{}
}

// startDemo starts the mock and the gateway in front of it, as outlast
// serve assembles it, with its journal in a temporary folder.
func startDemo(ctx context.Context, tl *demoTimeline) (_ *demo, err error) {
	d := &demo{tl: tl, runs: demoRuns(), reached: map[string]chan struct{}{}, once: map[string]*sync.Once{}, recorded: map[string]chan struct{}{}}
	d.done = make(chan struct{}, len(d.runs))
	for _, r := range d.runs {
		d.reached[r.name], d.once[r.name], d.recorded[r.name] = make(chan struct{}), new(sync.Once), make(chan struct{}, 1)
	}
	script, err := mockllm.ParseScript(demoScript)
	if err != nil {
		return nil, err
	}
	if d.dir, err = os.MkdirTemp("", "outlast-demo-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	// The script's clock starts at chat-1's first attempt, however long
	// the demo took to start.
	d.mock = &mockllm.Server{Script: script, Chunks: 3, ChunkDelay: 100 * time.Millisecond, FromFirstRequest: true}
	if err := d.mock.Start(""); err != nil {
		return nil, err
	}
	u, _ := url.Parse(d.mock.URL)
	d.srv, err = server.New(ctx, server.Config{
		Gateway: gateway.Config{
			Upstreams: []gateway.Upstream{{
				Name:             "mock",
				URL:              u,
				Policy:           &outlast.Policy{Waits: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}, Reserve: time.Second},
				Slots:            1,
				Queue:            2,
				FirstByteTimeout: 10 * time.Second,
			}},
			Logger: slog.New(slog.DiscardHandler), // the timeline says it instead
		},
		Journal:       "sqlite:" + filepath.Join(d.dir, "outlast.db"),
		JournalWriter: server.WriterInline, // a temporary journal is not worth a process
		JournalFlush:  50 * time.Millisecond,
		Observer:      d.observer(),
	})
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d.gw = &http.Server{Handler: d.srv, ReadHeaderTimeout: 10 * time.Second}
	d.gwURL = "http://" + l.Addr().String()
	go d.gw.Serve(l)
	return d, nil
}

func (d *demo) close() {
	if d.gw != nil {
		d.gw.Close()
	}
	if d.srv != nil {
		d.srv.Close(context.Background())
	}
	if d.mock != nil {
		d.mock.Close()
	}
	os.RemoveAll(d.dir)
}

// reach marks run as queued, sent or over, letting the next run start.
func (d *demo) reach(run string) {
	if o := d.once[run]; o != nil {
		o.Do(func() { close(d.reached[run]) })
	}
}

// observer turns the gateway's view of each request into timeline lines.
func (d *demo) observer() record.Observer {
	return record.Observer{
		Queued: func(r *record.Request, _ string, ahead int) {
			d.tl.event(r.Run, stateQueued, "queued at the slot, %d ahead", ahead)
			d.reach(r.Run)
		},
		AttemptStart: func(r *record.Request, a record.Attempt) {
			d.tl.event(r.Run, stateSending, "attempt %d sent", a.N)
			d.reach(r.Run)
		},
		AttemptEnd: func(r *record.Request, a record.Attempt) {
			state := stateSending
			if a.RetryIn > 0 {
				state = stateWaiting
			}
			d.tl.event(r.Run, state, "attempt %d %s", a.N, describe(a))
		},
		// The journal's observer has taken the record by now.
		Done: func(r *record.Request) {
			select {
			case d.recorded[r.Run] <- struct{}{}:
			default: // not one of the demo's runs
			}
			d.done <- struct{}{}
		},
	}
}

// runAll starts each run once the run before it has reached the gate, and
// its time has come, and waits for them all.
func (d *demo) runAll(ctx context.Context) {
	start := time.Now()
	var wg sync.WaitGroup
	for _, r := range d.runs {
		if err := d.waitTurn(ctx, r, start); err != nil {
			r.got, r.detail = "failed", err.Error()
			continue
		}
		wg.Go(func() {
			d.run(ctx, r)
			d.reach(r.name)
		})
	}
	wg.Wait()
	d.tl.finish()
}

// waitTurn waits until r may start: the run before it has reached the
// gate or ended, and r.notAt has passed since start.
func (d *demo) waitTurn(ctx context.Context, r *demoRun, start time.Time) error {
	if r.after != "" {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.reached[r.after]:
		}
	}
	t := time.NewTimer(time.Until(start.Add(r.notAt)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
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
		// The gateway tells of the answer's attempt once its first bytes
		// have gone, so a host may have it all first: the run ends on the
		// timeline after the gateway's record of it.
		select {
		case <-d.recorded[r.name]:
		case <-ctx.Done():
		}
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

func describe(a record.Attempt) string {
	var s string
	if a.Status != 0 {
		s = fmt.Sprintf("got %d %s", a.Status, http.StatusText(a.Status))
	} else {
		s = "failed: " + a.Error
	}
	if a.RetryAfter > 0 {
		s += fmt.Sprintf(" (Retry-After %v)", a.RetryAfter)
	}
	switch {
	case a.RetryIn > 0:
		s += fmt.Sprintf(", retrying in %v", a.RetryIn.Round(time.Millisecond))
	case a.Class != outlast.ClassNone:
		s += ", no retry left"
	}
	return s
}

// summary prints the table, and reports whether every run ended as
// expected and the record matches what the mock saw.
func (d *demo) summary(ctx context.Context) error {
	out := d.tl.out
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "run\toutcome\texpected\tattempts\tdetail")
	bad := 0
	recorded := d.attempts(ctx)
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

// attempts returns the attempts the journal holds, per run, once every
// request has been finished and written: the writer writes in batches.
func (d *demo) attempts(ctx context.Context) map[string]int {
	n := map[string]int{}
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	for range d.runs {
		select {
		case <-d.done:
		case <-t.C:
			fmt.Fprintln(d.tl.out, "demo: the gateway did not finish every request within 10s")
			return n
		case <-ctx.Done():
			return n
		}
	}
	if err := d.srv.Writer.Flush(ctx); err != nil {
		fmt.Fprintf(d.tl.out, "demo: writing the journal: %v\n", err)
		return n
	}
	for _, r := range d.runs {
		recs, err := d.srv.Store.Run(ctx, r.name)
		if err != nil && !errors.Is(err, journal.ErrNotFound) {
			fmt.Fprintf(d.tl.out, "demo: reading the journal: %v\n", err)
			return n
		}
		for _, rec := range recs {
			n[r.name] += len(rec.Attempts)
		}
	}
	return n
}
