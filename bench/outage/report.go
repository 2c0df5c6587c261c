package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// A summary is one policy's figures over the seeds.
type summary struct {
	Policy        string `json:"policy"`
	Group         string `json:"group"`
	Config        string `json:"config"`
	Success       stat   `json:"success"`
	OutageSuccess stat   `json:"success_outage_arrivals"`
	Attempts      stat   `json:"attempts_per_request"`
	Rejected      stat   `json:"rejected_per_request"`
	Late          stat   `json:"late_per_request"`
	Hung          stat   `json:"hung_per_request"`
	P50           stat   `json:"p50_success_s"`
	P99           stat   `json:"p99_success_s"`
	P99Fail       stat   `json:"p99_time_to_fail_s"`
	P99FailIdle   stat   `json:"p99_fail_idle_s"`
	Peak          stat   `json:"peak_over_capacity"`
	After429      stat   `json:"throttled_per_request_after_recovery"`
	Resent        stat   `json:"resent_after_commit"`
	// With --fallback only: the attempts split between the providers, and
	// the fallback's load.
	PrimaryAttempts  stat           `json:"primary_attempts_per_request,omitzero"`
	FallbackAttempts stat           `json:"fallback_attempts_per_request,omitzero"`
	FallbackServed   stat           `json:"served_by_fallback,omitzero"`
	FallbackPeak     stat           `json:"fallback_peak_in_flight_over_slots,omitzero"`
	Fallback429      stat           `json:"fallback_throttled_per_request,omitzero"`
	Errors           map[string]int `json:"errors"`
	Series           []float64      `json:"attempts_per_s"`
	Admitted         []float64      `json:"admitted_per_s"`
}

