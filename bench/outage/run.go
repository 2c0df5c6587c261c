package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/bubble"
	"github.com/outlast-llm/outlast/bench/internal/cmdline"
)

// run is the program: it parses args, runs every policy under every seed
// in virtual time, prints the table (or JSON) to stdout and writes the
// chart. ctx ends the wait for the runs early; the runs themselves, each a
// few hundred milliseconds, are not interrupted.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	done := make(chan result, 1)
	go func() {
		done <- bubble.InTest("Outage", func(b bubble.Bubbler) result { return measureAll(b, c, cmdline.Terminal(stderr)) })
	}()
	var res result
	select {
	case <-ctx.Done():
		return ctx.Err()
	case res = <-done:
	}
	if res.err != nil {
		return res.err
	}
	rep := res.rep
	rep.Command = cmdline.CommandLine("outage", args)
	if c.SVG != "" {
		if err := writeChart(c.SVG, rep); err != nil {
			return err
		}
	}
	return cmdline.Report(stdout, c.JSON, rep, rep.markdown)
}

type result struct {
	rep *report
	err error
}

// measureAll runs the simulations and summarizes them.
func measureAll(b bubble.Bubbler, c config, progress io.Writer) result {
	sc := &c.Scenario
	pols := selectFrom(available(sc), c.Policies)
	oracle := c.Policies == "" || strings.Contains(c.Policies, "oracle")
	if len(pols) == 0 && !oracle {
		hint := ""
		if !sc.Fallback && len(selectFrom(fallbackPolicies(), c.Policies)) > 0 {
			hint = " (the fallback rows need --fallback)"
		}
		return result{err: usageError{Err: fmt.Errorf("-policies %q names no policy%s", c.Policies, hint)}}
	}
	seeds := make([]uint64, c.Seeds)
	for i := range seeds {
		seeds[i] = c.SeedBase + uint64(i)
	}
	parallel := c.Parallel
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	var tick func(done, total int)
	if progress != nil {
		tick = func(done, total int) { fmt.Fprintf(progress, "\r%d/%d runs", done, total) }
	}
	start := time.Now()
	runs := runAll(b, sc, pols, oracle, seeds, parallel, tick)
	if progress != nil {
		fmt.Fprintln(progress)
	}
	bd := newBuild(sc)
	order := pols
	if oracle {
		cfg := "central FIFO admission, sends only to a free slot of an up provider, drops what cannot finish"
		if sc.Fallback {
			cfg += "; the fallback's slots when the primary has none free"
		}
		order = append(order, policy{Name: oracleName, Group: "limit", Config: cfg})
	}
	end := sc.Duration + sc.Deadline
	rep := &report{
		Scenario:  sc.json(),
		Capacity:  sc.Capacity(),
		Outlast:   describePolicy(bd),
		Budget:    bd.attempts,
		Seeds:     seeds,
		Policies:  summarizeRuns(sc, order, runs, end),
		SeriesEnd: end,
		Elapsed:   time.Since(start),
	}
	return result{rep: rep}
}

func describePolicy(b build) string {
	ws := make([]string, len(b.outlast.Waits))
	for i, w := range b.outlast.Waits {
		ws[i] = w.String()
	}
	return fmt.Sprintf("waits [%s] (the last repeats), reserve %v", strings.Join(ws, " "), b.outlast.Reserve)
}

func writeChart(path string, rep *report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.chart(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// machine names the machine, for the timing line.
func machine() string {
	return fmt.Sprintf("%s, %d CPUs, GOMAXPROCS %d", runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0))
}
