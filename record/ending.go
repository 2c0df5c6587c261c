package record

import (
	"fmt"
	"strconv"

	"github.com/outlast-llm/outlast"
)

// HedgedError is the Error of an attempt that lost a hedge: the other
// side, sent beside it to the fallback or the request's own upstream,
// answered first, and this one was cancelled.
const HedgedError = "outlast: hedged: the other attempt answered first"

// Ending says how the request's attempt i ended, in a few words for a
// person: its status, or its failure's class when no status came, and
// for an attempt whose answer reached the caller, how that answer ended
// (whole, broke after some bytes and was continued or not, an error
// event, the caller left). A hedge's loser is "hedged". The command's
// table and the page both say it so.
func (r *Request) Ending(i int) string {
	a := &r.Attempts[i]
	switch {
	case a.Error == HedgedError:
		return "hedged: the other attempt answered first"
	case a.End.IsZero() && a.Status == 0 && a.Class == outlast.ClassNone && a.Error == "":
		return "in flight"
	case a.Status == 0:
		return a.Class.String()
	case a.Class != outlast.ClassNone && !a.Class.IsStatus():
		return statusText(a.Status) + " " + a.Class.String()
	case a.Class != outlast.ClassNone:
		return statusText(a.Status)
	}
	s := statusText(a.Status)
	if c := r.Break(i); c != nil {
		s += fmt.Sprintf(", broke after %s", bytesText(c.After))
		if c.CarriedOn() {
			return s + ", " + c.Outcome
		}
		s += ", not continued: " + c.Outcome
		if c.Reason != "" {
			s += " (" + c.Reason + ")"
		}
		return s
	}
	if r.End.IsZero() {
		return s + ", answering"
	}
	switch r.Error {
	case "":
		if r.Stream {
			return s + ", stream whole"
		}
		return s
	case ErrorUpstreamBroke:
		return s + ", broke after " + bytesText(r.Bytes)
	case ErrorClientClosed:
		return s + ", the caller left after " + bytesText(r.Bytes)
	case ErrorUpstreamError:
		return s + ", an error event"
	}
	return s + ", " + r.Error
}

// Break returns the continuation made when the answer of r's attempt i
// broke after reaching the caller, or nil: for an attempt whose answer
// did not reach the caller, and for one that did not break before its
// request's end, which r.Error tells of. Each answer that reached the
// caller but the last broke, and the k-th one's break is the k-th
// continuation.
func (r *Request) Break(i int) *Continuation {
	if !answered(&r.Attempts[i]) {
		return nil
	}
	k := 0
	for j := range i {
		if answered(&r.Attempts[j]) {
			k++
		}
	}
	if k < len(r.Continuations) {
		return &r.Continuations[k]
	}
	return nil
}

// answered reports whether a's response went to the caller: a success,
// as only the committed attempts end.
func answered(a *Attempt) bool {
	return a.Status >= 200 && a.Status < 300 && a.Class == outlast.ClassNone
}

// bytesText is n bytes as "1 byte" or "1234 bytes".
func bytesText(n int64) string {
	if n == 1 {
		return "1 byte"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// statusTexts are the statuses 0 to 599 as text, made once: Ending says
// one of them of nearly every attempt.
var statusTexts = func() (t [600]string) {
	for i := range t {
		t[i] = strconv.Itoa(i)
	}
	return t
}()

// statusText is strconv.Itoa(status), without an allocation for a status
// under 600.
func statusText(status int) string {
	if 0 <= status && status < len(statusTexts) {
		return statusTexts[status]
	}
	return strconv.Itoa(status)
}
