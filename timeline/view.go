package timeline

import (
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/apierr"
	"github.com/outlast-llm/outlast/record"
)

// The outcomes of attempts and requests, which the page colours.
const (
	OutcomeOK       = "ok"       // a response below 400; of an attempt, an answer whole so far
	Outcome4xx      = "4xx"      // a 4xx status, 429 included
	Outcome5xx      = "5xx"      // a 5xx status, or a stream that opened with an error event (overloaded)
	OutcomeNetwork  = "network"  // no response: refused, reset, timed out, stalled or canceled
	OutcomeBusy     = "busy"     // the gateway's queue was full
	OutcomeInFlight = "inflight" // not over yet
	OutcomeBroke    = "broke"    // an attempt's answer that was cut after bytes had reached the caller
	OutcomeHedged   = "hedged"   // an attempt cancelled because the other side of its hedge answered first
)

// The states of a request.
const (
	StateQueued  = "queued"  // waiting for a slot
	StateSending = "sending" // an attempt is in flight
	StateWaiting = "waiting" // between attempts, or before the first
	StateDone    = "done"    // the gateway has answered
)

// Snapshot is the body of GET /outlast/recent and of the event stream's
// first event; the page's HTML carries one of the newest requests, for
// its first paint. Times are milliseconds since the Unix epoch, to the
// microsecond.
type Snapshot struct {
	// Now is when the snapshot was taken.
	Now float64 `json:"now"`
	// Keep is how many requests the feed keeps at most.
	Keep int `json:"keep"`
	// KeepBytes bounds their size as JSON.
	KeepBytes int `json:"keep_bytes"`
	// Dropped counts the events not sent to slow clients since the feed
	// was made.
	Dropped int64 `json:"dropped"`
	// Requests are the kept requests, oldest first.
	Requests []Request `json:"requests"`
	// Elided counts the older kept requests that Requests leaves out:
	// none, but in the page's HTML, which carries only the newest that
	// the page draws.
	Elided int `json:"elided,omitempty"`
	// Upstreams are the upstreams' slots, in the gateway's order.
	Upstreams []Upstream `json:"upstreams"`
	// States are the last MaxStates changes of the upstreams' admission
	// states, oldest first.
	States []StateChange `json:"states"`
}

// Request is what the page shows of one request through the gateway. Its
// times are milliseconds since the Unix epoch; zero means not yet.
type Request struct {
	// ID is the request's ID, as Outlast-Request-Id gave it.
	ID string `json:"id"`
	// Run is the request's Outlast-Run, or "".
	Run string `json:"run"`
	// Method is the request's HTTP method.
	Method string `json:"method"`
	// Path is the request's path, without its query.
	Path string `json:"path"`
	// Upstream is the name of the upstream that served it.
	Upstream string `json:"upstream"`
	// Slot is the named slot it waited for, or "".
	Slot string `json:"slot,omitempty"`
	// Model is the JSON body's "model", or "".
	Model string `json:"model,omitempty"`
	// Stream says the request asked for a stream.
	Stream bool `json:"stream,omitempty"`
	// State is where the request stands: one of the State constants.
	State string `json:"state"`
	// Outcome is the colour of the answer the caller got: one of the
	// Outcome constants.
	Outcome string `json:"outcome"`
	// Start is when the request arrived.
	Start float64 `json:"start"`
	// End is when the gateway was done with it.
	End float64 `json:"end,omitempty"`
	// Status is the status of the answer the caller got (see
	// record.Request.Status); 499 if the caller left.
	Status int `json:"status,omitempty"`
	// Error is the kind of a failure: the Outlast-Error of a response
	// the gateway made, or one of the record.Error constants.
	Error string `json:"error,omitempty"`
	// QueuedAt is, while State is StateQueued, since when.
	QueuedAt float64 `json:"queued_at,omitempty"`
	// Ahead is, while State is StateQueued, how many were ahead when it
	// joined the queue.
	Ahead int `json:"ahead,omitempty"`
	// Attempts are the request's attempts, oldest first, the one in
	// flight last: the last MaxAttempts of them.
	Attempts []Attempt `json:"attempts"`
	// Elided counts the earlier attempts that Attempts leaves out.
	Elided int `json:"elided,omitempty"`
}

