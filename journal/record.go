package journal

import (
	"errors"
	"fmt"
	"time"

	"github.com/outlast-llm/outlast/record"
)

// ErrInvalid is wrapped by the error for a record a Store cannot keep: one
// without an ID or a start, or whose attempts repeat a number; or a state
// change without a time.
var ErrInvalid = errors.New("journal: invalid record")

// validate reports why r cannot be stored. It is cheap enough for
// [Writer.Add], which drops such a record rather than let it fail a whole
// batch later.
func validate(r *record.Request) error {
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
func duplicateN(as []record.Attempt) string {
	for i := range as {
		for j := i + 1; j < len(as); j++ {
			if as[i].N == as[j].N {
				return fmt.Sprintf("attempt number %d twice", as[i].N)
			}
		}
	}
	return ""
}

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
