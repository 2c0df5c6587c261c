package record

import (
	"encoding/json"
	"time"

	"github.com/outlast-llm/outlast"
)

// The JSON forms of Request and Attempt are the record's API, and what
// outlast requests --json prints. Fields are snake_case and match the
// journal's columns; times are RFC 3339 in UTC with exactly three
// fractional digits (null when zero); durations are whole milliseconds,
// in fields that end in _ms.

// timeLayout is RFC 3339 with exactly three fractional digits, so that the
// text has a fixed width and sorts as the times do.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// jsonTime is a time in the record's JSON form.
type jsonTime time.Time

func (t jsonTime) MarshalJSON() ([]byte, error) {
	if time.Time(t).IsZero() {
		return []byte("null"), nil
	}
	b := make([]byte, 0, len(timeLayout)+2)
	b = append(b, '"')
	b = time.Time(t).UTC().AppendFormat(b, timeLayout)
	return append(b, '"'), nil
}

func (t *jsonTime) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = jsonTime{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	*t = jsonTime(v.UTC())
	return nil
}

// requestJSON is Request's JSON shape.
type requestJSON struct {
	ID        string              `json:"id"`
	Run       string              `json:"run"`
	Method    string              `json:"method"`
	Path      string              `json:"path"`
	Upstream  string              `json:"upstream"`
	Slot      string              `json:"slot"`
	Model     string              `json:"model"`
	Headers   map[string][]string `json:"headers"`
	StartedAt jsonTime            `json:"started_at"`
	EndedAt   jsonTime            `json:"ended_at"`
	Deadline  jsonTime            `json:"deadline"`
	// DeadlineSource is omitted when empty, as in records made before
	// deadlines were kept.
	DeadlineSource string `json:"deadline_source,omitempty"`
	Status         int    `json:"status"`
	Error          string `json:"error"`
	Stream         bool   `json:"stream"`
	Committed      bool   `json:"committed"`
	// Held is omitted when false, as in records made before it.
	Held     bool      `json:"held,omitempty"`
	Bytes    int64     `json:"bytes"`
	Attempts []Attempt `json:"attempts"`
	Moves    []Move    `json:"moves,omitempty"`
	// Continuations is omitted when empty, as in records made before
	// them.
	Continuations []Continuation `json:"continuations,omitempty"`
}

// attemptJSON is Attempt's JSON shape. The gate key is not in it: the
// journal does not keep it.
type attemptJSON struct {
	CallID       string   `json:"call_id"`
	N            int      `json:"n"`
	Upstream     string   `json:"upstream,omitempty"`
	Fallback     string   `json:"fallback,omitempty"`
	StartedAt    jsonTime `json:"started_at"`
	EndedAt      jsonTime `json:"ended_at"`
	QueuedAhead  int      `json:"queued_ahead"`
	GateWaitMS   int64    `json:"gate_wait_ms"`
	AdmissionMS  int64    `json:"admission_wait_ms,omitempty"`
	Probe        bool     `json:"probe,omitempty"`
	Status       int      `json:"status"`
	ErrorClass   string   `json:"error_class"`
	Error        string   `json:"error"`
	RetryInMS    int64    `json:"retry_in_ms"`
	RetryAfterMS int64    `json:"retry_after_ms"`
	// RetryAfterCut is omitted when false, as in records made before
	// delays were cut.
	RetryAfterCut bool  `json:"retry_after_cut,omitempty"`
	Bytes         int64 `json:"bytes"`
	// Continued and PrefillBytes are omitted for an attempt that did not
	// continue a stream, as in records made before continuations.
	Continued    bool  `json:"continued,omitempty"`
	PrefillBytes int64 `json:"prefill_bytes,omitempty"`
}

