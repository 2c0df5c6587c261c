package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/redact"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/record"
)

// followEvery is how often --follow looks for new requests: a few times
// the journal's flush interval, so that a request shows a moment after it
// ended.
const followEvery = 250 * time.Millisecond

// followOverlap is how far back from the last request it printed --follow
// looks again each time: a request reaches the journal a batch after it
// ended, later if a write failed and was tried again, and one from
// another replica may come
// with its clock a little behind.
const followOverlap = 10 * time.Second

const requestsUsage = `Usage: outlast requests [flags]

Prints the record the gateway keeps: each request with its attempts, the
status or error of each, and the wait before the next. Reads the journal
directly, so it works while the gateway runs or after it stopped.

Flags:`

// requestsFlags are the requests command's flags, as given.
type requestsFlags struct {
	spec, run    string
	limit        int
	follow, json bool
}

// newRequestsFlags defines the requests command's flags on fs.
func newRequestsFlags(fs *flag.FlagSet) *requestsFlags {
	f := &requestsFlags{}
	fs.StringVar(&f.spec, "journal", journal.DefaultSpec, "the journal to read, a `SPEC`: sqlite:PATH or a postgres:// URL")
	fs.StringVar(&f.run, "run", "", "show run `ID`'s requests, oldest first: each failure, its wait and the next attempt; none: the newest requests")
	fs.IntVar(&f.limit, "limit", 20, "how many of the newest requests to show, without --run")
	fs.BoolVar(&f.follow, "follow", false, "keep printing requests as they are recorded, until interrupted")
	fs.BoolVar(&f.json, "json", false, "print one JSON object a request, with its attempts, instead of a table")
	return f
}

func runRequests(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, done, err := parseCommand("requests", requestsUsage, newRequestsFlags, args, stderr)
	if done {
		return err
	}
	if f.limit < 1 || f.limit > journal.MaxLimit {
		return fmt.Errorf("%w: requests: --limit %d: want 1 to %d", ErrUsage, f.limit, journal.MaxLimit)
	}
	if f.spec == "off" {
		return fmt.Errorf("%w: requests: --journal off: there is no record to read; give the --journal that serve writes", ErrUsage)
	}
	if err := journal.CheckSpec(f.spec); err != nil {
		return fmt.Errorf("%w: requests: --journal %q: %v", ErrUsage, redact.Text(f.spec), strings.TrimPrefix(err.Error(), "journal: "))
	}
	// Reading never creates a journal: a wrong path would leave an empty
	// one behind and print nothing.
	store, err := journal.OpenExisting(ctx, f.spec)
	if errors.Is(err, journal.ErrNoJournal) {
		return fmt.Errorf("requests: no journal found at %s (%v): give the --journal that serve writes", redact.Text(f.spec), err)
	}
	if err != nil {
		return fmt.Errorf("requests: --journal: %w", err)
	}
	defer store.Close()
	p := &printer{out: stdout, json: f.json, seen: map[string]time.Time{}}
	recs, err := first(ctx, store, f.run, f.limit)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		// On stderr, with --json or not: stdout holds records alone, so
		// that a pipe reading it reads no note as a request.
		fmt.Fprintln(stderr, noRequests(f))
	}
	p.printAll(recs)
	if !f.follow {
		return nil
	}
	return p.follow(ctx, store, f.run)
}

// noRequests says that f's journal has no requests to show, and what
// happens next.
func noRequests(f *requestsFlags) string {
	which := "no requests"
	if f.run != "" {
		which += fmt.Sprintf(" of run %q", f.run)
	}
	note := fmt.Sprintf("outlast: %s recorded yet in %s", which, redact.Text(f.spec))
	if f.follow {
		note += "; waiting for them"
	}
	return note
}

// first returns the records to show before following: a run's, oldest
// first, or the newest, in time order.
func first(ctx context.Context, s journal.Store, run string, limit int) ([]record.Request, error) {
	if run != "" {
		recs, err := s.Run(ctx, run)
		if errors.Is(err, journal.ErrNotFound) {
			return nil, nil // nothing yet; --follow may show it
		}
		return recs, err
	}
	page, err := s.List(ctx, journal.Query{Limit: limit})
	slices.Reverse(page.Requests)
	return page.Requests, err
}

type printer struct {
	out  io.Writer
	json bool
	seen map[string]time.Time // printed requests by ID, with their ends, for followOverlap
	last time.Time            // the latest end printed
}

// follow prints requests as they end, every followEvery, until ctx ends:
// it asks the journal for those that ended since the last it printed,
// less followOverlap, and prints the ones it has not. It goes by end, not
// start, so that a request that started before one already printed, and
// ended after it, is printed too.
func (p *printer) follow(ctx context.Context, s journal.Store, run string) error {
	if p.last.IsZero() {
		p.last = time.Now()
	}
	t := time.NewTicker(followEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := p.ended(ctx, s, run); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("requests: %w", err)
		}
	}
}

