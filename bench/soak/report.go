package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/outlast-llm/outlast/bench/internal/cmdline"
)

// report is a run's figures and checks, as JSON or as markdown.
type report struct {
	Command     string    `json:"command"`
	Go          string    `json:"go"`
	GOMAXPROCS  int       `json:"gomaxprocs"`
	NumCPU      int       `json:"num_cpu"`
	Callers     int       `json:"callers"`
	StreamShare float64   `json:"stream_share"`
	MaxConns    int       `json:"max_conns"`
	FaultRate   float64   `json:"fault_rate"`
	Phases      []figures `json:"phases"`
	Checks      []check   `json:"checks"`
}

// markdown writes the report as the soak section of docs/reliability.md
// reads it: the command, the table, and the checks.
func (r *report) markdown(w io.Writer) {
	fmt.Fprintf(w, "`%s` (%s, GOMAXPROCS %d, %d CPUs): %d callers, each one request at a time, %.0f %% of them streams, "+
		"through the gateway as `outlast serve` assembles and serves it (`server.New`, `Serve`, its SQLite journal written inline, "+
		"`--max-conns %d`, since each caller holds a connection; serve's default is 1,024), "+
		"retrying after %s (%d attempts at most), to a fake upstream where %.0f %% of attempts fail: "+
		"503, 429 with `Retry-After: 1`, 529, a reset, a close before the first byte, or a stream's opening error event.\n\n",
		r.Command, r.Go, r.GOMAXPROCS, r.NumCPU, r.Callers, r.StreamShare*100, r.MaxConns,
		waitList(), len(waits)+1, r.FaultRate*100)
	fmt.Fprintln(w, "| slots | queue | time | requests | completions | busy | failed after the last retry | upstream attempts | requests/s | completions/s | gate wait p50 | gate wait p99 | end-to-end p50 | end-to-end p99 | peak RSS |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, p := range r.Phases {
		fmt.Fprintf(w, "| %d | %d | %.1f s | %d | %d | %d | %d | %d | %.0f | %.0f | %s | %s | %s | %s | %s |\n",
			p.Slots, p.Queue, p.Seconds, p.Requests, p.OK, p.Busy, p.Failed, p.Attempts, p.PerSecond, p.OKPerSecond,
			ms(p.GateWaitP50), ms(p.GateWaitP99), ms(p.EndToEndP50), ms(p.EndToEndP99), rss(p.PeakRSS, p.PeakRSSPhase))
	}
	fmt.Fprintln(w, "\nThe times are of the requests that no probe held (a probe holds every slot at the upstream for a second or two); "+
		"the gate wait is per attempt, the end-to-end time per request the upstream answered. "+
		"Peak RSS is the process's VmHWM, reset at each phase's start, with the callers and the upstream in the same process.")
	fmt.Fprintln(w)
	cmdline.WriteChecks(w, r.Checks)
}

// waitList is the policy's waits, as "5ms, 10ms, … and 160ms".
func waitList() string {
	s := make([]string, len(waits))
	for i, d := range waits {
		s[i] = d.String()
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

func ms(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}

// rss shows a peak RSS; one that could not be reset at the phase's start
// is the process's, and says so.
func rss(b int64, perPhase bool) string {
	switch {
	case b < 0:
		return "n/a"
	case !perPhase:
		return fmt.Sprintf("%.0f MiB (process)", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// section returns the report's markdown, for the doc.
func (r *report) section() string {
	var b strings.Builder
	r.markdown(&b)
	return b.String()
}
