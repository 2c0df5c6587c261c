package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/bench/internal/stats"
	"github.com/outlast-llm/outlast/gate"
	"github.com/outlast-llm/outlast/redisgate"
)

// settle is how long the holder waits, once the waiter has queued, before
// it releases: long enough for the waiter to be blocked, with nothing of
// its queuing still on its way, so that what is timed is a wake-up alone.
const settle = time.Millisecond

// handoffWarmup is how many hand-offs each setup runs before it measures:
// the first subscribes the waiter's Gate to its wake-ups.
const handoffWarmup = 20

// handoffRow is one setup's hand-offs.
type handoffRow struct {
	Gate  string  `json:"gate"`
	Setup string  `json:"setup"`
	Clock string  `json:"clock"`
	Took  summary `json:"handoff"`
	// GoalMet is whether the p99 is under the run's goal.
	GoalMet bool `json:"goal_met"`
}

// waiter is the side of a hand-off that waits: told to queue, it calls
// Acquire on the key the holder holds, and once granted it releases at
// once and tells when its Acquire returned.
type waiter interface {
	// queue returns once the waiter's Acquire has queued.
	queue() error
	// granted returns when the waiter's Acquire returned, after its
	// release has returned too.
	granted() (time.Time, error)
}

// handoffs times the hand-offs of each setup.
func (b *bench) handoffs(ctx context.Context) ([]handoffRow, error) {
	var rows []handoffRow
	add := func(name, setup, clock string, took []time.Duration) {
		s := summarize(took)
		rows = append(rows, handoffRow{Gate: name, Setup: setup, Clock: clock, Took: s, GoalMet: s.P99 < stats.Micros(b.cfg.Goal)})
	}
	local := gate.New(1, 1)
	took, err := b.handoff(ctx, local, "handoff", &goroutineWaiter{ctx: ctx, g: local, key: "handoff"})
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	add("gate (in-process)", "1 process, 2 goroutines", "monotonic", took)

	if took, err = b.twoGates(ctx); err != nil {
		return nil, fmt.Errorf("redisgate, 1 process: %w", err)
	}
	add("redisgate", "1 process, 2 Gates on 2 clients", "monotonic", took)

	if took, err = b.twoProcesses(ctx); err != nil {
		return nil, fmt.Errorf("redisgate, 2 processes: %w", err)
	}
	add("redisgate", "2 processes, a Gate in each", "wall (CLOCK_REALTIME, one machine)", took)
	return rows, nil
}

// twoGates times hand-offs from a Gate on one client to a Gate on
// another, as between two processes, within this one.
func (b *bench) twoGates(ctx context.Context) ([]time.Duration, error) {
	opts := redisgate.Options{Capacity: 1, MaxQueue: 1, Prefix: b.prefix}
	var gates [2]*redisgate.Gate
	for i := range gates {
		client, err := dial(ctx, b.opts, 0)
		if err != nil {
			return nil, err
		}
		defer client.Close()
		gates[i] = redisgate.New(client, opts)
		defer gates[i].Close() // before its client, as redisgate asks
	}
	return b.handoff(ctx, gates[0], "handoff", &goroutineWaiter{ctx: ctx, g: gates[1], key: "handoff"})
}

// twoProcesses times hand-offs from a Gate in this process to one in a
// child.
func (b *bench) twoProcesses(ctx context.Context) ([]time.Duration, error) {
	client, err := dial(ctx, b.opts, 0)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	g := redisgate.New(client, redisgate.Options{Capacity: 1, MaxQueue: 1, Prefix: b.prefix})
	defer g.Close()
	// A hand-off takes a few ms; the bound is for a child that hangs.
	ctx, cancel := context.WithTimeout(ctx, time.Duration(handoffWarmup+b.cfg.Handoffs)*100*time.Millisecond+childSlack)
	defer cancel()
	ch, err := b.startChild(ctx, childConfig{Role: roleHandoff, Prefix: b.prefix, Key: "handoff-procs", Capacity: 1, MaxQueue: 1})
	if err != nil {
		return nil, err
	}
	took, err := b.handoff(ctx, g, "handoff-procs", (*processWaiter)(ch))
	return took, errors.Join(err, ch.wait())
}

