// Package reliability_test is the fault matrix of issue 12: every fault,
// sent through the library's Transport and through the gateway, streaming
// and not, against a mockllm upstream, behind Toxiproxy when the fault is
// the network's. Each cell states what the caller must get, and checks
// that nothing was sent again after the commit point and that the record
// counts the attempts the upstream saw. The matrix is written to
// docs/reliability.md, which CI compares with a fresh run.
package reliability_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the fault matrix in "+docPath)

// The timings of every cell: short, so that the matrix takes seconds, and
// far apart, so that no outcome hangs on which of two timers fires first
// on a loaded machine. With -race and a cell for each of 32 at once, an
// attempt took up to a few hundred milliseconds to reach the mock, so no
// timeout that must not fire is shorter than a second.
const (
	policyWait     = 5 * time.Millisecond // each wait of the policy
	shortFirstByte = time.Second          // the first-byte timeout where the fault is a silence, which it ends
	longFirstByte  = 10 * time.Second     // the first-byte timeout elsewhere, which no attempt reaches
	idleTimeout    = time.Second          // the gateway's, between chunks
	callerPatience = 3 * time.Second      // the caller's own read timeout, past the gateway's
	slowHeaders    = 5000                 // ms of latency: five short first-byte timeouts
	restartWait    = 2 * time.Second      // the policy's waits where the upstream restarts
	concurrentRows = 8                    // rows run at once, four cells each
)

// A fault is a row of the matrix: how the upstream fails, and what the
// caller gets on each path.
type fault struct {
	id   string // the subtest's name
	name string // the row's heading
	how  string // what injects it, for the table

	script    string        // the mock's script; "" is "ok"
	chunks    int           // the mock's content chunks; 0 is its default
	toxic     *toxic        // a Toxiproxy toxic on the answers, or nil
	proxied   bool          // behind a Toxiproxy proxy, which the row stops and starts
	down      bool          // nothing listens: the proxy is stopped
	slots     int           // a gate of this many slots; 0 is none
	wait      time.Duration // the policy's waits; 0 is policyWait
	firstByte time.Duration // the first-byte timeout; 0 is longFirstByte
	honours   bool          // each retry must wait the server's delay
	queued    int           // requests queued behind one in flight; 0 sends one request

	want [4]string // the caller's outcome on each of paths
	note string    // what a reader of the row may not expect, if anything
}

// every is the same outcome on every path.
func every(o string) [4]string { return [4]string{o, o, o, o} }

// layers is one outcome for the Transport's paths and one for the
// gateway's.
func layers(transport, gw string) [4]string { return [4]string{transport, transport, gw, gw} }

