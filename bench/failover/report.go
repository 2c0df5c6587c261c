package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// key names a cell: a configuration's column and a scenario's row.
type key struct {
	config string
	n      int
}

// A report is a run's cells and how it went.
type report struct {
	scenarios []scenario
	configs   []configuration
	cells     map[key]cell
	command   string        // the command that wrote it
	took      time.Duration // the whole run
}

// section is the doc's section: it names the markers in
// docs/reliability.md.
const section = "failover"

// intro says what the table measures, before it.
const intro = `Each row is a fault at the primary upstream, for one streamed OpenAI chat completion (twenty, 4 s apart, in scenario 15), sent through ` + "`outlast serve`" + ` as a new user runs it: the default settings, and a config file that gives only two upstreams, each a ` + "`mockllm`" + ` server of 60 content chunks run in the suite's process, the primary's ` + "`fallbacks: [fallback]`" + `, the fallback's ` + "`models: {gpt-4o: gpt-4o-fallback}`" + ` and a journal. Each configuration is a column: serve with those defaults and the flags it names. The client sends the headers the ` + "`openai`" + ` npm package %s sends (no X-Stainless-Timeout; ` + "`@anthropic-ai/sdk`" + ` %s sends ` + "`X-Stainless-Timeout: %s`" + `), asks for usage, and makes no retries of its own.

A cell is **pass** when the caller gets the whole answer (the 60-chunk text, finish_reason stop and, but in scenario 11, ` + "`data: [DONE]`" + `) within %.0f s of the request's start (%.0f s in scenario %d), after at most %d attempts at the primary and at most %d in the %.1f s after its first there; scenario 13 passes on the upstream's 400, body unchanged, after one attempt at the primary and none at the fallback; scenario 16 also needs the fallback's model and a usage chunk; scenario 15 needs all twenty. A pass also needs every check of how the answer was got, as the public benchmark checks them: at most %d attempts at the primary in any %.1f s, and %s. A cell that has the answer but fails a check is **partial**. It is **safe** when it is no pass or partial but the caller sees a bounded, clean error in time: an HTTP error status, an error event, or a connection that breaks. It is **fail** otherwise: a truncated answer that ends as if complete, the budget exceeded, or too many attempts at the primary. In scenario 10 the client skips the one event it cannot parse and counts it, where the ` + "`openai`" + ` package would throw.

A cell gives the time to the answer or the error, the status with the gateway's ` + "`Outlast-Error`" + ` kind, the attempts at the primary (in its first 1.5 s) and at the fallback, then why it is not a pass. The attempts are the gateway's record of each request, with the connections the primary refused; with one request, those that reached a mock are the mock's own count.`

