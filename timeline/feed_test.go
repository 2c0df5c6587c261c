package timeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/record"
	"github.com/outlast-llm/outlast/timeline"
)

func TestFeedKeepsTheNewest(t *testing.T) {
	t.Parallel()
	f := timeline.New(3, 0)
	obs := f.Observer()
	for i := range 5 {
		r := request(fmt.Sprintf("r%d", i), "run")
		obs.AttemptStart(r, attempt(1, 0, 0, 0, nil))
		obs.Done(r)
	}
	s := f.Snapshot()
	var got []string
	for _, r := range s.Requests {
		got = append(got, r.ID)
	}
	if want := "[r2 r3 r4]"; fmt.Sprint(got) != want {
		t.Errorf("kept %v, want %s", got, want)
	}
	if s.Keep != 3 {
		t.Errorf("keep %d, want 3", s.Keep)
	}
}

// The feed is bounded in bytes as well as in rows: requests whose fields
// are as long as the gateway keeps them, and escape sixfold in JSON, make
// a snapshot no longer than keepBytes; the newest are kept.
func TestFeedKeepsBytes(t *testing.T) {
	t.Parallel()
	const keepBytes = 64 << 10
	f := timeline.New(0, keepBytes)
	obs := f.Observer()
	for i := range 200 {
		r := request(fmt.Sprintf("r%03d", i), strings.Repeat("<", 200))
		r.Path = "/" + strings.Repeat("<", 2047)
		r.Model = strings.Repeat("\u0001", 42)
		obs.AttemptStart(r, attempt(1, 0, 0, 0, nil))
		r.Attempts = append(r.Attempts, attempt(1, 0, time.Second, 200, nil))
		obs.Done(r)
	}
	s := f.Snapshot()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > keepBytes+4096 { // the upstreams and the snapshot's own fields
		t.Errorf("the snapshot is %d bytes, want at most %d", len(b), keepBytes)
	}
	if len(s.Requests) == 0 || s.Requests[len(s.Requests)-1].ID != "r199" || s.KeepBytes != keepBytes {
		t.Errorf("kept %d requests, the last %v, keep_bytes %d; want the newest, and %d", len(s.Requests), s.Requests, s.KeepBytes, keepBytes)
	}
	if len(s.Requests) > 10 {
		t.Errorf("kept %d requests of %d KiB JSON each in %d KiB", len(s.Requests), len(b)/len(s.Requests)>>10, keepBytes>>10)
	}
}

// A request's view holds its last MaxAttempts attempts, the one in flight
// included, and counts the others.
func TestFeedBoundsAttempts(t *testing.T) {
	t.Parallel()
	f := timeline.New(0, 0)
	obs := f.Observer()
	r := request("r", "run")
	const n = 1000
	for i := 1; i <= n; i++ {
		obs.AttemptStart(r, attempt(i, 0, 0, 0, nil))
		r.Attempts = append(r.Attempts, attempt(i, 0, time.Millisecond, 503, nil))
		obs.AttemptEnd(r, r.Attempts[i-1])
	}
	obs.AttemptStart(r, attempt(n+1, 0, 0, 0, nil))
	v := f.Snapshot().Requests[0]
	if len(v.Attempts) != timeline.MaxAttempts || v.Elided != n+1-timeline.MaxAttempts {
		t.Fatalf("the view holds %d attempts and elides %d, want %d and %d", len(v.Attempts), v.Elided, timeline.MaxAttempts, n+1-timeline.MaxAttempts)
	}
	if first, last := v.Attempts[0], v.Attempts[len(v.Attempts)-1]; first.N != n+2-timeline.MaxAttempts || last.N != n+1 || last.Outcome != timeline.OutcomeInFlight {
		t.Errorf("holds attempts %d to %d (last %s), want %d to %d, the last in flight", first.N, last.N, last.Outcome, n+2-timeline.MaxAttempts, n+1)
	}
}

func TestNewDefaultKeep(t *testing.T) {
	t.Parallel()
	if got := timeline.New(0, 0).Snapshot().Keep; got != timeline.DefaultKeep {
		t.Errorf("keep %d, want %d", got, timeline.DefaultKeep)
	}
}