// The rows. Every fault lasts for every attempt, unless its script says
// otherwise, so each cell shows both whether the fault is retried and
// what the caller gets when the retries run out.
var faults = []fault{
	// Nothing listens: the kernel refuses, before any server could count.
	{id: "refused", name: "connection refused", how: "a stopped Toxiproxy proxy", down: true,
		want: layers("3 → error: refused", "3 → 502 unreachable")},
	// The request reaches the upstream, and its answer never comes back.
	{id: "reset-before-headers", name: "reset before the headers", how: "Toxiproxy `reset_peer`",
		toxic: &toxic{"reset_peer", map[string]int{"timeout": 0}},
		want:  layers("3 → error: reset", "3 → 502 unreachable")},
	// The retryable statuses: the caller gets the last one unchanged.
	{id: "500", name: "500", how: "mockllm `500`", script: "500", want: every("3 → 500")},
	{id: "502", name: "502", how: "mockllm `502`", script: "502", want: every("3 → 502")},
	{id: "503", name: "503", how: "mockllm `503`", script: "503", want: every("3 → 503")},
	{id: "504", name: "504", how: "mockllm `504`", script: "504", want: every("3 → 504")},
	{id: "529", name: "529 overloaded", how: "mockllm `overloaded`", script: "overloaded", want: every("3 → 529")},
	// A 429's delay, in each of its three forms, is a floor under the
	// policy's 5 ms waits.
	{id: "429-seconds", name: "429, `Retry-After: 1`", how: "mockllm `429:retry-after=1`",
		script: "429:retry-after=1", honours: true, want: every("3 → 429")},
	{id: "429-date", name: "429, `Retry-After` as an HTTP-date 1 s ahead", how: "mockllm `429:retry-after-date=1`",
		script: "429:retry-after-date=1", honours: true, want: every("3 → 429")},
	{id: "429-ms", name: "429, `retry-after-ms: 200`", how: "mockllm `429:retry-after-ms=200`",
		script: "429:retry-after-ms=200", honours: true, want: every("3 → 429")},
	// The server's word overrides the status: not retried.
	{id: "should-retry-false", name: "503 with `x-should-retry: false`", how: "mockllm `503:header=x-should-retry=false`",
		script: "503:header=x-should-retry=false", want: every("1 → 503")},
	// The answer comes, five first-byte timeouts late.
	{id: "slow-headers", name: "slow headers, past the first-byte timeout", how: fmt.Sprintf("Toxiproxy `latency` %d ms", slowHeaders),
		toxic: &toxic{"latency", map[string]int{"latency": slowHeaders}}, firstByte: shortFirstByte,
		want: layers("3 → error: stalled", "3 → 504 timeout")},
	// A 200's headers, then the connection closes.
	{id: "closed-before-first-byte", name: "closed before the first byte", how: "mockllm `close-after-headers`",
		script: "close-after-headers",
		want:   layers("3 → error: closed_early", "3 → 502 upstream-broke")},
	// A 200's headers, then silence.
	{id: "stalled-before-first-byte", name: "stalled before the first byte", how: "mockllm `stall`",
		script: "stall", firstByte: shortFirstByte, want: layers("3 → error: stalled", "3 → 504 timeout")},
	// The connection stays open and nothing at all comes back.
	{id: "silent", name: "silent: no byte of the answer ever", how: "Toxiproxy `timeout` 0 (never closes)",
		toxic: &toxic{"timeout", map[string]int{"timeout": 0}}, firstByte: shortFirstByte,
		want: layers("3 → error: stalled", "3 → 504 timeout")},
	// Anthropic's overload inside a 200 stream: the first event is the
	// error, so nothing had reached the caller and it is retried.
	{id: "sse-error-first", name: "a 200 stream whose first event is an error", how: "mockllm `overloaded-stream`",
		script: "overloaded-stream", want: every("3 → 200, error event"),
		note: "once the attempts run out, the caller gets the last one's 200 stream as it came, error event and all, as it gets the last failed status in the rows above; the gateway adds `X-Should-Retry: false` and records it as `upstream-error`."},
	// The same, cut into slices: the error must be seen across reads.
	{id: "sse-error-first-sliced", name: "the same, in 8-byte slices", how: "mockllm `overloaded-stream`, Toxiproxy `slicer`",
		script: "overloaded-stream", toxic: &toxic{"slicer", map[string]int{"average_size": 8, "size_variation": 4, "delay": 100}},
		want: every("3 → 200, error event")},
	// An error after the stream's preamble, before any of the answer: the
	// commit point is the first event that carries the answer, so this is
	// a failed attempt too. A request that is not a stream gets the error
	// as the 500 it stands for.
	{id: "sse-error-after-preamble", name: "a 200 stream's error event after its preamble (the role chunk), before any text", how: "mockllm `error-after=0`",
		script: "error-after=0", want: [4]string{"3 → 500", "3 → 200, error event", "3 → 500", "3 → 200, error event"}},
	// Past the commit point: the caller has bytes, so nothing is re-sent.
	// The gateway's non-stream caller has the status line and every byte
	// the record counts, and then a cut connection.
	{id: "reset-after-chunks", name: "reset after 2 chunks", how: "mockllm `reset-after=2`",
		script: "reset-after=2",
		want:   [4]string{"1 → 200, cut", "1 → 200, cut", "3 → 502 upstream-broke", "1 → 200, error event"},
		note:   "in this row and the next two, the gateway reads an answer that is not a stream to its end before it commits, so that a break anywhere in it is a failed attempt, retried; a stream's caller, who has its first bytes, gets an error event instead. The Transport commits at the first byte, and its caller gets the 200 and a cut or stalled body."},
	// A silence, which the first-byte timeout ends for the gateway's
	// whole non-stream answer.
	{id: "stall-after-chunks", name: "stall after 2 chunks", how: "mockllm `stall-after=2`",
		script: "stall-after=2", firstByte: shortFirstByte,
		want: [4]string{"1 → 200, stalled", "1 → 200, stalled", "3 → 504 timeout", "1 → 200, error event"}},
	// Three hundred chunks put the 1,000th byte inside the body on every
	// path: past a non-stream's headers, and past a stream's first
	// content event, after which the caller has the answer's start.
	{id: "cut-after-bytes", name: "connection closed after 1,000 bytes", how: "Toxiproxy `limit_data` 1000",
		chunks: 300, toxic: &toxic{"limit_data", map[string]int{"bytes": 1000}},
		want: [4]string{"1 → 200, cut", "1 → 200, cut", "3 → 502 upstream-broke", "1 → 200, error event"}},
	// A restart while requests queue at a gate of one slot: the one in
	// flight is cut, the queued ones are refused, and all come back.
	{id: "restart-while-queued", name: "upstream restarts while 3 requests queue at its 1 slot", how: "Toxiproxy proxy stopped and started",
		script: "slow-headers=1m,ok", proxied: true, slots: 1, queued: 3, wait: restartWait,
		want: every("4 requests, each 2 → 200"),
		note: "the request holding the slot is cut when the proxy stops and each queued one is refused in turn; the proxy starts again before their waits end, and every retry succeeds."},
}

