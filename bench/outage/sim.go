package main

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/outlast-llm/outlast/bench/internal/bubble"
)

// A requestRecord is one logical request: what the caller saw.
type requestRecord struct {
	Client       int32
	Arrival, End time.Duration // offsets from the start of the run
	OK           bool
}

// A run is one policy under one seed: every request and every attempt.
type simRun struct {
	Policy   string
	Seed     uint64
	Requests []requestRecord
	Attempts []attemptRecord
	Errors   map[string]int // failures by kind, for a reader checking the model
}

// An arrival is when a logical request arrives and at which client.
type arrival struct {
	At     time.Duration
	Client int
}

// arrivals draws the load: a Poisson process at sc.Rate for sc.Duration,
// each request at a client drawn uniformly. Every policy sees the same
// arrivals for a seed.
func arrivals(sc *scenario, seed uint64) []arrival {
	rng := rand.New(rand.NewPCG(seed, streamArrivals))
	var out []arrival
	t := 0.0
	for {
		t += rng.ExpFloat64() / sc.Rate
		at := time.Duration(t * float64(time.Second))
		if at >= sc.Duration {
			return out
		}
		out = append(out, arrival{At: at, Client: rng.IntN(sc.Clients)})
	}
}

// simulate runs pol under seed in a bubble of its own and returns the run.
func simulate(b bubble.Bubbler, sc *scenario, pol policy, seed uint64) simRun {
	r := simRun{Policy: pol.Name, Seed: seed}
	b.Run(func() {
		p := newProvider(sc, seed)
		var fb *provider
		if sc.Fallback {
			fb = newFallbackProvider(sc, seed)
		}
		bd := newBuild(sc)
		callers := make([]caller, sc.Clients)
		for i := range callers {
			callers[i] = pol.client(bd, conn{p: p, fb: fb, client: i})
		}
		r.Requests, r.Errors = drive(p, sc, arrivals(sc, seed), callers)
		// The providers finish what the clients gave up on. The run's
		// attempts are the primary's, then the fallback's.
		for _, q := range []*provider{p, fb} {
			if q == nil {
				continue
			}
			q.wait()
			q.mu.Lock()
			r.Attempts = append(r.Attempts, q.records...)
			q.mu.Unlock()
		}
	})
	return r
}

// drive starts each request when it arrives and waits for all of them.
func drive(p *provider, sc *scenario, arr []arrival, callers []caller) ([]requestRecord, map[string]int) {
	reqs := make([]requestRecord, len(arr))
	errs := make([]error, len(arr))
	var wg sync.WaitGroup
	for i, a := range arr {
		time.Sleep(a.At - p.now())
		wg.Go(func() {
			ctx := withRequest(context.Background(), i)
			ctx, cancel := context.WithDeadline(ctx, p.t0.Add(a.At+sc.Deadline))
			err := callers[a.Client](ctx)
			cancel()
			reqs[i] = requestRecord{Client: int32(a.Client), Arrival: a.At, End: p.now(), OK: err == nil}
			errs[i] = err
		})
	}
	wg.Wait()
	kinds := map[string]int{}
	for _, err := range errs {
		if err != nil {
			kinds[errorKind(err)]++
		}
	}
	return reqs, kinds
}

// errorKind names a failure coarsely: a deadline, a status, or the error.
func errorKind(err error) string {
	var oe *openai.Error
	var ae *anthropic.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.As(err, &oe):
		return "status " + strconv.Itoa(oe.StatusCode)
	case errors.As(err, &ae):
		return "status " + strconv.Itoa(ae.StatusCode)
	}
	s := err.Error()
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

// runAll runs every policy under every seed, up to parallel at a time, and
// the oracle, which needs no bubble. progress, if not nil, is called after
// each run.
func runAll(b bubble.Bubbler, sc *scenario, pols []policy, oracle bool, seeds []uint64, parallel int, progress func(done, total int)) map[string][]simRun {
	type job struct {
		pol  policy
		seed uint64
	}
	var jobs []job
	for _, p := range pols {
		for _, s := range seeds {
			jobs = append(jobs, job{p, s})
		}
	}
	// outlast logs nothing unasked, but thousands of simulated retries
	// through anything that logs to slog.Default would bury the output.
	slog.SetDefault(discard)
	out := make([]simRun, len(jobs))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // guards done
		done int
	)
	next := make(chan int)
	for range max(parallel, 1) {
		wg.Go(func() {
			for i := range next {
				out[i] = simulate(b, sc, jobs[i].pol, jobs[i].seed)
				mu.Lock()
				done++
				if progress != nil {
					progress(done, len(jobs))
				}
				mu.Unlock()
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	runs := map[string][]simRun{}
	for _, r := range out {
		runs[r.Policy] = append(runs[r.Policy], r)
	}
	if oracle {
		for _, s := range seeds {
			runs[oracleName] = append(runs[oracleName], simulateOracle(sc, s))
		}
	}
	for _, rs := range runs {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Seed < rs[j].Seed })
	}
	return runs
}

var _ http.RoundTripper = conn{}
