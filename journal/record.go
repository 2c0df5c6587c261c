package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/outlast-llm/outlast"
)

// A Record is one request through the gateway, with every attempt at it.
// Times are kept to the millisecond, in UTC; durations to the millisecond.
//
// In JSON its fields are the columns' snake_case names, times are RFC 3339
// with milliseconds in UTC (null when zero), and attempts is the list of
// [Attempt] objects, oldest first.
//
// A Record is plain data. The zero Record cannot be stored: a Store needs
// its ID and Start.
type Record struct {
	ID       string // the request's ID (Outlast-Request-Id); required
	Run      string // Outlast-Run, or ""
	Method   string
	Path     string // the request's path, without its query
	Upstream string // the upstream's name
	Slot     string // the named slot, or ""
	Model    string // the JSON body's "model", or ""

	// Header is the request's header as [Redact] left it, with canonical
	// keys. A Store removes the credentials Redact always removes again,
	// whatever it is given.
	Header map[string][]string

	Start time.Time // required
	End   time.Time

	Status    int    // the status sent to the caller
	Error     string // the gateway's error kind (Outlast-Error), or ""
	Stream    bool   // a streaming request
	Committed bool   // a response byte was forwarded
	Bytes     int64  // response body bytes forwarded

	// Attempts are the tries at the request, in order. Each has its own N,
	// and no two the same.
	Attempts []Attempt
}

// An Attempt is one try at a request: what outlast.Attempt reports, in the
// form the record keeps. [FromAttempt] makes one.
type Attempt struct {
	CallID      string // a UUIDv7
	N           int    // 1 for the first attempt
	Start       time.Time
	End         time.Time
	QueuedAhead int           // how many were ahead at the gate
	GateWait    time.Duration // the wait at the gate
	Status      int           // the response's status, or 0 if none came
	ErrorClass  string        // one of the Class constants, or "" for success
	Error       string        // the failure's message, sanitized
	RetryIn     time.Duration // the wait before the next attempt, if one followed
	RetryAfter  time.Duration // the delay the server asked for, if any
	Bytes       int64         // response body bytes forwarded from this attempt
}

// FromAttempt returns the record of a, with its error classified by
// [ClassOf] and its message passed through [Sanitize]. Bytes is left zero:
// outlast.Attempt does not count them, and the gateway does.
func FromAttempt(a outlast.Attempt) Attempt {
	at := Attempt{
		CallID:      a.CallID,
		N:           a.N,
		Start:       a.Start,
		End:         a.End,
		QueuedAhead: a.Ahead,
		GateWait:    a.GateWait,
		Status:      a.Status,
		ErrorClass:  ClassOf(a.Err),
		RetryIn:     a.RetryIn,
		RetryAfter:  a.RetryAfter,
	}
	if a.Err != nil {
		at.Error = Sanitize(a.Err.Error())
	}
	return at
}

// ErrInvalid is wrapped by the error for a record a Store cannot keep: one
// without an ID or a start, or whose attempts repeat a number.
var ErrInvalid = errors.New("journal: invalid record")

// validate reports why r cannot be stored. It is cheap enough for
// [Writer.Add], which drops such a record rather than let it fail a whole
// batch later.
func (r *Record) validate() error {
	why := ""
	switch {
	case r.ID == "":
		why = "no id"
	case r.Start.IsZero():
		why = "no start time"
	case !inRange(r.Start) || !inRange(r.End):
		// SQLite keeps times as fixed-width text, which sorts only
		// within four-digit years.
		why = "a time outside the years 1 to 9999"
	default:
		why = duplicateN(r.Attempts)
	}
	if why == "" {
		return nil
	}
	return fmt.Errorf("%w %q: %s", ErrInvalid, r.ID, why)
}

// inRange reports whether t is zero or in a year of four digits.
func inRange(t time.Time) bool {
	y := t.UTC().Year()
	return t.IsZero() || y >= 1 && y <= 9999
}

// duplicateN names an attempt number used twice, or returns "". Records
// have a handful of attempts, for which the quadratic scan beats a map.
func duplicateN(as []Attempt) string {
	for i := range as {
		for j := i + 1; j < len(as); j++ {
			if as[i].N == as[j].N {
				return fmt.Sprintf("attempt number %d twice", as[i].N)
			}
		}
	}
	return ""
}

// jsonTime is a time in the record's JSON form.
type jsonTime time.Time