// TestFaultMatrix runs every cell, then compares the matrix with the one
// in docs/reliability.md, or with -update writes it there.
func TestFaultMatrix(t *testing.T) {
	got := runCells(t)
	if t.Failed() {
		if *update {
			t.Fatalf("not writing %s: some cells failed", docPath)
		}
		return
	}
	if all := len(faults) * len(paths); len(got) < all {
		if *update {
			t.Fatalf("not writing %s: %d of its %d cells ran", docPath, len(got), all)
		}
		t.Logf("%d of %d cells ran: the matrix is not compared", len(got), all)
		return
	}
	section := renderMatrix(got)
	if *update {
		if err := writeSection(docPath, section); err != nil {
			t.Fatal(err)
		}
		return
	}
	committed, err := readSection(docPath)
	if err != nil {
		t.Fatal(err)
	}
	if committed != section {
		t.Errorf("%s's fault matrix differs from this run's (run %s to rewrite it):\n%s", docPath, updateCommand, diffLines(committed, section))
	}
}

// runCells runs every cell and returns each one's outcome by row and
// path id. The cells run concurrentRows rows at a time, in goroutines of
// their own rather than under t.Parallel, whose limit is GOMAXPROCS (two
// here): they spend their time waiting on timers and sockets, not on the
// CPU, and two at a time would take a minute.
func runCells(t *testing.T) map[string]string {
	var mu sync.Mutex // guards got
	got := map[string]string{}
	var wg sync.WaitGroup
	running := make(chan struct{}, concurrentRows)
	for _, f := range faults {
		wg.Go(func() {
			running <- struct{}{}
			defer func() { <-running }()
			t.Run(f.id, func(t *testing.T) {
				var cells sync.WaitGroup
				for i, p := range paths {
					cells.Go(func() {
						t.Run(p.id(), func(t *testing.T) {
							o := runCell(t, f, p)
							if o != f.want[i] {
								t.Errorf("got %q, want %q", o, f.want[i])
							}
							mu.Lock()
							got[f.id+"/"+p.id()] = o
							mu.Unlock()
						})
					})
				}
				cells.Wait()
			})
		})
	}
	wg.Wait()
	return got
}

func runCell(t *testing.T, f fault, p path) string {
	c := newCell(t, f, p)
	if f.queued > 0 {
		return c.restart(f.queued)
	}
	return c.once()
}

