package timeline

import (
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/apierr"
	"github.com/outlast-llm/outlast/record"
)

// The outcomes of attempts and requests, which the page colours.
const (
	OutcomeOK       = "ok"       // a response below 400
	Outcome4xx      = "4xx"      // a 4xx status, 429 included
	Outcome5xx      = "5xx"      // a 5xx status, or a stream that opened with an error event (overloaded)
	OutcomeNetwork  = "network"  // no response: refused, reset, timed out, stalled or canceled
	OutcomeBusy     = "busy"     // the gateway's queue was full
	OutcomeInFlight = "inflight" // not over yet
)

// The states of a request.
const (
	StateQueued  = "queued"  // waiting for a slot
	StateSending = "sending" // an attempt is in flight
	StateWaiting = "waiting" // between attempts, or before the first
	StateDone    = "done"    // the gateway has answered
)

// Snapshot is the body of GET /outlast/recent and of the event stream's
// first event. Times are milliseconds since the Unix epoch, to the
// microsecond.
type Snapshot struct {
	Now       float64    `json:"now"`       // when the snapshot was taken
	Keep      int        `json:"keep"`      // how many requests the feed keeps
	Dropped   int64      `json:"dropped"`   // events not sent to slow clients since the feed was made
	Requests  []Request  `json:"requests"`  // oldest first
	Upstreams []Upstream `json:"upstreams"` // in the gateway's order
}

// Request is what the page shows of one request through the gateway. Its
// times are milliseconds since the Unix epoch; zero means not yet.
type Request struct {
	ID       string    `json:"id"`
	Run      string    `json:"run"`
	Method   string    `json:"method"`
	Path     string    `json:"path"`
	Upstream string    `json:"upstream"`
	Slot     string    `json:"slot,omitempty"`
	Model    string    `json:"model,omitempty"`
	Stream   bool      `json:"stream,omitempty"`
	State    string    `json:"state"`   // one of the State constants
	Outcome  string    `json:"outcome"` // one of the Outcome constants, from the status sent
	Start    float64   `json:"start"`
	End      float64   `json:"end,omitempty"`
	Status   int       `json:"status,omitempty"`    // the status sent to the caller; 499 if the caller left
	Error    string    `json:"error,omitempty"`     // the Outlast-Error kind of a response the gateway made
	QueuedAt float64   `json:"queued_at,omitempty"` // while State is StateQueued: since when
	Ahead    int       `json:"ahead,omitempty"`     // while State is StateQueued: how many were ahead when it joined
	Attempts []Attempt `json:"attempts"`
}

// Attempt is what the page shows of one attempt. Times and durations are
// milliseconds.
type Attempt struct {
	N          int     `json:"n"`
	Key        string  `json:"key,omitempty"`         // the gate key, as "slot 3"
	Ahead      int     `json:"ahead,omitempty"`       // how many were ahead when it queued
	GateWait   float64 `json:"gate_wait,omitempty"`   // how long it waited for a slot, just before Start
	Start      float64 `json:"start"`                 // since the Unix epoch
	End        float64 `json:"end,omitempty"`         // since the Unix epoch; zero while in flight
	Status     int     `json:"status,omitempty"`      // the response's status, if there was one
	Outcome    string  `json:"outcome"`               // one of the Outcome constants
	Error      string  `json:"error,omitempty"`       // the failure's class (outlast.Class), as "rate_limited" or "refused"
	RetryAfter float64 `json:"retry_after,omitempty"` // the delay the server asked for
	RetryIn    float64 `json:"retry_in,omitempty"`    // the wait before the next attempt
}

// Upstream is the state of one upstream's slots, for the page's panel.
type Upstream struct {
	Name     string   `json:"name"`
	Slots    int      `json:"slots"` // 0 means no bound
	InFlight int      `json:"in_flight"`
	Queued   int      `json:"queued"`
	Queue    []Waiter `json:"queue"` // in arrival order
}

// Waiter is a request waiting for a slot.
type Waiter struct {
	ID       string  `json:"id"`
	Run      string  `json:"run"`
	Key      string  `json:"key,omitempty"`
	Position int     `json:"position"` // 1 is next, among the waiters for the same key
	Ahead    int     `json:"ahead"`    // how many were ahead when it joined
	Since    float64 `json:"since"`    // milliseconds since the Unix epoch
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

// attemptOf is the page's view of a.
func attemptOf(a record.Attempt) Attempt {
	return Attempt{
		N:          a.N,
		Key:        a.Key,
		Ahead:      a.QueuedAhead,
		GateWait:   ms(a.GateWait),
		Start:      millis(a.Start),
		End:        millis(a.End),
		Status:     a.Status,
		Outcome:    attemptOutcome(a),
		Error:      a.Class.String(),
		RetryAfter: ms(a.RetryAfter),
		RetryIn:    ms(a.RetryIn),
	}
}

// attemptOutcome is the colour of an attempt, from its class.
func attemptOutcome(a record.Attempt) string {
	switch {
	case a.End.IsZero():
		return OutcomeInFlight
	}
	switch a.Class {
	case outlast.ClassNone:
		return OutcomeOK
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
	case r.Error == record.ErrorUpstreamBroke:
		// The caller got a 200 and part of the answer: the rest is lost.
		return Outcome5xx
	case r.Status >= 500:
		return Outcome5xx
	case r.Status >= 400:
		return Outcome4xx
	}
	return OutcomeOK
}
