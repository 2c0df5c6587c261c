package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/cmdline"
	"github.com/outlast-llm/outlast/cmd/outlast/cli"
)

// run is the program: it parses args, runs the phases (--runs times) and
// prints the report to stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	c, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	if c.MemProfile != "" {
		// Before the first allocation worth seeing; the default rate of
		// one sample per 512 KiB would miss most of a request's.
		runtime.MemProfileRate = 4 << 10
	}
	// The process collects as outlast serve does (cli.TuneGC): the
	// gateway targets run as a user runs them, and the bare proxy, which
	// shares the process, gets the same setting, the harder baseline.
	defer cli.TuneGC()()
	command := cmdline.CommandLine("load", args)
	var reps []*report
	for i := range c.Runs {
		if c.Runs > 1 {
			fmt.Fprintf(stderr, "load: run %d of %d\n", i+1, c.Runs)
		}
		rep, err := runOnce(ctx, c, stderr)
		if err != nil {
			return err
		}
		rep.Command = command
		reps = append(reps, rep)
	}
	if len(reps) == 1 {
		return cmdline.Report(stdout, c.JSON, reps[0], reps[0].markdown)
	}
	rr := summarize(command, reps)
	return cmdline.Report(stdout, c.JSON, rr, rr.markdown)
}

// runOnce starts the targets, runs every phase once, and stops them.
func runOnce(ctx context.Context, c config, stderr io.Writer) (_ *report, err error) {
	st, err := newStack(ctx, c, stderr)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, st.close()) }()
	b := &bench{cfg: c, st: st, senders: newSenders(c.InFlight), progress: cmdline.Terminal(stderr)}
	defer b.senders.close()
	return b.run(ctx)
}

// run runs every phase and returns the report.
func (b *bench) run(ctx context.Context) (*report, error) {
	rep := &report{
		Go:         runtime.Version(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		NumCPU:     runtime.NumCPU(),
		Targets:    b.st.names(),
		Rate:       b.cfg.Rate,
		Deployed:   b.cfg.Deployed,
	}
	start := time.Now()
	b.progressf("warming up")
	if err := b.warmup(ctx); err != nil {
		return nil, err
	}
	if err := b.latencyPhases(ctx, rep); err != nil {
		return nil, err
	}
	if err := b.maxPhases(ctx, rep); err != nil {
		return nil, err
	}
	if err := b.profiles(ctx); err != nil {
		return nil, err
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.Redone, rep.Kept = b.redone, b.kept
	return rep, nil
}

// latencyPhases runs the sequential and the fixed-rate phases, each for
// whole responses and then for streams. Each phase has its own redo
// budget.
func (b *bench) latencyPhases(ctx context.Context, rep *report) error {
	phases := []struct {
		name string
		run  func(context.Context, bool) ([]*series, error)
	}{
		{"sequential", b.sequential},
		{fmt.Sprintf("%g/s", b.cfg.Rate), b.fixedRate},
	}
	for _, p := range phases {
		for _, stream := range []bool{false, true} {
			b.redoLeft = b.cfg.RedoBudget
			s, err := p.run(ctx, stream)
			if err != nil {
				return err
			}
			rep.addLatency(p.name, stream, b.st.names(), s)
		}
	}
	return nil
}

// maxPhases finds each target's highest sustained rate, for whole
// responses and, with MaxStream, for streams.
func (b *bench) maxPhases(ctx context.Context, rep *report) error {
	if len(b.cfg.MaxRates) == 0 {
		return nil
	}
	var err error
	b.redoLeft = b.cfg.RedoBudget
	if rep.MaxRate, err = b.maxRate(ctx, false); err != nil || !b.cfg.MaxStream {
		return err
	}
	b.redoLeft = b.cfg.RedoBudget
	rep.MaxRateStream, err = b.maxRate(ctx, true)
	return err
}

// profiles writes the profiles the flags ask for.
func (b *bench) profiles(ctx context.Context) error {
	if b.cfg.CPUProfile != "" {
		if err := b.profile(ctx); err != nil {
			return fmt.Errorf("profiling: %w", err)
		}
	}
	if b.cfg.MemProfile != "" {
		if err := b.memProfile(); err != nil {
			return fmt.Errorf("writing the allocation profile: %w", err)
		}
	}
	return nil
}