// markdown writes the section: the introduction, the table, the summary
// and the command.
func (rep report) markdown(w io.Writer) {
	long := longest()
	fmt.Fprintf(w, intro+"\n\n", header(openAIHeaders, "User-Agent")[len("OpenAI/JS "):],
		header(anthropicHeaders, "User-Agent")[len("Anthropic/JS "):], header(anthropicHeaders, "X-Stainless-Timeout"),
		budget.Seconds(), long.limit().Seconds(), long.n, maxAttempts, maxEarly, earlyWindow.Seconds(),
		maxEarly, earlyWindow.Seconds(), checksText())
	fmt.Fprint(w, "| # | scenario | primary | fallback |")
	for _, cfg := range rep.configs {
		fmt.Fprintf(w, " %s |", cfg.name)
	}
	fmt.Fprint(w, "\n|--:|---|---|---|")
	for range rep.configs {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, sc := range rep.scenarios {
		fmt.Fprintf(w, "| %d | %s | `%s` | `%s` |", sc.n, sc.name, sc.primaryShown(), sc.fallback)
		for _, cfg := range rep.configs {
			c, ok := rep.cells[key{cfg.name, sc.n}]
			if !ok {
				fmt.Fprint(w, " — |")
				continue
			}
			fmt.Fprintf(w, " **%s**: %s |", c.outcome(), details(c))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	for _, cfg := range rep.configs {
		fmt.Fprintf(w, "%s\n", rep.summary(cfg))
	}
	fmt.Fprintf(w, "\nWritten by `%s`; the run took %v.\n", rep.command, rep.took.Round(time.Second))
}

// checksText lists each scenario's own checks, for the introduction: "in
// scenario 1, at least 2 attempts at the primary, …; in scenario 3, …".
func checksText() string {
	var parts []string
	for _, sc := range scenarios {
		if len(sc.checks) == 0 {
			continue
		}
		names := make([]string, len(sc.checks))
		for i, c := range sc.checks {
			names[i] = c.name
		}
		parts = append(parts, fmt.Sprintf("in scenario %d, %s", sc.n, strings.Join(names, ", ")))
	}
	return strings.Join(parts, "; ")
}

// longest returns the scenario with the longest budget.
func longest() scenario {
	long := scenarios[0]
	for _, sc := range scenarios {
		if sc.limit() > long.limit() {
			long = sc
		}
	}
	return long
}

// header returns the value of name in a captured header set.
func header(set [][2]string, name string) string {
	for _, h := range set {
		if h[0] == name {
			return h[1]
		}
	}
	return ""
}

// summary counts a configuration's outcomes, in one line.
func (rep report) summary(cfg configuration) string {
	var n [len(outcomeNames)]int
	for _, sc := range rep.scenarios {
		if c, ok := rep.cells[key{cfg.name, sc.n}]; ok {
			n[c.outcome()]++
		}
	}
	return fmt.Sprintf("%s: %d pass, %d partial, %d safe, %d fail.", cfg.name, n[pass], n[partial], n[safe], n[fail])
}

// details says why a cell scored as it did.
func details(c cell) string {
	var parts []string
	if len(c.results) == 1 {
		parts = requestDetails(c.results[0], c.attempts[0], c.verdicts[0])
	} else {
		parts = manyDetails(c)
	}
	if c.note != "" {
		parts = append(parts, c.note)
	}
	return strings.Join(parts, " · ")
}

// requestDetails are one request's figures, and why it did not pass.
func requestDetails(r result, a attempts, v verdict) []string {
	parts := []string{seconds(r.elapsed), status(r),
		fmt.Sprintf("primary %d (%d in 1.5 s)", len(a.primary), a.early()),
		fmt.Sprintf("fallback %d", a.fallback)}
	if r.malformed > 0 {
		parts = append(parts, fmt.Sprintf("%d malformed event skipped", r.malformed))
	}
	if v.outcome != pass {
		parts = append(parts, v.why)
	}
	return parts
}

// manyDetails sums up a cell of several requests: the count of each
// outcome, the slowest, the most attempts at the primary, and the first
// request that did not pass.
func manyDetails(c cell) []string {
	var n [len(outcomeNames)]int
	var slowest time.Duration
	most, mostEarly, fallback := 0, 0, 0
	first := -1
	for i, v := range c.verdicts {
		n[v.outcome]++
		slowest = max(slowest, c.results[i].elapsed)
		most, mostEarly = max(most, len(c.attempts[i].primary)), max(mostEarly, c.attempts[i].early())
		fallback += c.attempts[i].fallback
		if v.outcome != pass && first < 0 {
			first = i
		}
	}
	parts := []string{
		fmt.Sprintf("%d requests: %d pass, %d partial, %d safe, %d fail", len(c.verdicts), n[pass], n[partial], n[safe], n[fail]),
		"slowest " + seconds(slowest),
		fmt.Sprintf("primary at most %d a request (%d in 1.5 s)", most, mostEarly),
		fmt.Sprintf("fallback %d in all", fallback),
	}
	if first >= 0 {
		r := c.results[first]
		parts = append(parts, fmt.Sprintf("request %d: %s, %s, %s", first+1, seconds(r.elapsed), status(r), c.verdicts[first].why))
	}
	return parts
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// status is the response's status, with the gateway's Outlast-Error kind.
func status(r result) string {
	switch {
	case r.status == 0:
		return "no response"
	case r.kind != "" && r.status != 200:
		return fmt.Sprintf("%d %s", r.status, r.kind)
	}
	return strconv.Itoa(r.status)
}

// outcomes returns the report's outcome per cell.
func (rep report) outcomes() map[key]outcome {
	out := make(map[key]outcome, len(rep.cells))
	for k, c := range rep.cells {
		out[k] = c.outcome()
	}
	return out
}

// parseOutcomes reads the outcomes from a section that markdown wrote:
// the table's configuration columns, whose cells begin with the outcome
// in bold.
func parseOutcomes(body string) (map[key]outcome, error) {
	var configs []string
	out := map[key]outcome{}
	for _, line := range strings.Split(body, "\n") {
		cells := splitRow(line)
		switch {
		case len(cells) < 5:
		case cells[0] == "#":
			configs = cells[4:]
		default:
			n, err := strconv.Atoi(cells[0])
			if err != nil || configs == nil {
				continue
			}
			for i, text := range cells[4:] {
				if i >= len(configs) || text == "—" {
					continue
				}
				name, _, _ := strings.Cut(strings.TrimPrefix(text, "**"), "**")
				o, ok := parseOutcome(name)
				if !ok {
					return nil, fmt.Errorf("scenario %d, %s: %q is not an outcome", n, configs[i], name)
				}
				out[key{configs[i], n}] = o
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no table of outcomes")
	}
	return out, nil
}

// splitRow returns the cells of a markdown table row, trimmed, or nil for
// another line.
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
		return nil
	}
	cells := strings.Split(line[1:len(line)-1], "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// differences lists the cells whose outcome the run and the doc do not
// share, in table order, for the cells the run has.
func differences(got, want map[key]outcome) []string {
	keys := make([]key, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.n != b.n {
			return a.n - b.n
		}
		return strings.Compare(a.config, b.config)
	})
	var out []string
	for _, k := range keys {
		w, ok := want[k]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("scenario %d, %s: %s, and the doc has no outcome", k.n, k.config, got[k]))
		case w != got[k]:
			out = append(out, fmt.Sprintf("scenario %d, %s: %s, the doc says %s", k.n, k.config, got[k], w))
		}
	}
	return out
}