func TestFeedAttemptOutcomes(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	cases := []struct {
		name         string
		a            record.Attempt
		outcome      string
		class        string
		retryAfter   float64
		retryInMs    float64
		stillSending bool
	}{
		// A success is green.
		{name: "ok", a: attempt(1, 0, time.Second, 200, nil), outcome: timeline.OutcomeOK},
		// A 5xx is red, and its class is the status's.
		{name: "502", a: attempt(1, 0, time.Second, 502, &outlast.StatusError{StatusCode: 502}), outcome: timeline.Outcome5xx, class: "status_5xx"},
		// Anthropic's overload is a 5xx too.
		{name: "529", a: attempt(1, 0, time.Second, 529, &outlast.StatusError{StatusCode: 529}), outcome: timeline.Outcome5xx, class: "overloaded"},
		// A rate limit is a 4xx, and keeps the server's delay for the marker.
		{name: "429", a: func() record.Attempt {
			a := attempt(1, 0, time.Second, 429, &outlast.StatusError{StatusCode: 429, RetryAfter: time.Second})
			a.RetryAfter, a.RetryIn = time.Second, 1500*time.Millisecond
			return a
		}(), outcome: timeline.Outcome4xx, class: "rate_limited", retryAfter: 1000, retryInMs: 1500},
		// Any other 4xx.
		{name: "404", a: attempt(1, 0, time.Second, 404, &outlast.StatusError{StatusCode: 404}), outcome: timeline.Outcome4xx, class: "status_4xx"},
		// An overloaded stream opens 200 with an error event: red, not green.
		{name: "error event", a: attempt(1, 0, time.Second, 200, &outlast.StatusError{StatusCode: 200, Err: fmt.Errorf("%w: overloaded_error", outlast.ErrErrorEvent)}), outcome: timeline.Outcome5xx, class: "error_event"},
		// No response at all is purple, named by its class, not its text.
		{name: "refused", a: attempt(1, 0, time.Second, 0, refused), outcome: timeline.OutcomeNetwork, class: "refused"},
		// A stall is a network outcome too, and so is the caller's leaving.
		{name: "stalled", a: attempt(1, 0, time.Second, 0, outlast.ErrStalled), outcome: timeline.OutcomeNetwork, class: "stalled"},
		{name: "canceled", a: attempt(1, 0, time.Second, 0, context.Canceled), outcome: timeline.OutcomeNetwork, class: "canceled"},
		// A full gate is grey, as the gateway's own busy answer is.
		{name: "busy", a: attempt(1, 0, time.Second, 0, outlast.ErrBusy), outcome: timeline.OutcomeBusy, class: "busy"},
		// A status outside 4xx and 5xx, from a custom attempt, is no
		// response the page can colour by its code.
		{name: "302", a: attempt(1, 0, time.Second, 302, &outlast.StatusError{StatusCode: 302}), outcome: timeline.OutcomeNetwork, class: "other"},
		// The colour is the class's, not the status line's: a class set
		// by the Transport wins over a status that says otherwise.
		{name: "class over status", a: func() record.Attempt {
			a := attempt(1, 0, time.Second, 200, nil)
			a.Class = outlast.ClassOverloaded
			return a
		}(), outcome: timeline.Outcome5xx, class: "overloaded"},
		// An attempt not over yet is in flight.
		{name: "in flight", a: attempt(1, 0, 0, 0, nil), outcome: timeline.OutcomeInFlight, stillSending: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := timeline.New(0, 0)
			obs := f.Observer()
			r := request("r", "run")
			obs.AttemptStart(r, c.a)
			if !c.stillSending {
				r.Attempts = append(r.Attempts, c.a)
				obs.AttemptEnd(r, c.a)
			}
			got := f.Snapshot().Requests[0]
			if len(got.Attempts) != 1 {
				t.Fatalf("got %d attempts, want 1", len(got.Attempts))
			}
			a := got.Attempts[0]
			if a.Outcome != c.outcome || a.Error != c.class || a.RetryAfter != c.retryAfter || a.RetryIn != c.retryInMs {
				t.Errorf("got outcome %q class %q retry-after %v retry-in %v, want %q %q %v %v",
					a.Outcome, a.Error, a.RetryAfter, a.RetryIn, c.outcome, c.class, c.retryAfter, c.retryInMs)
			}
			wantState := timeline.StateWaiting
			if c.stillSending {
				wantState = timeline.StateSending
			}
			if got.State != wantState {
				t.Errorf("got state %q, want %q", got.State, wantState)
			}
		})
	}
}

func TestFeedRequestOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		status  int
		kind    string
		outcome string
	}{
		// The upstream's answer, after any retries.
		{"ok", 200, "", timeline.OutcomeOK},
		// The upstream's own 429, passed on.
		{"rate limited", 429, "", timeline.Outcome4xx},
		// The upstream's last failure, passed on when the retries ran out.
		{"bad gateway", 502, "", timeline.Outcome5xx},
		// The gateway's refusal when the queue is full: grey, not red.
		{"busy", 503, "busy", timeline.OutcomeBusy},
		// The gateway could not reach the upstream at all.
		{"unreachable", 502, "unreachable", timeline.OutcomeNetwork},
		// The caller left first.
		{"client closed", 499, "client-closed", timeline.OutcomeNetwork},
		// A 200 whose stream the upstream broke off: the caller lost the
		// rest of the answer.
		{"stream broke", 200, "upstream-broke", timeline.Outcome5xx},
		// The upstream's failure after progress comments: the record
		// keeps its status, though a 200 stream carried it.
		{"after progress", 503, "upstream-error", timeline.Outcome5xx},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := timeline.New(0, 0)
			r := request("r", "")
			r.Status, r.Error, r.End = c.status, c.kind, t0.Add(time.Second)
			f.Observer().Done(r)
			got := f.Snapshot().Requests[0]
			if got.Outcome != c.outcome || got.State != timeline.StateDone {
				t.Errorf("got %q %q, want %q done", got.Outcome, got.State, c.outcome)
			}
		})
	}
}

func TestFeedQueuePositions(t *testing.T) {
	t.Parallel()
	f := timeline.New(0, 0)
	obs := f.Observer()
	rs := []*record.Request{request("a", "run-a"), request("b", "run-b"), request("c", "run-c"), request("d", "run-d")}
	for i, r := range rs[:3] {
		obs.Queued(r, "", i+1)
	}
	// d waits for a named slot: a queue of its own.
	rs[3].Slot = "0"
	obs.Queued(rs[3], "slot 0", 1)

	positions := func() string {
		ups := f.Snapshot().Upstreams
		if len(ups) != 1 {
			t.Fatalf("got %d upstreams, want 1", len(ups))
		}
		s := fmt.Sprintf("queued=%d:", ups[0].Queued)
		for _, w := range ups[0].Queue {
			s += fmt.Sprintf(" %s#%d", w.ID, w.Position)
		}
		return s
	}
	if got, want := positions(), "queued=4: a#1 b#2 c#3 d#1"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	obs.AttemptStart(rs[0], attempt(1, 0, 0, 0, nil))
	obs.Done(rs[1]) // the caller left while it waited
	if got, want := positions(), "queued=2: c#1 d#1"; got != want {
		t.Errorf("after a's start and b's end: got %q, want %q", got, want)
	}
	if s := f.Snapshot().Requests[2]; s.State != timeline.StateQueued || s.Ahead != 3 || s.QueuedAt == 0 {
		t.Errorf("c: got state %q ahead %d queued at %v, want queued, 3 ahead, a time", s.State, s.Ahead, s.QueuedAt)
	}

	// With the gateway's Loads, the counts are the gate's own.
	f.SetLoads(func() []record.Load {
		return []record.Load{{Upstream: "mock", Slots: 1, InFlight: 1, Queued: 7}}
	})
	if got, want := positions(), "queued=7: c#1 d#1"; got != want {
		t.Errorf("with loads: got %q, want %q", got, want)
	}
	if up := f.Snapshot().Upstreams[0]; up.Slots != 1 || up.InFlight != 1 {
		t.Errorf("with loads: got slots %d in flight %d, want 1 1", up.Slots, up.InFlight)
	}
}

