package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		args  []string
		usage bool                    // a usage error, exit 2
		check func(c config) []string // what else must hold
	}{
		// The default scenario is the issue's.
		{"defaults", nil, false, func(c config) []string {
			s := c.Scenario
			return want(s.Slots == 80 && s.Rate == 20 && s.Clients == 100 && s.Deadline == time.Minute && c.Seeds == 10,
				"defaults differ from the issue's scenario")
		}},
		// The LLM-like service keeps the default's utilization unless
		// -rate is given, or the provider is overloaded without an outage.
		{"llm scales the rate", []string{"-service", "llm"}, false, func(c config) []string {
			u := c.Scenario.Rate / c.Scenario.Capacity()
			d := defaultScenario()
			return want(c.Scenario.Median == 8*time.Second && abs(u-d.Rate/d.Capacity()) < 1e-9, "utilization not kept")
		}},
		{"llm with a rate", []string{"-service", "llm", "-rate", "20"}, false, func(c config) []string {
			return want(c.Scenario.Rate == 20, "an explicit -rate was overridden")
		}},
		// The storm shape's rejections cost a quarter of the median
		// service; the other shapes' cost nothing.
		{"storm", []string{"-shape", "storm"}, false, func(c config) []string {
			return want(c.Scenario.rejectionCost() == c.Scenario.Median/4, "a storm rejection does not cost median/4")
		}},
		{"down rejections are free", nil, false, func(c config) []string {
			return want(c.Scenario.rejectionCost() == 0, "a down rejection costs a slot")
		}},
		// No fallback provider unless asked for; with one, K/2 slots.
		{"no fallback by default", nil, false, func(c config) []string {
			return want(!c.Scenario.Fallback && c.Scenario.FallbackSlots() == 0, "a fallback provider by default")
		}},
		{"fallback", []string{"--fallback"}, false, func(c config) []string {
			return want(c.Scenario.Fallback && c.Scenario.FallbackSlots() == 40, "--fallback does not give a fallback of K/2 = 40 slots")
		}},
		// Bad values are usage errors, so main exits 2.
		{"unknown shape", []string{"-shape", "meteor"}, true, nil},
		{"fractional Retry-After", []string{"-retry-after", "1.5s"}, true, nil},
		{"unknown flag", []string{"-nope"}, true, nil},
		{"stray argument", []string{"extra"}, true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseConfig(c.args, io.Discard)
			if isUsage := errors.As(err, new(usageError)); isUsage != c.usage {
				t.Fatalf("parseConfig(%q): err %v, want usage error %v", c.args, err, c.usage)
			}
			if err == nil && c.check != nil {
				for _, msg := range c.check(got) {
					t.Error(msg)
				}
			}
		})
	}
}

func want(ok bool, msg string) []string {
	if ok {
		return nil
	}
	return []string{msg}
}

func abs(x float64) float64 { return max(x, -x) }

// TestAttemptBudget pins the budget the tuned peers get: under a 60 s
// deadline, waits 2, 4, 8, 16, 16 s of fast failures fit with the 10 s
// reserve left, a sixth wait does not.
func TestAttemptBudget(t *testing.T) {
	t.Parallel()
	cases := []struct {
		deadline time.Duration
		want     int
	}{
		{60 * time.Second, 6},
		{20 * time.Second, 3}, // waits 2 and 4 s fit; 8 s would leave less than 10 s
	}
	for _, c := range cases {
		sc := defaultScenario()
		sc.Deadline = c.deadline
		if got := attemptBudget(&sc, outlastPolicy(&sc)); got != c.want {
			t.Errorf("deadline %v: budget %d, want %d", c.deadline, got, c.want)
		}
	}
}

// TestChart checks that the chart is well-formed SVG with a panel per
// policy.
func TestChart(t *testing.T) {
	t.Parallel()
	sc := defaultScenario()
	end := sc.Duration + sc.Deadline
	runs := map[string][]simRun{oracleName: {simulateOracle(&sc, 1)}}
	order := []policy{{Name: oracleName}}
	rep := &report{Scenario: sc.json(), Capacity: sc.Capacity(), Seeds: []uint64{1},
		Policies: summarizeRuns(&sc, order, runs, end), SeriesEnd: end}
	var buf bytes.Buffer
	if err := rep.chart(&buf); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&buf)
	paths := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "path" {
			paths++
		}
	}
	if want := 3; paths != want { // axes, all attempts, admitted
		t.Errorf("got %d paths for one panel, want %d", paths, want)
	}
}
