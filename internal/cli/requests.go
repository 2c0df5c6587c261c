package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/outlast-llm/outlast/journal"
)

// followEvery is how often --follow looks for new requests.
var followEvery = time.Second

func runRequests(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("requests", flag.ContinueOnError)
	spec := fs.String("journal", journal.DefaultSpec, "the journal to read: sqlite:`PATH` or a postgres:// URL")
	run := fs.String("run", "", "show this run's requests, oldest first, as seed 000 reads a run (default: the newest requests)")
	limit := fs.Int("limit", 20, "how many of the newest requests to show, without --run")
	follow := fs.Bool("follow", false, "keep printing requests as they are recorded, until interrupted")
	asJSON := fs.Bool("json", false, "print one JSON object a request, with its attempts, instead of a table")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `Usage: outlast requests [flags]

Prints the record the gateway keeps: each request with its attempts, the
status or error of each, and the wait before the next. Reads the journal
directly, so it works while the gateway runs or after it stopped.

Flags:`)
		fs.PrintDefaults()
	}
	if done, err := parseFlags(fs, args, stderr); done {
		return err
	}
	if *limit < 1 || *limit > journal.MaxLimit {
		return fmt.Errorf("%w: requests: --limit %d: want 1 to %d", ErrUsage, *limit, journal.MaxLimit)
	}
	store, err := journal.Open(ctx, *spec)
	switch {
	case err != nil:
		return fmt.Errorf("requests: --journal: %w", err)
	case store == nil:
		return fmt.Errorf("%w: requests: --journal off: there is no record to read", ErrUsage)
	}
	defer store.Close()
	p := &printer{out: stdout, json: *asJSON, seen: map[string]bool{}}
	recs, err := first(ctx, store, *run, *limit)
	if err != nil {
		return err
	}
	p.print(recs)
	if !*follow {
		return nil
	}
	return p.follow(ctx, store, *run)
}

// first returns the records to show before following: a run's, oldest
// first, or the newest, in time order.
func first(ctx context.Context, s journal.Store, run string, limit int) ([]journal.Record, error) {
	if run != "" {
		recs, err := s.Run(ctx, run)
		if errors.Is(err, journal.ErrNotFound) {
			return nil, nil // nothing yet; --follow may show it
		}
		return recs, err
	}
	page, err := s.List(ctx, journal.Query{Limit: limit})
	slices.Reverse(page.Records)
	return page.Records, err
}

type printer struct {
	out  io.Writer
	json bool
	seen map[string]bool
	last time.Time // the newest start printed
}

// follow prints new records every followEvery until ctx ends.
func (p *printer) follow(ctx context.Context, s journal.Store, run string) error {
	t := time.NewTicker(followEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		page, err := s.List(ctx, journal.Query{Run: run, Since: p.last, Limit: journal.MaxLimit})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("requests: %w", err)
		}
		slices.Reverse(page.Records)
		p.print(page.Records)
	}
}

func (p *printer) print(recs []journal.Record) {
	for _, r := range recs {
		if p.seen[r.ID] {
			continue
		}
		p.seen[r.ID] = true
		if r.Start.After(p.last) {
			p.last = r.Start
		}
		if p.json {
			b, _ := json.Marshal(r)
			fmt.Fprintf(p.out, "%s\n", b)
			continue
		}
		p.table(r)
	}
}

// table prints a request and, indented, its attempts.
func (p *printer) table(r journal.Record) {
	tw := tabwriter.NewWriter(p.out, 0, 8, 2, ' ', 0)
	took := "…"
	if !r.End.IsZero() {
		took = r.End.Sub(r.Start).Round(time.Millisecond).String()
	}
	outcome := fmt.Sprint(r.Status)
	if r.Error != "" {
		outcome += " " + r.Error
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s %s\t%s\t%d attempts\t%s\n", r.Start.Local().Format("15:04:05.000"), r.ID, orDash(r.Run), r.Method, r.Path, outcome, len(r.Attempts), took)
	for _, a := range r.Attempts {
		fmt.Fprintf(tw, "  #%d\t%s\t%s\n", a.N, a.Start.Local().Format("15:04:05.000"), describeAttempt(a))
	}
	tw.Flush()
}

func describeAttempt(a journal.Attempt) string {
	s := fmt.Sprint(a.Status)
	if a.ErrorClass != "" && a.ErrorClass != journal.ClassStatus {
		s = a.ErrorClass
	}
	if a.QueuedAhead > 0 {
		s += fmt.Sprintf(", queued behind %d for %v", a.QueuedAhead, a.GateWait.Round(time.Millisecond))
	}
	if a.RetryAfter > 0 {
		s += fmt.Sprintf(", Retry-After %v", a.RetryAfter)
	}
	if a.RetryIn > 0 {
		s += fmt.Sprintf(", retry in %v", a.RetryIn)
	}
	if a.Error != "" && a.ErrorClass != journal.ClassStatus {
		s += ": " + a.Error
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
