// Package record is what the gateway reports of each request: one
// [Request], with one [Attempt] per try at it, handed to an [Observer] as
// it happens and once more when the request is done.
//
// The values are already safe when an observer sees them. Each attempt was
// classified once, by outlast.Classify, where it ended, and carries that
// [outlast.Class]; its error text went through the one sanitizer, which
// cuts every URL's query and user info; the request's headers are those
// the gateway keeps, without credentials. An observer (the journal, the
// metrics, the timeline page, the traces) shows these values and never
// judges an error or a header again, so all of them agree.
//
// The package sits below the gateway and the observers alike: a journal or
// a dashboard needs it, not the gateway.
package record

import (
	"net/http"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/redact"
)

// A Request is one request through the gateway, with every attempt at it.
// The gateway fills it in as the request goes: an observer's live hooks
// see it unfinished, and Done sees it finished. It is plain data; the
// zero Request is a request with nothing known yet.
type Request struct {
	// ID identifies the request: a UUIDv7, sent to the caller as
	// Outlast-Request-Id.
	ID string
	// Run groups a host's requests into a run: the caller's Outlast-Run,
	// or "".
	Run string
	// Method is the request's HTTP method.
	Method string
	// Path is the request's path as the caller sent it, without its
	// query, which may carry a key.
	Path string
	// Header is the caller's request header without credentials and
	// without the names the gateway was told to redact, or nil when no
	// observer reads headers (see Observer.Headers).
	Header http.Header
	// Upstream is the name of the upstream that served the request.
	Upstream string
	// Slot is the named slot the request waited for (Outlast-Slot, or
	// llama.cpp's id_slot), or "".
	Slot string
	// Model is the JSON body's "model", or "".
	Model string
	// Start is when the request arrived.
	Start time.Time
	// Deadline is the request's deadline, or zero for none. It bounds
	// the attempts and the waits up to the answer's first byte; a
	// response that began in time is forwarded to its end.
	Deadline time.Time
	// DeadlineSource says where Deadline came from: DeadlineOutlast,
	// DeadlineSDK or DeadlineDefault; "" for none.
	DeadlineSource string
	// End is when the gateway was done with it; zero while it is not.
	End time.Time
	// Status is the status of the answer the caller got: the response's,
	// or, for an answer sent as an error event after progress comments
	// had committed a 200 stream, the status that the error stands for.
	// 499 means the caller left before the answer.
	Status int
	// Error is the kind of error the gateway answered with (its
	// Outlast-Error value, such as "busy" or "deadline"), one of the
	// Error constants for a failure it did not answer with an error of
	// its own, or "" when the upstream's response went through whole.
	Error string
	// Stream says the request asked for a stream: "stream": true in its
	// JSON body, or Accept: text/event-stream.
	Stream bool
	// Committed says that a byte of the upstream's response body reached
	// the caller: from then on nothing was retried.
	Committed bool
	// Held says that the answer was read whole before its first byte
	// went to the caller, so that a body cut short would have been
	// retried rather than forwarded. It is false for a stream, which
	// commits at its first event that carries the answer; for an answer
	// the gateway made itself; for an answer that went as it came, being
	// over the gateway's --max-body or finding no room in its
	// --hold-budget; and in records made before it was kept.
	Held bool
	// Bytes counts the response body bytes forwarded to the caller.
	Bytes int64
	// Attempts are the tries at the request, oldest first; an observer's
	// live hooks see those that have ended.
	Attempts []Attempt
	// Moves are the request's moves from an upstream to its fallback,
	// oldest first: every one, with those to an upstream that then made
	// no attempt (it refused the request busy, or down, and passed it on
	// or answered with the refusal), which no attempt's Fallback tells
	// of. Nil when it did not move, and in records made before them.
	Moves []Move
	// Continuations are the continuations of the request's stream, one
	// for each time it broke after its first byte on an upstream that
	// continues streams (outlast serve --continuation prefill or resume),
	// oldest first, those it could not make too. Nil when there were none.
	Continuations []Continuation
}

// A Continuation is one continuation of a stream that broke after its
// first byte had reached the caller: the request sent again with the
// answer so far as its final assistant message, the caller's stream
// carrying on with the new text; or, for the Responses API, the stream
// resumed after its last event forwarded. Its JSON form is its tags'.
type Continuation struct {
	// Upstream names the upstream whose stream broke.
	Upstream string `json:"upstream"`
	// After counts the bytes of the stream forwarded before the break.
	After int64 `json:"after"`
	// Prefill counts the bytes of the answer so far that it sent as the
	// prefill; 0 when it sent the request as it was, nothing of the
	// answer having come yet.
	Prefill int64 `json:"prefill"`
	// Outcome is how it ended: ContinuationOK, ContinuationResumed,
	// ContinuationReplayed, ContinuationRefused, ContinuationFailed,
	// ContinuationRestarted, ContinuationDiverged or
	// ContinuationUnsupported.
	Outcome string `json:"outcome"`
	// Reason says why it was not made, or failed; "" when it carried the
	// stream on, but for a replay's, which says why no prefill was sent
	// (the one sent was refused, or its model refused one lately). One
	// break has one Continuation.
	Reason string `json:"reason,omitempty"`
}

