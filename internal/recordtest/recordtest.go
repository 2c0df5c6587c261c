// Package recordtest holds what the tests of packages that keep records
// share: the form a record.Request takes once kept, in JSON or a journal.
package recordtest

import (
	"net/http"
	"time"

	"github.com/outlast-llm/outlast/record"
)

// Kept returns r as it reads back once kept, in the record's JSON form or
// a journal: times cut to the millisecond, in UTC; durations to the
// millisecond; no gate keys, which neither keeps; and a header that is
// never nil.
func Kept(r record.Request) record.Request {
	r.Start, r.End, r.Deadline = millis(r.Start), millis(r.End), millis(r.Deadline)
	if r.Header == nil {
		r.Header = http.Header{}
	}
	as := make([]record.Attempt, len(r.Attempts))
	for i, a := range r.Attempts {
		a.Start, a.End = millis(a.Start), millis(a.End)
		a.GateWait = a.GateWait.Truncate(time.Millisecond)
		a.AdmissionWait = a.AdmissionWait.Truncate(time.Millisecond)
		a.RetryIn = a.RetryIn.Truncate(time.Millisecond)
		a.RetryAfter = a.RetryAfter.Truncate(time.Millisecond)
		a.Key = ""
		as[i] = a
	}
	r.Attempts = as
	return r
}

func millis(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Millisecond)
}
