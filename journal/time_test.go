package journal

import (
	"testing"
	"time"
)

// FuzzAppendTime checks the store's time formatter against the standard
// library's, for any time: the stored text, and a query's bounds, must
// sort and parse as they did when they came from time.Format.
func FuzzAppendTime(f *testing.F) {
	f.Add(int64(0), int64(0))
	f.Add(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), int64(999_999_999))
	f.Add(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix(), int64(999_999_999))
	f.Add(time.Date(2026, 11, 29, 13, 33, 10, 0, time.UTC).Unix(), int64(1_500_000))
	f.Add(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), int64(0))
	f.Add(time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC).Unix(), int64(0))
	f.Fuzz(func(t *testing.T, sec, nsec int64) {
		tm := time.Unix(sec, nsec).In(time.FixedZone("x", int(sec%50_000)))
		want := tm.UTC().Format(timeLayout)
		if got := string(appendTime(nil, tm)); got != want {
			t.Fatalf("appendTime(%v) = %q, want %q", tm, got, want)
		}
	})
}
