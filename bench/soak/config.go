package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// config is what one run does. Every duration in it either paces the load
// or bounds a wait that should never be reached; none decides a check.
type config struct {
	Callers     int           // concurrent callers, each one request at a time
	Duration    time.Duration // the whole run, split evenly between the phases
	Slots       intList       // one phase per entry: the upstream's Slots
	Queue       int           // the upstream's Queue in every phase
	MaxConns    int           // the gateway's connection cap; 0: the callers and some
	FaultRate   float64       // the share of attempts that fail
	StreamShare float64       // the share of requests that stream
	Work        time.Duration // the upstream's time on each attempt before it answers
	Chunks      int           // content chunks in a completion
	Probes      int           // probes per phase
	Steps       int           // grants stepped through one at a time per probe; 0: up to 200, at most the queue
	BusyWait    time.Duration // the most a caller waits after busy, whatever Retry-After says
	Timeout     time.Duration // bound on one request: a hang fails the run instead of stopping it
	Stuck       time.Duration // bound on every wait for an event: past it, the run fails as stuck
	Seed        uint64        // picks each attempt's fault and each request's mode
	Doc         string
	JSON        bool
}

// defaults is the configuration of a plain run: the CI soak, a minute on a
// 2-core machine.
func defaults() config {
	return config{
		Callers:     2000,
		Duration:    60 * time.Second,
		Slots:       intList{1, 4},
		Queue:       500,
		FaultRate:   0.2,
		StreamShare: 0.5,
		Work:        time.Millisecond,
		Chunks:      5,
		Probes:      2,
		BusyWait:    5 * time.Second,
		Timeout:     2 * time.Minute,
		Stuck:       time.Minute,
		Seed:        1,
	}
}

// defaultSteps is the grants a probe steps through when --steps is 0.
const defaultSteps = 200

func parseConfig(args []string, stderr io.Writer) (config, error) {
	c := defaults()
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./soak [flags]\n\n"+
			"Runs concurrent callers through the gateway to a failing fake upstream, one phase per --slots,\n"+
			"checks what must hold, and prints a markdown table. Exits 1 with one line per failed check.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.IntVar(&c.Callers, "callers", c.Callers, "concurrent callers, each sending one request at a time")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "the whole run, split evenly between the phases")
	fs.Var(&c.Slots, "slots", "the upstream's slots, one phase per entry, comma-separated")
	fs.IntVar(&c.Queue, "queue", c.Queue, "the upstream's queue: requests that may wait for a slot (fewer than --callers minus the slots, so that busy comes)")
	fs.IntVar(&c.MaxConns, "max-conns", c.MaxConns, "the gateway's --max-conns, its cap on connections open at once (-1: none);\n0: the callers plus 64, since each holds one (serve's default is 1024)")
	fs.Float64Var(&c.FaultRate, "fault-rate", c.FaultRate, "the share of attempts that fail: 503, 429 with Retry-After, 529, reset,\nclosed before the first byte, or (streams only) an SSE error event, evenly")
	fs.Float64Var(&c.StreamShare, "stream-share", c.StreamShare, "the share of requests that stream")
	fs.DurationVar(&c.Work, "work", c.Work, "the upstream's time on each attempt before it answers")
	fs.IntVar(&c.Chunks, "chunks", c.Chunks, "content chunks in a completion")
	fs.IntVar(&c.Probes, "probes", c.Probes, "probes per phase: every slot held at the upstream until the queue is full and busy is checked,\nthen grants freed one at a time")
	fs.IntVar(&c.Steps, "steps", c.Steps, "grants freed one at a time per probe, at most --queue (0: 200, or --queue if fewer)")
	fs.DurationVar(&c.BusyWait, "busy-wait", c.BusyWait, "the most a caller waits after busy before its next request, whatever Retry-After says")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "bound on one request; a request that takes longer fails the run")
	fs.DurationVar(&c.Stuck, "stuck", c.Stuck, "bound on each wait for an event (a probe's, the records'); past it the run fails as stuck")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "picks each attempt's fault and each request's mode")
	fs.StringVar(&c.Doc, "doc", c.Doc, "rewrite the section between <!-- soak:begin --> and <!-- soak:end --> of this markdown `FILE`\nwith the table and the command, if every check passed")
	fs.BoolVar(&c.JSON, "json", c.JSON, "print JSON instead of markdown")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return c, err
		}
		return c, usageError{Err: err}
	}
	if fs.NArg() > 0 {
		return c, usageError{Err: fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if c.Steps == 0 {
		c.Steps = min(defaultSteps, c.Queue)
	}
	return c, c.validate()
}

func (c config) validate() error {
	maxSlots := 0
	for _, s := range c.Slots {
		maxSlots = max(maxSlots, s)
	}
	switch {
	case len(c.Slots) == 0:
		return usageError{Err: fmt.Errorf("--slots %q: want at least one phase", c.Slots.String())}
	case c.MaxConns < -1:
		return usageError{Err: fmt.Errorf("--max-conns %d: want -1 (none), 0 (the callers plus 64) or a bound", c.MaxConns)}
	case c.Queue < 1:
		return usageError{Err: fmt.Errorf("--queue %d: want 1 or more, so that requests queue", c.Queue)}
	case c.Callers <= maxSlots+c.Queue:
		// Busy needs more callers than there are places; the probes wait
		// for a full queue and a refusal, which would never come.
		return usageError{Err: fmt.Errorf("--callers %d: want more than the slots plus the queue (%d + %d)", c.Callers, maxSlots, c.Queue)}
	case c.Duration <= 0:
		return usageError{Err: fmt.Errorf("--duration %v: want more than 0", c.Duration)}
	case c.FaultRate < 0 || c.FaultRate >= 1:
		return usageError{Err: fmt.Errorf("--fault-rate %g: want 0 or more, below 1", c.FaultRate)}
	case c.StreamShare < 0 || c.StreamShare > 1:
		return usageError{Err: fmt.Errorf("--stream-share %g: want 0 to 1", c.StreamShare)}
	case c.Work < 0:
		return usageError{Err: fmt.Errorf("--work %v: want 0 or more", c.Work)}
	case c.Chunks < 1:
		return usageError{Err: fmt.Errorf("--chunks %d: want 1 or more", c.Chunks)}
	case c.Probes < 0:
		return usageError{Err: fmt.Errorf("--probes %d: want 0 or more", c.Probes)}
	case c.Steps < 1 || c.Steps > c.Queue:
		// A step frees a slot for the queue's front waiter; past the
		// waiters the probe found, a step might free it for nobody.
		return usageError{Err: fmt.Errorf("--steps %d: want 1 to --queue (%d)", c.Steps, c.Queue)}
	case c.BusyWait < 0 || c.Timeout <= 0 || c.Stuck <= 0:
		return usageError{Err: fmt.Errorf("--busy-wait %v, --timeout %v, --stuck %v: want 0 or more, and more than 0 for the bounds", c.BusyWait, c.Timeout, c.Stuck)}
	}
	return nil
}

// maxConns is the gateway's ServerConfig.MaxConns for c.
func (c config) maxConns() int {
	if c.MaxConns == 0 {
		return c.Callers + 64
	}
	return c.MaxConns
}

// intList is a comma-separated list of slot counts, as a flag.
type intList []int

func (l *intList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	var out intList
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 1024 {
			return fmt.Errorf("slots %q: want a whole number from 1 to 1024", f)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}
