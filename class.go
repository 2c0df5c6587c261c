package outlast

import (
	"errors"
	"fmt"
	"net/http"
)

// A Class names how an attempt ended. [Classify] is the one place that
// decides it; the Transport sets it on each [Attempt] at the attempt's
// end, and everything that reports attempts (a journal, metrics, traces, a
// page, logs) shows that value rather than judging the error again.
//
// A Class is written as its name (see [Class.String]), in text and JSON
// alike, so that stored classes survive a reordering of the constants.
// The zero value is ClassNone.
type Class uint8

// The classes. A failed status is split by what it asks of the client: 429
// and 529 ask it to slow down, any other 4xx says the request is wrong,
// and any other 5xx that the server failed.
const (
	ClassNone        Class = iota // no failure: the attempt's response was returned
	ClassRateLimited              // status 429 Too Many Requests
	ClassOverloaded               // status 529, Anthropic's overloaded_error
	ClassStatus4xx                // any other failed 4xx status
	ClassStatus5xx                // any other failed 5xx status
	ClassErrorEvent               // a 200 event stream that sent an error before its answer began (ErrErrorEvent)
	ClassBusy                     // the gate's queue was full (ErrBusy): nothing was sent
	ClassStalled                  // no first byte in time (ErrStalled)
	ClassClosedEarly              // the body ended before its first byte (ErrClosedEarly)
	ClassRefused                  // no connection: refused, or the dial failed
	ClassReset                    // the connection broke before the response: reset, aborted, or closed (EOF)
	ClassTimeout                  // a timeout that was not the caller's, such as a response header timeout
	ClassCanceled                 // the caller's context ended: its cancellation or its deadline
	ClassOther                    // anything else, a status outside 400–599 among them
	ClassDown                     // an Admission sent it away: the upstream is down and no chance to send came in time (ErrUpstreamDown), or its retry budget is spent (ErrRetryBudget)
	numClasses
)

var classNames = [numClasses]string{
	"", "rate_limited", "overloaded", "status_4xx", "status_5xx", "error_event", "busy",
	"stalled", "closed_early", "refused", "reset", "timeout", "canceled", "other", "upstream_down",
}

// Classes returns every Class, ClassNone first, in the order of the
// constants: for observers that export a series per class from the start.
func Classes() []Class {
	cs := make([]Class, numClasses)
	for i := range cs {
		cs[i] = Class(i)
	}
	return cs
}

// String returns the class's name: "" for ClassNone, else a lowercase
// word such as "rate_limited" or "refused".
func (c Class) String() string {
	if c >= numClasses {
		return fmt.Sprintf("Class(%d)", uint8(c))
	}
	return classNames[c]
}

// MarshalText returns the class's name, as String does. It fails for a
// value that is not one of the constants.
func (c Class) MarshalText() ([]byte, error) {
	if c >= numClasses {
		return nil, fmt.Errorf("outlast: class %d is not a Class", uint8(c))
	}
	return []byte(classNames[c]), nil
}

// UnmarshalText sets c to the class that text names; "" is ClassNone.
func (c *Class) UnmarshalText(text []byte) error {
	for i, n := range classNames {
		if string(text) == n {
			*c = Class(i)
			return nil
		}
	}
	return fmt.Errorf("outlast: %q is not a class (want one of %v)", text, classNames[1:])
}

// Classify returns the class of an attempt's failure, ClassNone for nil.
// The order matters where classes nest: an error event comes inside a
// *StatusError, and a stall is also a timeout. It allocates nothing.
func Classify(err error) Class {
	switch {
	case err == nil:
		return ClassNone
	case errors.Is(err, ErrErrorEvent):
		return ClassErrorEvent
	case errors.Is(err, ErrUpstreamDown), errors.Is(err, ErrRetryBudget):
		return ClassDown // before the last failure it wraps
	}
	if se, ok := errors.AsType[*StatusError](err); ok {
		return StatusClass(se.StatusCode)
	}
	switch {
	case isBusy(err):
		return ClassBusy
	case errors.Is(err, ErrStalled):
		return ClassStalled
	case errors.Is(err, ErrClosedEarly):
		return ClassClosedEarly
	case isCallerDone(err):
		return ClassCanceled
	case isRefused(err):
		return ClassRefused
	case isReset(err):
		return ClassReset
	case isTimeout(err):
		return ClassTimeout
	}
	return ClassOther
}

// IsStatus reports whether c is the class of a failed status: one of
// ClassRateLimited, ClassOverloaded, ClassStatus4xx and ClassStatus5xx,
// which StatusClass returns.
func (c Class) IsStatus() bool {
	switch c {
	case ClassRateLimited, ClassOverloaded, ClassStatus4xx, ClassStatus5xx:
		return true
	}
	return false
}

// StatusClass returns the class of a failed response's status: what
// Classify returns for a *StatusError with that code.
func StatusClass(code int) Class {
	switch {
	case code == http.StatusTooManyRequests:
		return ClassRateLimited
	case code == 529: // Anthropic's overloaded_error; not in net/http
		return ClassOverloaded
	case code >= 400 && code <= 499:
		return ClassStatus4xx
	case code >= 500 && code <= 599:
		return ClassStatus5xx
	}
	return ClassOther
}