// A report is a whole invocation's result.
type report struct {
	Command   string        `json:"command"`
	Scenario  scenarioJSON  `json:"scenario"`
	Capacity  float64       `json:"capacity_per_s"`
	Outlast   string        `json:"outlast_policy"`
	Budget    int           `json:"attempt_budget"`
	Seeds     []uint64      `json:"seeds"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	Policies  []summary     `json:"policies"`
	SeriesEnd time.Duration `json:"series_end_ns"`
}

// scenarioJSON is the scenario with its durations in seconds.
type scenarioJSON struct {
	Slots       int     `json:"k"`
	Median      float64 `json:"median_service_s"`
	Sigma       float64 `json:"sigma"`
	OutageStart float64 `json:"outage_start_s"`
	Outage      float64 `json:"outage_s"`
	RetryAfter  string  `json:"retry_after"`
	Shape       string  `json:"shape"`
	Rate        float64 `json:"rate_per_s"`
	Duration    float64 `json:"duration_s"`
	Clients     int     `json:"clients"`
	Deadline    float64 `json:"deadline_s"`
	Fallback    int     `json:"fallback_k,omitzero"` // the fallback provider's slots, K/2, with --fallback
}

func (s *scenario) json() scenarioJSON {
	return scenarioJSON{
		Slots: s.Slots, Median: s.Median.Seconds(), Sigma: s.Sigma,
		OutageStart: s.OutageStart.Seconds(), Outage: s.Outage.Seconds(),
		RetryAfter: s.RetryAfter, Shape: s.Shape, Rate: s.Rate,
		Duration: s.Duration.Seconds(), Clients: s.Clients, Deadline: s.Deadline.Seconds(),
		Fallback: s.FallbackSlots(),
	}
}

// summarizeRuns turns each policy's runs into its summary, in order.
func summarizeRuns(sc *scenario, order []policy, runs map[string][]simRun, end time.Duration) []summary {
	var out []summary
	for _, p := range order {
		rs := runs[p.Name]
		if len(rs) == 0 {
			continue
		}
		out = append(out, summarizePolicy(sc, p, rs, end))
	}
	return out
}

func summarizePolicy(sc *scenario, p policy, rs []simRun, end time.Duration) summary {
	ms := make([]measures, len(rs))
	for i, r := range rs {
		ms[i] = measure(sc, r)
	}
	col := func(f func(measures) float64) stat {
		xs := make([]float64, len(ms))
		for i, m := range ms {
			xs[i] = f(m)
		}
		return summarize(xs)
	}
	s := summary{
		Policy: p.Name, Group: p.Group, Config: p.Config,
		Success:       col(func(m measures) float64 { return m.Success }),
		OutageSuccess: col(func(m measures) float64 { return m.OutageSuccess }),
		Attempts:      col(func(m measures) float64 { return m.Attempts }),
		Rejected:      col(func(m measures) float64 { return m.Rejected }),
		Late:          col(func(m measures) float64 { return m.Late }),
		Hung:          col(func(m measures) float64 { return m.Hung }),
		P50:           col(func(m measures) float64 { return m.P50 }),
		P99:           col(func(m measures) float64 { return m.P99 }),
		P99Fail:       col(func(m measures) float64 { return m.P99Fail }),
		P99FailIdle:   col(func(m measures) float64 { return m.P99FailIdle }),
		Peak:          col(func(m measures) float64 { return m.Peak }),
		After429:      col(func(m measures) float64 { return m.After429 }),
		Resent:        col(func(m measures) float64 { return m.Resent }),
		Errors:        map[string]int{},
	}
	if sc.Fallback {
		s.PrimaryAttempts = col(func(m measures) float64 { return m.PrimaryAttempts })
		s.FallbackAttempts = col(func(m measures) float64 { return m.FallbackAttempts })
		s.FallbackServed = col(func(m measures) float64 { return m.FallbackServed })
		s.FallbackPeak = col(func(m measures) float64 { return m.FallbackPeak })
		s.Fallback429 = col(func(m measures) float64 { return m.Fallback429 })
	}
	n := int(end / time.Second)
	s.Series, s.Admitted = make([]float64, n), make([]float64, n)
	for _, r := range rs {
		all, adm := series(r, end)
		for i := range all {
			s.Series[i] += all[i] / float64(len(rs))
			s.Admitted[i] += adm[i] / float64(len(rs))
		}
		for k, v := range r.Errors {
			s.Errors[k] += v
		}
	}
	return s
}

// markdown writes the table, one row per policy.
func (r *report) markdown(w io.Writer) {
	sc := r.Scenario
	fmt.Fprintf(w, "Outage %gs from %gs, Retry-After %s, shape %s; K %d, service median %gs σ %g (C ≈ %.1f/s); "+
		"%g requests/s for %gs over %d clients, deadline %gs; %d seeds, mean ± 95%% interval.\n\n",
		sc.Outage, sc.OutageStart, sc.RetryAfter, sc.Shape, sc.Slots, sc.Median, sc.Sigma, r.Capacity,
		sc.Rate, sc.Duration, sc.Clients, sc.Deadline, len(r.Seeds))
	if sc.Fallback > 0 {
		fmt.Fprintf(w, "Fallback provider at %s: %d slots (K/2), the same service time, never down; attempts/req counts both providers, peak ÷ C and 429s/req after are the primary's.\n\n", fallbackHost, sc.Fallback)
	}
	fmt.Fprintf(w, "outlast's policy: %s; attempt budget under the deadline: %d.\n\n", r.Outlast, r.Budget)
	fmt.Fprintln(w, "| policy | success % | success %, outage arrivals | attempts/req | rejected/req | late /1k req | p50 s | p99 s | p99 fail s | p99 idle at fail s | peak ÷ C | 429s/req after |")
	fmt.Fprintln(w, "| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
	for _, s := range r.Policies {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			s.Policy, pct(s.Success), pct(s.OutageSuccess), num(s.Attempts, 2), num(s.Rejected, 2),
			perK(s.Late), num(s.P50, 1), num(s.P99, 1), num(s.P99Fail, 2), num(s.P99FailIdle, 1),
			num(s.Peak, 2), num(s.After429, 2))
	}
	fmt.Fprintln(w)
	if sc.Fallback > 0 {
		r.fallbackTable(w)
	}
	fmt.Fprintf(w, "Command: `%s` (%v of wall time on %s).\n", r.Command, r.Elapsed.Round(time.Second), machine())
	var resent []string
	for _, s := range r.Policies {
		if s.Resent.Mean > 0 {
			resent = append(resent, fmt.Sprintf("%s %.1f", s.Policy, s.Resent.Mean))
		}
	}
	if len(resent) > 0 {
		fmt.Fprintf(w, "\nAttempts re-sent after their request's 200 headers had arrived, per run: %s.\n", strings.Join(resent, "; "))
	}
}

// fallbackTable writes the attempts split between the two providers and
// the fallback's load, one row per policy.
func (r *report) fallbackTable(w io.Writer) {
	fmt.Fprintln(w, "| policy | success % | success %, outage arrivals | attempts/req | primary attempts/req | fallback attempts/req | served by fallback % | primary peak ÷ C | fallback peak in flight ÷ K/2 | fallback 429s/req |")
	fmt.Fprintln(w, "| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
	for _, s := range r.Policies {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			s.Policy, pct(s.Success), pct(s.OutageSuccess), num(s.Attempts, 2), num(s.PrimaryAttempts, 2),
			num(s.FallbackAttempts, 2), pct(s.FallbackServed), num(s.Peak, 2), num(s.FallbackPeak, 2), num(s.Fallback429, 2))
	}
	fmt.Fprintln(w)
}

// pct formats a fraction as a percentage with its interval.
func pct(s stat) string {
	return num(stat{Mean: 100 * s.Mean, CI95: 100 * s.CI95, N: s.N}, 1)
}

// perK formats a per-request rate per 1,000 requests.
func perK(s stat) string {
	return num(stat{Mean: 1000 * s.Mean, CI95: 1000 * s.CI95, N: s.N}, 1)
}

// num formats a stat with prec decimals; the interval is left out when it
// rounds to zero or there was one seed.
func num(s stat, prec int) string {
	if math.IsNaN(s.Mean) {
		return "–"
	}
	m := fmt.Sprintf("%.*f", prec, s.Mean)
	if s.N < 2 || math.IsNaN(s.CI95) {
		return m
	}
	ci := fmt.Sprintf("%.*f", prec, s.CI95)
	if strings.Trim(ci, "0.") == "" {
		return m
	}
	return m + " ± " + ci
}
