package outlast_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
)

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	one := []time.Duration{time.Second}
	tests := []struct {
		name string
		p    *outlast.Policy
		want string // a word the error must name; "" means valid
	}{
		// An empty list would fail later under a deadline; it must be
		// refused where the policy is made, naming the field.
		{"empty waits", &outlast.Policy{}, "Waits"},
		// A nil list is as empty as a zero-length one.
		{"zero-length waits", &outlast.Policy{Waits: []time.Duration{}}, "Waits"},
		// A nil *Policy must be an error, not a panic.
		{"nil policy", nil, "nil"},
		// The message names the bad entry, so a long list is easy to fix.
		{"negative wait", &outlast.Policy{Waits: []time.Duration{time.Second, 2 * time.Second, -time.Millisecond}}, "Waits[2]"},
		// Spread is a fraction in [0, 1]; below is meaningless.
		{"spread below 0", &outlast.Policy{Waits: one, Jitter: outlast.Jitter{Spread: -0.1}}, "Jitter.Spread"},
		// Above 1 could make a wait negative.
		{"spread above 1", &outlast.Policy{Waits: one, Jitter: outlast.Jitter{Spread: 1.01}}, "Jitter.Spread"},
		// NaN fails every comparison, so a plain range check lets it through.
		{"spread NaN", &outlast.Policy{Waits: one, Jitter: outlast.Jitter{Spread: math.NaN()}}, "Jitter.Spread"},
		// +Inf is above 1.
		{"spread +Inf", &outlast.Policy{Waits: one, Jitter: outlast.Jitter{Spread: math.Inf(1)}}, "Jitter.Spread"},
		// Full and Spread are two different jitters; both at once is a mistake.
		{"full and spread", &outlast.Policy{Waits: one, Jitter: outlast.Jitter{Full: true, Spread: 0.25}}, "Jitter.Full"},
		// Zero means no cap; negative means nothing.
		{"negative max attempts", &outlast.Policy{Waits: one, MaxAttempts: -1}, "MaxAttempts"},
		// Zero means no cap; negative means nothing.
		{"negative window", &outlast.Policy{Waits: one, Window: -time.Second}, "Window"},
		// Only the three declared modes exist.
		{"mode past the last", &outlast.Policy{Waits: one, RetryAfter: outlast.RetryAfterIgnore + 1}, "RetryAfter"},
		// A negative mode is as unknown as a large one.
		{"negative mode", &outlast.Policy{Waits: one, RetryAfter: -1}, "RetryAfter"},

		// The smallest valid policy: one wait, everything else zero.
		{"one wait", &outlast.Policy{Waits: one}, ""},
		// A zero wait retries at once; it is not negative.
		{"zero wait", &outlast.Policy{Waits: []time.Duration{0}}, ""},
		// Zero Reserve means DefaultReserve.
		{"zero reserve", &outlast.Policy{Waits: one, Reserve: 0}, ""},
		// A negative Reserve means none, and is documented as valid.
		{"negative reserve", &outlast.Policy{Waits: one, Reserve: -time.Second}, ""},
		// Both ends of Spread's range are allowed.
		{"spread 0", &outlast.Policy{Waits: one, Jitter: outlast.Jitter{Spread: 0}}, ""},
		{"spread 1", &outlast.Policy{Waits: one, Jitter: outlast.Jitter{Spread: 1}}, ""},
		// Full alone is "full jitter".
		{"full alone", &outlast.Policy{Waits: one, Jitter: outlast.Jitter{Full: true}}, ""},
		// Every declared mode is valid.
		{"mode exact", &outlast.Policy{Waits: one, RetryAfter: outlast.RetryAfterExact}, ""},
		{"mode ignore", &outlast.Policy{Waits: one, RetryAfter: outlast.RetryAfterIgnore}, ""},
		// A local server's schedule, with every bound set.
		{"local server", &outlast.Policy{
			Waits:       []time.Duration{2 * time.Second, 8 * time.Second, 30 * time.Second},
			Jitter:      outlast.Jitter{Spread: 0.25},
			MaxAttempts: 4,
			Window:      2 * time.Minute,
			Retryable:   outlast.ServerGone,
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.p.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got nil, want an error naming %q", tt.want)
			}
			if !errors.Is(err, outlast.ErrInvalidPolicy) {
				t.Errorf("got %v, want an error wrapping ErrInvalidPolicy", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q, want it to name %q", err, tt.want)
			}
		})
	}
}

