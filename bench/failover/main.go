// Failover measures outlast serve against the faults an upstream shows,
// as a new user runs it: its default settings and one fallback upstream.
// Sixteen scenarios (a 429, a 503, a reset, a silence, a stream cut or
// paused or malformed, a 400 that no retry mends, a primary down for a
// minute, …) each put a fault at a primary mockllm server, run in this
// process with a second one as the fallback, and send streamed OpenAI
// chat completions through a real outlast serve process, built from this
// module with go build, from a client that sends exactly the headers of
// the openai npm package and makes no retries of its own.
//
// Each cell of the table scores pass, partial, safe or fail, as the
// public failover benchmark that the suite reproduces grades them:
//
//   - pass: the whole answer (the 60-chunk text, finish_reason stop and
//     data: [DONE]) within 45 s of the request's start, after at most 6
//     attempts at the primary and at most 2 in the 1.5 s after its first
//     there, and every check of the scenario's behaviour holds (such as
//     a short rate limit waited for at the primary, a silent primary
//     left after one attempt; see scenarios); scenario 13 passes on the
//     upstream's 400, unchanged, after one attempt at the primary and
//     none at the fallback;
//   - partial: the answer so, but a check failed;
//   - safe: no pass, but a bounded, clean error in time: an HTTP error
//     status, an error event, or a connection that breaks;
//   - fail: anything else, such as a truncated answer that ends as if
//     complete, the budget exceeded, or too many attempts.
//
// In scenario 10 the client skips the one event it cannot parse, and
// counts it, to see what follows; a strict SDK, as the openai package
// is, would throw there.
//
// The scenarios run at once, each with its own mocks and its own serve
// process, so that the run takes about as long as its longest scenario,
// two to three minutes. A configuration is a column: serve's defaults
// plus some flags (see configurations), so that a change to serve can
// add one and see the same scenarios under it.
//
// It prints a markdown section: the table, a summary of each column and
// the command. With --doc it writes that section between
// <!-- failover:begin --> and <!-- failover:end --> in a markdown file;
// with --check it compares the run's outcomes with those in the file
// instead, and exits 1 on any difference, naming each.
//
// Usage:
//
//	cd bench && go run ./failover [--doc ../docs/reliability.md] [--check]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/cmdline"
	"github.com/outlast-llm/outlast/bench/internal/proc"
)

func main() {
	cmdline.Main("failover", run)
}

// usageError is a bad command line: main exits 2 for it.
type usageError = cmdline.UsageError

// options are a run's command line.
type options struct {
	doc   string
	check bool
	only  []int  // the scenarios to run, by number; nil for all
	work  string // where the run's files go and stay; "" for a temporary directory
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("failover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var only string
	fs.StringVar(&o.doc, "doc", "", "write the section between <!-- failover:begin --> and <!-- failover:end --> of this markdown `FILE`\nwith the table, the summary and the command")
	fs.BoolVar(&o.check, "check", false, "compare the run's outcomes with those in --doc instead of writing it, and exit 1 on any difference")
	fs.StringVar(&o.work, "work", "", "keep the run's files (each gateway's config, journal and log) in this `DIR`, for a look after the run;\nempty: a temporary directory, removed after it")
	fs.StringVar(&only, "scenarios", "", "run only these scenarios, by number, comma-separated (not with --doc unless --check)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, usageError{Err: err}
	}
	if fs.NArg() > 0 {
		return o, usageError{Err: fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	for f := range strings.SplitSeq(only, ",") {
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > len(scenarios) {
			return o, usageError{Err: fmt.Errorf("--scenarios %q: want numbers from 1 to %d", only, len(scenarios))}
		}
		o.only = append(o.only, n)
	}
	switch {
	case o.check && o.doc == "":
		return o, usageError{Err: errors.New("--check needs --doc, the file whose outcomes it compares")}
	case o.only != nil && o.doc != "" && !o.check:
		return o, usageError{Err: errors.New("--doc with --scenarios would write a partial table; give --check too, or neither")}
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	var want map[key]outcome
	if o.check {
		// Read the doc first: a run is minutes that a bad path would waste.
		if want, err = committed(o.doc); err != nil {
			return err
		}
	}
	dir := o.work
	if dir == "" {
		if dir, err = os.MkdirTemp("", "outlast-failover"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	bin, err := proc.BuildOutlast(ctx, dir, stderr)
	if err != nil {
		return err
	}
	rep, err := runAll(ctx, bin, dir, o, cmdline.Terminal(stderr))
	if err != nil {
		return err
	}
	rep.command = cmdline.CommandLine("failover", args)
	rep.markdown(stdout)
	switch {
	case o.check:
		diffs := differences(rep.outcomes(), want)
		for _, d := range diffs {
			fmt.Fprintln(stderr, "failover: "+d)
		}
		if len(diffs) > 0 {
			return fmt.Errorf("%d outcomes differ from %s", len(diffs), o.doc)
		}
	case o.doc != "":
		var b strings.Builder
		rep.markdown(&b)
		return cmdline.Section{Name: section}.Write(o.doc, b.String())
	}
	return nil
}

// committed reads the outcomes of the failover section of the doc at
// path.
func committed(path string) (map[key]outcome, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	body, err := cmdline.Section{Name: section}.Read(doc)
	if err != nil {
		return nil, fmt.Errorf("--doc %s: %w", path, err)
	}
	want, err := parseOutcomes(body)
	if err != nil {
		return nil, fmt.Errorf("--doc %s: %w", path, err)
	}
	return want, nil
}

// runAll runs every scenario under every configuration at once, and
// tells progress, if a terminal, as each cell ends.
func runAll(ctx context.Context, bin, dir string, o options, progress io.Writer) (report, error) {
	rep := report{configs: configurations, cells: map[key]cell{}}
	for _, sc := range scenarios {
		if o.only == nil || slices.Contains(o.only, sc.n) {
			rep.scenarios = append(rep.scenarios, sc)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	begin := time.Now()
	var mu sync.Mutex // guards rep.cells and errs
	var errs []error
	var wg sync.WaitGroup
	for _, cfg := range rep.configs {
		for _, sc := range rep.scenarios {
			if !cfg.runs(sc.n) {
				continue
			}
			wg.Go(func() {
				c, err := runCell(ctx, bin, dir, sc, cfg)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					// The first error cancels the rest, whose errors
					// would only say so.
					if ctx.Err() == nil {
						errs = append(errs, err)
					}
					cancel()
					return
				}
				rep.cells[key{cfg.name, sc.n}] = c
				if progress != nil {
					fmt.Fprintf(progress, "failover: %s, scenario %d: %s after %v\n", cfg.name, sc.n, c.outcome(), time.Since(begin).Round(time.Second))
				}
			})
		}
	}
	wg.Wait()
	rep.took = time.Since(begin)
	return rep, errors.Join(errs...)
}
