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

// config is what one run measures. Every count and duration in it bounds a
// loop, so that a run ends by itself.
type config struct {
	Chunks      int           // events in a streamed response
	PromptBytes int           // bytes added to the request's prompt
	Warmup      int           // sequential requests per target and mode before measuring
	SeqRounds   int           // rounds of the sequential phase
	SeqPerRound int           // sequential requests per target and round
	Rate        float64       // the fixed rate of the open-loop phase, requests/s
	RateDur     time.Duration // open-loop time per target and mode, over all rounds
	Slice       time.Duration // open-loop time per target in one round
	MaxRates    rateList      // the steps of the max-rate phase
	MaxDur      time.Duration // time per target and step of the max-rate phase
	MaxP99      time.Duration // a step with a higher p99 fails
	MaxErrors   float64       // a step with a higher share of errors fails
	MaxAchieved float64       // a step achieving less than this share of its rate fails
	MaxStream   bool          // also find the max rate of streamed requests
	InFlight    int           // the open loop's bound on requests in flight
	MaxOther    float64       // a round in which other processes used more of the machine is run again
	RedoBudget  time.Duration // the most time each phase spends on rounds run again
	Late        time.Duration // a send this far behind its schedule is late
	GateSlots   int           // Slots of the gateway+gate target
	Journal     bool          // add the gateway+journal target
	Redis       string        // add the gateway+redis target, its gate kept in this Redis
	JournalProc bool          // write that journal from a child process at nice 19
	UpIdle      int           // MaxIdleConnsPerHost of both proxies' transports
	ProxyPool   bool          // give the bare proxy a buffer pool, as the gateway has
	Timeout     time.Duration // bound on one request
	JSON        bool
	CPUProfile  string
	ProfileDur  time.Duration // time per profiled target
	MemProfile  string
	Quick       bool
	Runs        int      // times to run it all, the targets started afresh each time
	Deployed    bool     // every target in a process of its own, the gateways as outlast serve
	ServeArgs   []string // add the gateway+args target: --journal off and these
}

// defaults is the configuration of a plain run: about two and a half
// minutes on a 2-core machine.
func defaults() config {
	return config{
		Chunks:      5,
		Warmup:      200,
		SeqRounds:   20,
		SeqPerRound: 400,
		Rate:        2000,
		RateDur:     5 * time.Second,
		Slice:       500 * time.Millisecond,
		MaxRates:    rateList{1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 10000, 12000, 16000},
		MaxDur:      2 * time.Second,
		MaxP99:      50 * time.Millisecond,
		MaxErrors:   0.001,
		MaxAchieved: 0.95,
		InFlight:    1000,
		MaxOther:    0.25,
		RedoBudget:  12 * time.Second,
		Late:        2 * time.Millisecond,
		GateSlots:   1024,
		Journal:     true,
		JournalProc: true,
		UpIdle:      64, // the gateway's own default
		ProxyPool:   true,
		Timeout:     10 * time.Second,
		ProfileDur:  20 * time.Second,
		Runs:        1,
	}
}

