package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/cmdline"
	"github.com/outlast-llm/outlast/bench/internal/stats"
)

// belowLevel is the load, in per cent of capacity, under which the outlast
// pool must serve nearly all that is offered without 429s.
const belowLevel = 90

// Thresholds of the checks.
const (
	maxRejectsBelow = 1.0  // 429s from the members per 1,000 requests, below belowLevel
	minServedBelow  = 95.0 // per cent of the offered requests served, below belowLevel
	successSlack    = 0.5  // percentage points by which another policy may beat outlast's success
)

// A group is a set of load levels that the report sums up in one row: a
// level alone, or a summary of several.
type group struct {
	Step   string // the level's step, 1 on, or empty for a summary
	Label  string // the load, such as "50 %", or the summary's name
	Levels []int  // indexes into config.Levels
}

// A row is one policy's figures over one group of levels.
type row struct {
	Group    group
	Policy   string
	Requests int
	Offered  float64 // arrivals a second, in per cent of capacity
	Rejects  float64 // 429s the members answered, per 1,000 requests
	Through  float64 // requests served a second, in per cent of capacity
	Success  float64 // per cent of the requests served within their deadline
	P50, P99 time.Duration
	Outcomes [len(outcomeNames)]int
}

// A check is one thing a run must hold, as cmdline.Check.
type check struct {
	ok   bool
	line string
}

// OK reports whether the check held.
func (c check) OK() bool { return c.ok }

// Line says what the check is and how it went.
func (c check) Line() string { return c.line }

// A report is a whole invocation's result.
type report struct {
	Command string
	Config  config
	Work    *workload
	Runs    []policyRun
	Rows    []row
	Checks  []check
	Elapsed time.Duration
}

// groups returns the report's groups: each level, then the levels below
// belowLevel, those over capacity, and the whole run.
func groups(c config) []group {
	var gs []group
	var below, over, all []int
	for i, pct := range c.Levels {
		gs = append(gs, group{Step: fmt.Sprint(i + 1), Label: fmt.Sprintf("%d %%", pct), Levels: []int{i}})
		if pct < belowLevel {
			below = append(below, i)
		}
		if pct > 100 {
			over = append(over, i)
		}
		all = append(all, i)
	}
	if len(below) > 0 {
		gs = append(gs, group{Label: fmt.Sprintf("below %d %%", belowLevel), Levels: below})
	}
	if len(over) > 0 {
		gs = append(gs, group{Label: "over 100 %", Levels: over})
	}
	return append(gs, group{Label: "whole run", Levels: all})
}

// newReport sums up runs of workload w under c.
func newReport(c config, w *workload, runs []policyRun) *report {
	rep := &report{Config: c, Work: w, Runs: runs}
	for _, g := range groups(c) {
		for _, r := range runs {
			rep.Rows = append(rep.Rows, summarize(c, w, g, r))
		}
	}
	rep.Checks = checks(c, rep.Rows)
	return rep
}

// summarize returns r's row over the levels of g.
func summarize(c config, w *workload, g group, r policyRun) row {
	out := row{Group: g, Policy: r.Policy.Name}
	var lat []time.Duration
	rejects := 0
	for _, res := range r.Results {
		if !slices.Contains(g.Levels, res.Level) {
			continue
		}
		out.Requests++
		out.Outcomes[res.Outcome]++
		rejects += res.Rejects
		if res.Outcome == served {
			lat = append(lat, res.Latency)
		}
	}
	secs := float64(len(g.Levels)) * c.LevelDuration.Seconds()
	if out.Requests > 0 {
		out.Rejects = 1000 * float64(rejects) / float64(out.Requests)
		out.Success = 100 * float64(out.Outcomes[served]) / float64(out.Requests)
	}
	out.Offered = 100 * float64(out.Requests) / secs / w.Capacity
	out.Through = 100 * float64(out.Outcomes[served]) / secs / w.Capacity
	slices.Sort(lat)
	out.P50, out.P99 = stats.Percentile(lat, 0.5), stats.Percentile(lat, 0.99)
	return out
}

