package main

import (
	"context"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/bubble"
	"github.com/outlast-llm/outlast/bench/internal/cmdline"
)

// run is the program: it parses args, runs every policy on the same
// workload in virtual time, and prints the report to stdout. With --check
// it fails unless the checks pass. ctx ends the wait for the runs early.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	start := time.Now()
	w := newWorkload(c)
	done := make(chan []policyRun, 1)
	go func() {
		done <- bubble.InTest("Pool", func(b bubble.Bubbler) []policyRun { return runAll(b, c, w, policies()) })
	}()
	var runs []policyRun
	select {
	case <-ctx.Done():
		return ctx.Err()
	case runs = <-done:
	}
	rep := newReport(c, w, runs)
	rep.Command = cmdline.CommandLine("pool", args)
	rep.Elapsed = time.Since(start)
	rep.markdown(stdout)
	if c.Check {
		return cmdline.CheckFailures(stderr, "pool", rep.Checks)
	}
	return nil
}

// runAll runs each policy in a bubble of its own, as many at once as
// there are processors, and returns their runs in the order of pols.
func runAll(b bubble.Bubbler, c config, w *workload, pols []policy) []policyRun {
	runs := make([]policyRun, len(pols))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, p := range pols {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			runs[i] = simulate(b, c, w, p)
		})
	}
	wg.Wait()
	return runs
}