// The outcomes of a Continuation.
const (
	// ContinuationOK: the continuation's stream carried the answer on.
	ContinuationOK = "continued"
	// ContinuationRefused: the upstream refused the continuation with a
	// 4xx. A model's 400 or 422 to an assistant prefill is followed by a
	// replay, whose outcome the break's record has.
	ContinuationRefused = "refused"
	// ContinuationFailed: the continuation got no stream to carry on
	// with (its attempts failed, or its deadline less its reserve came),
	// or its stream was not its API's.
	ContinuationFailed = "failed"
	// ContinuationUnsupported: the stream could not be continued safely
	// (a tool call, reasoning, more than one choice, a shape outlast does
	// not know, a model that refused a prefill lately), and was not.
	ContinuationUnsupported = "unsupported"
	// ContinuationRestarted: the continuation's text began with the
	// answer's opening (its server answered the prefill from the start
	// rather than continuing it), and none of it reached the caller.
	ContinuationRestarted = "restarted"
	// ContinuationResumed: the stream was resumed after its last event
	// forwarded (Responses API, serve --continuation resume), and carried
	// the answer on.
	ContinuationResumed = "resumed"
	// ContinuationReplayed: the request was sent again as it was, to a
	// model that takes no prefill, and the answer carried on with the
	// part of its new answer past the answer so far, which it started
	// with.
	ContinuationReplayed = "replayed"
	// ContinuationDiverged: the replay's text differed from the answer
	// so far, and none of it reached the caller.
	ContinuationDiverged = "diverged"
)

// CarriedOn reports whether the continuation carried the answer on:
// continued, resumed or replayed.
func (c Continuation) CarriedOn() bool {
	return c.Outcome == ContinuationOK || c.Outcome == ContinuationResumed || c.Outcome == ContinuationReplayed
}

// Answered returns the name of the upstream whose answer the caller got:
// the one the last move went to, or Upstream. It may have made no
// attempt: a refusal, busy or down, is its answer too.
func (r *Request) Answered() string {
	if n := len(r.Moves); n > 0 {
		return r.Moves[n-1].To
	}
	return r.Upstream
}

// A Move is a request's move from one upstream to its fallback. Its
// JSON form, in the record's and the journal's, is its tags'.
type Move struct {
	// From names the upstream the request left.
	From string `json:"from"`
	// To names the upstream it moved to.
	To string `json:"to"`
	// Reason is why it moved: "down", "spent", "silent", "busy" or
	// "context-length", as outlast.FallbackReason says, ReasonHedge, or
	// ReasonRateLimited.
	Reason string `json:"reason"`
}

// ReasonHedge is the Reason of a Move to a hedge that answered first,
// and the Fallback of a hedge's first attempt: a stream that had sent no
// content after its hedge delay was sent to the first fallback too.
const ReasonHedge = "hedge"

// ReasonRateLimited is the Reason of a Move from a pool's member that
// answered 429 to another member.
const ReasonRateLimited = "rate-limited"

// The sources of a request's deadline (Request.DeadlineSource).
const (
	// DeadlineOutlast is the request's Outlast-Timeout or
	// Outlast-Deadline.
	DeadlineOutlast = "outlast"
	// DeadlineSDK is the SDK's own timeout, which the OpenAI and
	// Anthropic SDKs made by Stainless send as X-Stainless-Timeout, less
	// a margin, so that the SDK reads the answer before it gives up.
	DeadlineSDK = "sdk"
	// DeadlineDefault is the upstream's default for a request that
	// brings none (outlast serve --timeout).
	DeadlineDefault = "default"
)

// The kinds of Request.Error that are not an Outlast-Error of the
// gateway's own answer.
const (
	// ErrorUpstreamError is an upstream's failure sent as an error
	// event: to a caller whose 200 event stream progress comments had
	// already committed, with the upstream's status in Request.Status;
	// or as the first event of the upstream's own 200 stream, the last
	// attempt's answer, forwarded as it came.
	ErrorUpstreamError = "upstream-error"
	// ErrorUpstreamBroke is a response the upstream broke off. After its
	// first byte had reached the caller, a stream ends with an error
	// event and any other body with a cut connection, and Status is the
	// upstream's; before it, the caller got a 502 with Outlast-Error:
	// upstream-broke.
	ErrorUpstreamBroke = "upstream-broke"
	// ErrorClientClosed is a caller that left before its answer was
	// done; Status is 499 if it left before the answer began.
	ErrorClientClosed = "client-closed"
)

