package cli

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var (
	timePrefix = regexp.MustCompile(`^\s*\d+\.\d\ds  `)
	durations  = regexp.MustCompile(`\d+(\.\d+)?(ms|s)\b`)
	numbers    = regexp.MustCompile(`([\s(:])\d+\b`)
)

// TestDemoGolden runs the demo as CI does, without a terminal, and checks
// its structure against testdata/demo.golden: the introduction, how each
// run starts and ends, and the summary, with times and counts masked,
// since they move with the machine's load. Run with -update to rewrite it.
func TestDemoGolden(t *testing.T) {
	var out bytes.Buffer
	if err := runDemo(context.Background(), nil, &out, io.Discard); err != nil {
		t.Fatalf("the demo failed: %v\n%s", err, out.String())
	}
	got := demoStructure(t, out.String())
	const golden = "testdata/demo.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("the demo's structure changed (run with -update if on purpose):\ngot:\n%s\nwant:\n%s", got, want)
	}
}

// demoStructure keeps the lines that say what happened, masked, and checks
// that each run's events come in an order that makes sense.
func demoStructure(t *testing.T, out string) string {
	t.Helper()
	var b strings.Builder
	events := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		if timePrefix.MatchString(line) {
			fields := strings.Fields(timePrefix.ReplaceAllString(line, ""))
			run, msg := fields[0], strings.Join(fields[1:], " ")
			events[run] = append(events[run], msg)
			continue
		}
		b.WriteString(mask(line) + "\n")
	}
	runs := make([]string, 0, len(events))
	for _, r := range demoRuns() {
		evs := events[r.name]
		checkRunEvents(t, r.name, evs)
		runs = append(runs, r.name+": "+mask(evs[0])+" … "+mask(evs[len(evs)-1]))
	}
	return strings.Join(runs, "\n") + "\n" + b.String()
}

// A run starts; then each attempt may queue, is sent, and gets an answer
// that is retried (a wait) or is the last; then the run ends. A refused
// run ends at once.
var runGrammar = regexp.MustCompile(`^S(Q?NW)*(Q?NA)?E$`)

func checkRunEvents(t *testing.T, run string, evs []string) {
	t.Helper()
	var tokens strings.Builder
	for _, e := range evs {
		switch {
		case strings.HasPrefix(e, "starts"):
			tokens.WriteByte('S')
		case strings.HasPrefix(e, "queued"):
			tokens.WriteByte('Q')
		case strings.HasSuffix(e, " sent"):
			tokens.WriteByte('N')
		case strings.Contains(e, "retrying in"):
			tokens.WriteByte('W')
		case strings.HasPrefix(e, "attempt "):
			tokens.WriteByte('A')
		case strings.HasPrefix(e, "ends:"):
			tokens.WriteByte('E')
		default:
			tokens.WriteByte('?')
		}
	}
	if !runGrammar.MatchString(tokens.String()) {
		t.Errorf("run %s: events out of order (%s):\n%s", run, tokens.String(), strings.Join(evs, "\n"))
	}
}

var (
	spaces = regexp.MustCompile(` {2,}`)
	// lastFailure is a failed run's last status: which failure of the
	// outage a run with too short a deadline meets last depends on when,
	// to the millisecond, its last attempt reaches the mock.
	lastFailure = regexp.MustCompile(`<n> [A-Z][A-Za-z ]+ after <n> attempts: the deadline`)
)

// mask hides times and counts, which move with the machine's load, the
// last status of a run that fails, which moves with them, and the table's
// padding.
func mask(s string) string {
	s = durations.ReplaceAllString(s, "<d>")
	s = numbers.ReplaceAllString(s, "${1}<n>")
	s = lastFailure.ReplaceAllString(s, "<status> after <n> attempts: the deadline")
	return strings.TrimRight(spaces.ReplaceAllString(s, "  "), " ")
}
