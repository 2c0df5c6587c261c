package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/outlast-llm/outlast/gateway"
)

// short is the soak cut down to seconds and a hundred callers, so that
// go test -race covers every check: more callers than the slots and the
// queue, so that busy comes, and one probe per phase.
var short = []string{
	"--json",
	"--callers", "100",
	"--queue", "30",
	"--duration", "4s",
	"--probes", "1",
	"--steps", "20",
	"--busy-wait", "1s", // a probe waits for refused callers to come back
}

// TestSoak runs the whole soak at that scale: every check must pass, and
// the figures must show that each check had something to judge. It is not
// parallel: the resources check counts the process's goroutines.
func TestSoak(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), short, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("decoding the report: %v\n%s", err, stdout.String())
	}
	if len(rep.Phases) != 2 || rep.Phases[0].Slots != 1 || rep.Phases[1].Slots != 4 {
		t.Fatalf("phases: got %+v, want 1 slot, then 4", rep.Phases)
	}
	for _, p := range rep.Phases {
		if p.OK == 0 || p.Busy == 0 || p.Attempts <= p.OK || p.PeakInFlight != p.Slots {
			t.Errorf("%d slots: got %d completions, %d busy, %d attempts, peak %d in flight; want some of each, more attempts than completions (a fifth fail), and every slot in use at the peak",
				p.Slots, p.OK, p.Busy, p.Attempts, p.PeakInFlight)
		}
	}
	names := map[string]int{}
	for _, c := range rep.Checks {
		names[c.Name]++
		if !c.Passed {
			t.Errorf("%s", c.Line())
		}
	}
	for _, name := range []string{"liveness", "capacity", "answers", "attempts", "fifo", "busy", "resources"} {
		if names[name] != 2 {
			t.Errorf("check %s: ran %d times, want once per phase", name, names[name])
		}
	}
}

// The checks fail when what they check is broken: each case breaks one
// thing in an otherwise clean phase.
func TestChecksFail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		check string
		brk   func(ph *phase, r *result)
	}{
		// The upstream saw two attempts at once through one slot.
		{"over capacity", "capacity", func(ph *phase, r *result) { r.seen.peak = 2 }},
		// A request's answer was cut, or was another attempt's.
		{"bad answer", "answers", func(ph *phase, r *result) { r.outcomes[0].bad = "cut" }},
		// The record never heard of a request.
		{"no record", "answers", func(ph *phase, r *result) { delete(ph.led.requests, "id-a") }},
		// The journal lost a request's row.
		{"no row", "attempts", func(ph *phase, r *result) { delete(r.rows, "a") }},
		// The upstream saw an attempt that no header counts.
		{"extra attempt", "attempts", func(ph *phase, r *result) {
			r.seen.arrivals = append(r.seen.arrivals, arrival{attemptKey{"b", 2}, 9})
		}},
		// The journal's writer dropped records.
		{"dropped", "attempts", func(ph *phase, r *result) { r.dropped = 3 }},
		// b joined the queue after a had, and was granted first.
		{"out of order", "fifo", func(ph *phase, r *result) {
			r.seen.arrivals[0].rank, r.seen.arrivals[1].rank = 3, 1
		}},
		// Busy came with room in the queue.
		{"busy early", "busy", func(ph *phase, r *result) { ph.probes.bad = []string{"refused with 3 of 30 waiting"} }},
		// A probe was stuck.
		{"stuck", "liveness", func(ph *phase, r *result) { r.stuck = []string{"probe 1: stuck"} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ph, r := cleanPhase()
			for _, c := range ph.judgeRun(r).checks {
				if !c.Passed {
					t.Fatalf("the clean phase failed: %s", c.Line())
				}
			}
			ph, r = cleanPhase()
			tt.brk(ph, r)
			for _, c := range ph.judgeRun(r).checks {
				if got, want := c.Passed, c.Name != tt.check; got != want {
					t.Errorf("check %s: got passed %v, want %v (%s)", c.Name, got, want, c.Detail)
				}
			}
		})
	}
}

