package metrics

import (
	"errors"
	"net/http"

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
	class := outlast.Classify(err)
	if class == outlast.ClassStatus {
		// AsType, not As: As's target escapes, and this runs per attempt.
		se, _ := errors.AsType[*outlast.StatusError](err)
		return statusOutcome(se.StatusCode)
	}
	return classOutcome[class]
}

// classOutcome maps outlast.Classify's classes to outcomes; a missing
// class is outcomeOK (0), which only nil, the class "", has.
var classOutcome = map[string]outcome{
	"":                       outcomeOK,
	outlast.ClassErrorEvent:  outcomeErrorEvent,
	outlast.ClassBusy:        outcomeOther, // a busy gate makes no attempt
	outlast.ClassStalled:     outcomeStalled,
	outlast.ClassClosedEarly: outcomeClosedEarly,
	outlast.ClassCanceled:    outcomeCanceled,
	outlast.ClassRefused:     outcomeRefused,
	outlast.ClassReset:       outcomeReset,
	outlast.ClassTimeout:     outcomeTimeout,
	outlast.ClassOther:       outcomeOther,
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
