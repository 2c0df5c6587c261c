package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/cmdline"
)

// settleLimit bounds the wait for goroutines and files to come back after
// a phase; past it, the resources check fails.
const settleLimit = 30 * time.Second

// run is the program: it parses args, runs one phase per --slots entry,
// prints the report to stdout and each failed check to stderr, and
// writes the doc's section if every check passed.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	// Two descriptors per caller, the caller's and the gateway's ends,
	// and a few hundred for the upstream's connections, the journal and
	// the runtime.
	if err := raiseFileLimit(uint64(2*c.Callers + 256)); err != nil {
		return err
	}
	warmUp()
	progress := cmdline.Terminal(stderr)
	rep := &report{
		Command: cmdline.CommandLine("soak", args), Go: runtime.Version(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
		Callers: c.Callers, StreamShare: c.StreamShare, MaxConns: c.maxConns(), FaultRate: c.FaultRate,
	}
	per := c.Duration / time.Duration(len(c.Slots))
	for _, slots := range c.Slots {
		checks, fig, err := runPhase(ctx, c, slots, per, progress)
		if err != nil {
			return fmt.Errorf("%d slots: %w", slots, err)
		}
		rep.Phases = append(rep.Phases, fig)
		rep.Checks = append(rep.Checks, checks...)
	}
	if err := cmdline.Report(stdout, c.JSON, rep, rep.markdown); err != nil {
		return err
	}
	if err := cmdline.CheckFailures(stderr, "soak", rep.Checks); err != nil {
		return err
	}
	if c.Doc != "" {
		return cmdline.Section{Name: "soak"}.Write(c.Doc, rep.section())
	}
	return nil
}

// runPhase runs one phase and judges it, the resources last: it measures
// them before the phase starts and once it is closed and its records are
// garbage.
func runPhase(ctx context.Context, c config, slots int, d time.Duration, progress io.Writer) ([]check, figures, error) {
	base := measure()
	perPhase := resetPeakRSS()
	j, err := loadPhase(ctx, c, slots, d, progress)
	if err != nil {
		return nil, figures{}, err
	}
	j.fig.PeakRSSPhase = perPhase
	progressf(progress, "%d slots: waiting for goroutines and files to come back", slots)
	j.checks = append(j.checks, resourceCheck(slots, c.Callers, base, settle(base, c.Callers, settleLimit)))

	return j.checks, j.fig, nil
}

// loadPhase sets a phase up, runs its load, judges it and closes it.
func loadPhase(ctx context.Context, c config, slots int, d time.Duration, progress io.Writer) (judged, error) {
	ph, err := newPhase(ctx, c, slots)
	if err != nil {
		return judged{}, err
	}
	progressf(progress, "%d slots: %d callers for %v", slots, c.Callers, d)
	r, err := ph.load(ctx, d, progress)
	var j judged
	if err == nil {
		j = ph.judgeRun(r)
		j.fig.PeakRSS = peakRSS()
	}
	return j, errors.Join(err, ph.close())
}
