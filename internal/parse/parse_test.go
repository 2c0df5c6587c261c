package parse_test

import (
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/internal/parse"
)

func TestDuration(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want time.Duration
		err  string // a part of the error, or "" for none
	}{
		// Go's own syntax.
		{"15s", 15 * time.Second, ""},
		{" 1m30s ", 90 * time.Second, ""},
		// A bare number is seconds, with a fraction too.
		{"10", 10 * time.Second, ""},
		{"1.5", 1500 * time.Millisecond, ""},
		{"0", 0, ""},
		// Negative values parse; the caller decides whether they mean
		// anything.
		{"-1s", -time.Second, ""},
		// What ParseFloat takes but a person typing seconds does not mean.
		{"+5", 0, `"+5"`},
		{"1e3", 0, `"1e3"`},
		{"inf", 0, `"inf"`},
		{"NaN", 0, `"NaN"`},
		{"0x1p4", 0, `"0x1p4"`},
		// Too long for a Duration.
		{"1e300", 0, `"1e300"`},
		{"99999999999999999999", 0, "too long"},
		// Whole days, alone or before a Go duration.
		{"7d", 7 * 24 * time.Hour, ""},
		{"1d12h", 36 * time.Hour, ""},
		{"0d", 0, ""},
		{"1.5d", 0, `"1.5d"`},
		{"d", 0, `"d"`},
		{"1d-1h", 0, `"1d-1h"`},
		{"-1d", 0, `"-1d"`},
		{"007d", 7 * 24 * time.Hour, ""},
		{"106751d", 106751 * 24 * time.Hour, ""}, // the longest whole-day Duration
		{"106752d", 0, "too long"},
		{"106751d24h", 0, "too long"}, // past it by the sum
		{"99999999999999999999d", 0, `"99999999999999999999d"`},
		{"7D", 0, `"7D"`}, // units are lowercase, as Go's
		{"", 0, "empty"},
		{"soon", 0, `"soon" is not a duration`},
	} {
		got, err := parse.Duration(c.in)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("Duration(%q): got %v, %v; want %v", c.in, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("Duration(%q): got %v, %v; want an error with %q", c.in, got, err, c.err)
		}
	}
}

func TestWaits(t *testing.T) {
	t.Parallel()
	got, err := parse.Waits("15s, 45 ,2m")
	if want := []time.Duration{15 * time.Second, 45 * time.Second, 2 * time.Minute}; err != nil || len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"", " ", "1s,", "1s,-2s", "1s,x"} {
		if _, err := parse.Waits(bad); err == nil {
			t.Errorf("Waits(%q): got no error, want one", bad)
		}
	}
}

func TestZeroIsNone(t *testing.T) {
	t.Parallel()
	if got := parse.ZeroIsNone(0); got != -1 {
		t.Errorf("ZeroIsNone(0): got %d, want -1", got)
	}
	if got := parse.ZeroIsNone(5 * time.Second); got != 5*time.Second {
		t.Errorf("ZeroIsNone(5s): got %v, want 5s", got)
	}
}

// FuzzDuration checks that Duration never panics, and that what it
// accepts reads back the same from Go's form of it, so that the two
// syntaxes never disagree.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{"15s", "1.5", "90", "-0", "1e3", "9223372036", ".5", "5.", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parse.Duration(s)
		if err != nil {
			return
		}
		back, err := parse.Duration(d.String())
		if err != nil || back != d {
			t.Errorf("Duration(%q) = %v, but Duration(%q) = %v, %v", s, d, d.String(), back, err)
		}
	})
}
