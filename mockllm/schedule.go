package mockllm

import (
	"errors"
	"sync"
	"time"
)

// reopenRetry is how soon a listener that could not be reopened after a
// refuse window is tried again.
const reopenRetry = 100 * time.Millisecond

// schedule runs a script: it knows which step is current, moves on when
// a step's requests are used up or its window ends, and closes and
// reopens the listener for refuse steps.
//
// Counted steps move on when a request takes their last use; timed steps
// move on when their window ends, measured from when they became
// current. The first step becomes current at start, or, if the schedule
// waits for the first request, when take is first called. A timer moves
// the schedule on at the end of a window even if no request comes,
// because a refuse step must close the listener on time; requests also
// move it on, so that one that arrives before the timer fires still sees
// the right step.
type schedule struct {
	steps []step
	// refuse closes (true) or reopens (false) the listener. It is called
	// with mu held; it must not call back into the schedule.
	refuse func(on bool) error
	logf   func(format string, args ...any)

	mu       sync.Mutex  // guards the fields below
	waiting  bool        // whether the clock waits for the first request
	i        int         // the current step
	used     int         // requests the current step has taken
	since    time.Time   // when the current step became current
	refusing bool        // whether the listener is closed for a refuse step
	reopenOK bool        // false after a reopen failed, until one succeeds
	timer    *time.Timer // fires at timerAt, to call advance
	timerAt  time.Time
	closed   bool
}

func newSchedule(s Script, refuse func(bool) error, logf func(string, ...any)) *schedule {
	steps := s.steps
	// The step added is ok as a script writes it: without a Retry-After
	// of any form, which the zero step would send as 0.
	ok := step{fault: faultOK, retryAfter: -1, retryAfterDate: -1, retryAfterMs: -1}
	switch {
	case len(steps) == 0:
		steps = []step{ok}
	case steps[len(steps)-1].fault == faultRefuse:
		// A refuse step is a server restart: after it the server is up.
		steps = append(steps[:len(steps):len(steps)], ok)
	}
	return &schedule{steps: steps, refuse: refuse, logf: logf, reopenOK: true}
}

// start makes the first step current at now or, with fromFirst, leaves
// it waiting for the first request to take it. A first step that refuses
// starts at now either way, since with the socket closed no request could
// come to start its clock; the steps after it follow on from it.
func (sc *schedule) start(now time.Time, fromFirst bool) {
	sc.mu.Lock()
	if fromFirst && sc.steps[0].fault != faultRefuse {
		// No timer yet: a window that has not begun cannot end.
		sc.waiting = true
		sc.mu.Unlock()
		return
	}
	sc.since = now
	err := sc.advance(now)
	sc.mu.Unlock()
	sc.report(err)
}

// take returns the step that applies to a request arriving at now, and
// its number from 0, and counts the request against it.
func (sc *schedule) take(now time.Time) (step, int) {
	sc.mu.Lock()
	if sc.waiting {
		sc.waiting = false
		sc.since = now
	}
	err := sc.advance(now)
	i, st := sc.i, sc.steps[sc.i]
	if _, timed := st.timed(); !timed && !sc.last() {
		sc.used++
		if sc.used >= max(st.count, 1) {
			sc.i++
			sc.used = 0
			sc.since = now
			err = errors.Join(err, sc.advance(now))
		}
	}
	sc.mu.Unlock()
	sc.report(err)
	return st, i
}

// peek returns the step that applies at now without using it. While the
// schedule waits for the first request, that is the first step, and its
// clock stays stopped: only a model request starts it.
func (sc *schedule) peek(now time.Time) step {
	sc.mu.Lock()
	if sc.waiting {
		st := sc.steps[0]
		sc.mu.Unlock()
		return st
	}
	err := sc.advance(now)
	st := sc.steps[sc.i]
	sc.mu.Unlock()
	sc.report(err)
	return st
}

func (sc *schedule) last() bool { return sc.i == len(sc.steps)-1 }

// advance moves past every timed step whose window has ended by now,
// puts the listener in the state the current step wants, and sets the
// timer for the current step's end. It is called with mu held, and
// returns an error if the listener could not be reopened.
func (sc *schedule) advance(now time.Time) error {
	if sc.closed {
		return nil
	}
	for !sc.last() {
		d, timed := sc.steps[sc.i].timed()
		if !timed || now.Before(sc.since.Add(d)) {
			break
		}
		// The next step starts when this window ended, not when someone
		// noticed, so that windows add up to a timeline.
		sc.since = sc.since.Add(d)
		sc.i++
		sc.used = 0
	}
	var err error
	if want := sc.steps[sc.i].fault == faultRefuse; want != sc.refusing {
		err = sc.refuse(want)
		if err == nil {
			sc.refusing = want
		}
	}
	sc.reopenOK = err == nil
	sc.arm(now)
	return err
}

// report logs an error from advance; it is called without mu held, since
// logf calls the user's hook.
func (sc *schedule) report(err error) {
	if err != nil && sc.logf != nil {
		sc.logf("mockllm: %v; trying again in %v", err, reopenRetry)
	}
}

// arm sets the timer for the current step's end, or for the next try at
// reopening the listener. A timer already set for that time is kept, so
// that requests do not make a new one each.
func (sc *schedule) arm(now time.Time) {
	var at time.Time
	if d, timed := sc.steps[sc.i].timed(); timed && !sc.last() {
		at = sc.since.Add(d)
	}
	if retry := now.Add(reopenRetry); !sc.reopenOK && (at.IsZero() || at.After(retry)) {
		at = retry
	}
	if sc.timer != nil && at.Equal(sc.timerAt) {
		return
	}
	if sc.timer != nil {
		sc.timer.Stop()
		sc.timer = nil
	}
	sc.timerAt = at
	if !at.IsZero() {
		sc.timer = time.AfterFunc(at.Sub(now), sc.tick)
	}
}

func (sc *schedule) tick() {
	sc.mu.Lock()
	err := sc.advance(time.Now())
	sc.mu.Unlock()
	sc.report(err)
}

// close stops the schedule; the Server closes the listener itself.
func (sc *schedule) close() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.closed = true
	if sc.timer != nil {
		sc.timer.Stop()
	}
}