// A request that has moved to a fallback waits in the fallback's queue,
// not in its own upstream's, and leaves the one it was in; without the
// gateway's Loads, the counts are the queues' too.
func TestFeedQueueAtFallback(t *testing.T) {
	t.Parallel()
	for _, loads := range []bool{true, false} {
		t.Run(fmt.Sprintf("loads=%v", loads), func(t *testing.T) {
			t.Parallel()
			f := timeline.New(0, 0)
			if loads {
				f.SetLoads(func() []record.Load { return []record.Load{{Upstream: "azure"}, {Upstream: "mock"}} })
			}
			obs := f.Observer()
			r := request("a", "run-a")
			queues := func() string {
				s := ""
				for _, u := range f.Snapshot().Upstreams {
					if !loads {
						s += fmt.Sprintf(" %s:%d/%d", u.Name, u.Queued, len(u.Queue))
						continue
					}
					s += fmt.Sprintf(" %s:%d", u.Name, len(u.Queue))
				}
				return s
			}
			want := map[bool][3]string{
				true:  {" azure:0 mock:1", " azure:1 mock:0", " azure:0 mock:0"},
				false: {" mock:1/1", " azure:1/1 mock:0/0", " mock:0/0"},
			}[loads]
			obs.Queued(r, "", 1)
			if got := queues(); got != want[0] {
				t.Errorf("queued at its own upstream: got%s, want%s", got, want[0])
			}
			r.Moves = append(r.Moves, record.Move{From: "mock", To: "azure", Reason: "busy"})
			obs.Queued(r, "", 2)
			if got := queues(); got != want[1] {
				t.Errorf("queued at the fallback: got%s, want%s", got, want[1])
			}
			obs.Done(r)
			if got := queues(); got != want[2] {
				t.Errorf("done: got%s, want%s", got, want[2])
			}
		})
	}
}

// The feed keeps the last MaxStates changes of the upstreams' states,
// oldest first, in the snapshot as the page reads them.
func TestFeedKeepsStates(t *testing.T) {
	t.Parallel()
	f := timeline.New(0, 0)
	if b, _ := json.Marshal(f.Snapshot()); !strings.Contains(string(b), `"states":[]`) {
		t.Errorf("an empty feed's snapshot: got %s, want an empty list of states", b)
	}
	obs := f.Observer()
	const n = timeline.MaxStates + 50
	for i := range n {
		from, to := outlast.Down, outlast.Probing
		if i%2 == 1 {
			from, to = to, from
		}
		obs.UpstreamState(record.StateChange{Upstream: fmt.Sprint("up", i), At: t0.Add(time.Duration(i) * time.Millisecond), From: from, To: to})
	}
	s := f.Snapshot()
	if len(s.States) != timeline.MaxStates {
		t.Fatalf("kept %d changes, want %d", len(s.States), timeline.MaxStates)
	}
	first, last := s.States[0], s.States[len(s.States)-1]
	if first.Upstream != "up50" || last.Upstream != fmt.Sprint("up", n-1) {
		t.Errorf("kept %s to %s, want up50 to up%d", first.Upstream, last.Upstream, n-1)
	}
	if want := (timeline.StateChange{Upstream: "up50", At: millisOf(t0.Add(50 * time.Millisecond)), From: "down", To: "probing"}); first != want {
		t.Errorf("the first kept: got %+v, want %+v", first, want)
	}
	// A snapshot is a copy: later changes leave it as it was.
	obs.UpstreamState(record.StateChange{Upstream: "later", At: t0, From: outlast.Probing, To: outlast.Recovering})
	if s.States[0].Upstream != "up50" || s.States[len(s.States)-1].Upstream != last.Upstream {
		t.Errorf("a later change moved an earlier snapshot's states")
	}
}

// An attempt's view carries its wait for the upstream and its probe
// mark, and leaves both out of the JSON when there are none.
func TestFeedAttemptAdmission(t *testing.T) {
	t.Parallel()
	f := timeline.New(0, 0)
	obs := f.Observer()
	r := request("r", "run")
	probe := attempt(2, time.Second, time.Second, 200, nil)
	probe.AdmissionWait, probe.Probe = 1500*time.Millisecond, true
	r.Attempts = []record.Attempt{attempt(1, 0, 10*time.Millisecond, 503, &outlast.StatusError{StatusCode: 503}), probe}
	obs.AttemptEnd(r, probe)
	as := f.Snapshot().Requests[0].Attempts
	if len(as) != 2 || as[0].AdmissionWait != 0 || as[0].Probe || as[1].AdmissionWait != 1500 || !as[1].Probe {
		t.Fatalf("got attempts %+v, want the second the probe after 1500 ms", as)
	}
	b, _ := json.Marshal(as)
	if got := string(b); strings.Count(got, `"admission_wait":1500,"probe":true`) != 1 || strings.Count(got, "admission_wait") != 1 {
		t.Errorf("got %s, want the wait and the mark on the second attempt alone", got)
	}
}

