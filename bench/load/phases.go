package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/stats"
)

// errDropped is an open-loop send that was never made.
var errDropped = errors.New("load: dropped: too many requests in flight, or the scheduler fell too far behind")

// bench runs the phases over a stack.
type bench struct {
	cfg      config
	st       *stack
	senders  *senders      // the open loop's
	progress io.Writer     // nil unless stderr is a terminal
	redoLeft time.Duration // of config.RedoBudget, in this phase
	redone   int           // rounds run again because other processes disturbed them
	kept     int           // disturbed rounds kept because the phase's budget was spent
}

func (b *bench) progressf(format string, args ...any) {
	if b.progress != nil {
		fmt.Fprintf(b.progress, "load: "+format+"\n", args...)
	}
}

func (b *bench) newSeries() []*series {
	out := make([]*series, len(b.st.targets))
	for i := range out {
		out[i] = &series{}
	}
	return out
}

// order is the order of the targets in round r: a permutation drawn
// anew each round, from a seed that is the round's number, so that no
// target always follows the same one. (A rotation, as before, kept the
// gateway always after the bare proxy, and whatever the proxy's slice
// left behind fell on the gateway's: it used ~15 % more CPU than the
// gated gateway, which does more.)
func (b *bench) order(r int) []int {
	return rand.New(rand.NewPCG(uint64(r), 0x6c6f6164)).Perm(len(b.st.targets))
}

// settle starts a target's slice from a collected heap, so that each
// slice pays mostly for its own garbage rather than for the previous
// target's.
func settle() { runtime.GC() }

// warmup opens connections on every path and fails fast on a target that
// answers wrong.
func (b *bench) warmup(ctx context.Context) error {
	for _, t := range b.st.targets {
		for _, stream := range []bool{false, true} {
			for range b.cfg.Warmup {
				if _, err := t.do(ctx, stream); err != nil {
					return fmt.Errorf("warming up %s: %w", t.name, err)
				}
			}
		}
	}
	return nil
}