// checks returns the checks of the outlast pool against its thresholds
// and the other policies, level by level.
func checks(c config, rows []row) []check {
	var out []check
	for i, pct := range c.Levels {
		var mine row
		var others []row
		for _, r := range rows {
			if r.Group.Step != fmt.Sprint(i+1) {
				continue
			}
			if r.Policy == outlastName {
				mine = r
			} else {
				others = append(others, r)
			}
		}
		where := fmt.Sprintf("step %d (%d %%)", i+1, pct)
		if pct < belowLevel {
			out = append(out,
				check{mine.Rejects <= maxRejectsBelow, fmt.Sprintf("%s: %s gets %.1f 429s per 1,000 requests (at most %.0f)", where, outlastName, mine.Rejects, maxRejectsBelow)},
				check{mine.Success >= minServedBelow, fmt.Sprintf("%s: %s serves %.1f %% of the offered requests within their deadline (at least %.0f %%)", where, outlastName, mine.Success, minServedBelow)})
		}
		var fewer, better []string
		rejOK, sucOK := true, true
		for _, o := range others {
			fewer = append(fewer, fmt.Sprintf("%s %.1f", o.Policy, o.Rejects))
			better = append(better, fmt.Sprintf("%s %.1f", o.Policy, o.Success))
			rejOK = rejOK && mine.Rejects <= o.Rejects
			sucOK = sucOK && mine.Success >= o.Success-successSlack
		}
		out = append(out,
			check{rejOK, fmt.Sprintf("%s: %s's 429s per 1,000, %.1f, are at most every other's (%s)", where, outlastName, mine.Rejects, strings.Join(fewer, ", "))},
			check{sucOK, fmt.Sprintf("%s: %s's success, %.1f %%, is at least every other's less %.1f points (%s)", where, outlastName, mine.Success, successSlack, strings.Join(better, ", "))})
	}
	return out
}

// seconds formats d in seconds with two decimals.
func seconds(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }

