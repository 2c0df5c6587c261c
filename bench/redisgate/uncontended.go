package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/bench/internal/stats"
	"github.com/outlast-llm/outlast/gate"
	"github.com/outlast-llm/outlast/redisgate"
)

// warmup is how many ops each loop runs before it measures: enough to
// dial the connection, load the scripts and fill the free lists.
const warmup = 200

// uncontendedRow is one gate's uncontended acquire+release.
type uncontendedRow struct {
	Gate string `json:"gate"`
	// Each op timed alone, a clock read included: the percentiles.
	Timed summary `json:"timed"`
	// A second loop of as many ops timed as a whole, over their number:
	// the mean without the clock reads, which matter at ns.
	Mean float64 `json:"mean_us"`
	// Round trips to Redis per op, and each command per op; nil for what
	// sends none.
	RoundTrips *float64           `json:"round_trips,omitempty"`
	Commands   map[string]float64 `json:"commands,omitempty"`
}

// uncontended times one goroutine's acquire+release on one key of
// capacity 1, on each gate, and a PING for scale.
func (b *bench) uncontended(ctx context.Context) ([]uncontendedRow, error) {
	n := b.cfg.Iterations
	local := acquireRelease(ctx, gate.New(1, 0), "uncontended")
	if err := warm(local); err != nil {
		return nil, err
	}
	inProcess, err := timeOps(n, local)
	if err != nil {
		return nil, err
	}
	inProcess.Gate = "gate (in-process)"

	hook := &commandCounter{}
	client, err := dial(ctx, b.opts, 0)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	client.AddHook(hook)
	ping, err := b.timeRedis(n, hook, func() error { return client.Ping(ctx).Err() })
	if err != nil {
		return nil, err
	}
	ping.Gate = "Redis PING (one round trip, for scale)"

	g := redisgate.New(client, redisgate.Options{Capacity: 1, Prefix: b.prefix})
	defer g.Close()
	shared, err := b.timeRedis(n, hook, acquireRelease(ctx, g, "uncontended"))
	if err != nil {
		return nil, err
	}
	shared.Gate = "redisgate"
	return []uncontendedRow{inProcess, ping, shared}, nil
}

// acquireRelease returns an op that acquires key on g and releases it.
func acquireRelease(ctx context.Context, g outlast.Gate, key string) func() error {
	return func() error {
		release, err := g.Acquire(ctx, key, nil)
		if err != nil {
			return err
		}
		release()
		return nil
	}
}

// timeRedis is timeOps, with the commands that op sends counted over both
// of its loops.
func (b *bench) timeRedis(n int, hook *commandCounter, op func() error) (uncontendedRow, error) {
	// The warm-up's commands, a dial's or a script's first EVAL, are not
	// the op's steady cost.
	if err := warm(op); err != nil {
		return uncontendedRow{}, err
	}
	hook.reset()
	row, err := timeOps(n, op)
	if err != nil {
		return row, err
	}
	trips, names := hook.perOp(2 * n)
	row.RoundTrips, row.Commands = &trips, names
	return row, nil
}

// warm runs op warmup times.
func warm(op func() error) error {
	for range warmup {
		if err := op(); err != nil {
			return err
		}
	}
	return nil
}

// timeOps runs op n times each timed alone, then n times timed as a whole.
func timeOps(n int, op func() error) (uncontendedRow, error) {
	took := make([]time.Duration, n)
	for i := range took {
		start := time.Now()
		if err := op(); err != nil {
			return uncontendedRow{}, err
		}
		took[i] = time.Since(start)
	}
	start := time.Now()
	for range n {
		if err := op(); err != nil {
			return uncontendedRow{}, err
		}
	}
	mean := stats.Micros(time.Since(start)) / float64(n)
	return uncontendedRow{Timed: summarize(took), Mean: mean}, nil
}

// The in-process gate and redisgate are both what outlast.Transport holds.
var (
	_ outlast.Gate = (*gate.Gate)(nil)
	_ outlast.Gate = (*redisgate.Gate)(nil)
	_ redis.Hook   = (*commandCounter)(nil)
)
