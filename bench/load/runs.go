package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// With --runs N, the whole benchmark runs N times, each with targets
// started afresh: a process's start (where its memory lands, which core
// it wakes on) moves its latency by more than the rounds of one run can
// average away. The report then gives, over the runs, the range of each
// gateway target's ratios and how many runs met the goal, and each run's
// ratios; --json gives every run's whole report too.

// Goals for a gateway target's added latency over the bare proxy's, at
// p50 and p99 alike.
const (
	goal        = 1.10 // without a journal
	goalJournal = 1.25 // writing the default journal
)

// goalOf is the goal of the gateway target name.
func goalOf(name string) float64 {
	if name == "gateway+journal" {
		return goalJournal
	}
	return goal
}

// runsReport is the report of several runs.
type runsReport struct {
	Command string     `json:"command"`
	Go      string     `json:"go"`
	Summary []runsRow  `json:"summary"`
	MaxRate []maxRange `json:"max_rate,omitempty"`
	Runs    []*report  `json:"runs"`
}

// runsRow is one phase, metric and gateway target over the runs.
type runsRow struct {
	Phase  string  `json:"phase"`
	Metric string  `json:"metric"`
	Target string  `json:"target"`
	Goal   float64 `json:"goal"`
	// The lowest and the highest over the runs: what the bare proxy
	// added, µs, and the target's ratios. A run without a ratio (the
	// proxy added nothing) is left out of them.
	ProxyP50 span `json:"proxy_added_p50_us"`
	ProxyP99 span `json:"proxy_added_p99_us"`
	RatioP50 span `json:"ratio_p50"`
	RatioP99 span `json:"ratio_p99"`
	// Met counts the runs whose ratios are both within Goal; a run
	// without them does not meet it.
	Met  int `json:"met"`
	Runs int `json:"runs"`
	// Each is each run's ratios, nil where it has none.
	Each [][2]*float64 `json:"each"`
}

// span is the lowest and the highest of some values; Low > High when
// there were none.
type span struct {
	Low  float64 `json:"low"`
	High float64 `json:"high"`
}

func emptySpan() span { return span{Low: 1, High: 0} }

func (s *span) add(v float64) {
	if s.Low > s.High {
		s.Low, s.High = v, v
		return
	}
	s.Low, s.High = min(s.Low, v), max(s.High, v)
}

// maxRange is a target's highest sustained rate over the runs.
type maxRange struct {
	Target string `json:"target"`
	Max    span   `json:"max"`
	// Proxy counts the runs in which the target sustained the bare
	// proxy's rate.
	Proxy int `json:"as_proxy"`
	Runs  int `json:"runs"`
}

// summarize gathers reps, runs of the same targets and phases.
func summarize(command string, reps []*report) *runsReport {
	rr := &runsReport{Command: command, Runs: reps}
	if len(reps) == 0 {
		return rr
	}
	rr.Go = reps[0].Go
	for i, row := range reps[0].Latency {
		for j := 2; j < len(row.Targets); j++ {
			s := runsRow{Phase: row.Phase, Metric: row.Metric, Target: row.Targets[j].Name, Goal: goalOf(row.Targets[j].Name),
				ProxyP50: emptySpan(), ProxyP99: emptySpan(), RatioP50: emptySpan(), RatioP99: emptySpan()}
			for _, rep := range reps {
				if i >= len(rep.Latency) || j >= len(rep.Latency[i].Targets) {
					continue
				}
				p, t := rep.Latency[i].Targets[1], rep.Latency[i].Targets[j]
				s.Runs++
				s.Each = append(s.Each, [2]*float64{t.RatioP50, t.RatioP99})
				if p.AddedP50 != nil {
					s.ProxyP50.add(*p.AddedP50)
					s.ProxyP99.add(*p.AddedP99)
				}
				if t.RatioP50 != nil {
					s.RatioP50.add(*t.RatioP50)
				}
				if t.RatioP99 != nil {
					s.RatioP99.add(*t.RatioP99)
				}
				if t.RatioP50 != nil && t.RatioP99 != nil && *t.RatioP50 <= s.Goal && *t.RatioP99 <= s.Goal {
					s.Met++
				}
			}
			rr.Summary = append(rr.Summary, s)
		}
	}
	for i, m := range reps[0].MaxRate {
		r := maxRange{Target: m.Target, Max: emptySpan()}
		for _, rep := range reps {
			if i >= len(rep.MaxRate) {
				continue
			}
			r.Runs++
			r.Max.add(rep.MaxRate[i].Max)
			if proxy := slices.IndexFunc(rep.MaxRate, func(m maxResult) bool { return m.Target == "proxy" }); proxy >= 0 && rep.MaxRate[i].Max >= rep.MaxRate[proxy].Max {
				r.Proxy++
			}
		}
		rr.MaxRate = append(rr.MaxRate, r)
	}
	return rr
}

