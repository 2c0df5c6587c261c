package record

import (
	"time"

	"github.com/outlast-llm/outlast"
)

// An Observer is told what the gateway does with each request as it does
// it. Any field may be nil. The calls for one request come in order, from
// the goroutine serving it; calls for different requests may come at
// once. The *Request is the gateway's own: read it during the call, and
// copy what you keep.
type Observer struct {
	// Queued is called when a request joins a gate's queue for key, with
	// ahead others holding or waiting for it.
	Queued func(r *Request, key string, ahead int)
	// AttemptStart is called when an attempt is sent.
	AttemptStart func(r *Request, a Attempt)
	// AttemptEnd is called when an attempt has its result, after it was
	// added to r.Attempts. RetryIn is set when another will follow. For
	// the attempt whose answer it forwards, the gateway makes the call
	// once the answer's first bytes have been sent to the caller (its
	// status line, for an answer with no body), so that no observer
	// delays an answer; a.End is still when the response came. A hedged
	// request's sides are told of as they end.
	AttemptEnd func(r *Request, a Attempt)
	// Done is called once, when the request is finished: r.End is set
	// and r.Attempts holds every attempt.
	Done func(r *Request)
	// UpstreamState is called when an upstream's admission state
	// changes: healthy, down, probing or recovering (see
	// outlast.Admission). It comes from the goroutine that changed it,
	// with no lock held.
	UpstreamState func(c StateChange)

	// Headers says the observer reads Request.Header. The gateway copies
	// the caller's headers, without credentials, only when an observer
	// does; otherwise Header is nil, and the copy costs nothing.
	Headers bool
}

// Observers returns an Observer that tells each of obs in turn, in order.
func Observers(obs ...Observer) Observer {
	var o Observer
	for _, x := range obs {
		o.Queued = chain3(o.Queued, x.Queued)
		o.AttemptStart = chain2(o.AttemptStart, x.AttemptStart)
		o.AttemptEnd = chain2(o.AttemptEnd, x.AttemptEnd)
		o.Done = chain1(o.Done, x.Done)
		o.UpstreamState = chain1(o.UpstreamState, x.UpstreamState)
		o.Headers = o.Headers || x.Headers
	}
	return o
}

// chain1, chain2 and chain3 return a hook, of one, two or three
// arguments, that calls first and then next: either alone if the other
// is nil.
func chain1[A any](first, next func(A)) func(A) {
	switch {
	case first == nil:
		return next
	case next == nil:
		return first
	}
	return func(a A) { first(a); next(a) }
}

func chain2[A, B any](first, next func(A, B)) func(A, B) {
	switch {
	case first == nil:
		return next
	case next == nil:
		return first
	}
	return func(a A, b B) { first(a, b); next(a, b) }
}

func chain3[A, B, C any](first, next func(A, B, C)) func(A, B, C) {
	switch {
	case first == nil:
		return next
	case next == nil:
		return first
	}
	return func(a A, b B, c C) { first(a, b, c); next(a, b, c) }
}

// A StateChange is an upstream's admission state changing.
type StateChange struct {
	// Upstream is the upstream's name.
	Upstream string
	// At is when it changed.
	At time.Time
	// From and To are the states, such as outlast.Down.
	From, To outlast.UpstreamState
}