// renderMatrix returns the section of docs/reliability.md between its
// markers: what the cells share, the table, and the command that wrote it.
func renderMatrix(got map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Each cell is a request (four in the last row) through the library's `outlast.Transport` or through the gateway, under a policy of three attempts with waits of %v (%v where the upstream restarts), to `mockllm`, behind Toxiproxy for the network's faults. The first-byte timeout is %v where the fault is a silence, and %v elsewhere, where no attempt comes near it; the gateway's idle timeout is %v. Unless its row says otherwise, a fault lasts for every attempt.\n\n", policyWait, restartWait, shortFirstByte, longFirstByte, idleTimeout)
	b.WriteString("A cell reads *attempts → what the caller got*: the status, with the gateway's `Outlast-Error` kind if it made the answer itself, or the error the Transport returned, as `outlast.Classify` names it; then how the body ended, if not cleanly: *cut* (the connection broke), *error event* (the stream ended with an error event: `event: error`, or an error object as data, as OpenAI sends one) or *stalled* (the caller's own read timeout of ")
	fmt.Fprintf(&b, "%v gave up). Every cell also checks that no attempt started after a byte of the body reached the caller, and that the attempts in the record (the Transport's hooks; the gateway's `Outlast-Attempts` and its `record.Observer`) are the requests the upstream saw (the mock's count, plus the connections the kernel refused).\n\n", callerPatience)
	b.WriteString("| fault | injected by |")
	for _, p := range paths {
		b.WriteString(" " + p.String() + " |")
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|", len(paths)) + "\n")
	for _, f := range faults {
		fmt.Fprintf(&b, "| %s | %s |", f.name, f.how)
		for _, p := range paths {
			b.WriteString(" " + got[f.id+"/"+p.id()] + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for _, f := range faults {
		if f.note != "" {
			fmt.Fprintf(&b, "- *%s*: %s\n", f.name, f.note)
		}
	}
	fmt.Fprintf(&b, "\nWritten by `%s`.\n", updateCommand)
	return b.String()
}

// updateCommand is the command that writes the matrix.
const updateCommand = "go test ./reliability -run TestFaultMatrix -update"

const (
	docPath     = "../docs/reliability.md"
	beginMarker = "<!-- matrix:begin -->\n"
	endMarker   = "<!-- matrix:end -->"
)

// cutSection splits doc around the matrix's section.
func cutSection(doc string) (before, section, after string, err error) {
	before, rest, ok := strings.Cut(doc, beginMarker)
	if !ok {
		return "", "", "", fmt.Errorf("%s: no %q", docPath, strings.TrimSpace(beginMarker))
	}
	section, after, ok = strings.Cut(rest, endMarker)
	if !ok {
		return "", "", "", fmt.Errorf("%s: no %q after %q", docPath, endMarker, strings.TrimSpace(beginMarker))
	}
	return before, section, after, nil
}

func readSection(name string) (string, error) {
	doc, err := os.ReadFile(name)
	if err != nil {
		return "", err
	}
	_, section, _, err := cutSection(string(doc))
	return section, err
}

// writeSection replaces the matrix's section of the file and leaves the
// rest of it as it was.
func writeSection(name, section string) error {
	doc, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	before, _, after, err := cutSection(string(doc))
	if err != nil {
		return err
	}
	return os.WriteFile(name, []byte(before+beginMarker+section+endMarker+after), 0o644)
}

// diffLines lists the lines of the committed section that this run's
// lacks, and the other way round: enough to see which rows moved.
func diffLines(committed, run string) string {
	has := func(text, line string) bool { return strings.Contains("\n"+text+"\n", "\n"+line+"\n") }
	var b strings.Builder
	for _, l := range strings.Split(committed, "\n") {
		if !has(run, l) {
			b.WriteString("- committed: " + l + "\n")
		}
	}
	for _, l := range strings.Split(run, "\n") {
		if !has(committed, l) {
			b.WriteString("+ this run:  " + l + "\n")
		}
	}
	return b.String()
}