// timeLayout is RFC 3339 with exactly three fractional digits, so that the
// text has a fixed width and sorts as the times do.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// appendTime appends t in timeLayout, in UTC, as t.UTC().Format(timeLayout)
// does, at a fraction of its cost for four-digit years: the store formats
// four times per request.
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		// Not four digits: a query's bound may be any time.
		return t.AppendFormat(b, timeLayout)
	}
	hour, min, sec := t.Clock()
	ms := t.Nanosecond() / int(time.Millisecond)
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, min, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	b = append(b, '.')
	b = appendDigits(b, ms, 3)
	return append(b, 'Z')
}

// appendDigits appends the last width decimal digits of v ≥ 0, with
// leading zeros.
func appendDigits(b []byte, v, width int) []byte {
	b = append(b, make([]byte, width)...)
	for i := len(b) - 1; i >= len(b)-width; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return b
}

func (t jsonTime) MarshalJSON() ([]byte, error) {
	if time.Time(t).IsZero() {
		return []byte("null"), nil
	}
	b := make([]byte, 0, len(timeLayout)+2)
	b = append(b, '"')
	b = appendTime(b, time.Time(t))
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

// recordJSON is Record's JSON shape.
type recordJSON struct {
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
	Status    int                 `json:"status"`
	Error     string              `json:"error"`
	Stream    bool                `json:"stream"`
	Committed bool                `json:"committed"`
	Bytes     int64               `json:"bytes"`
	Attempts  []Attempt           `json:"attempts"`
}

// attemptJSON is Attempt's JSON shape.
type attemptJSON struct {
	CallID       string   `json:"call_id"`
	N            int      `json:"n"`
	StartedAt    jsonTime `json:"started_at"`
	EndedAt      jsonTime `json:"ended_at"`
	QueuedAhead  int      `json:"queued_ahead"`
	GateWaitMS   int64    `json:"gate_wait_ms"`
	Status       int      `json:"status"`
	ErrorClass   string   `json:"error_class"`
	Error        string   `json:"error"`
	RetryInMS    int64    `json:"retry_in_ms"`
	RetryAfterMS int64    `json:"retry_after_ms"`
	Bytes        int64    `json:"bytes"`
}

// MarshalJSON returns r in the record's JSON form. Headers and attempts
// are never null, so that readers need not tell null from empty.
func (r Record) MarshalJSON() ([]byte, error) {
	j := recordJSON{
		ID: r.ID, Run: r.Run, Method: r.Method, Path: r.Path,
		Upstream: r.Upstream, Slot: r.Slot, Model: r.Model,
		Headers:   r.Header,
		StartedAt: jsonTime(r.Start), EndedAt: jsonTime(r.End),
		Status: r.Status, Error: r.Error,
		Stream: r.Stream, Committed: r.Committed, Bytes: r.Bytes,
		Attempts: r.Attempts,
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
func (r *Record) UnmarshalJSON(b []byte) error {
	var j recordJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Record{
		ID: j.ID, Run: j.Run, Method: j.Method, Path: j.Path,
		Upstream: j.Upstream, Slot: j.Slot, Model: j.Model,
		Header: j.Headers,
		Start:  time.Time(j.StartedAt), End: time.Time(j.EndedAt),
		Status: j.Status, Error: j.Error,
		Stream: j.Stream, Committed: j.Committed, Bytes: j.Bytes,
		Attempts: j.Attempts,
	}
	return nil
}

// MarshalJSON returns a in the record's JSON form, durations in whole
// milliseconds.
func (a Attempt) MarshalJSON() ([]byte, error) {
	return json.Marshal(attemptJSON{
		CallID: a.CallID, N: a.N,
		StartedAt: jsonTime(a.Start), EndedAt: jsonTime(a.End),
		QueuedAhead: a.QueuedAhead, GateWaitMS: a.GateWait.Milliseconds(),
		Status: a.Status, ErrorClass: a.ErrorClass, Error: a.Error,
		RetryInMS: a.RetryIn.Milliseconds(), RetryAfterMS: a.RetryAfter.Milliseconds(),
		Bytes: a.Bytes,
	})
}

// UnmarshalJSON reads a from the record's JSON form.
func (a *Attempt) UnmarshalJSON(b []byte) error {
	var j attemptJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*a = Attempt{
		CallID: j.CallID, N: j.N,
		Start: time.Time(j.StartedAt), End: time.Time(j.EndedAt),
		QueuedAhead: j.QueuedAhead, GateWait: ms(j.GateWaitMS),
		Status: j.Status, ErrorClass: j.ErrorClass, Error: j.Error,
		RetryIn: ms(j.RetryInMS), RetryAfter: ms(j.RetryAfterMS),
		Bytes: j.Bytes,
	}
	return nil
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