// Attempt is what the page shows of one attempt. Times and durations are
// milliseconds.
type Attempt struct {
	// N is the attempt's number, 1 for the first.
	N int `json:"n"`
	// Key is the gate key it held, as "slot 3", or "".
	Key string `json:"key,omitempty"`
	// Ahead is how many were ahead when it queued.
	Ahead int `json:"ahead,omitempty"`
	// GateWait is how long it waited for a slot, just before Start.
	GateWait float64 `json:"gate_wait,omitempty"`
	// AdmissionWait is how long it waited for its upstream to take it,
	// while the upstream was down or recovering, just before GateWait.
	AdmissionWait float64 `json:"admission_wait,omitempty"`
	// Probe says it was its upstream's one probe while down.
	Probe bool `json:"probe,omitempty"`
	// Upstream names the upstream it went to: the request's own, or a
	// fallback.
	Upstream string `json:"upstream,omitempty"`
	// Fallback is why it went to a fallback, on the first attempt there
	// ("down", "spent", "silent", "busy", "context-length", or "hedge"
	// for a hedge sent beside the request's own attempt), else "".
	Fallback string `json:"fallback,omitempty"`
	// Continued says it continued a stream that broke after its first
	// byte, carrying PrefillBytes of the answer so far: the page marks
	// the splice.
	Continued    bool  `json:"continued,omitempty"`
	PrefillBytes int64 `json:"prefill_bytes,omitempty"`
	// Start is when it was sent, since the Unix epoch.
	Start float64 `json:"start"`
	// End is when its answer or failure came, since the Unix epoch; zero
	// while it is in flight.
	End float64 `json:"end,omitempty"`
	// Status is the response's status, if there was one.
	Status int `json:"status,omitempty"`
	// Outcome is the attempt's colour: one of the Outcome constants.
	// An answer that went to the caller is OutcomeOK until it is known
	// to have been cut, and then OutcomeBroke, continued or not.
	Outcome string `json:"outcome"`
	// Ending says how the attempt ended, in words, as
	// record.Request.Ending says it: "529", "timeout", "200, broke after
	// 300 bytes, continued", "hedged: the other attempt answered first".
	// It holds statuses, classes, byte counts and fixed words, never an
	// error's text, which may hold a URL and its key.
	Ending string `json:"ending"`
	// Error is the failure's class, the attempt's outlast.Class, as
	// "rate_limited" or "refused"; "" for none.
	Error string `json:"error,omitempty"`
	// RetryAfter is the delay the server asked for.
	RetryAfter float64 `json:"retry_after,omitempty"`
	// RetryIn is the wait before the next attempt.
	RetryIn float64 `json:"retry_in,omitempty"`
}

// Upstream is the state of one upstream's slots, for the page's panel.
type Upstream struct {
	// Name is the upstream's name.
	Name string `json:"name"`
	// Slots is its bound on requests in flight; 0 means none.
	Slots int `json:"slots"`
	// InFlight counts its requests in flight.
	InFlight int `json:"in_flight"`
	// Queued counts its requests waiting for a slot.
	Queued int `json:"queued"`
	// Queue lists the waiting requests the feed has seen, in arrival
	// order.
	Queue []Waiter `json:"queue"`
	// Pool names the pool the upstream is a member of, if it is one.
	Pool string `json:"pool,omitempty"`
	// Requests and Tokens are a pool member's rate limits as its pool
	// counts them now, when its answers have stated them.
	Requests *Limit `json:"requests,omitempty"`
	Tokens   *Limit `json:"tokens,omitempty"`
}

// A Limit is one of a pool member's rate limits: what is left of it now,
// and the limit a window (-1 if not stated).
type Limit struct {
	Remaining int64 `json:"remaining"`
	Limit     int64 `json:"limit"`
}

// limitOf returns q as a Limit, nil if it is not known.
func limitOf(q outlast.Quota) *Limit {
	if !q.Known() {
		return nil
	}
	return &Limit{Remaining: q.Remaining, Limit: q.Limit}
}

// StateChange is a change of an upstream's admission state, for the
// page's band of each upstream's states.
type StateChange struct {
	// Upstream is the upstream's name.
	Upstream string `json:"upstream"`
	// At is when it changed, in milliseconds since the Unix epoch.
	At float64 `json:"at"`
	// From and To are the states' names: "healthy", "down", "probing"
	// or "recovering".
	From string `json:"from"`
	To   string `json:"to"`
}

// stateOf is the page's view of c.
func stateOf(c record.StateChange) StateChange {
	return StateChange{Upstream: c.Upstream, At: millis(c.At), From: c.From.String(), To: c.To.String()}
}

