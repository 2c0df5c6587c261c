package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/outlast-llm/outlast/bench/internal/stats"
)

// report is a run's findings, as JSON or as markdown.
type report struct {
	Command       string       `json:"command"`
	Go            string       `json:"go"`
	GOMAXPROCS    int          `json:"gomaxprocs"`
	NumCPU        int          `json:"num_cpu"`
	Targets       []string     `json:"targets"`
	Rate          float64      `json:"rate"`
	Deployed      bool         `json:"deployed"` // each target in a process of its own
	Seconds       float64      `json:"seconds"`
	Redone        int          `json:"redone_rounds"` // rounds run again because other processes disturbed them
	Kept          int          `json:"disturbed_rounds_kept"`
	Latency       []latencyRow `json:"latency"`
	MaxRate       []maxResult  `json:"max_rate,omitempty"`
	MaxRateStream []maxResult  `json:"max_rate_stream,omitempty"`
}

// latencyRow is one phase and metric, over every target.
type latencyRow struct {
	Phase   string        `json:"phase"`  // "sequential" or the fixed rate
	Metric  string        `json:"metric"` // "full" or "ttfb"
	Targets []targetStats `json:"targets"`
	// Against compares each gateway+X target with the gateway alone.
	Against []comparison `json:"against_gateway,omitempty"`
}

// baseline is the target the others of its family are compared with.
const baseline = "gateway"

// comparison is whether a target's latency differs from the baseline's
// beyond the noise: the Mann–Whitney U test of the two targets' per-round
// percentiles, as benchstat compares benchmark runs.
type comparison struct {
	Target    string  `json:"target"`
	Rounds    int     `json:"rounds"`    // per target
	DeltaP50  float64 `json:"delta_p50"` // the medians' difference, µs
	DeltaP99  float64 `json:"delta_p99"`
	ChangeP50 float64 `json:"change_p50"` // DeltaP50 over the baseline's median
	ChangeP99 float64 `json:"change_p99"`
	PP50      float64 `json:"p_p50"` // the test's p-value
	PP99      float64 `json:"p_p99"`
}

// alpha is the p-value under which a difference is beyond the noise.
const alpha = 0.05

// compare compares s with base, round by round.
func compare(name string, s, base *series) comparison {
	x, y := roundMicros(s, 0.50), roundMicros(base, 0.50)
	c := comparison{Target: name, Rounds: min(len(x), len(y))}
	c.DeltaP50, c.ChangeP50, c.PP50 = differ(x, y)
	c.DeltaP99, c.ChangeP99, c.PP99 = differ(roundMicros(s, 0.99), roundMicros(base, 0.99))
	return c
}

// differ returns how the per-round percentiles x differ from base's: the
// medians' difference in µs, that over base's median, and the
// Mann–Whitney p-value.
func differ(x, base []float64) (delta, change, pValue float64) {
	m := median(base)
	delta = median(x) - m
	if m > 0 {
		change = delta / m
	}
	return delta, change, mannWhitney(x, base)
}

// roundMicros returns s's per-round p-th percentiles, in µs.
func roundMicros(s *series, p float64) []float64 {
	var out []float64
	for _, d := range s.roundPercentiles(p) {
		out = append(out, stats.Micros(d))
	}
	return out
}

// targetStats is one target's latency in a row. Added is over the direct
// target; Ratio is this target's added latency over the bare proxy's.
type targetStats struct {
	Name       string   `json:"name"`
	N          int      `json:"n"`
	Errors     int      `json:"errors"`
	Dropped    int      `json:"dropped"`
	Late       int      `json:"late"`
	FirstError string   `json:"first_error,omitempty"`
	P50        float64  `json:"p50_us"`        // the median over rounds of each round's p50
	P99        float64  `json:"p99_us"`        // the same for p99
	PooledP50  float64  `json:"pooled_p50_us"` // over every request of every round
	PooledP99  float64  `json:"pooled_p99_us"`
	Foreign    *float64 `json:"foreign_cpu,omitempty"` // other processes' share of the machine's CPU meanwhile
	AddedP50   *float64 `json:"added_p50_us,omitempty"`
	AddedP99   *float64 `json:"added_p99_us,omitempty"`
	RatioP50   *float64 `json:"ratio_p50,omitempty"`
	RatioP99   *float64 `json:"ratio_p99,omitempty"`

	// The process's cost per request sent while this target was driven.
	CPU *float64 `json:"cpu_us_per_req,omitempty"` // nil where the platform cannot tell
	// OwnCPU is the target's own process's alone, when deployed: the
	// upstream's for direct.
	OwnCPU      *float64 `json:"own_cpu_us_per_req,omitempty"`
	Allocs      float64  `json:"allocs_per_req"`
	Bytes       float64  `json:"bytes_per_req"`
	AddedCPU    *float64 `json:"added_cpu_us_per_req,omitempty"`
	AddedAllocs *float64 `json:"added_allocs_per_req,omitempty"`
	AddedBytes  *float64 `json:"added_bytes_per_req,omitempty"`
	RatioCPU    *float64 `json:"ratio_cpu,omitempty"`
	RatioAllocs *float64 `json:"ratio_allocs,omitempty"`
}