// markdown writes the report.
func (rep *report) markdown(w io.Writer) {
	c, wl := rep.Config, rep.Work
	fmt.Fprintf(w, "# Pool routing under rate limits\n\n```\n%s\n```\n\n", rep.Command)
	fmt.Fprintf(w, "Members (OpenAI-style limits, token buckets that refill continuously, a request's cost counted up front as its input, a token per 4 bytes of body, plus its max_tokens):\n\n")
	for _, s := range memberSpecs {
		fmt.Fprintf(w, "- %s: %d RPM, %d TPM\n", s.Name, s.RPM, s.TPM)
	}
	fmt.Fprintf(w, "\nAnswers: %v + %v per output token generated, the output a uniform share in [%.1f, 1] of max_tokens. A 429 comes at once, with Retry-After, retry-after-ms and OpenAI's x-ratelimit headers; a 200 carries the x-ratelimit headers too.\n\n", baseLatency, perToken, minOutputShare)
	var kinds []string
	for _, k := range mix {
		kinds = append(kinds, fmt.Sprintf("%.0f %% %s (body %d–%d bytes, max_tokens %d)", 100*k.Share, k.Name, k.MinBytes, k.MaxBytes, k.MaxTokens))
	}
	fmt.Fprintf(w, "Workload: seed %d, open-loop Poisson arrivals, %s; mean cost %.0f tokens. Capacity = min(requests %.2f/s, tokens %.0f/s ÷ %.0f = %.2f/s) = **%.2f requests/s**. Levels of %v each, in %% of capacity: %s. %d requests in all. Deadline %v from arrival; reserve %v. A 200's rate-limit headers tell of the limits as the request was %s.\n\n",
		c.Seed, strings.Join(kinds, ", "), wl.MeanCost, wl.ReqCap, wl.TokCap*wl.MeanCost, wl.MeanCost, wl.TokCap, wl.Capacity, c.LevelDuration, joinInts(c.Levels), len(wl.Requests), c.Deadline, c.Reserve, c.Headers)
	fmt.Fprintf(w, "Policies, each on fresh members, on the same requests:\n\n")
	for _, r := range rep.Runs {
		fmt.Fprintf(w, "- **%s**: %s\n", r.Policy.Name, r.Policy.Config)
	}
	fmt.Fprint(w, `
Columns: *offered* and *throughput* are requests a second, as a share of capacity: arrivals, and requests served within their deadline, counted at the level they arrived in. *Success* is the share of the level's requests served within their deadline. *429s/1k* counts the 429s the members answered, per 1,000 requests. Latency is of the requests served, from arrival. The failures: *refused* (the router gave up before the deadline: outlast.ErrPoolSpent, "no deployments", every member cooling down), *429* (a member's 429 returned to the caller), *late* (the deadline passed before a member admitted it), *cut* (the deadline passed while a member generated its answer, whose cost was spent).

| step | load | policy | requests | offered % | 429s/1k | throughput % | success % | p50 s | p99 s | refused | 429 | late | cut |
|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
`)
	for _, r := range rep.Rows {
		label := r.Group.Label
		if r.Group.Step == "" {
			label = "**" + label + "**"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %.1f | %.1f | %.1f | %.1f | %s | %s | %d | %d | %d | %d |\n",
			r.Group.Step, label, r.Policy, r.Requests, r.Offered, r.Rejects, r.Through, r.Success, seconds(r.P50), seconds(r.P99),
			r.Outcomes[refused], r.Outcomes[rejected], r.Outcomes[late], r.Outcomes[cut])
	}
	fmt.Fprintf(w, "\nMembers over the whole run (admitted requests, their tokens, 429s answered, answers cut short by the caller's deadline):\n\n| policy | member | admitted | tokens | 429s | cut |\n|---|---|---:|---:|---:|---:|\n")
	for _, r := range rep.Runs {
		for _, m := range r.Members {
			fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %d |\n", r.Policy.Name, m.Name, m.Admitted, m.Tokens, m.Rejected, m.Canceled)
		}
	}
	fmt.Fprint(w, "\nWhere the time went, over the whole run: the wait from arrival to a member's admission of the requests served, and of those cut; the time from arrival to the failure of those refused.\n\n| policy | served: wait p50 s | p99 s | cut: wait p50 s | p99 s | refused: after p50 s | p99 s |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.Runs {
		var servedWait, cutWait, refusedAfter []time.Duration
		for _, res := range r.Results {
			switch res.Outcome {
			case served:
				servedWait = append(servedWait, res.Wait)
			case cut:
				cutWait = append(cutWait, res.Wait)
			case refused:
				refusedAfter = append(refusedAfter, res.Latency)
			}
		}
		fmt.Fprintf(w, "| %s |", r.Policy.Name)
		for _, d := range [][]time.Duration{servedWait, cutWait, refusedAfter} {
			slices.Sort(d)
			if len(d) == 0 {
				fmt.Fprint(w, " – | – |")
				continue
			}
			fmt.Fprintf(w, " %s | %s |", seconds(stats.Percentile(d, 0.5)), seconds(stats.Percentile(d, 0.99)))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, "\nSuccess by size at the levels over capacity (over 100 %), and over the whole run: who gets served when not everyone can be.\n\n| policy |")
	for _, k := range mix {
		fmt.Fprintf(w, " %s, over capacity | %s, whole run |", k.Name, k.Name)
	}
	fmt.Fprint(w, "\n|---|")
	for range mix {
		fmt.Fprint(w, "---:|---:|")
	}
	fmt.Fprintln(w)
	for _, r := range rep.Runs {
		fmt.Fprintf(w, "| %s |", r.Policy.Name)
		for k := range mix {
			var over, overOK, all, allOK int
			for _, res := range r.Results {
				if res.Class != k {
					continue
				}
				all++
				ok := res.Outcome == served
				if ok {
					allOK++
				}
				if c.Levels[res.Level] > 100 {
					over++
					if ok {
						overOK++
					}
				}
			}
			fmt.Fprintf(w, " %s | %s |", percent(overOK, over), percent(allOK, all))
		}
		fmt.Fprintln(w)
	}
	rep.banked(w)
	fmt.Fprintln(w)
	cmdline.WriteChecks(w, rep.Checks)
	fmt.Fprintf(w, "\nRan in %.1f s of real time.\n", rep.Elapsed.Seconds())
}

// banked writes what each policy left in the members' buckets at the end
// of each level over capacity: what the next level may spend at once, on
// top of the refill. A router that spends less of the pool while it is
// over capacity serves the level after it from what it left.
func (rep *report) banked(w io.Writer) {
	c := rep.Config
	var over []int
	for i, pct := range c.Levels {
		if pct > 100 {
			over = append(over, i)
		}
	}
	if len(over) == 0 {
		return
	}
	fmt.Fprint(w, "\nLeft in the members' buckets at the end of each level over capacity, requests / tokens over the three members (replayed from their admissions): what the next level may spend on top of the refill.\n\n| policy |")
	for _, l := range over {
		fmt.Fprintf(w, " end of step %d (%d %%) |", l+1, c.Levels[l])
	}
	fmt.Fprint(w, "\n|---|"+strings.Repeat("---:|", len(over))+"\n")
	for _, r := range rep.Runs {
		fmt.Fprintf(w, "| %s |", r.Policy.Name)
		for _, l := range over {
			at := r.Start.Add(time.Duration(l+1) * c.LevelDuration)
			var reqs, toks float64
			for i, m := range r.Members {
				rq, tk := m.levelsAt(memberSpecs[i], r.Start, at)
				reqs, toks = reqs+rq, toks+tk
			}
			fmt.Fprintf(w, " %.0f / %.0f |", reqs, toks)
		}
		fmt.Fprintln(w)
	}
}

// percent formats n of total as a percentage, or – for none.
func percent(n, total int) string {
	if total == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", 100*float64(n)/float64(total))
}