// millisOf is t as the views give times: milliseconds since the epoch.
func millisOf(t time.Time) float64 { return float64(t.UnixMicro()) / 1e3 }

// TestFeedDoneSeesLateChanges checks that a request's view at its end
// holds its attempts as they are then: one changed after its end (a
// continuation marks the attempt it continued) shows changed, and one
// that did not keeps the view attemptEnd made.
func TestFeedDoneSeesLateChanges(t *testing.T) {
	t.Parallel()
	f := timeline.New(0, 0)
	obs := f.Observer()
	for _, late := range []bool{false, true} {
		r := request(fmt.Sprintf("late=%v", late), "run")
		a := attempt(1, 0, 0, 0, nil)
		obs.AttemptStart(r, a)
		a = attempt(1, 0, time.Second, 200, nil)
		r.Attempts = append(r.Attempts, a)
		obs.AttemptEnd(r, a)
		if late {
			r.Attempts[0].Continued, r.Attempts[0].PrefillBytes = true, 42
		}
		r.Status, r.End = 200, t0.Add(time.Second)
		obs.Done(r)
		got := f.Snapshot().Requests
		v := got[len(got)-1]
		if len(v.Attempts) != 1 || v.Attempts[0].Continued != late || (late && v.Attempts[0].PrefillBytes != 42) {
			t.Errorf("changed after its end: %v; the done view's attempts %+v", late, v.Attempts)
		}
		if v.State != timeline.StateDone || v.Attempts[0].Outcome != timeline.OutcomeOK {
			t.Errorf("changed after its end: %v; the done view is %s with attempt %s, want done and ok", late, v.State, v.Attempts[0].Outcome)
		}
	}
}

// TestFeedSnapshotsStayAsTaken checks that a snapshot, which the page's
// event stream encodes after the feed's lock is let go, keeps the views
// it was given while the request goes on: its first attempt's views
// share the request's entry, and each must be written only once. The
// race detector sees a view changed under an encoding. A request of one
// attempt ends with that attempt's view made anew, its ending final.
func TestFeedSnapshotsStayAsTaken(t *testing.T) {
	t.Parallel()
	for _, tries := range []int{1, 2} {
		t.Run(fmt.Sprint(tries), func(t *testing.T) {
			t.Parallel()
			snapshotsStayAsTaken(t, tries)
		})
	}
}

func snapshotsStayAsTaken(t *testing.T, tries int) {
	f := timeline.New(0, 0)
	obs := f.Observer()
	r := request("r", "run")
	r.Stream = true
	type taken struct {
		s    timeline.Snapshot
		json string
	}
	var snaps []taken
	snap := func() {
		s := f.Snapshot()
		b, err := json.Marshal(s.Requests)
		if err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, taken{s, string(b)})
	}
	end := make(chan struct{})
	go func() { // encodes the snapshots while the request goes on
		defer close(end)
		for range 200 {
			json.Marshal(f.Snapshot())
		}
	}()
	for n := 1; n <= tries; n++ {
		obs.AttemptStart(r, attempt(n, 0, 0, 0, nil))
		snap()
		a := attempt(n, 0, time.Second, 503, nil)
		if n == tries {
			a = attempt(n, 0, time.Second, 200, nil)
		}
		r.Attempts = append(r.Attempts, a)
		obs.AttemptEnd(r, a)
		snap()
	}
	r.Status, r.End = 200, t0.Add(2*time.Second)
	obs.Done(r)
	snap()
	<-end
	for i, s := range snaps {
		b, _ := json.Marshal(s.s.Requests)
		if string(b) != s.json {
			t.Errorf("snapshot %d changed after it was taken:\nthen %s\nnow  %s", i, s.json, b)
		}
	}
	want := []string{"1:sending", "1:waiting", "2:sending", "2:waiting", "2:done"}
	if tries == 1 {
		want = []string{"1:sending", "1:waiting", "1:done"}
	}
	for i, s := range snaps {
		v := s.s.Requests[0]
		if got := fmt.Sprintf("%d:%s", len(v.Attempts), v.State); got != want[i] {
			t.Errorf("snapshot %d: %s, want %s", i, got, want[i])
		}
	}
	if a := snaps[1].s.Requests[0].Attempts[0]; a.Outcome == timeline.OutcomeInFlight || a.Status == 0 {
		t.Errorf("the first attempt ended: %+v, want a status and not in flight", a)
	}
	answer := func(i int) string {
		as := snaps[i].s.Requests[0].Attempts
		return as[len(as)-1].Ending
	}
	if then, now := answer(len(snaps)-2), answer(len(snaps)-1); then != "200, answering" || now != "200, stream whole" {
		t.Errorf("the answer's ending: %q, then %q at the end, want %q, then %q", then, now, "200, answering", "200, stream whole")
	}
}

