package main

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// cellOf is a one-request cell of scenario n with the outcome o.
func cellOf(t *testing.T, n int, o outcome) cell {
	t.Helper()
	r := whole()
	if o != pass {
		r = result{elapsed: time.Second, status: 503, kind: "upstream-down"}
	}
	v := verdict{o, ""}
	if o != pass {
		v.why = "an error status"
	}
	return cell{sc: scenarioN(t, n), results: []result{r}, attempts: []attempts{tries(0, 0)}, verdicts: []verdict{v}}
}

// The outcomes the table shows are the ones --check reads back, in every
// configuration's column, with a dash where a configuration does not run
// a scenario.
func TestOutcomesRoundTrip(t *testing.T) {
	t.Parallel()
	rep := report{
		scenarios: []scenario{scenarioN(t, 1), scenarioN(t, 8), scenarioN(t, 13)},
		configs:   []configuration{{name: "defaults"}, {name: "prefill", flags: []string{"--continuation", "prefill"}, only: []int{8}}},
		cells: map[key]cell{
			{"defaults", 1}:  cellOf(t, 1, pass),
			{"defaults", 8}:  cellOf(t, 8, safe),
			{"defaults", 13}: cellOf(t, 13, fail),
			{"prefill", 8}:   cellOf(t, 8, pass),
		},
		command: "cd bench && go run ./failover", took: 2 * time.Minute,
	}
	var b strings.Builder
	rep.markdown(&b)
	got, err := parseOutcomes(b.String())
	if err != nil {
		t.Fatal(err)
	}
	if want := rep.outcomes(); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, line := range []string{
		"| 8 | stream cut (reset) after 40 of 60 tokens, once | `reset-after=40,ok` | `ok` | **safe**: 1.0 s · 503 upstream-down · primary 1 (1 in 1.5 s) · fallback 0 · an error status | **pass**: 2.0 s · 200 · primary 1 (1 in 1.5 s) · fallback 0 |",
		"| 13 | 400 `content_policy_violation` |",
		"defaults: 1 pass, 0 partial, 1 safe, 1 fail.",
		"prefill: 1 pass, 0 partial, 0 safe, 0 fail.",
		"Written by `cd bench && go run ./failover`; the run took 2m0s.",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("the section lacks %q:\n%s", line, b.String())
		}
	}
}

// A section with no table, or a cell that is no outcome, is an error.
func TestParseOutcomesErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body, want string }{
		// An empty section: nothing to compare against.
		{"empty", "\n", "no table"},
		// A cell edited by hand into something else.
		{"bad cell", "| # | scenario | primary | fallback | defaults |\n|--:|---|---|---|---|\n| 1 | x | `a` | `b` | **great**: 1 s |\n", `scenario 1, defaults: "great"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := parseOutcomes(tc.body); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// --check names every cell whose outcome changed, and every cell the doc
// lacks, and nothing else.
func TestDifferences(t *testing.T) {
	t.Parallel()
	got := map[key]outcome{{"defaults", 1}: pass, {"defaults", 2}: safe, {"prefill", 8}: pass, {"defaults", 8}: fail}
	want := map[key]outcome{{"defaults", 1}: pass, {"defaults", 2}: fail, {"defaults", 8}: fail, {"defaults", 9}: safe}
	d := differences(got, want)
	wantD := []string{
		"scenario 2, defaults: safe, the doc says fail",
		"scenario 8, prefill: pass, and the doc has no outcome",
	}
	if !reflect.DeepEqual(d, wantD) {
		t.Errorf("got %q, want %q", d, wantD)
	}
}
