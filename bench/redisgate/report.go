package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/outlast-llm/outlast/bench/internal/cmdline"
)

// report is a run's figures and checks, as JSON or as markdown.
type report struct {
	Command     string           `json:"command"`
	Go          string           `json:"go"`
	GOMAXPROCS  int              `json:"gomaxprocs"`
	NumCPU      int              `json:"num_cpu"`
	Redis       string           `json:"redis_version"`
	Addr        string           `json:"redis_addr"`
	Config      config           `json:"config"`
	Seconds     float64          `json:"seconds"`
	Uncontended []uncontendedRow `json:"uncontended"`
	Contended   []contendedRow   `json:"contended"`
	Handoff     []handoffRow     `json:"handoff"`
	Checks      []check          `json:"checks"`
}

// check is one thing that must hold, and whether it did.
type check struct {
	Name   string `json:"name"`
	Passed bool   `json:"passed"`
	Detail string `json:"detail"`
}

func (c check) OK() bool     { return c.Passed }
func (c check) Line() string { return c.Name + ": " + c.Detail }

// check judges the run: the capacity held, every process reported, no
// Acquire failed, and, with --check, the hand-off goal was met.
func (r *report) check(c config) []check {
	var out []check
	for _, row := range r.Contended {
		out = append(out,
			check{row.Gate + ": capacity never exceeded", row.MaxHoldersCounter <= int64(row.Capacity) && row.MaxHoldersClock <= row.Capacity,
				fmt.Sprintf("at most %d holders by the Redis counter, %d by the wall clock, of %d slots", row.MaxHoldersCounter, row.MaxHoldersClock, row.Capacity)},
			check{row.Gate + ": every process reported", row.Reported == row.Processes && row.Grants > 0,
				fmt.Sprintf("%d of %d, with %d grants%s", row.Reported, row.Processes, row.Grants, suffix(row.Missing))},
			check{row.Gate + ": no Acquire failed", row.Errors == 0,
				fmt.Sprintf("%d failed%s", row.Errors, suffix(row.FirstError))})
	}
	if c.Check {
		for _, row := range r.Handoff {
			if row.Gate == "redisgate" {
				out = append(out, check{row.Gate + ", " + row.Setup + ": hand-off p99 under " + c.Goal.String(), row.GoalMet,
					"p99 " + human(row.Took.P99)})
			}
		}
	}
	return out
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return "; " + s
}

// markdown writes the command, the three tables and the checks.
func (r *report) markdown(w io.Writer) {
	fmt.Fprintf(w, "`%s` (%s, GOMAXPROCS %d, %d CPUs; Redis %s at %s, over loopback; %.0f s)\n\n",
		r.Command, r.Go, r.GOMAXPROCS, r.NumCPU, r.Redis, r.Addr, r.Seconds)
	r.uncontendedTable(w)
	r.contendedTable(w)
	r.handoffTable(w)
	cmdline.WriteChecks(w, r.Checks)
}

func (r *report) uncontendedTable(w io.Writer) {
	fmt.Fprintf(w, "**1. Acquire + release, uncontended**: one goroutine, one key of capacity 1, %d times "+
		"(p50 and p99 of each timed alone, a clock read included; the mean of another %d timed as a whole)\n\n",
		r.Config.Iterations, r.Config.Iterations)
	fmt.Fprintln(w, "| gate | p50 | p99 | mean | round trips | commands |")
	fmt.Fprintln(w, "| --- | --: | --: | --: | --: | --- |")
	for _, row := range r.Uncontended {
		trips, cmds := "0", "none"
		if row.RoundTrips != nil {
			trips, cmds = fmt.Sprintf("%.2f", *row.RoundTrips), commandList(row.Commands)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", row.Gate, human(row.Timed.P50), human(row.Timed.P99), human(row.Mean), trips, cmds)
	}
	fmt.Fprintln(w)
}

// commandList is the commands per op, as "EVALSHA ×2.00".
func commandList(m map[string]float64) string {
	var s []string
	for _, name := range slices.Sorted(maps.Keys(m)) {
		s = append(s, fmt.Sprintf("%s ×%.2f", name, m[name]))
	}
	return strings.Join(s, ", ")
}

func (r *report) contendedTable(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "**2. Contended**: %d goroutines loop acquire → hold %v (INCR a Redis counter, sleep, DECR it) → release "+
		"on one key of capacity %d, for %v\n\n", c.Goroutines, c.Hold, c.Capacity, c.Duration)
	fmt.Fprintln(w, "| gate | setup | grants/s | slots busy | slot idle per grant | acquire wait p50 | p99 | release p50 | p99 | mean hold | most holders: counter | clock | processes reported |")
	fmt.Fprintln(w, "| --- | --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
	for _, row := range r.Contended {
		fmt.Fprintf(w, "| %s | %s | %.0f | %.1f %% | %s | %s | %s | %s | %s | %s | %d | %d | %d of %d |\n",
			row.Gate, row.Setup, row.PerSecond, 100*row.SlotsBusy, human(row.IdlePerGrant), human(row.Wait.P50), human(row.Wait.P99),
			human(row.Release.P50), human(row.Release.P99), human(row.Held.Mean),
			row.MaxHoldersCounter, row.MaxHoldersClock, row.Reported, row.Processes)
	}
	fmt.Fprintln(w, "\nSlots busy is the holders' time between Acquire's return and the release call over the slots' time "+
		"(capacity × first start to last end); the idle rest, per grant, is what each hand-off under load cost. "+
		"The most holders are by the counter's INCR replies, and by the holds' wall-clock intervals merged over the processes.")
	fmt.Fprintln(w)
}

func (r *report) handoffTable(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "**3. Hand-off**: one holder, one waiter queued on a key of capacity 1; from just before the holder's release "+
		"to the waiter's Acquire returning, %d times\n\n", c.Handoffs)
	fmt.Fprintf(w, "| gate | setup | clock | p50 | p99 | mean | max | p99 under %v |\n", c.Goal)
	fmt.Fprintln(w, "| --- | --- | --- | --: | --: | --: | --: | --- |")
	for _, row := range r.Handoff {
		met := "no"
		if row.GoalMet {
			met = "yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", row.Gate, row.Setup, row.Clock,
			human(row.Took.P50), human(row.Took.P99), human(row.Took.Mean), human(row.Took.Max), met)
	}
	fmt.Fprintln(w)
}
