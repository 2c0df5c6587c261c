package journal_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast/journal"
)

func TestParseKeep(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"7d", 7 * day, false},         // the flag's example
		{"36h", 36 * time.Hour, false}, // hours
		{"90m", 90 * time.Minute, false},
		{"1d12h30m", day + 12*time.Hour + 30*time.Minute, false}, // units combine
		{"0", 0, false},                                          // keep forever
		{"0d", 0, false},                                         // a zero count is zero too
		{"007d", 7 * day, false},                                 // leading zeros are digits
		{"106751d", 106751 * day, false},                         // the longest whole-day Duration
		{"", 0, true},                                            // nothing
		{"7", 0, true},                                           // no unit
		{"d", 0, true},                                           // no count
		{"7s", 0, true},                                          // seconds are not a retention
		{"7ms", 0, true},                                         // nor milliseconds: "m" then a stray "s"
		{"1.5d", 0, true},                                        // whole counts only
		{"-1d", 0, true},                                         // no negative retention
		{"7D", 0, true},                                          // units are lowercase, as Go's
		{" 7d", 0, true},                                         // no spaces
		{"106752d", 0, true},                                     // past the longest Duration
		{"106751d24h", 0, true},                                  // past it by the sum
		{"99999999999999999999d", 0, true},                       // past int64 in the count
	}
	for _, c := range tests {
		got, err := journal.ParseKeep(c.in)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("ParseKeep(%q): got %v, %v; want %v, error %v", c.in, got, err, c.want, c.wantErr)
		}
	}
}

// FuzzParseKeep checks that ParseKeep never panics, never returns a
// negative duration, and that what it accepts reads back the same in
// minutes.
func FuzzParseKeep(f *testing.F) {
	for _, s := range []string{"7d", "1d2h3m", "0", "", "9223372036854775807m", "1m1m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := journal.ParseKeep(s)
		if err != nil {
			return
		}
		if d < 0 || d%time.Minute != 0 {
			t.Fatalf("ParseKeep(%q): got %v, want a whole number of minutes ≥ 0", s, d)
		}
		m := strconv.FormatInt(int64(d/time.Minute), 10) + "m"
		if back, err := journal.ParseKeep(m); err != nil || back != d {
			t.Errorf("ParseKeep(%q) = %v, and ParseKeep(%q): got %v, %v; want %v", s, d, m, back, err, d)
		}
	})
}

// pruneStore records the cut of each Prune.
type pruneStore struct {
	fakeStore
	mu  sync.Mutex // guards cuts
	cut []time.Time
}

func (p *pruneStore) Prune(_ context.Context, before time.Time) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = append(p.cut, before)
	return 1, nil
}

func (p *pruneStore) cuts() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.cut...)
}

// TestKeeper checks that a Keeper prunes at once and then every interval,
// with the cut Keep before now, and stops with its context.
func TestKeeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &pruneStore{}
		k := &journal.Keeper{Store: s, Keep: 7 * 24 * time.Hour, Interval: time.Hour, Logger: quiet}
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		done := make(chan struct{})
		go func() {
			k.Run(ctx)
			close(done)
		}()
		time.Sleep(150 * time.Minute)
		synctest.Wait()
		cuts := s.cuts()
		if len(cuts) != 3 {
			t.Fatalf("after 2.5h: got %d prunes, want 3 (at 0, 1h, 2h)", len(cuts))
		}
		for i, c := range cuts {
			if want := start.Add(time.Duration(i)*time.Hour - k.Keep); !c.Equal(want) {
				t.Errorf("prune %d: got cut %v, want %v", i, c, want)
			}
		}
		cancel()
		<-done
	})
}

// TestKeeperKeepsAll checks that a Keeper without a Keep returns at once.
func TestKeeperKeepsAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &pruneStore{}
		(&journal.Keeper{Store: s}).Run(context.Background())
		if got := len(s.cuts()); got != 0 {
			t.Errorf("got %d prunes, want 0", got)
		}
	})
}
