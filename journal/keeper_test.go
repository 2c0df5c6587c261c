package journal_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast/journal"
)

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