// cleanPhase returns a judged phase of one slot where all went well: a,
// then b, each answered at its first attempt, in the order they joined.
func cleanPhase() (*phase, *result) {
	c := defaults()
	c.Queue, c.Probes = 30, 0
	ph := &phase{cfg: c, slots: 1, maxAttempts: len(waits) + 1, probes: &probes{}}
	ph.led = newLedger(&ph.clock, 1, c.Queue)
	r := &result{rows: map[string][]journalRow{}}
	for i, tag := range []string{"a", "b"} {
		k := attemptKey{tag, 1}
		base := int64(10 * i)
		ph.led.joins[k] = &join{before: base + 1, after: base + 2, queued: i > 0}
		ph.led.requests["id-"+tag] = &finished{tag: tag, status: 200, attempts: 1}
		r.seen.arrivals = append(r.seen.arrivals, arrival{k, int64(2*i + 1)})
		r.rows[tag] = []journalRow{{id: "id-" + tag, status: 200, attempts: 1}}
		r.outcomes = append(r.outcomes, outcome{tag: tag, id: "id-" + tag, status: 200, kind: kindOK, attempts: 1, clean: true})
	}
	r.seen.peak = 1
	return ph, r
}

// judge takes the answers the gateway may give, whole, and refuses the
// rest with a reason.
func TestJudge(t *testing.T) {
	t.Parallel()
	ps := pieces(5)
	last := len(waits) + 1
	tests := []struct {
		name     string
		stream   bool
		attempts string
		handler  http.HandlerFunc
		kind     string // "" for an answer judge must refuse
	}{
		{"completion", false, "2", send(200, completionBody(completionID("t", 2))), kindOK},
		{"stream", true, "1", sendStream(streamBody(completionID("t", 1), ps)), kindOK},
		// An earlier attempt's completion: the gateway forwarded the wrong one.
		{"other attempt", false, "2", send(200, completionBody(completionID("t", 1))), ""},
		// Another request's completion.
		{"other request", false, "1", send(200, completionBody(completionID("u", 1))), ""},
		// A stream without its [DONE]: cut short.
		{"stream cut", true, "1", sendStream(bytes.TrimSuffix(streamBody(completionID("t", 1), ps), []byte(doneEvent))), ""},
		// A stream with a second completion after the first.
		{"stream twice", true, "1", sendStream(append(streamBody(completionID("t", 1), ps), streamBody(completionID("t", 1), ps)...)), ""},
		// The upstream's failure, after the last attempt: passed through.
		{"upstream 503 at the end", false, strconv.Itoa(last), send(503, errorBody(503)), kindUpstream},
		// The upstream's failure with attempts left: it should have been retried.
		{"upstream 503 early", false, "2", send(503, errorBody(503)), ""},
		// A stream's opening error event, after the last attempt.
		{"error event at the end", true, strconv.Itoa(last), sendStream([]byte(overloadedEvent)), kindUpstream},
		{"busy", false, "0", gatewayError(503, "busy", `{"type":"error","error":{"type":"outlast_busy","message":"full"}}`, "2"), kindBusy},
		// Busy must say when to come back.
		{"busy without Retry-After", false, "0", gatewayError(503, "busy", `{"type":"error","error":{"type":"outlast_busy","message":"full"}}`, ""), ""},
		{"unreachable at the end", false, strconv.Itoa(last), gatewayError(502, "unreachable", `{"type":"error","error":{"type":"outlast_unreachable","message":"reset"}}`, ""), kindUnreachable},
		// A gateway error out of its one shape.
		{"bad shape", false, "0", gatewayError(503, "busy", `{"error":"busy"}`, "2"), ""},
		// A deadline the soak never sets.
		{"deadline", false, "1", gatewayError(504, "deadline", `{"type":"error","error":{"type":"outlast_deadline","message":"late"}}`, ""), ""},
		// No Outlast-Attempts: the attempts cannot be counted.
		{"no attempts", false, "", send(200, completionBody(completionID("t", 1))), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(gateway.HeaderRequestID, "id")
				if tt.attempts != "" {
					w.Header().Set(gateway.HeaderAttempts, tt.attempts)
				}
				tt.handler(w, r)
			}))
			t.Cleanup(srv.Close)
			resp, err := srv.Client().Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			kind, _, bad := judge(resp, "t", tt.stream, last, ps)
			if kind != tt.kind || (kind == "") != (bad != "") {
				t.Errorf("got kind %q (%s), want %q", kind, bad, tt.kind)
			}
		})
	}
}

