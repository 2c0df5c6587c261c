package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// A scenario is the world one run simulates: the provider, the outage, the
// load and the clients. Its zero value is not useful; start from
// defaultScenario.
type scenario struct {
	Slots        int           // K: the provider's requests in flight
	Median       time.Duration // median service time of an admitted attempt
	Sigma        float64       // σ of the service time's lognormal
	RejectAfter  time.Duration // when a 429 or an outage 503 arrives
	OutageStart  time.Duration // from the start of the run
	Outage       time.Duration // how long the outage lasts
	RetryAfter   string        // on the outage 503: none, accurate, or a delay such as 1s or 60s
	Shape        string        // what the outage does; see shapes
	Rate         float64       // logical requests per second, Poisson
	Duration     time.Duration // how long requests arrive
	Clients      int           // client processes, each with its own layer
	Deadline     time.Duration // each request's context deadline
	AttemptLimit time.Duration // per-attempt timeout for the hang shape's tuned configurations
	Reserve      time.Duration // outlast's reserve, overriding the rule when positive
	Fallback     bool          // a second provider of K/2 slots at fallbackHost, never down, and the rows that use it
}

// shapes are the failure shapes, with what each does during the outage.
var shapes = []struct{ name, doc string }{
	{"down", "every attempt gets a 503 after RejectAfter (the default)"},
	{"hang", "every attempt hangs until the client gives up on it"},
	{"brownout", "half the attempts get a 503, the rest are served"},
	{"capacity", "the provider serves K/4 at a time instead of K"},
	{"headers", "an admitted attempt gets 200 headers, then its body breaks: not to be retried"},
	{"layers", "as down, with every policy in two layers that both retry"},
	{"storm", "as down, and every 429 or 503, in the outage or after, holds one of the K slots for 0.25 × median service"},
}

func defaultScenario() scenario {
	return scenario{
		Slots:       80,
		Median:      2 * time.Second,
		Sigma:       0.25,
		RejectAfter: 50 * time.Millisecond,
		OutageStart: 30 * time.Second,
		Outage:      30 * time.Second,
		RetryAfter:  "none",
		Shape:       "down",
		Rate:        20,
		Duration:    150 * time.Second,
		Clients:     100,
		Deadline:    60 * time.Second,
	}
}

// Capacity is C, the requests per second the provider completes when all
// its slots are busy: K over the mean service time, which for a lognormal
// is median·exp(σ²/2).
func (s *scenario) Capacity() float64 {
	mean := s.Median.Seconds() * math.Exp(s.Sigma*s.Sigma/2)
	return float64(s.Slots) / mean
}

// FallbackSlots is the fallback provider's requests in flight, K/2, or 0
// without one. It has the primary's service time and is never down.
func (s *scenario) FallbackSlots() int {
	if !s.Fallback {
		return 0
	}
	return max(s.Slots/2, 1)
}

// OutageEnd is when the provider recovers.
func (s *scenario) OutageEnd() time.Duration { return s.OutageStart + s.Outage }

// attemptTimeout is the per-attempt timeout that the tuned configurations
// get in the hang shape: five median service times, beyond the p99.9 of the
// default service (σ 0.25) though not of the LLM-like one (σ 0.6).
func (s *scenario) attemptTimeout() time.Duration {
	if s.Shape != "hang" {
		return 0
	}
	if s.AttemptLimit > 0 {
		return s.AttemptLimit
	}
	return 5 * s.Median
}

// rejectionCost is how long a rejection, a 429 or an outage 503, holds one
// of the provider's K slots: a quarter of the median service time in the
// storm shape, nothing in the others. A real overloaded server spends work
// on the attempts it turns away (accepting, TLS, authentication, parsing,
// logging), and that work competes with the attempts it serves. The answer
// still comes after RejectAfter, as in down, so that the cost is all that
// differs; the slot is held from the attempt's arrival. A rejection is made
// and costs even when every slot is busy, so past K·4/median rejections a
// second the rejections alone keep the provider full and nothing is
// admitted: a retry storm that outlives its trigger, the metastable failure
// of Bronson et al., "Metastable Failures in Distributed Systems", HotOS
// 2021. A quarter is an assumption, fixed before any run: rejecting is
// cheaper than serving, but not free.
func (s *scenario) rejectionCost() time.Duration {
	if s.Shape != "storm" {
		return 0
	}
	return s.Median / 4
}

// config is one invocation: a scenario, the seeds, and the output.
type config struct {
	Scenario scenario
	Seeds    int
	SeedBase uint64
	Policies string // comma-separated names or prefixes; empty means all
	JSON     bool
	SVG      string // where the chart goes; empty means none
	Parallel int
}

