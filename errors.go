package outlast

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ErrBusy is returned when a [Gate] refuses a request because its queue is
// full. It is never retried: the gate has already said that waiting will not
// help.
//
// Any error whose type has a method Busy() bool that returns true is treated
// as ErrBusy, and errors.Is(err, ErrBusy) holds for it if the type also
// implements Is the way package gate does. That lets gates in other packages
// (gate, redisgate) refuse a request without importing this one.
var ErrBusy error = busyError{}

// ErrStalled is the failure of an attempt whose response did not produce its
// first body byte, or for an event stream its first event that carries the
// answer, within [Transport.FirstByteTimeout]. It is retryable: no byte of
// the answer reached the caller.
var ErrStalled = errors.New("outlast: no first byte before the timeout")

// ErrClosedEarly is the failure of an attempt whose response body failed
// before its first byte, or whose event stream ended or failed before its
// answer began. It is retryable: nothing of the answer reached the caller.
var ErrClosedEarly = errors.New("outlast: response closed before its first byte")

// ErrNoTime is returned, wrapping the last attempt's failure, when a retry
// under a deadline would have to wait at the gate past the deadline less
// the policy's reserve. The rest of the deadline is the caller's: no wait
// before a retry eats into the reserve.
var ErrNoTime = errors.New("outlast: no slot at the gate before the deadline's reserve")

// ErrInvalidPolicy is wrapped by every error that [Policy.Validate] returns.
var ErrInvalidPolicy = errors.New("outlast: invalid policy")

type busyError struct{}

func (busyError) Error() string { return "outlast: busy: the gate's queue is full" }

// Busy reports that this error is a gate's refusal.
func (busyError) Busy() bool { return true }

// Is matches any busy error, such as gate.ErrBusy.
func (busyError) Is(target error) bool { return isBusy(target) }

// busy is an error that can say it is a gate's refusal.
type busy interface {
	error
	Busy() bool
}

// isBusy reports whether err, or an error it wraps, says it is a busy refusal.
func isBusy(err error) bool {
	b, ok := errors.AsType[busy](err)
	return ok && b.Busy()
}

// StatusError is the failure of an attempt that got a response whose status
// the policy treats as a failure. Use errors.As to reach it: it is what
// [Policy.Retryable] and [Attempt.Err] see for a failed status, and what an
// attempt passed to [Do] may return to name a status and a server delay.
//
// The response itself is not kept: the Transport drains and closes a failed
// response that it retries, and returns the last one to the caller unchanged.
type StatusError struct {
	// StatusCode is the response's HTTP status.
	StatusCode int
	// Header is the response's header. It may be nil.
	Header http.Header
	// RetryAfter is the delay the server asked for, from Retry-After or
	// retry-after-ms. Zero means the server asked for none.
	RetryAfter time.Duration
	// Err, if not nil, is a cause that Unwrap returns: ErrErrorEvent for a
	// streamed 200 that sent an error before its answer, say.
	Err error
}

// Error returns a line naming the status, such as
// "outlast: status 503 Service Unavailable".
func (e *StatusError) Error() string {
	s := fmt.Sprintf("outlast: status %d", e.StatusCode)
	if text := http.StatusText(e.StatusCode); text != "" {
		s += " " + text
	}
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %v)", e.RetryAfter)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns e.Err.
func (e *StatusError) Unwrap() error { return e.Err }