// ended prints the requests of run (any, if "") that ended since p.last
// less followOverlap and have not been printed, page by page.
func (p *printer) ended(ctx context.Context, s journal.Store, run string) error {
	end, id := p.last.Add(-followOverlap), ""
	for {
		recs, err := s.Ended(ctx, end, id, journal.MaxLimit)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if run == "" || r.Run == run {
				p.print(r)
			}
		}
		if len(recs) < journal.MaxLimit {
			break
		}
		end, id = recs[len(recs)-1].End, recs[len(recs)-1].ID
	}
	// Forget what is too old to be asked for again.
	for id, end := range p.seen {
		if end.Before(p.last.Add(-2 * followOverlap)) {
			delete(p.seen, id)
		}
	}
	return nil
}

// printAll prints recs, in their order.
func (p *printer) printAll(recs []record.Request) {
	for _, r := range recs {
		p.print(r)
	}
}

// print prints r, unless it has been printed.
func (p *printer) print(r record.Request) {
	if _, ok := p.seen[r.ID]; ok {
		return
	}
	p.seen[r.ID] = r.End
	if r.End.After(p.last) {
		p.last = r.End
	}
	if p.json {
		b, _ := json.Marshal(r)
		fmt.Fprintf(p.out, "%s\n", b)
		return
	}
	p.table(r)
}

// table prints a request and, indented, its attempts.
func (p *printer) table(r record.Request) {
	tw := tabwriter.NewWriter(p.out, 0, 8, 2, ' ', 0)
	took := "…"
	if !r.End.IsZero() {
		took = r.End.Sub(r.Start).Round(time.Millisecond).String()
	}
	outcome := fmt.Sprint(r.Status)
	if r.Error != "" {
		outcome += " " + r.Error
	}
	if !r.Deadline.IsZero() {
		// The deadline, and where it came from: the request's own
		// header, its SDK's timeout, or serve's default.
		took += fmt.Sprintf(" of a %v deadline (%s)", r.Deadline.Sub(r.Start).Round(time.Millisecond), r.DeadlineSource)
	}
	kind := ""
	if r.Stream {
		kind = " (stream)"
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s %s%s\t%s\t%d attempts\t%s\n", r.Start.Local().Format("15:04:05.000"), r.ID, orDash(r.Run), r.Method, r.Path, kind, outcome, len(r.Attempts), took)
	moves := r.Moves
	for i, a := range r.Attempts {
		s := describeAttempt(&r, i)
		if a.Fallback != "" {
			// The moves that brought the request here, past upstreams
			// that made no attempt.
			var skipped string
			skipped, moves = movesTo(moves, a.Upstream)
			s = skipped + s
		}
		fmt.Fprintf(tw, "  #%d\t%s\t%s\n", a.N, a.Start.Local().Format("15:04:05.000"), s)
	}
	if skipped, _ := movesTo(moves, ""); skipped != "" {
		// It moved last to an upstream that refused it without an attempt.
		fmt.Fprintf(tw, "  -\t-\t%s\n", strings.TrimSuffix(skipped, " "))
	}
	tw.Flush()
}

// movesTo consumes moves up to the one to upstream, returning the rest and
// the moves before it, each to an upstream that made no attempt, as
// "→azure (busy, no attempt) ".
func movesTo(moves []record.Move, upstream string) (string, []record.Move) {
	var s strings.Builder
	for len(moves) > 0 {
		m := moves[0]
		moves = moves[1:]
		if m.To == upstream {
			break
		}
		fmt.Fprintf(&s, "→%s (%s, no attempt) ", m.To, m.Reason)
	}
	return s.String(), moves
}

// describeAttempt says where r's attempt i went, if not to r's upstream
// or after a move, as "→azure (down)"; how it ended, as r.Ending says;
// and what it waited for.
func describeAttempt(r *record.Request, i int) string {
	a, upstream := r.Attempts[i], r.Upstream
	s := r.Ending(i)
	plain := a.Class == outlast.ClassNone || a.Class.IsStatus() || a.Error == record.HedgedError // the ending says it all
	// In the order they happened: the wait for a down upstream came
	// before the gate's queue.
	if a.AdmissionWait > 0 {
		s += fmt.Sprintf(", waited %v for the upstream", a.AdmissionWait.Round(time.Millisecond))
	}
	if a.Probe {
		s += ", probe"
	}
	if a.QueuedAhead > 0 {
		s += fmt.Sprintf(", queued behind %d for %v", a.QueuedAhead, a.GateWait.Round(time.Millisecond))
	}
	if a.RetryAfter > 0 {
		s += fmt.Sprintf(", Retry-After %v", a.RetryAfter)
		if a.RetryAfterCut {
			s += " (cut: the server asked for more)"
		}
	}
	if a.RetryIn > 0 {
		s += fmt.Sprintf(", retry in %v", a.RetryIn)
	}
	if a.Error != "" && !plain {
		s += ": " + a.Error
	}
	switch {
	case a.Continued && a.PrefillBytes > 0:
		s = fmt.Sprintf("continuation, %d bytes of the answer as its prefill: ", a.PrefillBytes) + s
	case a.Continued:
		s = "continuation: " + s // resumed, or sent again before any text
	}
	// Where it went goes first: the move came before the attempt. An
	// attempt with no upstream of its own, recorded before fallbacks,
	// went to the request's.
	if moved := a.Upstream != "" && a.Upstream != upstream; moved || a.Fallback != "" {
		to := "→" + a.Upstream
		if a.Upstream == "" {
			to = "→" + orDash(upstream)
		}
		if a.Fallback != "" {
			to += " (" + a.Fallback + ")"
		}
		s = to + " " + s
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
