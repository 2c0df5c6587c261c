package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// fakeRun is a report of one latency row with the proxy adding proxyAdded
// µs at p50 and p99, and the gateway and the journal target the ratios
// given, and one max-rate result per target.
func fakeRun(proxyAdded float64, gw, journal [2]float64, maxes ...float64) *report {
	pa := proxyAdded
	r := func(v float64) *float64 { return &v }
	rep := &report{Go: "go1.x", Latency: []latencyRow{{
		Phase: "sequential", Metric: "full",
		Targets: []targetStats{
			{Name: "direct"},
			{Name: "proxy", AddedP50: &pa, AddedP99: &pa},
			{Name: "gateway", RatioP50: r(gw[0]), RatioP99: r(gw[1])},
			{Name: "gateway+journal", RatioP50: r(journal[0]), RatioP99: r(journal[1])},
		},
	}}}
	for i, name := range []string{"proxy", "gateway"} {
		if i < len(maxes) {
			rep.MaxRate = append(rep.MaxRate, maxResult{Target: name, Max: maxes[i]})
		}
	}
	return rep
}

// Over runs, each gateway target's ratios are reported as their range,
// and a run meets the goal only when both its ratios are within it: 1.10
// for the gateway, 1.25 for the gateway writing its journal.
func TestSummarize(t *testing.T) {
	rr := summarize("load --runs 3", []*report{
		fakeRun(250, [2]float64{1.05, 0.98}, [2]float64{1.20, 1.25}, 8000, 7000),
		fakeRun(270, [2]float64{1.12, 1.00}, [2]float64{1.26, 1.00}, 7000, 7000),
		fakeRun(230, [2]float64{1.10, 1.11}, [2]float64{1.01, 1.10}, 8000, 6000),
	})
	if len(rr.Summary) != 2 {
		t.Fatalf("got %d summary rows, want 2 (gateway, gateway+journal)", len(rr.Summary))
	}
	for _, c := range []struct {
		target     string
		goal       float64
		p50, p99   span
		met, proxy int
	}{
		{"gateway", 1.10, span{1.05, 1.12}, span{0.98, 1.11}, 1, 0}, // run 2's p50 and run 3's p99 are over
		{"gateway+journal", 1.25, span{1.01, 1.26}, span{1.00, 1.25}, 2, 0},
	} {
		i := 0
		if c.target != "gateway" {
			i = 1
		}
		s := rr.Summary[i]
		if s.Target != c.target || s.Goal != c.goal || s.RatioP50 != c.p50 || s.RatioP99 != c.p99 || s.Met != c.met || s.Runs != 3 {
			t.Errorf("%s: got %+v; want goal %.2f, ratios %v and %v, %d of 3 within", c.target, s, c.goal, c.p50, c.p99, c.met)
		}
		if s.ProxyP50 != (span{230, 270}) {
			t.Errorf("%s: the proxy added %v, want 230 to 270", c.target, s.ProxyP50)
		}
	}
	if len(rr.MaxRate) != 2 || rr.MaxRate[1].Max != (span{6000, 7000}) || rr.MaxRate[1].Proxy != 1 {
		t.Errorf("max rates: got %+v; want the gateway at 6000 to 7000, the proxy's in 1 run of 3", rr.MaxRate)
	}
	var md bytes.Buffer
	rr.markdown(&md)
	for _, want := range []string{
		"| sequential | full | 230–270 µs / 230–270 µs | gateway | 1.05–1.12 | 0.98–1.11 | 1 of 3 (≤ 1.10) |",
		"| sequential | full | gateway | 1.05 / 0.98 | 1.12 / 1.00 | 1.10 / 1.11 |",
		"| gateway | 6000–7000 | 1 of 3 |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the markdown lacks %q:\n%s", want, md.String())
		}
	}
}

// A run whose proxy added nothing has no ratios: it does not meet the
// goal, and its missing ratios are not in the ranges.
func TestSummarizeWithoutRatios(t *testing.T) {
	none := fakeRun(0, [2]float64{}, [2]float64{})
	for i := range none.Latency[0].Targets {
		none.Latency[0].Targets[i].RatioP50, none.Latency[0].Targets[i].RatioP99 = nil, nil
	}
	rr := summarize("load --runs 2", []*report{none, fakeRun(250, [2]float64{1.0, 1.0}, [2]float64{1.0, 1.0})})
	s := rr.Summary[0]
	if s.Met != 1 || s.Runs != 2 || s.RatioP50 != (span{1, 1}) || s.ProxyP50 != (span{0, 250}) {
		t.Errorf("got %+v; want 1 of 2 within, ratio 1.00 alone", s)
	}
	if _, err := json.Marshal(rr); err != nil {
		t.Errorf("the report does not encode: %v", err)
	}
}

// --runs takes a count of 1 or more, and not with the profiles, which
// are of one run.
func TestRunsFlag(t *testing.T) {
	for _, args := range [][]string{
		{"--runs", "0"},
		{"--runs", "2", "--cpuprofile", "x"},
		{"--runs", "2", "--memprofile", "x"},
	} {
		var stderr bytes.Buffer
		if _, err := parseConfig(args, &stderr); err == nil {
			t.Errorf("%q: got no error", args)
		}
	}
	c, err := parseConfig(nil, &bytes.Buffer{})
	if err != nil || c.Runs != 1 {
		t.Errorf("defaults: got --runs %d (%v), want 1", c.Runs, err)
	}
}

// --runs 2 runs everything twice, with targets started afresh, and
// reports both runs and their summary.
func TestSmokeRuns(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	args := append(append([]string(nil), tiny...), "--runs", "2", "--gate-slots", "0", "--journal=false")
	if err := run(t.Context(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v; stderr: %s", err, stderr.String())
	}
	var rr runsReport
	if err := json.Unmarshal(stdout.Bytes(), &rr); err != nil {
		t.Fatalf("decoding the report: %v\n%s", err, stdout.String())
	}
	if len(rr.Runs) != 2 || len(rr.Summary) != 4 {
		t.Fatalf("got %d runs and %d summary rows; want 2 runs, 4 rows (the gateway in two phases, two modes)", len(rr.Runs), len(rr.Summary))
	}
	for _, s := range rr.Summary {
		if s.Target != "gateway" || s.Runs != 2 || len(s.Each) != 2 {
			t.Errorf("%s %s: got %+v; want the gateway over 2 runs", s.Phase, s.Metric, s)
		}
	}
	if !strings.Contains(stderr.String(), "run 2 of 2") {
		t.Errorf("stderr does not say which run: %s", stderr.String())
	}
}
