// Package parse reads the values that people type into outlast's flags,
// config file and Outlast-* headers, so that each has one syntax
// everywhere: durations, lists of waits, and the convention that 0 means
// none.
package parse

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// maxSeconds bounds a bare number of seconds, so that it fits a
// time.Duration.
const maxSeconds = float64(1<<62) / float64(time.Second)

// day is the unit "d" of Duration.
const day = 24 * time.Hour

// Duration parses a Go duration ("1m30s", "250ms"), one that starts with
// a whole number of days ("7d", "1d12h"), or a bare number of seconds
// ("90", "1.5"), with space around it allowed. Its errors quote s and give
// an example, for the caller to prefix with what was being set.
func Duration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty: want a duration such as 15s, 2m or 7d")
	}
	if days, rest, ok := strings.Cut(s, "d"); ok {
		return withDays(s, days, rest)
	}
	// ParseFloat also takes "+1", "1e3", "0x1p4", "inf" and "nan": a
	// person typing seconds means none of them.
	if f, err := strconv.ParseFloat(s, 64); err == nil && s[0] != '+' && !strings.ContainsAny(s, "eEinINxXpP_") {
		if f > maxSeconds || f < -maxSeconds {
			return 0, fmt.Errorf("%q is %w", s, ErrTooLong)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, notDuration(s)
	}
	return d, nil
}

// ErrTooLong is a duration past what a time.Duration holds (about 292
// years).
var ErrTooLong = errors.New("too long")

func notDuration(s string) error {
	return fmt.Errorf("%q is not a duration such as 15s, 2m, 7d or 90 (seconds)", s)
}

// withDays parses s, which is days, a "d", and rest: whole days and then,
// if anything, a Go duration, as in "1d12h".
func withDays(s, days, rest string) (time.Duration, error) {
	n, err := strconv.ParseUint(days, 10, 63)
	if err != nil || days[0] == '+' {
		return 0, notDuration(s)
	}
	if n > uint64(math.MaxInt64/day) {
		return 0, fmt.Errorf("%q is %w", s, ErrTooLong)
	}
	d := time.Duration(n) * day
	if rest == "" {
		return d, nil
	}
	r, err := time.ParseDuration(rest)
	if err != nil || r < 0 || rest[0] == '+' || rest[0] == '-' {
		return 0, notDuration(s)
	}
	if r > math.MaxInt64-d {
		return 0, fmt.Errorf("%q is %w", s, ErrTooLong)
	}
	return d + r, nil
}

// Waits parses a comma-separated list of waits, such as
// "15s,45s,120s,240s", each as Duration reads it. The list must name one
// wait at least, and none may be negative.
func Waits(s string) ([]time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty: give at least one wait, such as 15s,45s")
	}
	var waits []time.Duration
	for part := range strings.SplitSeq(s, ",") {
		d, err := Duration(part)
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, fmt.Errorf("wait %q is negative", strings.TrimSpace(part))
		}
		waits = append(waits, d)
	}
	return waits, nil
}

// ZeroIsNone maps a bound as people type it, where 0 means none, to the
// value outlast's Go types take, where zero means their default and a
// negative value none: --queue 0, --reserve 0 and Outlast-Reserve: 0 all
// go through it.
func ZeroIsNone[T ~int | ~int64](v T) T {
	if v == 0 {
		return -1
	}
	return v
}