// MarshalJSON returns r in the record's JSON form. Headers and attempts
// are never null, so that readers need not tell null from empty.
func (r Request) MarshalJSON() ([]byte, error) {
	j := requestJSON{
		ID: r.ID, Run: r.Run, Method: r.Method, Path: r.Path,
		Upstream: r.Upstream, Slot: r.Slot, Model: r.Model,
		Headers:   r.Header,
		StartedAt: jsonTime(r.Start), EndedAt: jsonTime(r.End),
		Deadline: jsonTime(r.Deadline), DeadlineSource: r.DeadlineSource,
		Status: r.Status, Error: r.Error,
		Stream: r.Stream, Committed: r.Committed, Held: r.Held, Bytes: r.Bytes,
		Attempts: r.Attempts, Moves: r.Moves, Continuations: r.Continuations,
	}
	if j.Headers == nil {
		j.Headers = map[string][]string{}
	}
	if j.Attempts == nil {
		j.Attempts = []Attempt{}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads r from the record's JSON form.
func (r *Request) UnmarshalJSON(b []byte) error {
	var j requestJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Request{
		ID: j.ID, Run: j.Run, Method: j.Method, Path: j.Path,
		Upstream: j.Upstream, Slot: j.Slot, Model: j.Model,
		Header: j.Headers,
		Start:  time.Time(j.StartedAt), End: time.Time(j.EndedAt),
		Deadline: time.Time(j.Deadline), DeadlineSource: j.DeadlineSource,
		Status: j.Status, Error: j.Error,
		Stream: j.Stream, Committed: j.Committed, Held: j.Held, Bytes: j.Bytes,
		Attempts: j.Attempts, Moves: j.Moves, Continuations: j.Continuations,
	}
	return nil
}

// MarshalJSON returns a in the record's JSON form, durations in whole
// milliseconds.
func (a Attempt) MarshalJSON() ([]byte, error) {
	return json.Marshal(attemptJSON{
		CallID: a.CallID, N: a.N, Upstream: a.Upstream, Fallback: a.Fallback,
		StartedAt: jsonTime(a.Start), EndedAt: jsonTime(a.End),
		QueuedAhead: a.QueuedAhead, GateWaitMS: a.GateWait.Milliseconds(),
		AdmissionMS: a.AdmissionWait.Milliseconds(), Probe: a.Probe,
		Status: a.Status, ErrorClass: a.Class.String(), Error: a.Error,
		RetryInMS: a.RetryIn.Milliseconds(), RetryAfterMS: a.RetryAfter.Milliseconds(),
		RetryAfterCut: a.RetryAfterCut, Bytes: a.Bytes,
		Continued: a.Continued, PrefillBytes: a.PrefillBytes,
	})
}

// UnmarshalJSON reads a from the record's JSON form.
func (a *Attempt) UnmarshalJSON(b []byte) error {
	var j attemptJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*a = Attempt{
		CallID: j.CallID, N: j.N, Upstream: j.Upstream, Fallback: j.Fallback,
		Start: time.Time(j.StartedAt), End: time.Time(j.EndedAt),
		QueuedAhead: j.QueuedAhead, GateWait: ms(j.GateWaitMS),
		AdmissionWait: ms(j.AdmissionMS), Probe: j.Probe,
		Status: j.Status, Class: ParseClass(j.ErrorClass, j.Status), Error: j.Error,
		RetryIn: ms(j.RetryInMS), RetryAfter: ms(j.RetryAfterMS),
		RetryAfterCut: j.RetryAfterCut, Bytes: j.Bytes,
		Continued: j.Continued, PrefillBytes: j.PrefillBytes,
	}
	return nil
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// ParseClass returns the class that name stands for in a record made by
// any version of outlast: a class's name, as outlast.Class writes it; the
// name "status", which records made before failed statuses were split by
// class hold, as the class of the attempt's status; and a name this
// version does not know, from a newer one, as outlast.ClassOther, so
// that a reader never fails on a record a newer writer made.
func ParseClass(name string, status int) outlast.Class {
	var c outlast.Class
	switch {
	case name == "status":
		return outlast.StatusClass(status)
	case c.UnmarshalText([]byte(name)) != nil:
		return outlast.ClassOther
	}
	return c
}