// An Attempt is one try at a request: an outlast.Attempt in the form
// observers read. [NewAttempt] makes one.
type Attempt struct {
	// CallID identifies the attempt: a UUIDv7, so sorting IDs sorts
	// attempts.
	CallID string
	// N is the attempt's number, 1 for the first.
	N int
	// Upstream names the upstream the attempt went to: the request's own,
	// or one it fell back to. Empty in records made before fallbacks.
	Upstream string
	// Fallback is why the request moved to this attempt's upstream
	// ("down", "spent", "silent", "busy" or "context-length", as
	// outlast.FallbackReason says), on the first attempt there after a
	// move; else "". The first attempt of a hedge, sent beside the
	// request's own, says ReasonHedge, whether or not it won. The
	// request's Moves say where it moved from.
	Fallback string
	// Start is when the attempt was sent, after the gate.
	Start time.Time
	// End is when its response, first byte or failure came; zero while
	// it is in flight.
	End time.Time
	// Key is the gate key the attempt held, such as "slot 3", or "" for
	// the upstream's own bound. The journal does not keep it: the
	// request's Slot says the same.
	Key string
	// QueuedAhead is how many held or waited for the key when the
	// attempt joined the gate's queue; 0 when it did not queue.
	QueuedAhead int
	// GateWait is how long the attempt waited at the gate.
	GateWait time.Duration
	// AdmissionWait is how long the attempt waited for its upstream,
	// before the gate, while the upstream was down or recovering.
	AdmissionWait time.Duration
	// Probe says the attempt was its upstream's one probe while down.
	Probe bool
	// Status is the response's status, or 0 if none came.
	Status int
	// Class is how the attempt ended, as outlast.Classify judged it when
	// it did: outlast.ClassNone for the response that was returned.
	Class outlast.Class
	// Error is the failure's message, its URLs' queries and user info
	// cut, or "".
	Error string
	// RetryIn is the wait before the next attempt, when one followed.
	RetryIn time.Duration
	// RetryAfter is the delay the server asked for, if any, as it was
	// used: cut to the upstream's bound when longer (RetryAfterCut).
	RetryAfter time.Duration
	// RetryAfterCut says the server asked for a longer delay than the
	// upstream's bound (outlast serve --max-retry-after), and RetryAfter
	// is that bound.
	RetryAfterCut bool
	// Bytes counts the response body bytes forwarded from this attempt:
	// the committed attempts', else 0.
	Bytes int64
	// Continued says that the attempt continued a stream that broke
	// after its first byte (see Request.Continuations), carrying
	// PrefillBytes of the answer so far.
	Continued bool
	// PrefillBytes counts the bytes of the answer so far that a
	// continuation sent as its final assistant message.
	PrefillBytes int64
}

// NewAttempt returns the record of a: its class as a carries it, and its
// error's text sanitized. Bytes is left zero: outlast.Attempt does not
// count them, and the gateway does.
func NewAttempt(a outlast.Attempt) Attempt {
	at := Attempt{
		CallID:      a.CallID,
		N:           a.N,
		Upstream:    a.Upstream,
		Start:       a.Start,
		End:         a.End,
		Key:         a.Key,
		QueuedAhead: a.Ahead,
		GateWait:    a.GateWait,
		Status:      a.Status,
		// The admission's part of the wait, and whether it probed.
		AdmissionWait: a.AdmissionWait,
		Probe:         a.Probe,
		Class:         a.Class,
		RetryIn:       a.RetryIn,
		RetryAfter:    a.RetryAfter,
		RetryAfterCut: a.RetryAfterCut,
	}
	if a.Err != nil {
		at.Error = redact.Text(a.Err.Error())
	}
	return at
}

// Load is one upstream's gate at one moment, as the gateway counts it:
// for observers that show slots and queues.
type Load struct {
	// Upstream is the upstream's name.
	Upstream string
	// Slots is the upstream's bound on requests in flight; 0 means none.
	Slots int
	// InFlight counts the requests in flight, over the bound and every
	// named slot.
	InFlight int
	// Queued counts the requests waiting, over the bound and every named
	// slot.
	Queued int
	// Named counts the requests waiting for each named slot, by gate key
	// ("slot 3"); nil when none is in use.
	Named map[string]int
	// Admission says the upstream has an admission controller, whose
	// State, Limit and Waiting follow.
	Admission bool
	// State is the upstream's admission state.
	State outlast.UpstreamState
	// Limit is the admission's limit of requests in flight while the
	// upstream recovers; 0 otherwise.
	Limit int
	// Waiting counts the requests waiting for the upstream to come back,
	// before the gate.
	Waiting int
	// Pool names the pool the upstream is a member of; empty for one
	// that is not a member.
	Pool string
	// Requests and Tokens are a pool member's rate limits as its pool
	// counts them now (see outlast.Pool); not Known for a limit the
	// member's answers have not stated, and for an upstream that is not
	// a member.
	Requests, Tokens outlast.Quota
}
