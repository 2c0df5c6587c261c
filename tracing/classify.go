package tracing

import (
	"errors"
	"strconv"

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
	switch class := outlast.Classify(err); class {
	case outlast.ClassStatus:
		se, _ := errors.AsType[*outlast.StatusError](err)
		return strconv.Itoa(se.StatusCode)
	case outlast.ClassOther:
		return "_OTHER" // OpenTelemetry's name for an error it has no class for
	default:
		return class
	}
}
