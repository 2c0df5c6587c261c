package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/stats"
	"github.com/outlast-llm/outlast/gate"
)

// childSlack bounds a child's start and its report, on top of its run.
const childSlack = time.Minute

// contendedRow is one gate under contention.
type contendedRow struct {
	Gate       string  `json:"gate"`
	Setup      string  `json:"setup"`
	Processes  int     `json:"processes"`
	Reported   int     `json:"reported"`          // processes that reported their tally
	Missing    string  `json:"missing,omitempty"` // why the others did not
	Goroutines int     `json:"goroutines"`
	Capacity   int     `json:"capacity"`
	Seconds    float64 `json:"seconds"` // first start to last end, over the processes
	Grants     int     `json:"grants"`
	PerSecond  float64 `json:"grants_per_second"`
	// SlotsBusy is the share of the slots' time that holders spent between
	// their Acquire's return and their release call: what a hand-off and
	// the gate's own calls leave idle is the rest.
	SlotsBusy float64 `json:"slots_busy"`
	// IdlePerGrant is the rest, per grant: the time a slot sat unused
	// between one holder's release call and the next one's start, µs.
	IdlePerGrant float64 `json:"idle_per_grant_us"`
	Wait         summary `json:"acquire_wait"`
	Release      summary `json:"release"`
	Held         summary `json:"held"`
	// The most holders at once, by the Redis counter they INCR and DECR
	// while they hold, and by their holds on the wall clock.
	MaxHoldersCounter int64  `json:"max_holders_counter"`
	MaxHoldersClock   int    `json:"max_holders_clock"`
	Errors            int    `json:"errors"`
	FirstError        string `json:"first_error,omitempty"`
}

// contended runs the contenders on the in-process gate, in this process,
// then on redisgate, spread over the child processes.
func (b *bench) contended(ctx context.Context) ([]contendedRow, error) {
	c := b.cfg
	counters := [2]string{b.prefix + "holders:gate", b.prefix + "holders:redisgate"}
	for _, key := range counters {
		// INCR sets no expiry, and a run that is killed leaves the
		// counters behind: give them one that outlasts the run.
		if err := b.client.Set(ctx, key, 0, 2*(c.Duration+childSlack)).Err(); err != nil {
			return nil, err
		}
	}
	b.progressf("contended: gate, %d goroutines in this process for %v", c.Goroutines, c.Duration)
	local := &contenders{
		gate: gate.New(c.Capacity, c.Goroutines), key: "contended", workers: c.Goroutines,
		hold: c.Hold, duration: c.Duration, counter: b.client, counterKey: counters[0],
	}
	inProcess := b.sumUp("gate (in-process)",
		fmt.Sprintf("1 process × %d goroutines; an in-process gate cannot span processes", c.Goroutines),
		1, []*tally{local.run(ctx)}, nil)

	b.progressf("contended: redisgate, %d goroutines in %d processes for %v", c.Goroutines, c.Processes, c.Duration)
	tallies, missing, err := b.contendInChildren(ctx, counters[1])
	if err != nil {
		return nil, err
	}
	setup := fmt.Sprintf("%d processes × %d goroutines", c.Processes, c.share(0))
	if c.share(0) != c.share(c.Processes-1) {
		setup = fmt.Sprintf("%d processes × %d–%d goroutines", c.Processes, c.share(c.Processes-1), c.share(0))
	}
	shared := b.sumUp("redisgate", setup, c.Processes, tallies, missing)
	return []contendedRow{inProcess, shared}, nil
}

// contendInChildren starts the children, counting their holders on
// counterKey, lets them go together once all are ready, and reads their
// tallies. A child that does not report is
// missing, with its error, and the run goes on without it.
func (b *bench) contendInChildren(ctx context.Context, counterKey string) ([]*tally, []error, error) {
	c := b.cfg
	ctx, cancel := context.WithTimeout(ctx, c.Duration+childSlack)
	defer cancel()
	var children []*child
	defer func() {
		for _, ch := range children {
			ch.wait()
		}
	}()
	for i := range c.Processes {
		ch, err := b.startChild(ctx, childConfig{
			Role: roleContend, Prefix: b.prefix, Key: "contended", CounterKey: counterKey,
			// Room for every goroutine of every process: waiting is
			// what is measured, never a refusal.
			Capacity: c.Capacity, MaxQueue: c.Goroutines, Workers: c.share(i), Hold: c.Hold, Duration: c.Duration,
		})
		if err != nil {
			return nil, nil, err
		}
		children = append(children, ch)
	}
	for _, ch := range children {
		if err := ch.send("go"); err != nil {
			return nil, nil, err
		}
	}
	var tallies []*tally
	var missing []error
	for _, ch := range children {
		t := &tally{}
		err := json.NewDecoder(ch.out).Decode(t)
		switch werr := ch.wait(); {
		case werr != nil: // the cause of a failed read, too
			missing = append(missing, werr)
		case err != nil:
			missing = append(missing, fmt.Errorf("child %d: reading its tally: %w", ch.cmd.Process.Pid, err))
		default:
			tallies = append(tallies, t)
		}
	}
	children = nil
	return tallies, missing, nil
}

// sumUp sums up the tallies of the processes of one gate's run.
func (b *bench) sumUp(name, setup string, processes int, tallies []*tally, missing []error) contendedRow {
	row := contendedRow{
		Gate: name, Setup: setup, Processes: processes, Reported: len(tallies),
		Goroutines: b.cfg.Goroutines, Capacity: b.cfg.Capacity,
	}
	var why []string
	for _, err := range missing {
		why = append(why, err.Error())
	}
	row.Missing = strings.Join(why, "; ")
	var waits, releases, held []time.Duration
	var holds []span
	var first, last int64
	for i, t := range tallies {
		if i == 0 || t.Start < first {
			first = t.Start
		}
		last = max(last, t.End)
		row.Grants += t.Grants
		row.Errors += t.Errors
		if row.FirstError == "" {
			row.FirstError = t.FirstError
		}
		row.MaxHoldersCounter = max(row.MaxHoldersCounter, t.MaxHolders)
		for _, v := range t.Waits {
			waits = append(waits, time.Duration(v))
		}
		for _, v := range t.Releases {
			releases = append(releases, time.Duration(v))
		}
		for _, h := range t.Holds {
			held = append(held, time.Duration(h[1]-h[0]))
		}
		holds = append(holds, t.Holds...)
	}
	wall := time.Duration(last - first)
	row.Seconds = wall.Seconds()
	row.Wait, row.Release, row.Held = summarize(waits), summarize(releases), summarize(held)
	row.MaxHoldersClock = stats.MaxOverlap(holds)
	if wall > 0 {
		row.PerSecond = float64(row.Grants) / wall.Seconds()
		slotTime := stats.Micros(wall) * float64(row.Capacity)
		busy := row.Held.Mean * float64(row.Held.N)
		row.SlotsBusy = busy / slotTime
		if row.Grants > 0 {
			row.IdlePerGrant = (slotTime - busy) / float64(row.Grants)
		}
	}
	return row
}
