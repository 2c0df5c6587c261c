package journal

import (
	"context"
	"log/slog"
	"time"
)

// DefaultPruneInterval is the time between prunes for a Keeper whose
// Interval is zero.
const DefaultPruneInterval = time.Hour

// A Keeper deletes the records of requests older than Keep, and the
// upstreams' state changes older than Keep, now and then every Interval.
// The zero Keeper keeps everything. Its fields must not change while Run
// runs.
type Keeper struct {
	// Store is pruned. If nil, Run returns at once.
	Store Store

	// Keep is how long a request's record is kept after it ended. Zero
	// or negative means forever: Run returns at once.
	Keep time.Duration

	// Interval is the time between prunes. Zero means
	// DefaultPruneInterval (1 h).
	Interval time.Duration

	// Logger receives a line per prune that deleted records or failed.
	// If nil, slog.Default() is used.
	Logger *slog.Logger
}

// Run prunes at once and then every Interval, in the caller's goroutine,
// until ctx is done. A failed prune is logged and tried again at the next
// tick: the records wait, and nothing else does.
func (k *Keeper) Run(ctx context.Context) {
	if k.Store == nil || k.Keep <= 0 {
		return
	}
	interval := k.Interval
	if interval <= 0 {
		interval = DefaultPruneInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if ctx.Err() != nil {
			return
		}
		k.prune(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (k *Keeper) prune(ctx context.Context) {
	logger := k.Logger
	if logger == nil {
		logger = slog.Default()
	}
	before := time.Now().Add(-k.Keep)
	n, err := k.Store.Prune(ctx, before)
	switch {
	case err != nil && ctx.Err() == nil:
		logger.Warn("journal: prune failed", "before", before, "deleted", n, "err", err)
	case n > 0:
		logger.Info("journal: pruned", "before", before, "deleted", n)
	}
}