// setCost fills in the cost per request of s, the series of the i'th
// target.
func (ts *targetStats) setCost(s *series, i int) {
	sent := float64(len(s.lats) + s.errs)
	if sent == 0 {
		return
	}
	if s.cost.cpuOK {
		v := stats.Micros(s.cost.cpu) / sent
		ts.CPU = &v
		if i < len(s.cost.procs) {
			own := stats.Micros(s.cost.procs[i]) / sent
			ts.OwnCPU = &own
		}
	}
	ts.Allocs = float64(s.cost.mallocs) / sent
	ts.Bytes = float64(s.cost.bytes) / sent
}

// setAdded fills in what ts adds over direct, and its ratios to proxy's.
func (ts *targetStats) setAdded(direct, proxy *targetStats) {
	a50, a99 := ts.P50-direct.P50, ts.P99-direct.P99
	ts.AddedP50, ts.AddedP99 = &a50, &a99
	aAllocs, aBytes := ts.Allocs-direct.Allocs, ts.Bytes-direct.Bytes
	ts.AddedAllocs, ts.AddedBytes = &aAllocs, &aBytes
	if ts.CPU != nil && direct.CPU != nil {
		v := *ts.CPU - *direct.CPU
		ts.AddedCPU = &v
	}
	if proxy == nil {
		return
	}
	ts.RatioP50 = ratio(*ts.AddedP50, *proxy.AddedP50)
	ts.RatioP99 = ratio(*ts.AddedP99, *proxy.AddedP99)
	ts.RatioAllocs = ratio(*ts.AddedAllocs, *proxy.AddedAllocs)
	if ts.AddedCPU != nil && proxy.AddedCPU != nil {
		ts.RatioCPU = ratio(*ts.AddedCPU, *proxy.AddedCPU)
	}
}

// addLatency adds a row for series s, one per target, in names' order:
// direct first, the bare proxy second.
func (rep *report) addLatency(phase string, stream bool, names []string, s []*series) {
	row := latencyRow{Phase: phase, Metric: "full"}
	if stream {
		row.Metric = "ttfb"
	}
	for i, name := range names {
		ts := targetStats{
			Name: name, N: s[i].total(), Errors: s[i].errs, Dropped: s[i].dropped, Late: s[i].late,
			P50: stats.Micros(s[i].roundPercentile(0.50)), P99: stats.Micros(s[i].roundPercentile(0.99)),
			PooledP50: stats.Micros(s[i].percentile(0.50)), PooledP99: stats.Micros(s[i].percentile(0.99)),
		}
		if f, ok := s[i].cost.foreign(); ok {
			ts.Foreign = &f
		}
		if s[i].firstErr != nil {
			ts.FirstError = s[i].firstErr.Error()
		}
		ts.setCost(s[i], i)
		switch {
		case i == 1:
			ts.setAdded(&row.Targets[0], nil)
		case i > 1:
			ts.setAdded(&row.Targets[0], &row.Targets[1])
		}
		row.Targets = append(row.Targets, ts)
	}
	if b := slices.Index(names, baseline); b >= 0 {
		for i, name := range names {
			if strings.HasPrefix(name, baseline+"+") {
				row.Against = append(row.Against, compare(name, s[i], s[b]))
			}
		}
	}
	rep.Latency = append(rep.Latency, row)
}

// ratio is a/b, or nil when b is no added latency at all.
func ratio(a, b float64) *float64 {
	if b <= 0 {
		return nil
	}
	r := a / b
	return &r
}

