package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"

	"github.com/outlast-llm/outlast"
)

// outcome is how an attempt ended: the outcome label of
// outlast_attempts_total and, but for ok, the reason label of
// outlast_retries_total. The set is fixed, so every value is exported at
// zero from the start.
type outcome uint8

const (
	outcomeOK          outcome = iota // no failure: a status below 400
	outcomeRateLimited                // 429
	outcomeOverloaded                 // 529, Anthropic's overloaded
	outcome4xx                        // any other 4xx
	outcome5xx                        // any other 5xx
	outcomeErrorEvent                 // a 200 event stream that opened with an error (outlast.ErrErrorEvent)
	outcomeStalled                    // no first byte in time (outlast.ErrStalled)
	outcomeClosedEarly                // the body ended before its first byte (outlast.ErrClosedEarly)
	outcomeRefused                    // no connection: refused, or the dial failed
	outcomeReset                      // the connection broke before the response
	outcomeTimeout                    // a timeout that was not the caller's
	outcomeCanceled                   // the caller's context ended: it left, or its deadline passed
	outcomeOther                      // anything else, a status outside 400–599 among them
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	"ok", "rate_limited", "overloaded", "status_4xx", "status_5xx", "error_event",
	"stalled", "closed_early", "refused", "reset", "timeout", "canceled", "other",
}

func (o outcome) String() string { return outcomeNames[o] }

// outcomeOf classifies an attempt's failure, as Attempt.Err holds it. The
// classes are the journal's (journal.ClassOf), with the status class split
// by code; they are rebuilt here, not imported, so that metrics does not
// pull in the journal's SQL drivers.
//
// The order matters where classes nest: an error event is carried by a
// *outlast.StatusError, and a stall is also a timeout.
func outcomeOf(err error) outcome {
	if err == nil {
		return outcomeOK
	}
	if errors.Is(err, outlast.ErrErrorEvent) {
		return outcomeErrorEvent
	}
	// AsType, not As: As's target escapes, and this runs per attempt.
	if se, ok := errors.AsType[*outlast.StatusError](err); ok {
		return statusOutcome(se.StatusCode)
	}
	switch {
	case errors.Is(err, outlast.ErrStalled):
		return outcomeStalled
	case errors.Is(err, outlast.ErrClosedEarly):
		return outcomeClosedEarly
	case callerDone(err):
		return outcomeCanceled
	case refused(err):
		return outcomeRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// net/http returns EOF when the server closes the connection
		// before a response.
		return outcomeReset
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return outcomeTimeout
	}
	return outcomeOther
}

func statusOutcome(code int) outcome {
	switch {
	case code == http.StatusTooManyRequests:
		return outcomeRateLimited
	case code == 529: // Anthropic's overloaded_error; not in net/http
		return outcomeOverloaded
	case code >= 400 && code <= 499:
		return outcome4xx
	case code >= 500 && code <= 599:
		return outcome5xx
	}
	return outcomeOther
}

// refused reports a connection that was never made.
func refused(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	op, ok := errors.AsType[*net.OpError](err)
	return ok && op.Op == "dial"
}

// callerDone reports whether err is the caller's own context ending. It
// compares the chain's errors by identity, as the root package does,
// rather than with errors.Is: net/http's response header timeout matches
// context.DeadlineExceeded through an Is method, and that is the server's
// slowness, not the caller's impatience.
func callerDone(err error) bool {
	// Depth-first over both Unwrap forms, bounded as no real chain is.
	stack := []error{err}
	for seen := 0; len(stack) > 0 && seen < 64; seen++ {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if e == context.Canceled || e == context.DeadlineExceeded {
			return true
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			if next := u.Unwrap(); next != nil {
				stack = append(stack, next)
			}
		case interface{ Unwrap() []error }:
			for _, next := range u.Unwrap() {
				if next != nil {
					stack = append(stack, next)
				}
			}
		}
	}
	return false
}