func TestExponential(t *testing.T) {
	t.Parallel()
	const maxD = time.Duration(math.MaxInt64)
	// powers is 1ns doubled 63 times, then the cap: the doubling reaches
	// 1<<62 and one more would overflow.
	powers := make([]time.Duration, 70)
	for i := range powers {
		if i < 63 {
			powers[i] = 1 << i
		} else {
			powers[i] = maxD
		}
	}
	tests := []struct {
		name      string
		base, max time.Duration
		n         int
		want      []time.Duration
	}{
		// The documented shape: doubling, then the cap repeated.
		{"doubling then cap", time.Second, 10 * time.Second, 5, secs(1, 2, 4, 8, 10)},
		// A cap that is not a power of two times base is still reached exactly.
		{"uneven cap", 3 * time.Second, 10 * time.Second, 5, secs(3, 6, 10, 10, 10)},
		// No waits asked for: nil, which Validate refuses.
		{"n zero", time.Second, 10 * time.Second, 0, nil},
		// A negative count is no waits too, not a panic in make.
		{"n negative", time.Second, 10 * time.Second, -1, nil},
		// base above max: every wait is max, the first included.
		{"base above max", 20 * time.Second, 10 * time.Second, 3, secs(10, 10, 10)},
		// base equal to max: no doubling at all.
		{"base equals max", 5 * time.Second, 5 * time.Second, 3, secs(5, 5, 5)},
		// A zero base stays zero; doubling zero is zero.
		{"zero base", 0, 10 * time.Second, 3, secs(0, 0, 0)},
		// One wait is just base.
		{"n one", time.Second, 10 * time.Second, 1, secs(1)},
		// 1<<62 doubled overflows int64: the cap must take over, never a
		// negative or wrapped wait.
		{"huge base", 1 << 62, maxD, 70, append([]time.Duration{1 << 62}, repeat(maxD, 69)...)},
		// From 1 ns the doubling runs right up to the overflow edge.
		{"doubling to the edge", 1, maxD, 70, powers},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := outlast.Exponential(tt.base, tt.max, tt.n)
			if !equalDurations(got, tt.want) || (got == nil) != (tt.want == nil) {
				t.Fatalf("Exponential(%v, %v, %d): got %v, want %v", tt.base, tt.max, tt.n, got, tt.want)
			}
			for i, w := range got {
				if w < 0 || w > tt.max {
					t.Errorf("entry %d: got %v, want in [0, %v]", i, w, tt.max)
				}
			}
		})
	}
}

// TestExponentialNeverOverflows checks the bounds over many bases and caps,
// not only the ones the table names.
func TestExponentialNeverOverflows(t *testing.T) {
	t.Parallel()
	for _, base := range []time.Duration{1, 7, time.Millisecond, time.Hour, 1 << 40, 1<<62 - 1, 1 << 62, math.MaxInt64} {
		for _, max := range []time.Duration{1, time.Second, 1<<62 + 1, math.MaxInt64 - 1, math.MaxInt64} {
			got := outlast.Exponential(base, max, 80)
			if len(got) != 80 {
				t.Fatalf("Exponential(%v, %v, 80): got %d waits, want 80", base, max, len(got))
			}
			for i, w := range got {
				if w < 0 || w > max {
					t.Fatalf("Exponential(%v, %v, 80)[%d]: got %v, want in [0, %v]", base, max, i, w, max)
				}
				if i > 0 && w < got[i-1] {
					t.Fatalf("Exponential(%v, %v, 80)[%d]: got %v after %v, want no decrease", base, max, i, w, got[i-1])
				}
			}
			if got[79] != max {
				t.Errorf("Exponential(%v, %v, 80): got last %v, want the cap %v", base, max, got[79], max)
			}
		}
	}
}