func (rep *report) markdown(w io.Writer) {
	fmt.Fprintf(w, "`%s` (%s, GOMAXPROCS %d, %.0f s)\n\n", rep.Command, rep.Go, rep.GOMAXPROCS, rep.Seconds)
	rep.latencyTable(w)
	fmt.Fprintf(w, "\nAdded = the target's percentile minus direct's; ratio = the gateway's added over the bare proxy's (goal: at most 1.10).\n"+
		"Latency is the whole response (full) or, streaming, the first body byte (ttfb); each percentile is the median over the rounds\n"+
		"of the round's percentile (the pooled ones are in --json).\n")
	rep.againstTable(w)
	rep.costTable(w)
	rep.countTable(w)
	if len(rep.MaxRate) > 0 {
		rep.maxTable(w)
	}
}

func (rep *report) latencyTable(w io.Writer) {
	head := []string{"phase", "metric", "direct p50", "direct p99", "proxy +p50", "proxy +p99"}
	for _, name := range rep.Targets[2:] {
		head = append(head, name+" +p50", name+" +p99", "ratio p50", "ratio p99")
	}
	tableRow(w, head...)
	tableRule(w, len(head))
	for _, row := range rep.Latency {
		d, p := row.Targets[0], row.Targets[1]
		cells := []string{row.Phase, row.Metric, us(d.P50), us(d.P99), added(p.AddedP50), added(p.AddedP99)}
		for _, g := range row.Targets[2:] {
			cells = append(cells, added(g.AddedP50), added(g.AddedP99), ratioCell(g.RatioP50), ratioCell(g.RatioP99))
		}
		tableRow(w, cells...)
	}
}