// quick overrides the flags that --quick shortens, for a smoke run of
// about ten seconds.
var quick = map[string]string{
	"warmup":     "50",
	"seq-rounds": "2",
	"seq":        "200",
	"rate-time":  "500ms",
	"slice":      "250ms",
	"max-rates":  "1000,2000",
	"max-time":   "300ms",
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	c := defaults()
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./load [flags]\n\n"+
			"Measures the latency the outlast gateway adds next to a bare httputil.ReverseProxy,\n"+
			"over an in-process fake upstream, and prints a markdown table.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.IntVar(&c.Chunks, "chunks", c.Chunks, "events in a streamed response")
	fs.IntVar(&c.PromptBytes, "prompt-bytes", c.PromptBytes, "bytes of padding added to the request's prompt (the body is ~100 bytes without)")
	fs.IntVar(&c.Warmup, "warmup", c.Warmup, "sequential requests per target and mode before measuring")
	fs.IntVar(&c.SeqRounds, "seq-rounds", c.SeqRounds, "rounds of the sequential phase")
	fs.IntVar(&c.SeqPerRound, "seq", c.SeqPerRound, "sequential requests per target and round")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "fixed open-loop rate, requests/s")
	fs.DurationVar(&c.RateDur, "rate-time", c.RateDur, "open-loop time per target and mode, over all rounds")
	fs.DurationVar(&c.Slice, "slice", c.Slice, "open-loop time per target in one round")
	fs.Var(&c.MaxRates, "max-rates", "steps of the max-rate phase, requests/s, ascending (empty: skip the phase)")
	fs.DurationVar(&c.MaxDur, "max-time", c.MaxDur, "time per target and step of the max-rate phase")
	fs.DurationVar(&c.MaxP99, "max-p99", c.MaxP99, "a step whose p99 is higher fails")
	fs.Float64Var(&c.MaxErrors, "max-errors", c.MaxErrors, "a step with a higher share of errors fails")
	fs.Float64Var(&c.MaxAchieved, "max-achieved", c.MaxAchieved, "a step achieving less than this share of its rate fails")
	fs.BoolVar(&c.MaxStream, "max-stream", c.MaxStream, "also find the max rate of streamed requests")
	fs.IntVar(&c.InFlight, "inflight", c.InFlight, "open-loop bound on requests in flight per target; a send over it is dropped")
	fs.Float64Var(&c.MaxOther, "max-other", c.MaxOther, "run a latency round again if other processes used more than this share of the machine's CPU meanwhile\n(Linux only; 0: never)")
	fs.DurationVar(&c.RedoBudget, "redo-budget", c.RedoBudget, "the most time each of the five phases spends on rounds run again")
	fs.DurationVar(&c.Late, "late", c.Late, "an open-loop send this far behind its schedule counts as late")
	fs.IntVar(&c.GateSlots, "gate-slots", c.GateSlots, "the gateway+gate target's --slots (0: leave the target out)")
	fs.StringVar(&c.Redis, "redis", c.Redis, "add the gateway+redis target: the gateway+gate target's gate and admission kept in this Redis (a redis:// URL), as outlast serve --redis keeps them (empty: leave the target out)")
	fs.BoolVar(&c.Journal, "journal", c.Journal, "add the gateway+journal target: the gateway writing its record to SQLite, as outlast serve does by default")
	fs.BoolVar(&c.JournalProc, "journal-child", c.JournalProc, "write the gateway+journal target's SQLite from a child process at the lowest CPU priority, fed batches through a pipe,\nas outlast serve does by default (false: in this process, as serve --journal-writer inline)")
	fs.IntVar(&c.UpIdle, "upstream-idle", c.UpIdle, "MaxIdleConnsPerHost of the proxy's and the gateway's transports")
	fs.BoolVar(&c.ProxyPool, "proxy-pool", c.ProxyPool, "give the bare proxy a BufferPool, as the gateway pools its buffers\n(false: httputil's default, a new 32 KiB buffer per response)")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "bound on one request")
	fs.BoolVar(&c.JSON, "json", c.JSON, "print JSON instead of markdown")
	fs.StringVar(&c.CPUProfile, "cpuprofile", c.CPUProfile, "after the phases, profile the proxy, the gateway and the gateway with its journal, each alone at --rate,\nnon-streaming, for --profile-time each, into `PREFIX`-proxy.pprof, PREFIX-gateway.pprof and PREFIX-gateway+journal.pprof")
	fs.DurationVar(&c.ProfileDur, "profile-time", c.ProfileDur, "time per target profiled by --cpuprofile")
	fs.StringVar(&c.MemProfile, "memprofile", c.MemProfile, "write the whole run's allocations, sampled every 4 KiB, to `FILE`\n(the sampling slows every target; do not read the tables of such a run)")
	fs.BoolVar(&c.Deployed, "deployed", c.Deployed, "run every target as users deploy it, in a process of its own: the upstream and the bare proxy as children\nof this program, each gateway as `outlast serve` built from this module with its own flags and defaults\n(false: every target in this process)")
	fs.Func("serve-args", "add the gateway+args target: outlast serve --journal off with these flags too, space-separated (\"--log-level warn\")", func(v string) error {
		c.ServeArgs = strings.Fields(v)
		return nil
	})
	fs.IntVar(&c.Runs, "runs", c.Runs, "run everything this many times, the targets started afresh each time, and report each gateway target's\nratios over the runs and how many met the goal (at most 1.10; 1.25 writing the journal)")
	fs.BoolVar(&c.Quick, "quick", c.Quick, "a short run (~10 s) for a smoke test; flags given explicitly still win")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return c, err
		}
		return c, usageError{Err: err}
	}
	if fs.NArg() > 0 {
		return c, usageError{Err: fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if c.Quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range quick {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return c, err
				}
			}
		}
	}
	return c, c.validate()
}