// TestJitterAtSeed004 checks a spread of a quarter against worked
// examples: the base is schedule[retry-1], or the last entry past the end,
// moved by a quarter of it times jitter/1000.
func TestJitterAtSeed004(t *testing.T) {
	t.Parallel()
	schedule := ms(2000, 8000, 30000)
	j := outlast.Jitter{Spread: 0.25}
	tests := []struct {
		name   string
		retry  int
		jitter int // -1000..1000, a thousandth of the quarter each
		want   time.Duration
	}{
		// No jitter: the base itself.
		{"retry 1 jitter 0", 1, 0, 2000 * time.Millisecond},
		// Full upward jitter adds a quarter.
		{"retry 1 jitter 1000", 1, 1000, 2500 * time.Millisecond},
		// Full downward jitter takes a quarter off.
		{"retry 1 jitter -1000", 1, -1000, 1500 * time.Millisecond},
		// Half jitter on the second entry: 8000 + 8000/4/2.
		{"retry 2 jitter 500", 2, 500, 9000 * time.Millisecond},
		// Past the end of the schedule, the last entry repeats.
		{"retry 4 jitter 0", 4, 0, 30000 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := schedule[min(tt.retry, len(schedule))-1]
			got := outlast.JitterAt(j, base, false, float64(tt.jitter)/1000)
			if got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestJitterAtExact pins single points of the jitter map.
func TestJitterAtExact(t *testing.T) {
	t.Parallel()
	const w = 4 * time.Second
	tests := []struct {
		name      string
		j         outlast.Jitter
		w         time.Duration
		serverSet bool
		u         float64
		want      time.Duration
	}{
		// The zero Jitter adds nothing, whatever the draw: tests name exact waits.
		{"zero jitter u=1", outlast.Jitter{}, w, false, 1, w},
		{"zero jitter u=-1", outlast.Jitter{}, w, false, -1, w},
		{"zero jitter server", outlast.Jitter{}, w, true, -0.7, w},
		// A zero wait stays zero: there is nothing to spread.
		{"zero wait spread", outlast.Jitter{Spread: 1}, 0, false, 1, 0},
		{"zero wait full", outlast.Jitter{Full: true}, 0, true, -1, 0},
		// The doc's example: 0.25 turns 4 s into [3 s, 5 s].
		{"spread low end", outlast.Jitter{Spread: 0.25}, w, false, -1, 3 * time.Second},
		{"spread high end", outlast.Jitter{Spread: 0.25}, w, false, 1, 5 * time.Second},
		// Server-set: a downward draw is mirrored upward, never shortening.
		{"spread server mirrored", outlast.Jitter{Spread: 0.25}, w, true, -1, 5 * time.Second},
		// Full maps u=-1 to w, u=0 to w/2 and u=1 to 0.
		{"full u=-1", outlast.Jitter{Full: true}, w, false, -1, w},
		{"full u=0", outlast.Jitter{Full: true}, w, false, 0, w / 2},
		{"full u=1", outlast.Jitter{Full: true}, w, false, 1, 0},
		// Full on a server's delay gives [d, 2d]: the draw that would give 0 gives 2d.
		{"full server u=1", outlast.Jitter{Full: true}, w, true, 1, 2 * w},
		{"full server u=-1", outlast.Jitter{Full: true}, w, true, -1, w},
		// A wait near the largest Duration must not wrap negative when
		// jitter lengthens it.
		{"spread overflow", outlast.Jitter{Spread: 1}, math.MaxInt64 - 1, false, 1, math.MaxInt64 - 1},
		{"full server overflow", outlast.Jitter{Full: true}, 1<<62 + 1<<61, true, 1, 1<<62 + 1<<61},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := outlast.JitterAt(tt.j, tt.w, tt.serverSet, tt.u)
			if got != tt.want {
				t.Fatalf("JitterAt(%+v, %v, %v, %v): got %v, want %v", tt.j, tt.w, tt.serverSet, tt.u, got, tt.want)
			}
		})
	}
}

// TestJitterAtBounds sweeps the draw over [-1, 1] and checks the range each
// jitter promises.
func TestJitterAtBounds(t *testing.T) {
	t.Parallel()
	waits := []time.Duration{1, 3, time.Millisecond, 1500 * time.Millisecond, time.Hour, 1 << 60}
	tests := []struct {
		name      string
		j         outlast.Jitter
		serverSet bool
		lo, hi    func(w time.Duration) time.Duration // the promised range
	}{
		// Full jitter draws from [0, w].
		{"full", outlast.Jitter{Full: true}, false,
			func(time.Duration) time.Duration { return 0 },
			func(w time.Duration) time.Duration { return w }},
		// On a server's delay, Full gives [w, 2w]: never shorter than asked.
		{"full server", outlast.Jitter{Full: true}, true,
			func(w time.Duration) time.Duration { return w },
			func(w time.Duration) time.Duration { return 2 * w }},
		// Spread 0.25 gives [0.75w, 1.25w].
		{"spread", outlast.Jitter{Spread: 0.25}, false,
			func(w time.Duration) time.Duration { return w - w/4 - 1 },
			func(w time.Duration) time.Duration { return w + w/4 + 1 }},
		// On a server's delay, Spread gives [w, 1.25w].
		{"spread server", outlast.Jitter{Spread: 0.25}, true,
			func(w time.Duration) time.Duration { return w },
			func(w time.Duration) time.Duration { return w + w/4 + 1 }},
		// The widest Spread reaches down to 0 but never below.
		{"spread 1", outlast.Jitter{Spread: 1}, false,
			func(time.Duration) time.Duration { return 0 },
			func(w time.Duration) time.Duration { return 2 * w }},
		// The widest Spread on a server's delay never shortens it.
		{"spread 1 server", outlast.Jitter{Spread: 1}, true,
			func(w time.Duration) time.Duration { return w },
			func(w time.Duration) time.Duration { return 2 * w }},
	}
	const steps = 2000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, w := range waits {
				for i := 0; i <= steps; i++ {
					u := -1 + 2*float64(i)/steps
					got := outlast.JitterAt(tt.j, w, tt.serverSet, u)
					if lo, hi := tt.lo(w), tt.hi(w); got < lo || got > hi {
						t.Fatalf("JitterAt(%+v, %v, %v, %v): got %v, want in [%v, %v]", tt.j, w, tt.serverSet, u, got, lo, hi)
					}
				}
			}
		})
	}
}

func TestRetryAfterModeString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		m    outlast.RetryAfterMode
		want string
	}{
		// The three documented names.
		{outlast.RetryAfterAtLeast, "at-least"},
		{outlast.RetryAfterExact, "exact"},
		{outlast.RetryAfterIgnore, "ignore"},
		// An unknown mode still prints something that names its value, so
		// Validate's error can show it.
		{7, "RetryAfterMode(7)"},
		{-1, "RetryAfterMode(-1)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			if got := tt.m.String(); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// secs returns n seconds for each n.
func secs(n ...int) []time.Duration {
	d := make([]time.Duration, len(n))
	for i, v := range n {
		d[i] = time.Duration(v) * time.Second
	}
	return d
}

// repeat returns n copies of d.
func repeat(d time.Duration, n int) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = d
	}
	return s
}
