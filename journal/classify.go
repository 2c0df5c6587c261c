package journal

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/outlast-llm/outlast"
)

// The classes of an attempt's failure, as [ClassOf] names them and
// [Attempt.ErrorClass] keeps them.
const (
	ClassStatus      = "status"       // a failed status: a *outlast.StatusError
	ClassErrorEvent  = "error_event"  // a 200 event stream that opened with an error (outlast.ErrErrorEvent)
	ClassBusy        = "busy"         // the gate's queue was full (outlast.ErrBusy)
	ClassStalled     = "stalled"      // no first byte in time (outlast.ErrStalled)
	ClassClosedEarly = "closed_early" // the body ended before its first byte (outlast.ErrClosedEarly)
	ClassCanceled    = "canceled"     // the caller's context ended: its cancellation or its deadline
	ClassRefused     = "refused"      // no connection: refused, or the dial failed (a name that did not resolve, say)
	ClassReset       = "reset"        // the connection broke before the response: reset, aborted, or closed (EOF)
	ClassTimeout     = "timeout"      // a timeout that was not the caller's, such as a response header timeout
	ClassOther       = "other"        // anything else
)

// ClassOf returns the class of an attempt's failure, or "" for nil.
//
// The order matters where classes nest: an error event is carried by a
// *outlast.StatusError, and a stall is also a timeout.
func ClassOf(err error) string {
	var se *outlast.StatusError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, outlast.ErrErrorEvent):
		return ClassErrorEvent
	case errors.As(err, &se):
		return ClassStatus
	case errors.Is(err, outlast.ErrBusy):
		return ClassBusy
	case errors.Is(err, outlast.ErrStalled):
		return ClassStalled
	case errors.Is(err, outlast.ErrClosedEarly):
		return ClassClosedEarly
	case callerDone(err):
		return ClassCanceled
	case refused(err):
		return ClassRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ClassReset
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ClassTimeout
	}
	return ClassOther
}

// refused reports a connection that was never made.
func refused(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// callerDone reports whether err is the caller's own context ending. It
// compares the chain's errors by identity, as the root package does,
// rather than with errors.Is: net/http's own timeouts (its response
// header timeout) match context.DeadlineExceeded through an Is method, and
// those are the server's slowness, not the caller's impatience.
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