// parseConfig reads the flags. The help text goes to stderr.
func parseConfig(args []string, stderr io.Writer) (config, error) {
	c := config{Scenario: defaultScenario(), Seeds: 10, SeedBase: 1, SVG: "outage.svg"}
	s := &c.Scenario
	fs := flag.NewFlagSet("outage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(fs, stderr) }
	fs.IntVar(&c.Seeds, "seeds", c.Seeds, "number of seeds; results are their mean with a 95% interval")
	fs.Uint64Var(&c.SeedBase, "seed", c.SeedBase, "first seed; the run uses seed … seed+seeds-1")
	fs.StringVar(&c.Policies, "policies", "", "comma-separated policy names or name prefixes to run (default all); a comma followed by a space is part of a name, as in \"outlast, jitter\"")
	fs.BoolVar(&c.JSON, "json", false, "print the results as JSON instead of a markdown table")
	fs.StringVar(&c.SVG, "svg", c.SVG, "write the attempts/s chart here (empty: no chart)")
	fs.IntVar(&c.Parallel, "parallel", 0, "simulations run at once (default GOMAXPROCS)")
	fs.DurationVar(&s.Outage, "outage", s.Outage, "outage length (sweep: 5s, 30s, 120s)")
	fs.DurationVar(&s.OutageStart, "outage-start", s.OutageStart, "when the outage starts")
	fs.DurationVar(&s.Deadline, "deadline", s.Deadline, "each request's deadline (sweep: 20s, 60s, 300s)")
	fs.IntVar(&s.Clients, "clients", s.Clients, "client processes (sweep: 10, 100, 1000)")
	fs.Float64Var(&s.Rate, "rate", s.Rate, "logical requests per second (Poisson); with -service llm, 0 keeps the default's load relative to C")
	fs.DurationVar(&s.Duration, "duration", s.Duration, "how long requests arrive")
	fs.IntVar(&s.Slots, "k", s.Slots, "the provider's requests in flight, K")
	service := fs.String("service", "api", "service time: api (median 2s, σ 0.25) or llm (median 8s, σ 0.6)")
	fs.StringVar(&s.RetryAfter, "retry-after", s.RetryAfter, "Retry-After on the outage 503: none, accurate (time to recovery), or a delay such as 1s or 60s")
	fs.StringVar(&s.Shape, "shape", s.Shape, "failure shape: "+shapeNames()+"; storm makes each rejection cost a slot for 0.25 × median service, so that retries can keep the provider saturated after the outage (see Shapes below)")
	fs.DurationVar(&s.Reserve, "reserve", 0, "outlast's reserve, and so the tuned peers' attempt budget (default 5 × median service, at most half the deadline)")
	fs.BoolVar(&s.Fallback, "fallback", false, "add a second provider of K/2 slots at "+fallbackHost+", same service time, never down, beside the primary and its outage, and the rows that use it (outlast's Fallback and LiteLLM's rule); the other rows use the primary alone")
	fs.DurationVar(&s.AttemptLimit, "attempt-timeout", 0, "per-attempt timeout of the tuned configurations in the hang shape (default 5 × median service)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, usageError{Err: err}
	}
	if fs.NArg() > 0 {
		return c, usageError{Err: fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	rateSet := false
	fs.Visit(func(f *flag.Flag) { rateSet = rateSet || f.Name == "rate" })
	if err := applyService(s, *service, rateSet); err != nil {
		return c, err
	}
	return c, c.validate()
}

// applyService sets the service time. The LLM-like service has a quarter of
// the default's capacity, so unless -rate is given its load is scaled to
// keep the default's utilization (20 requests/s of C ≈ 39): at 20/s the
// provider would be overloaded with no outage at all.
func applyService(s *scenario, name string, rateSet bool) error {
	switch name {
	case "api":
		return nil
	case "llm":
		base := defaultScenario()
		s.Median, s.Sigma = 8*time.Second, 0.6
		if !rateSet || s.Rate == 0 {
			s.Rate = base.Rate / base.Capacity() * s.Capacity()
		}
		return nil
	}
	return usageError{Err: fmt.Errorf("-service %q: want api or llm", name)}
}

func (c *config) validate() error {
	s := &c.Scenario
	bad := func(format string, args ...any) error { return usageError{Err: fmt.Errorf(format, args...)} }
	switch {
	case c.Seeds < 1:
		return bad("-seeds %d: want at least 1", c.Seeds)
	case s.Clients < 1:
		return bad("-clients %d: want at least 1", s.Clients)
	case s.Slots < 1:
		return bad("-k %d: want at least 1", s.Slots)
	case s.Rate <= 0:
		return bad("-rate %v: want a positive rate", s.Rate)
	case s.Deadline <= 0 || s.Duration <= 0 || s.Outage < 0 || s.OutageStart < 0:
		return bad("-deadline, -duration, -outage and -outage-start must not be negative, nor the first two zero")
	case !knownShape(s.Shape):
		return bad("-shape %q: want one of %s", s.Shape, shapeNames())
	}
	if _, _, err := s.retryAfterMode(); err != nil {
		return usageError{Err: err}
	}
	return nil
}

// retryAfterMode parses RetryAfter: accurate reports the time to recovery;
// otherwise d is the constant delay, and has says whether there is one.
func (s *scenario) retryAfterMode() (accurate bool, d time.Duration, err error) {
	switch s.RetryAfter {
	case "", "none":
		return false, 0, nil
	case "accurate":
		return true, 0, nil
	}
	d, err = time.ParseDuration(s.RetryAfter)
	if err != nil || d <= 0 || d%time.Second != 0 {
		return false, 0, fmt.Errorf("-retry-after %q: want none, accurate, or a whole number of seconds such as 60s", s.RetryAfter)
	}
	return false, d, nil
}

func knownShape(name string) bool {
	for _, s := range shapes {
		if s.name == name {
			return true
		}
	}
	return false
}

func shapeNames() string {
	names := make([]string, len(shapes))
	for i, s := range shapes {
		names[i] = s.name
	}
	return strings.Join(names, ", ")
}

func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprint(w, `Outage simulates a provider outage in virtual time and measures how each
retry policy, running its library's own code, gets requests through it.

Usage:

	cd bench && go run ./outage [flags]

Flags:
`)
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nShapes:")
	for _, s := range shapes {
		fmt.Fprintf(w, "  %-9s %s\n", s.name, s.doc)
	}
}
