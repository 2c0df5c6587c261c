package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// config is one invocation: the workload's seed and shape, each request's
// deadline and the retrying layer's reserve, and whether to enforce the
// checks.
type config struct {
	Seed          uint64
	LevelDuration time.Duration // how long each load level lasts
	Levels        []int         // the load levels, in per cent of the pool's capacity, in order
	Deadline      time.Duration // each request's context deadline, from its arrival
	Reserve       time.Duration // the policies' reserve: no wait ends, and no attempt is sent, later than deadline less it
	Headers       string        // when a 200's rate-limit headers are read: headersAdmitted or headersAnswered
	Check         bool          // exit non-zero unless the checks pass
}

// The values of config.Headers.
const (
	headersAdmitted = "admitted" // as the request was admitted, before the model ran
	headersAnswered = "answered" // as the answer is sent
)

// defaultLevels are the load levels of a run: up from half the pool's
// capacity to one and a half times it, and down again.
var defaultLevels = []int{50, 70, 90, 110, 130, 150, 130, 110, 90, 70, 50}

// defaultConfig returns the configuration of a run with no flags.
func defaultConfig() config {
	return config{
		Seed:          1,
		LevelDuration: 3 * time.Minute,
		Levels:        defaultLevels,
		Deadline:      30 * time.Second,
		Reserve:       -1, // a quarter of the deadline, as serve's --reserve auto
		Headers:       headersAdmitted,
	}
}

// parseConfig reads the flags. The help text goes to stderr.
func parseConfig(args []string, stderr io.Writer) (config, error) {
	c := defaultConfig()
	fs := flag.NewFlagSet("pool", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(fs, stderr) }
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the workload: arrivals, sizes and answers' lengths")
	fs.DurationVar(&c.LevelDuration, "level-duration", c.LevelDuration, "how long each load level lasts, in simulated time")
	fs.DurationVar(&c.Deadline, "deadline", c.Deadline, "each request's deadline, from its arrival")
	fs.DurationVar(&c.Reserve, "reserve", c.Reserve, "the policies' reserve: no wait for room, and no retry, past the deadline less this; -1ns (the default) means a quarter of the deadline, as outlast serve's --reserve auto")
	fs.StringVar(&c.Headers, "headers", c.Headers, "what a 200's x-ratelimit headers tell of: the limits as the request was "+headersAdmitted+" (before the model ran, as a provider's rate limiter sets them), or as they stand when it is "+headersAnswered)
	levels := fs.String("levels", joinInts(c.Levels), "the load levels, in per cent of the pool's capacity, in order")
	fs.BoolVar(&c.Check, "check", false, "exit non-zero unless the outlast pool passes the checks (see Checks below)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, usageError{Err: err}
	}
	if fs.NArg() > 0 {
		return c, usageError{Err: fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	var err error
	if c.Levels, err = parseLevels(*levels); err != nil {
		return c, usageError{Err: err}
	}
	return c, c.validate()
}

// validate reports a configuration that cannot run, as a usageError.
func (c *config) validate() error {
	bad := func(format string, args ...any) error { return usageError{Err: fmt.Errorf(format, args...)} }
	switch {
	case c.LevelDuration <= 0:
		return bad("-level-duration %v: want a positive duration", c.LevelDuration)
	case c.Deadline <= 0:
		return bad("-deadline %v: want a positive duration", c.Deadline)
	case c.Reserve >= c.Deadline:
		return bad("-reserve %v: want less than the deadline", c.Reserve)
	case c.Reserve < 0:
		c.Reserve = c.Deadline / 4
		return c.validate()
	case len(c.Levels) == 0:
		return bad("-levels: want at least one level")
	case c.Headers != headersAdmitted && c.Headers != headersAnswered:
		return bad("-headers %q: want %s or %s", c.Headers, headersAdmitted, headersAnswered)
	}
	return nil
}

// parseLevels reads a comma-separated list of load levels in per cent.
func parseLevels(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || n > 1000 {
			return nil, fmt.Errorf("-levels %q: want per cents from 1 to 1000, separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// joinInts writes ns separated by commas, as -levels reads them.
func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// usage writes the help text.
func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprint(w, `Pool runs three rate-limited API keys in virtual time and measures how
each router (outlast.Pool, round-robin, least busy, usage-based, one key
alone) serves an open-loop load that rises from 50 % of the pool's
capacity to 150 % and back.

Usage:

	cd bench && go run ./pool [flags]

Flags:
`)
	fs.PrintDefaults()
	fmt.Fprint(w, `
Checks (printed always; --check makes a failure exit 1):
  - at each level below 90 % of capacity, the outlast pool gets at most one
    429 from the members per 1,000 requests, and serves at least 95 % of the
    requests offered within their deadline (below capacity, the offered
    load is what can be served, so "95 % of capacity" reads as 95 % of the
    offered load);
  - at each level, the outlast pool gets no more 429s per 1,000 requests
    than any other policy, and serves no smaller a share of its requests,
    within 0.5 percentage points.
`)
}