// TestFeedAttemptEndings checks that each attempt's view says how it
// ended, in record.Request.Ending's words, and is coloured so: green only
// for an answer whole so far, amber for one cut after bytes had gone,
// continued or not, and striped grey for a hedge's loser.
func TestFeedAttemptEndings(t *testing.T) {
	t.Parallel()
	ok := attempt(1, 0, time.Second, 200, nil)
	overloaded := attempt(2, time.Second, time.Second, 529, &outlast.StatusError{StatusCode: 529})
	continued := attempt(3, 2*time.Second, time.Second, 200, nil)
	continued.Continued, continued.PrefillBytes = true, 80
	timeout := attempt(1, 0, time.Second, 0, context.DeadlineExceeded)
	timeout.Class = outlast.ClassTimeout // the Transport's class for its own attempt timeout
	hedged := attempt(2, 0, time.Second, 0, context.Canceled)
	hedged.Error = record.HedgedError
	errorEvent := attempt(1, 0, time.Second, 200, &outlast.StatusError{StatusCode: 200, Err: fmt.Errorf("%w: overloaded_error", outlast.ErrErrorEvent)})
	second := ok
	second.N = 2
	type want struct{ ending, outcome string }
	cases := []struct {
		name     string
		attempts []record.Attempt
		done     func(r *record.Request) // nil: the request is not over
		want     []want
	}{
		// A plain answer that went through whole.
		{"whole", []record.Attempt{ok}, func(r *record.Request) { r.Status = 200 },
			[]want{{"200", timeline.OutcomeOK}}},
		// A stream that went through whole says so.
		{"whole stream", []record.Attempt{ok}, func(r *record.Request) { r.Status, r.Stream = 200, true },
			[]want{{"200, stream whole", timeline.OutcomeOK}}},
		// An answer still on its way is green so far.
		{"answering", []record.Attempt{ok}, nil,
			[]want{{"200, answering", timeline.OutcomeOK}}},
		// A stream that broke after 300 bytes and was continued: its
		// first answer is amber, though the caller got the whole answer.
		{"broke, continued", []record.Attempt{ok, overloaded, continued}, func(r *record.Request) {
			r.Status, r.Stream, r.Bytes = 200, true, 900
			r.Continuations = []record.Continuation{{After: 300, Prefill: 80, Outcome: record.ContinuationOK}}
		}, []want{{"200, broke after 300 bytes, continued", timeline.OutcomeBroke}, {"529", timeline.Outcome5xx}, {"200, stream whole", timeline.OutcomeOK}}},
		// A stream that broke and was not continued: amber too.
		{"broke", []record.Attempt{ok}, func(r *record.Request) {
			r.Status, r.Stream, r.Bytes, r.Error = 200, true, 1234, record.ErrorUpstreamBroke
		}, []want{{"200, broke after 1234 bytes", timeline.OutcomeBroke}}},
		// The caller left mid-answer: the answer did not reach it whole.
		{"caller left", []record.Attempt{ok}, func(r *record.Request) {
			r.Status, r.Bytes, r.Error = 200, 12, record.ErrorClientClosed
		}, []want{{"200, the caller left after 12 bytes", timeline.OutcomeBroke}}},
		// An answer that was an error event is a failure: red.
		{"error event", []record.Attempt{errorEvent, second}, func(r *record.Request) {
			r.Status, r.Stream, r.Error = 529, true, record.ErrorUpstreamError
		}, []want{{"200 error_event", timeline.Outcome5xx}, {"200, an error event", timeline.Outcome5xx}}},
		// A hedge's loser was cancelled, and nothing failed: not a
		// network failure's colour.
		{"hedged", []record.Attempt{ok, hedged}, func(r *record.Request) { r.Status, r.Stream = 200, true },
			[]want{{"200, stream whole", timeline.OutcomeOK}, {"hedged: the other attempt answered first", timeline.OutcomeHedged}}},
		// A failure without a status is named by its class.
		{"timeout", []record.Attempt{timeout}, func(r *record.Request) { r.Status, r.Error = 504, "timeout" },
			[]want{{"timeout", timeline.OutcomeNetwork}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := timeline.New(0, 0)
			obs := f.Observer()
			r := request("r", "run")
			for _, a := range c.attempts {
				obs.AttemptStart(r, record.Attempt{N: a.N, Start: a.Start})
				r.Attempts = append(r.Attempts, a)
				obs.AttemptEnd(r, a)
			}
			if c.done != nil {
				c.done(r)
				r.End = t0.Add(5 * time.Second)
				obs.Done(r)
			}
			as := f.Snapshot().Requests[0].Attempts
			if len(as) != len(c.want) {
				t.Fatalf("got %d attempts, want %d", len(as), len(c.want))
			}
			for i, w := range c.want {
				if as[i].Ending != w.ending || as[i].Outcome != w.outcome {
					t.Errorf("attempt %d: got %q (%s), want %q (%s)", i+1, as[i].Ending, as[i].Outcome, w.ending, w.outcome)
				}
			}
		})
	}
}