// againstTable says whether each gateway+X target's latency differs from
// the gateway's beyond the noise.
func (rep *report) againstTable(w io.Writer) {
	var rows []latencyRow
	for _, row := range rep.Latency {
		if len(row.Against) > 0 {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n")
	head := []string{"phase", "metric", "target", "rounds", "p50 vs " + baseline, "p99 vs " + baseline}
	tableRow(w, head...)
	tableRule(w, len(head))
	for _, row := range rows {
		for _, c := range row.Against {
			tableRow(w, row.Phase, row.Metric, c.Target, fmt.Sprint(c.Rounds),
				against(c.DeltaP50, c.ChangeP50, c.PP50), against(c.DeltaP99, c.ChangeP99, c.PP99))
		}
	}
	fmt.Fprintf(w, "\nEach cell is the difference of the medians over the rounds of each round's percentile, and the p-value of the\n"+
		"Mann–Whitney U test of the rounds' percentiles, as benchstat reports: ~ is within the noise (p ≥ %.2f).\n", alpha)
}

// against is one cell of againstTable.
func against(delta, change, p float64) string {
	verdict := "~"
	if p < alpha {
		verdict = fmt.Sprintf("%+.0f%%", 100*change)
	}
	return fmt.Sprintf("%+.1f µs, %s (p=%.2f)", delta, verdict, p)
}

// costTable shows the process's CPU time and allocations per request,
// which a noisy machine disturbs far less than latency.
func (rep *report) costTable(w io.Writer) {
	fmt.Fprintf(w, "\n")
	if rep.Deployed {
		rep.cpuTable(w)
		return
	}
	head := []string{"phase", "metric", "direct CPU/req", "proxy +CPU", "direct allocs/req", "proxy +allocs", "proxy +bytes"}
	for _, name := range rep.Targets[2:] {
		head = append(head, name+" +CPU", "ratio CPU", name+" +allocs", name+" +bytes", "ratio allocs")
	}
	tableRow(w, head...)
	tableRule(w, len(head))
	for _, row := range rep.Latency {
		d, p := row.Targets[0], row.Targets[1]
		cells := []string{row.Phase, row.Metric, opt(d.CPU, "%.1f µs"), added(p.AddedCPU),
			fmt.Sprintf("%.1f", d.Allocs), num(p.AddedAllocs, "%+.1f"), num(p.AddedBytes, "%+.0f B")}
		for _, g := range row.Targets[2:] {
			cells = append(cells, added(g.AddedCPU), ratioCell(g.RatioCPU),
				num(g.AddedAllocs, "%+.1f"), num(g.AddedBytes, "%+.0f B"), ratioCell(g.RatioAllocs))
		}
		tableRow(w, cells...)
	}
	fmt.Fprintf(w, "\nCPU and allocations are the whole process's (client, upstream and target) while one target was driven; +X is over direct.\n")
}

// cpuTable is costTable for targets in processes of their own, whose
// allocations this process cannot see: CPU time only, every process's.
func (rep *report) cpuTable(w io.Writer) {
	head := []string{"phase", "metric", "direct CPU/req", "proxy +CPU", "proxy own"}
	for _, name := range rep.Targets[2:] {
		head = append(head, name+" +CPU", "ratio CPU", "own")
	}
	tableRow(w, head...)
	tableRule(w, len(head))
	for _, row := range rep.Latency {
		d, p := row.Targets[0], row.Targets[1]
		cells := []string{row.Phase, row.Metric, opt(d.CPU, "%.1f µs"), added(p.AddedCPU), opt(p.OwnCPU, "%.1f µs")}
		for _, g := range row.Targets[2:] {
			cells = append(cells, added(g.AddedCPU), ratioCell(g.RatioCPU), opt(g.OwnCPU, "%.1f µs"))
		}
		tableRow(w, cells...)
	}
	fmt.Fprintf(w, "\nCPU is every process's (the client, the upstream, the target and its journal writer) while one target was driven,\n"+
		"from /proc's schedstat (this process's own in 10 ms ticks); +CPU is over direct; own is the target's own process's alone (with its journal writer).\n")
}

// countTable shows what the latencies leave out: failed, dropped and late
// requests. All zero but late is a clean run.
func (rep *report) countTable(w io.Writer) {
	fmt.Fprintf(w, "\n")
	head := []string{"phase", "metric"}
	for _, name := range rep.Targets {
		head = append(head, name+" n / err / drop / late / other CPU")
	}
	tableRow(w, head...)
	tableRule(w, len(head))
	var firstErrs []string
	worst := 0.0
	for _, row := range rep.Latency {
		cells := []string{row.Phase, row.Metric}
		for _, t := range row.Targets {
			cells = append(cells, fmt.Sprintf("%d / %d / %d / %d / %s", t.N, t.Errors, t.Dropped, t.Late, pct(t.Foreign)))
			if t.Foreign != nil && *t.Foreign > worst {
				worst = *t.Foreign
			}
			if t.FirstError != "" {
				firstErrs = append(firstErrs, fmt.Sprintf("%s %s %s: %s", row.Phase, row.Metric, t.Name, t.FirstError))
			}
		}
		tableRow(w, cells...)
	}
	fmt.Fprintf(w, "\nLate: an open-loop send more than --late behind its schedule. Other CPU: the share of the machine's CPU\n"+
		"that other processes used while the target ran, over the rounds kept (up to %.0f%% in a phase).\n"+
		"%d rounds (and max-rate steps) were run again because other processes used more than --max-other.\n", 100*min(worst, 1), rep.Redone)
	if rep.Kept > 0 {
		fmt.Fprintf(w, "\n**%d disturbed rounds were kept because a phase's --redo-budget was spent: run again on a quieter machine.**\n", rep.Kept)
	}
	for _, e := range firstErrs {
		fmt.Fprintf(w, "\nfirst error: %s\n", e)
	}
}

func (rep *report) maxTable(w io.Writer) {
	fmt.Fprintf(w, "\n")
	head := []string{"target", "max sustained req/s", "failed at", "why"}
	if len(rep.MaxRateStream) > 0 {
		head = append(head, "max streaming req/s", "failed at", "why")
	}
	tableRow(w, head...)
	tableRule(w, len(head))
	for i, m := range rep.MaxRate {
		cells := maxCells(m)
		if len(rep.MaxRateStream) > 0 {
			cells = append(cells, maxCells(rep.MaxRateStream[i])[1:]...)
		}
		tableRow(w, cells...)
	}
	fmt.Fprintf(w, "\nA step passes with at most 0.1%% errors, 95%% of its rate achieved and p99 within the --max-p99 bound.\n")
}

func maxCells(m maxResult) []string {
	failed, why := "—", "passed every step"
	if m.FailedAt > 0 {
		failed, why = fmt.Sprintf("%g", m.FailedAt), m.Reason
	}
	return []string{m.Target, fmt.Sprintf("%g", m.Max), failed, why}
}

func tableRow(w io.Writer, cells ...string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

func tableRule(w io.Writer, n int) {
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", n))
}

func us(v float64) string { return fmt.Sprintf("%.1f µs", v) }

func added(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%+.1f µs", *v)
}

func pct(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.0f%%", 100*min(*v, 1)) // ticks make short rounds overshoot
}

func opt(v *float64, format string) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf(format, *v)
}

func num(v *float64, format string) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf(format, *v)
}

func ratioCell(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", *v)
}