func send(status int, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(body)
	}
}

func sendStream(body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(body)
	}
}

func gatewayError(status int, kind, body, retryAfter string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(gateway.HeaderError, kind)
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		send(status, []byte(body))(w, r)
	}
}

// fifoBreak finds a pair served out of order only when both orders are
// known: the join's by the counter, the grant's by rank.
func TestFifoBreak(t *testing.T) {
	t.Parallel()
	at := func(tag string, before, after, rank int64) placed {
		return placed{attemptKey: attemptKey{tag, 1}, before: before, after: after, rank: rank}
	}
	tests := []struct {
		name string
		as   []placed
		want string // the second of the pair found, or ""
	}{
		{"in order", []placed{at("a", 1, 2, 1), at("b", 3, 4, 2), at("c", 5, 6, 3)}, ""},
		// c was sent after a had joined, and granted before it.
		{"overtaken", []placed{at("a", 1, 2, 2), at("b", 3, 4, 3), at("c", 5, 6, 1)}, "c"},
		// b's caller read the counter before a's Queued hook did: either
		// may have joined first.
		{"unknown join order", []placed{at("a", 1, 4, 2), at("b", 3, 5, 1)}, ""},
		// Equal ranks: which was granted first is unknown.
		{"unknown grant order", []placed{at("a", 1, 2, 1), at("b", 3, 4, 1)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, second, found := fifoBreak(tt.as)
			if got := map[bool]string{true: second.tag}[found]; got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	// Keys are separate queues: an order across keys says nothing.
	a, b := at("a", 1, 2, 2), at("b", 3, 4, 1)
	a.key, b.key = "slot 0", "slot 1"
	if _, _, found := fifoBreak([]placed{a, b}); found {
		t.Errorf("two keys: got a break, want none")
	}
}

// Bad command lines are usage errors, which exit 2.
func TestParseConfig(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--callers", "100", "--queue", "100"}, // no room for busy
		{"--slots", "0"},
		{"--fault-rate", "1"},
		{"--steps", "600"}, // more than the queue
		{"extra"},
	} {
		if _, err := parseConfig(args, io.Discard); !errors.As(err, new(usageError)) {
			t.Errorf("%q: got %v, want a usage error", args, err)
		}
	}
	c, err := parseConfig([]string{"--slots", "2,8"}, io.Discard)
	if err != nil || len(c.Slots) != 2 || c.Slots[1] != 8 {
		t.Errorf("--slots 2,8: got %v, %v; want [2 8]", c.Slots, err)
	}
}

// The faults come at the rate asked for, in every kind, and an error
// event only where a stream was asked for.
func TestPick(t *testing.T) {
	t.Parallel()
	const n = 20000
	kinds := map[fault]int{}
	failed := 0
	for i := range n {
		stream := i%2 == 0
		f := pick(1, 0.2, "t"+strconv.Itoa(i), 1, stream)
		if f != faultNone {
			failed++
			kinds[f]++
		}
		if f == faultErrorEvent && !stream {
			t.Fatalf("an error event for a request that does not stream")
		}
	}
	if share := float64(failed) / n; share < 0.18 || share > 0.22 {
		t.Errorf("got %.3f of attempts failing, want about 0.2", share)
	}
	if len(kinds) != len(faults(true)) {
		t.Errorf("got faults %v, want every kind", kinds)
	}
}
