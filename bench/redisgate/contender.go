package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outlast-llm/outlast"
)

// contenders are goroutines of one process that loop acquire, hold,
// release on one key of a gate until a deadline. The in-process run and
// each child of the redisgate run are one.
type contenders struct {
	gate       outlast.Gate
	key        string
	workers    int
	hold       time.Duration
	duration   time.Duration
	counter    *redis.Client // where the holders count themselves
	counterKey string
}

// tally is what one process's contenders did, as a child reports it on
// stdout. The times are ns; Start and End, and each hold's, are Unix ns
// on the wall clock, which the processes of one machine share.
type tally struct {
	Workers    int     `json:"workers"`
	Grants     int     `json:"grants"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	MaxHolders int64   `json:"max_holders"` // the highest the counter went, by this process's INCRs
	Start      int64   `json:"start"`
	End        int64   `json:"end"`
	Waits      []int64 `json:"waits"`    // each grant's Acquire call
	Releases   []int64 `json:"releases"` // each release call
	Holds      []span  `json:"holds"`
}

// run runs the contenders and returns their tally.
func (c *contenders) run(ctx context.Context) *tally {
	t := &tally{Workers: c.workers, Start: time.Now().UnixNano()}
	deadline := time.Now().Add(c.duration)
	var (
		mu         sync.Mutex // guards t while the workers run
		maxHolders atomic.Int64
		wg         sync.WaitGroup
	)
	for range c.workers {
		wg.Go(func() {
			w := &tally{}
			for time.Now().Before(deadline) {
				if err := c.once(ctx, w, &maxHolders); err != nil {
					w.Errors, w.FirstError = 1, err.Error()
					break // a failing Redis would fail every loop alike
				}
			}
			mu.Lock()
			t.add(w)
			mu.Unlock()
		})
	}
	wg.Wait()
	t.End = time.Now().UnixNano()
	t.MaxHolders = maxHolders.Load()
	return t
}

// once acquires, holds and releases once. The hold is counted in by INCR
// after Acquire has returned and out by DECR before release is called, so
// that the counter, read by no one process alone, never exceeds the
// capacity if the gate holds.
func (c *contenders) once(ctx context.Context, w *tally, maxHolders *atomic.Int64) error {
	asked := time.Now()
	release, err := c.gate.Acquire(ctx, c.key, nil)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	start := time.Now()
	holders, err := c.counter.Incr(ctx, c.counterKey).Result()
	if err == nil {
		storeMax(maxHolders, holders)
		time.Sleep(c.hold)
		err = c.counter.Decr(ctx, c.counterKey).Err()
	}
	end := time.Now()
	release()
	w.Grants++
	w.Waits = append(w.Waits, int64(start.Sub(asked)))
	w.Releases = append(w.Releases, int64(time.Since(end)))
	w.Holds = append(w.Holds, span{start.UnixNano(), end.UnixNano()})
	if err != nil {
		return fmt.Errorf("holders counter: %w", err)
	}
	return nil
}

// storeMax raises m to v if v is higher.
func storeMax(m *atomic.Int64, v int64) {
	for {
		old := m.Load()
		if v <= old || m.CompareAndSwap(old, v) {
			return
		}
	}
}

// add adds w's figures to t's.
func (t *tally) add(w *tally) {
	t.Grants += w.Grants
	t.Errors += w.Errors
	if t.FirstError == "" {
		t.FirstError = w.FirstError
	}
	t.Waits = append(t.Waits, w.Waits...)
	t.Releases = append(t.Releases, w.Releases...)
	t.Holds = append(t.Holds, w.Holds...)
}
