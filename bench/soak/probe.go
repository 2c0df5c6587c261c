package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// probes is what the probes of a phase share with the callers.
//
// A probe holds every attempt at the upstream until all the slots are
// held there. From then on no slot can be freed, so no waiter leaves the
// queue, which can only grow: that is the quiet window, during which a
// busy refusal is judged against the queue's depth as the caller sees it
// after the refusal, which can only be greater than at the refusal. Once
// the queue is full and one refusal has been judged, the window closes
// and the probe frees the held attempts one at a time, each time waiting
// for the one grant it makes to arrive, so that the upstream ranks those
// grants exactly, whatever the number of slots. Then it frees the rest.
type probes struct {
	window  atomic.Int64  // odd while a quiet window is open
	judged  atomic.Int64  // busy refusals judged in the open window
	wake    chan struct{} // cap 1: a busy refusal was judged; read by the probe alone
	mu      sync.Mutex    // guards the fields below
	bad     []string      // busy refusals with room in the queue
	total   int           // busy refusals judged, in every window
	stepped int           // grants ranked by stepping
	run     int           // probes run to their end
}

// maxJudged is how many busy refusals a probe's quiet window waits for.
const maxJudged = 50

// judgeBusy judges a busy refusal of the request tagged tag, whose caller
// read window before sending it, against the queue's depth now, out of
// queue.
func (p *probes) judgeBusy(window int64, tag string, depth func() int, queue int) {
	if window%2 == 0 {
		return
	}
	d := depth()
	if p.window.Load() != window {
		return // the window closed meanwhile: the queue may have shrunk since
	}
	p.mu.Lock()
	if d < queue {
		p.bad = append(p.bad, fmt.Sprintf("%s was refused busy with %d of %d waiting, while the queue could only grow", tag, d, queue))
	}
	p.total++
	p.mu.Unlock()
	p.judged.Add(1)
	signal(p.wake)
}

// probe runs one probe of the phase.
func (ph *phase) probe(ctx context.Context) error {
	up, p := ph.up, ph.probes
	ph.pauses.Add(1) // odd: the times of requests in flight now are the probe's
	up.pause()
	defer func() {
		up.resume()
		ph.pauses.Add(1)
	}()
	held := func() bool { h, _ := up.holding(); return h >= ph.slots }
	if err := ph.await(ctx, up.wake, "every slot held at the upstream", held); err != nil {
		return err
	}
	p.judged.Store(0)
	p.window.Add(1) // open
	full := func() bool { return ph.queued() >= ph.cfg.Queue }
	if err := ph.await(ctx, ph.led.queuedWake, "the queue full while every slot was held", full); err != nil {
		p.window.Add(1)
		return err
	}
	// Every caller outside the queue is refused in turn, each within a
	// BusyWait of its last refusal.
	want := int64(min(maxJudged, ph.cfg.Callers-ph.slots-ph.cfg.Queue))
	refused := func() bool { return p.judged.Load() >= want }
	err := ph.await(ctx, p.wake, fmt.Sprintf("%d busy refusals while the queue was full", want), refused)
	p.window.Add(1) // closed, before any slot is freed
	if err != nil {
		return err
	}
	for range ph.cfg.Steps {
		_, before := up.holding()
		up.step()
		granted := func() bool { h, a := up.holding(); return a > before && h >= ph.slots }
		if err := ph.await(ctx, up.wake, "the grant of a freed slot", granted); err != nil {
			return err
		}
		if _, a := up.holding(); a != before+1 {
			return fmt.Errorf("one freed slot let %d attempts through to the upstream", a-before)
		}
	}
	p.mu.Lock()
	p.stepped += ph.cfg.Steps
	p.run++
	p.mu.Unlock()
	return nil
}

// await returns once cond holds, testing it at each signal on wake, or an
// error naming what it waited for once Stuck has passed or ctx ended.
func (ph *phase) await(ctx context.Context, wake <-chan struct{}, what string, cond func() bool) error {
	t := time.NewTimer(ph.cfg.Stuck)
	defer t.Stop()
	for !cond() {
		select {
		case <-wake:
		case <-t.C:
			return fmt.Errorf("stuck: no %s after %v", what, ph.cfg.Stuck)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}