// sequential sends one request at a time, SeqPerRound per target in each
// of SeqRounds rounds.
func (b *bench) sequential(ctx context.Context, stream bool) ([]*series, error) {
	out := b.newSeries()
	for r := range b.cfg.SeqRounds {
		b.progressf("sequential stream=%v: round %d/%d", stream, r+1, b.cfg.SeqRounds)
		for _, i := range b.order(r) {
			t, s := b.st.targets[i], out[i]
			err := b.round(s, func() error {
				for range b.cfg.SeqPerRound {
					if err := ctx.Err(); err != nil {
						return err
					}
					s.add(t.do(ctx, stream))
				}
				return t.finish(ctx)
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// fixedRate drives each target open-loop at Rate for RateDur in all,
// in slices of Slice, one target at a time.
func (b *bench) fixedRate(ctx context.Context, stream bool) ([]*series, error) {
	out := b.newSeries()
	rounds := int((b.cfg.RateDur + b.cfg.Slice - 1) / b.cfg.Slice)
	for r := range rounds {
		d := min(b.cfg.Slice, b.cfg.RateDur-time.Duration(r)*b.cfg.Slice)
		b.progressf("%g/s stream=%v: round %d/%d", b.cfg.Rate, stream, r+1, rounds)
		for _, i := range b.order(r) {
			t, s := b.st.targets[i], out[i]
			err := b.round(s, func() error {
				if err := b.openLoop(ctx, t, s, b.cfg.Rate, d, stream); err != nil {
					return err
				}
				return t.finish(ctx)
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// openLoop sends rate·dur requests to t at fixed intervals, each from a
// sender of its own (see senders), whether or not earlier ones have been
// answered: a slow target gets the same arrivals as a fast one. A send
// when InFlight are in flight is dropped. It measures each request from
// its actual send, and counts the sends that were late.
func (b *bench) openLoop(ctx context.Context, t *target, s *series, rate float64, dur time.Duration, stream bool) error {
	type result struct {
		lat time.Duration
		err error
	}
	n := max(1, int(rate*dur.Seconds()))
	interval := time.Duration(float64(time.Second) / rate)
	res := make([]result, n)
	for i := range res {
		res[i].err = errDropped // until sent
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var wg sync.WaitGroup
	start := time.Now()
	// A scheduler this far behind is starved: the rest are dropped, which
	// fails the step, rather than stretching the run.
	stopBy := start.Add(2*dur + time.Second)
	var err error
send:
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				err = ctx.Err()
				break send
			case <-timer.C:
			}
		}
		now := time.Now()
		if now.After(stopBy) {
			break
		}
		if now.Sub(due) > b.cfg.Late {
			s.late++
		}
		wg.Add(1)
		sent := b.senders.send(func() {
			defer wg.Done()
			res[i].lat, res[i].err = t.do(ctx, stream)
		})
		if !sent {
			wg.Done() // dropped
		}
	}
	wg.Wait()
	s.wall += time.Since(start)
	for _, r := range res {
		s.add(r.lat, r.err)
	}
	return err
}

// maxResult is the max-rate phase's finding for one target.
type maxResult struct {
	Target   string     `json:"target"`
	Max      float64    `json:"max_rps"`             // the highest step passed; 0 for none
	FailedAt float64    `json:"failed_at,omitempty"` // the step that failed; 0 if all passed
	Reason   string     `json:"reason,omitempty"`
	Steps    []stepStat `json:"steps"`
}

// stepStat is one step of the max-rate phase.
type stepStat struct {
	Rate     float64 `json:"rate"`
	Achieved float64 `json:"achieved"`
	P50      float64 `json:"p50_us"`
	P99      float64 `json:"p99_us"`
	Errors   int     `json:"errors"`
	Dropped  int     `json:"dropped"`
	Late     int     `json:"late"`
	Other    float64 `json:"other_cpu"`        // other processes' share of the machine meanwhile
	Failed   string  `json:"failed,omitempty"` // why the step failed
}

// maxRate steps each target through MaxRates until a step fails; the
// targets still passing run one after another within a step. A failed
// step is run once more and fails only if both tries do, so that one
// hiccup of a shared machine does not decide.
func (b *bench) maxRate(ctx context.Context, stream bool) ([]maxResult, error) {
	out := make([]maxResult, len(b.st.targets))
	alive := make([]bool, len(out))
	for i, t := range b.st.targets {
		out[i].Target, alive[i] = t.name, true
	}
	for r, rate := range b.cfg.MaxRates {
		b.progressf("max rate stream=%v: %g/s", stream, rate)
		for _, i := range b.order(r) {
			if !alive[i] {
				continue
			}
			why, err := b.step(ctx, i, rate, stream, &out[i])
			if err == nil && why != "" {
				why, err = b.step(ctx, i, rate, stream, &out[i])
			}
			switch {
			case err != nil:
				return nil, err
			case why != "":
				out[i].FailedAt, out[i].Reason, alive[i] = rate, why, false
			default:
				out[i].Max = rate
			}
		}
		if !slices.Contains(alive, true) {
			break
		}
	}
	return out, nil
}

// step drives target i at rate for MaxDur, records the step on m, and
// says why it failed, or "" if it passed. A failure while other processes
// took the machine is run again, within the redo budget.
func (b *bench) step(ctx context.Context, i int, rate float64, stream bool, m *maxResult) (string, error) {
	for {
		settle()
		s := &series{}
		before := b.st.sampleCost()
		if err := b.openLoop(ctx, b.st.targets[i], s, rate, b.cfg.MaxDur, stream); err != nil {
			return "", err
		}
		if err := b.st.targets[i].finish(ctx); err != nil {
			return "", err
		}
		d := b.st.sampleCost().since(before)
		why := b.verdict(s, rate)
		other, _ := d.foreign()
		m.Steps = append(m.Steps, stepStat{
			Rate: rate, Achieved: float64(len(s.lats)) / s.wall.Seconds(),
			P50: stats.Micros(s.percentile(0.5)), P99: stats.Micros(s.percentile(0.99)),
			Errors: s.errs, Dropped: s.dropped, Late: s.late, Other: other, Failed: why,
		})
		if why == "" || !b.redo(d) {
			if why != "" && b.cfg.MaxOther > 0 && other > b.cfg.MaxOther {
				why += fmt.Sprintf(" (other processes used %.0f%% of the CPU)", 100*min(other, 1))
			}
			return why, nil
		}
	}
}

// verdict says why a step at rate failed, or "" if it passed.
func (b *bench) verdict(s *series, rate float64) string {
	total := s.total()
	if total == 0 {
		return "nothing sent"
	}
	if bad := float64(s.errs+s.dropped) / float64(total); bad > b.cfg.MaxErrors {
		why := fmt.Sprintf("%.2f%% failed (%d errors, %d dropped)", 100*bad, s.errs, s.dropped)
		if s.firstErr != nil {
			why += "; first error: " + s.firstErr.Error()
		}
		return why
	}
	if achieved := float64(len(s.lats)) / s.wall.Seconds(); achieved < b.cfg.MaxAchieved*rate {
		return fmt.Sprintf("achieved %.0f/s", achieved)
	}
	if p99 := s.percentile(0.99); p99 > b.cfg.MaxP99 {
		return fmt.Sprintf("p99 %v", p99.Round(time.Microsecond))
	}
	return ""
}

// profile writes a CPU profile of the proxy, of the gateway and, if it
// runs, of the gateway with its journal, each alone at Rate, non-streaming,
// for ProfileDur: diff them with
// go tool pprof -diff_base PREFIX-proxy.pprof PREFIX-gateway.pprof.
func (b *bench) profile(ctx context.Context) error {
	names := []string{"proxy", "gateway"}
	if b.st.target("gateway+journal") != nil {
		names = append(names, "gateway+journal")
	}
	for _, name := range names {
		b.progressf("profiling %s at %g/s", name, b.cfg.Rate)
		if err := b.profileOne(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// memProfile writes the allocations of the whole run, sampled finely.
// Each proxy's own sites are told apart by their stacks: -focus
// ReverseProxy, -focus outlast.
func (b *bench) memProfile() error {
	f, err := os.Create(b.cfg.MemProfile)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		return err
	}
	return f.Close()
}

func (b *bench) profileOne(ctx context.Context, name string) error {
	t := b.st.target(name)
	f, err := os.Create(b.cfg.CPUProfile + "-" + name + ".pprof")
	if err != nil {
		return err
	}
	defer f.Close()
	settle()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	err = b.openLoop(ctx, t, &series{}, b.cfg.Rate, b.cfg.ProfileDur, false)
	if err == nil {
		err = t.finish(ctx)
	}
	pprof.StopCPUProfile()
	if err != nil {
		return err
	}
	return f.Close()
}
