package tracing

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"

	"github.com/outlast-llm/outlast"
)

// errorType is the error.type of an attempt that ended with err and
// status, or "" for a success. The classes are the journal's
// (journal.ClassOf), rebuilt here so that tracing does not pull in the
// journal's SQL drivers, except that a failed status is named by its code,
// as OpenTelemetry's HTTP conventions ask.
//
// The order matters where classes nest: an error event is carried by a
// *outlast.StatusError, and a stall is also a timeout.
func errorType(err error, status int) string {
	if err == nil {
		if status >= 400 {
			return strconv.Itoa(status)
		}
		return ""
	}
	var se *outlast.StatusError
	switch {
	case errors.Is(err, outlast.ErrErrorEvent):
		return "error_event"
	case errors.As(err, &se):
		return strconv.Itoa(se.StatusCode)
	case errors.Is(err, outlast.ErrBusy):
		return "busy"
	case errors.Is(err, outlast.ErrStalled):
		return "stalled"
	case errors.Is(err, outlast.ErrClosedEarly):
		return "closed_early"
	case callerDone(err):
		return "canceled"
	case refused(err):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// net/http returns EOF when the server closes the connection
		// before a response.
		return "reset"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "_OTHER" // OpenTelemetry's name for an error it has no class for
}

// refused reports a connection that was never made: refused, or a dial
// that failed before it, as a name that did not resolve does.
func refused(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// callerDone reports whether err's chain holds the caller's own context
// error. It compares by identity, not with errors.Is: net/http's response
// header timeout matches context.DeadlineExceeded through an Is method,
// and that is the upstream's slowness, not the caller's impatience.
func callerDone(err error) bool {
	// Depth first over both forms of Unwrap; the bound is far beyond any
	// real chain and keeps a cyclic one from spinning.
	stack := []error{err}
	for n := 0; len(stack) > 0 && n < 64; n++ {
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