func (c config) validate() error {
	switch {
	case c.Chunks < 1:
		return usageError{Err: fmt.Errorf("--chunks %d: want 1 or more", c.Chunks)}
	case c.PromptBytes < 0 || c.PromptBytes > 1<<20:
		return usageError{Err: fmt.Errorf("--prompt-bytes %d: want 0 to 1048576", c.PromptBytes)}
	case c.SeqRounds < 1 || c.SeqPerRound < 1:
		return usageError{Err: fmt.Errorf("--seq-rounds %d, --seq %d: want 1 or more", c.SeqRounds, c.SeqPerRound)}
	case c.Rate <= 0 || c.Rate > 1e6:
		return usageError{Err: fmt.Errorf("--rate %g: want more than 0 and at most 1e6", c.Rate)}
	case c.Slice <= 0 || c.RateDur < c.Slice:
		return usageError{Err: fmt.Errorf("--slice %v, --rate-time %v: want 0 < slice <= rate-time", c.Slice, c.RateDur)}
	case c.MaxDur <= 0:
		return usageError{Err: fmt.Errorf("--max-time %v: want more than 0", c.MaxDur)}
	case c.InFlight < 1:
		return usageError{Err: fmt.Errorf("--inflight %d: want 1 or more", c.InFlight)}
	case c.GateSlots < 0:
		return usageError{Err: fmt.Errorf("--gate-slots %d: want 0 or more", c.GateSlots)}
	case c.UpIdle < 1:
		return usageError{Err: fmt.Errorf("--upstream-idle %d: want 1 or more", c.UpIdle)}
	case c.ProfileDur <= 0:
		return usageError{Err: fmt.Errorf("--profile-time %v: want more than 0", c.ProfileDur)}
	case c.Deployed && (c.CPUProfile != "" || c.MemProfile != ""):
		return usageError{Err: errors.New("--deployed: the profiles are of this process, and the targets run in others: leave out --cpuprofile and --memprofile")}
	case c.Deployed && c.UpIdle != 64:
		return usageError{Err: fmt.Errorf("--upstream-idle %d: with --deployed, outlast serve keeps its own 64 idle connections per host", c.UpIdle)}
	case c.Runs < 1:
		return usageError{Err: fmt.Errorf("--runs %d: want 1 or more", c.Runs)}
	case c.Runs > 1 && (c.CPUProfile != "" || c.MemProfile != ""):
		return usageError{Err: errors.New("--runs: the profiles are of one run: leave out --cpuprofile and --memprofile, or --runs")}
	case c.Timeout <= 0:
		return usageError{Err: fmt.Errorf("--timeout %v: want more than 0", c.Timeout)}
	}
	return nil
}

// rateList is a comma-separated, ascending list of rates, as a flag.
type rateList []float64

func (l *rateList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, r := range *l {
		s[i] = strconv.FormatFloat(r, 'f', -1, 64)
	}
	return strings.Join(s, ",")
}

func (l *rateList) Set(v string) error {
	var out rateList
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r <= 0 || r > 1e6 {
			return fmt.Errorf("rate %q: want a number of requests/s above 0, at most 1e6", f)
		}
		if len(out) > 0 && r <= out[len(out)-1] {
			return fmt.Errorf("rate %q: want the rates in ascending order", f)
		}
		out = append(out, r)
	}
	*l = out
	return nil
}
