package tracing

import (
	"strconv"

	"github.com/outlast-llm/outlast"
)

// errorType is the error.type of an attempt of class c that got status, or
// "" for a success. It is the record's class, except that a failed status
// is named by its code, as OpenTelemetry's HTTP conventions ask; the
// class itself is in outlast.attempt.class.
func errorType(c outlast.Class, status int) string {
	switch {
	case c == outlast.ClassNone && status < 400:
		return ""
	case c == outlast.ClassNone, c.IsStatus():
		return strconv.Itoa(status)
	case c == outlast.ClassOther:
		return "_OTHER" // OpenTelemetry's name for an error it has no class for
	}
	return c.String()
}