func (rr *runsReport) markdown(w io.Writer) {
	fmt.Fprintf(w, "`%s` (%s, %d runs)\n\n", rr.Command, rr.Go, len(rr.Runs))
	head := []string{"phase", "metric", "proxy adds, p50 / p99", "target", "ratio p50", "ratio p99", "runs within the goal"}
	tableRow(w, head...)
	tableRule(w, len(head))
	for _, s := range rr.Summary {
		tableRow(w, s.Phase, s.Metric, fmt.Sprintf("%s / %s", spanCell(s.ProxyP50, "%.0f", " µs"), spanCell(s.ProxyP99, "%.0f", " µs")),
			s.Target, spanCell(s.RatioP50, "%.2f", ""), spanCell(s.RatioP99, "%.2f", ""),
			fmt.Sprintf("%d of %d (≤ %.2f)", s.Met, s.Runs, s.Goal))
	}
	fmt.Fprintf(w, "\nEach range is the lowest and the highest over the runs; a run is within the goal when its ratio is at p50 and at p99.\n")
	if len(rr.MaxRate) > 0 {
		fmt.Fprintf(w, "\n")
		tableRow(w, "target", "max sustained req/s", "runs at the proxy's")
		tableRule(w, 3)
		for _, m := range rr.MaxRate {
			tableRow(w, m.Target, spanCell(m.Max, "%.0f", ""), fmt.Sprintf("%d of %d", m.Proxy, m.Runs))
		}
	}
	fmt.Fprintf(w, "\nEach run's ratios, p50 / p99:\n\n")
	head = []string{"phase", "metric", "target"}
	for i := range rr.Runs {
		head = append(head, fmt.Sprintf("run %d", i+1))
	}
	tableRow(w, head...)
	tableRule(w, len(head))
	for _, s := range rr.Summary {
		cells := []string{s.Phase, s.Metric, s.Target}
		for _, e := range s.Each {
			cells = append(cells, ratioCell(e[0])+" / "+ratioCell(e[1]))
		}
		tableRow(w, cells...)
	}
	var disturbed []string
	for i, rep := range rr.Runs {
		if rep.Kept > 0 {
			disturbed = append(disturbed, fmt.Sprintf("run %d kept %d", i+1, rep.Kept))
		}
	}
	if len(disturbed) > 0 {
		fmt.Fprintf(w, "\n**Disturbed rounds were kept (%s): run again on a quieter machine.**\n", strings.Join(disturbed, ", "))
	}
}

// spanCell is s as "low–high", or one value when they are equal, each
// in format and followed by unit; "n/a" when s is empty.
func spanCell(s span, format, unit string) string {
	if s.Low > s.High {
		return "n/a"
	}
	lo, hi := fmt.Sprintf(format, s.Low), fmt.Sprintf(format, s.High)
	if lo == hi {
		return lo + unit
	}
	return lo + "–" + hi + unit
}