// Waiter is a request waiting for a slot.
type Waiter struct {
	// ID is the request's ID.
	ID string `json:"id"`
	// Run is the request's run, or "".
	Run string `json:"run"`
	// Key is the gate key it waits for, as "slot 3", or "" for the
	// upstream's bound.
	Key string `json:"key,omitempty"`
	// Position is its place among the waiters for the same key: 1 is
	// next.
	Position int `json:"position"`
	// Ahead is how many were ahead when it joined.
	Ahead int `json:"ahead"`
	// Since is when it joined, in milliseconds since the Unix epoch.
	Since float64 `json:"since"`
}

// millis is t in milliseconds since the Unix epoch, or 0 for the zero
// time. Microseconds are enough for bars that are pixels wide.
func millis(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixMicro()) / 1e3
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// attemptOf is the page's view of r's attempt i. Its ending and colour
// depend on the attempts after it and on how r ended, as well as on the
// attempt: a view is made anew at each change of r.
func attemptOf(r *record.Request, i int) Attempt {
	v := attemptFields(&r.Attempts[i])
	v.Ending, v.Outcome = r.Ending(i), attemptOutcome(r, i)
	return v
}

// inFlight is the page's view of a, an attempt just sent, which its
// request's Attempts do not hold yet. Its ending is what Ending says of
// an attempt with no end, asked of a request of a alone, so that the
// words stay record's.
func inFlight(a record.Attempt) Attempt {
	v := attemptFields(&a)
	alone := record.Request{Attempts: []record.Attempt{a}}
	v.Ending, v.Outcome = alone.Ending(0), OutcomeInFlight
	return v
}

// attemptFields is the page's view of a, but for its ending and colour.
func attemptFields(a *record.Attempt) Attempt {
	return Attempt{
		N:             a.N,
		Key:           a.Key,
		Ahead:         a.QueuedAhead,
		GateWait:      ms(a.GateWait),
		AdmissionWait: ms(a.AdmissionWait),
		Probe:         a.Probe,
		Upstream:      a.Upstream,
		Fallback:      a.Fallback,
		Continued:     a.Continued,
		PrefillBytes:  a.PrefillBytes,
		Start:         millis(a.Start),
		End:           millis(a.End),
		Status:        a.Status,
		Error:         a.Class.String(),
		RetryAfter:    ms(a.RetryAfter),
		RetryIn:       ms(a.RetryIn),
	}
}

// attemptOutcome is the colour of r's attempt i: from its class, or for
// the answer that went to the caller, from how that answer ended.
func attemptOutcome(r *record.Request, i int) string {
	a := &r.Attempts[i]
	switch {
	case a.Error == record.HedgedError:
		// Its class is canceled, as the caller's leaving is; but nothing
		// failed: the hedge's other side answered.
		return OutcomeHedged
	case a.End.IsZero():
		return OutcomeInFlight
	}
	switch a.Class {
	case outlast.ClassNone:
		return answerOutcome(r, i)
	case outlast.ClassBusy:
		return OutcomeBusy
	case outlast.ClassRateLimited, outlast.ClassStatus4xx:
		return Outcome4xx
	case outlast.ClassOverloaded, outlast.ClassStatus5xx, outlast.ClassErrorEvent:
		// An event stream that opened with an error is an overload in
		// all but its status line (Anthropic's overloaded_error).
		return Outcome5xx
	}
	return OutcomeNetwork
}

// answerOutcome is the colour of r's attempt i, whose answer went to the
// caller. It is green while the answer is whole so far, and amber once
// it is known to have been cut after bytes had gone: when it broke and a
// continuation was made of it (record.Request.Break), or when r ended
// with a failure of its own (the upstream broke it and it was not
// continued, the caller left, the gateway shut down). An answer that was
// an error event is red, as its request is.
func answerOutcome(r *record.Request, i int) string {
	switch {
	case r.Break(i) != nil:
		return OutcomeBroke
	case r.End.IsZero(), r.Error == "":
		return OutcomeOK
	case r.Error == record.ErrorUpstreamError:
		return Outcome5xx
	}
	return OutcomeBroke
}

// requestOutcome is the outcome of the response sent for r, which is over
// when done.
func requestOutcome(r *record.Request, done bool) string {
	switch {
	case !done:
		return OutcomeInFlight
	case r.Error == apierr.Busy:
		return OutcomeBusy
	case r.Error == apierr.Unreachable, r.Error == apierr.Timeout, r.Error == apierr.Deadline, r.Status == 499:
		return OutcomeNetwork
	case r.Error == record.ErrorUpstreamBroke, r.Error == record.ErrorUpstreamError:
		// The caller got a 200 and part of the answer, or an error
		// event under it.
		return Outcome5xx
	case r.Status >= 500:
		return Outcome5xx
	case r.Status >= 400:
		return Outcome4xx
	}
	return OutcomeOK
}