// handoff times handoffWarmup and then Handoffs hand-offs from a holder
// of key on g to w, and returns the measured ones: each from just before
// the holder's release call to the moment w's Acquire returned.
func (b *bench) handoff(ctx context.Context, g outlast.Gate, key string, w waiter) ([]time.Duration, error) {
	took := make([]time.Duration, 0, b.cfg.Handoffs)
	for i := range handoffWarmup + b.cfg.Handoffs {
		release, err := g.Acquire(ctx, key, nil)
		if err != nil {
			return nil, err
		}
		if err := w.queue(); err != nil {
			release()
			return nil, err
		}
		time.Sleep(settle)
		released := time.Now()
		release()
		acquired, err := w.granted()
		if err != nil {
			return nil, err
		}
		if i >= handoffWarmup {
			took = append(took, acquired.Sub(released))
		}
	}
	return took, nil
}

// goroutineWaiter waits in a goroutine of this process.
type goroutineWaiter struct {
	ctx    context.Context // the run's, for the waiting goroutines
	g      outlast.Gate
	key    string
	queued chan struct{}
	done   chan grant
}

// grant is a waiter's Acquire's return.
type grant struct {
	at  time.Time
	err error
}

func (w *goroutineWaiter) queue() error {
	if w.queued == nil {
		w.queued, w.done = make(chan struct{}, 1), make(chan grant, 1)
	}
	go func() {
		release, err := w.g.Acquire(w.ctx, w.key, func(int) { w.queued <- struct{}{} })
		at := time.Now()
		if err == nil {
			release()
		}
		w.done <- grant{at, err}
	}()
	select {
	case <-w.queued:
		return nil
	case g := <-w.done:
		return errors.Join(g.err, errors.New("the waiter was granted without waiting"))
	}
}

func (w *goroutineWaiter) granted() (time.Time, error) {
	g := <-w.done
	return g.at, g.err
}

// processWaiter waits in a child, which says "queued" once its Acquire
// has queued and "granted NS" once it has returned and the slot is
// released again, with NS the Unix ns at which Acquire returned.
type processWaiter child

func (w *processWaiter) queue() error {
	ch := (*child)(w)
	if err := ch.send("wait"); err != nil {
		return err
	}
	switch line, err := ch.readLine(); {
	case err != nil:
		return fmt.Errorf("the waiting child: %w", err)
	case line != "queued":
		return fmt.Errorf("the waiting child: got %q, want queued", line)
	}
	return nil
}

func (w *processWaiter) granted() (time.Time, error) {
	line, err := (*child)(w).readLine()
	if err != nil {
		return time.Time{}, fmt.Errorf("the waiting child: %w", err)
	}
	v, ok := strings.CutPrefix(line, "granted ")
	ns, perr := strconv.ParseInt(v, 10, 64)
	if !ok || perr != nil {
		return time.Time{}, fmt.Errorf("the waiting child: got %q, want granted and a time", line)
	}
	// A wall clock time, without a monotonic reading: Sub with the
	// holder's time.Now uses the wall clock of both.
	return time.Unix(0, ns), nil
}

// waitForHandoffs is the waiting child: for each "wait" on in, it
// acquires key on g, which must queue, and reports as processWaiter reads.
func waitForHandoffs(ctx context.Context, g *redisgate.Gate, key string, in *bufio.Scanner, out io.Writer) error {
	for in.Scan() {
		if in.Text() != "wait" {
			return fmt.Errorf("got %q from the parent, want wait", in.Text())
		}
		release, err := g.Acquire(ctx, key, func(int) { fmt.Fprintln(out, "queued") })
		at := time.Now().UnixNano()
		if err != nil {
			return err
		}
		release()
		fmt.Fprintf(out, "granted %d\n", at)
	}
	return in.Err()
}