// TestFeedEndingInFlight checks the ending of an attempt just sent, and
// that the page's JSON carries each attempt's ending by that name.
func TestFeedEndingInFlight(t *testing.T) {
	t.Parallel()
	f := timeline.New(0, 0)
	obs := f.Observer()
	r := request("r", "run")
	r.Stream = true
	first := attempt(1, 0, time.Second, 200, nil)
	obs.AttemptStart(r, first)
	r.Attempts = append(r.Attempts, first)
	obs.AttemptEnd(r, first)
	r.Continuations = []record.Continuation{{After: 300, Outcome: record.ContinuationOK}}
	obs.AttemptStart(r, attempt(2, time.Second, 0, 0, nil))
	b, err := json.Marshal(f.Snapshot().Requests[0].Attempts)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"outcome":"broke","ending":"200, broke after 300 bytes, continued"`, `"outcome":"inflight","ending":"in flight"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("got %s, want it to hold %s", b, want)
		}
	}
}

// A pool's member shows its pool and the limits its answers stated, as
// the pool counts them; a limit not stated, and an upstream that is no
// member, show none.
func TestFeedPoolMembers(t *testing.T) {
	t.Parallel()
	f := timeline.New(0, 0)
	unknown := outlast.Quota{Limit: -1, Remaining: -1}
	f.SetLoads(func() []record.Load {
		return []record.Load{
			{Upstream: "gpt", Requests: unknown, Tokens: unknown},
			{Upstream: "key-a", Pool: "gpt", Requests: outlast.Quota{Limit: 60, Remaining: 12}, Tokens: unknown},
		}
	})
	ups := f.Snapshot().Upstreams
	if len(ups) != 2 || ups[0].Pool != "" || ups[0].Requests != nil || ups[0].Tokens != nil {
		t.Fatalf("upstreams %+v, want the pool with no limits first", ups)
	}
	a := ups[1]
	if a.Pool != "gpt" || a.Requests == nil || *a.Requests != (timeline.Limit{Remaining: 12, Limit: 60}) || a.Tokens != nil {
		t.Errorf("member %+v, want pool gpt, 12 of 60 requests left, tokens not stated", a)
	}
}
