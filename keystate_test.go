package outlast

import (
	"context"
	"errors"
	"testing"
	"time"
)

// stepCell is one cell of the key's state × event table, or one case of
// it: a key in state from, the news n, and what step must make of it.
type stepCell struct {
	name  string
	from  UpstreamState
	n     news
	prep  func(k *admKey) // sets up the case, after the state's defaults
	fleet bool            // the Admission has a Fleet
	want  UpstreamState
	send  bool                          // evBound: the waiter goes now
	check func(t *testing.T, k *admKey) // what else the cell promises
}

// stepNow is the instant every cell happens at.
var stepNow = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

var errStep = errors.New("step: refused")

// stepKey returns a key in state s as the Admission leaves one there:
// down with its next probe 1 s away, probing with its probe in flight,
// recovering at a limit of 4 of MaxLimit 8 with one request in flight
// and one waiting.
func stepKey(a *Admission, s UpstreamState) *admKey {
	k := &admKey{key: "k", state: s}
	switch s {
	case Down:
		k.nextProbe = stepNow.Add(time.Second)
	case Probing:
		k.probe = &admToken{a: a, k: k, probe: true}
		k.inFlight = 1
	case Recovering:
		k.limit, k.inFlight = 4, 1
		k.q = []*admWaiter{{k: k}}
	}
	return k
}

func TestStepTable(t *testing.T) {
	failure := func(c Class) news { return news{ev: evFailure, class: c, err: errStep} }
	probeFailure := func(c Class) news { return news{ev: evFailure, class: c, probe: true, err: errStep} }
	until := stepNow.Add(30 * time.Second)
	told := func(s UpstreamState) news {
		return news{ev: evFleet, told: FleetState{State: s, NextProbe: stepNow.Add(5 * time.Second), Limit: 3}}
	}
	emptyQueue := func(k *admKey) { k.q = nil }
	nextProbeIn := func(lo, hi time.Duration) func(*testing.T, *admKey) {
		return func(t *testing.T, k *admKey) {
			if d := k.nextProbe.Sub(stepNow); d < lo || d > hi {
				t.Errorf("next probe in %v, want %v to %v", d, lo, hi)
			}
		}
	}
	limitIs := func(want float64) func(*testing.T, *admKey) {
		return func(t *testing.T, k *admKey) {
			if k.limit != want {
				t.Errorf("limit %v, want %v", k.limit, want)
			}
		}
	}
	streakIs := func(want int) func(*testing.T, *admKey) {
		return func(t *testing.T, k *admKey) {
			if k.streak != want {
				t.Errorf("streak %d, want %d", k.streak, want)
			}
		}
	}
	cells := []stepCell{
		// Healthy.
		{name: "an outage failure is counted", from: Healthy, n: failure(ClassRefused), want: Healthy, check: streakIs(1)},
		{name: "the DownAfter-th in a row marks it down", from: Healthy, n: failure(ClassStatus5xx), prep: func(k *admKey) { k.streak = 2 }, want: Down, check: nextProbeIn(time.Second, 1500*time.Millisecond)},
		{name: "a 429 is left to the request", from: Healthy, n: failure(ClassRateLimited), prep: func(k *admKey) { k.streak = 2 }, want: Healthy, check: streakIs(0)},
		{name: "a success ends a streak", from: Healthy, n: news{ev: evSuccess}, prep: func(k *admKey) { k.streak = 2 }, want: Healthy, check: streakIs(0)},
		{name: "no probe to send", from: Healthy, n: news{ev: evProbe}, want: Healthy},
		{name: "no probe to answer", from: Healthy, n: news{ev: evProbeAnswered}, want: Healthy},
		{name: "a not-before time marks it down until then", from: Healthy, n: news{ev: evNotBefore, until: until, err: errStep}, want: Down, check: func(t *testing.T, k *admKey) {
			if !k.nextProbe.Equal(until) || !k.notBefore.Equal(until) || k.last != errStep {
				t.Errorf("next probe %v, not before %v, last %v; want both at %v, and the failure kept", k.nextProbe, k.notBefore, k.last, until)
			}
		}},
		{name: "nobody waits at a healthy key", from: Healthy, n: news{ev: evBound}, want: Healthy},
		{name: "the fleet found it down", from: Healthy, n: told(Down), want: Down, check: nextProbeIn(5*time.Second, 5*time.Second)},
		{name: "the fleet found it healthy", from: Healthy, n: told(Healthy), want: Healthy},

		// Down.
		{name: "a late outage failure is counted", from: Down, n: failure(ClassReset), want: Down, check: streakIs(1)},
		{name: "a late 429", from: Down, n: failure(ClassRateLimited), want: Down},
		{name: "only the probe's answer ends it", from: Down, n: news{ev: evSuccess}, want: Down},
		{name: "the probe goes", from: Down, n: news{ev: evProbe}, want: Probing},
		{name: "no probe is out", from: Down, n: news{ev: evProbeAnswered}, want: Down},
		{name: "a later not-before time moves the probe", from: Down, n: news{ev: evNotBefore, until: until}, want: Down, check: nextProbeIn(30*time.Second, 30*time.Second)},
		{name: "a waiter at its bound is not sent", from: Down, n: news{ev: evBound}, want: Down, send: false},
		{name: "the fleet's probe was answered", from: Down, n: told(Recovering), want: Recovering, check: limitIs(3)},
		{name: "the fleet never brings the probe earlier", from: Down, n: told(Down), prep: func(k *admKey) { k.nextProbe = stepNow.Add(9 * time.Second) }, want: Down, check: nextProbeIn(9*time.Second, 9*time.Second)},

		// Probing.
		{name: "the probe's failure: the next probe waits longer", from: Probing, n: probeFailure(ClassRefused), want: Down, check: func(t *testing.T, k *admKey) {
			nextProbeIn(2*time.Second, 3*time.Second)(t, k)
			if k.probes != 1 || k.probe != nil {
				t.Errorf("failed probes %d, probe %p; want 1 and none in flight", k.probes, k.probe)
			}
		}},
		{name: "the probe's 429: back but full", from: Probing, n: probeFailure(ClassRateLimited), want: Down, check: nextProbeIn(2*time.Second, 3*time.Second)},
		{name: "a probe given up: the next may go at once", from: Probing, n: probeFailure(ClassCanceled), prep: func(k *admKey) { k.nextProbe = stepNow }, want: Down, check: func(t *testing.T, k *admKey) {
			if !k.nextProbe.Equal(stepNow) || k.probes != 0 || k.streak != 0 {
				t.Errorf("next probe %v, failed probes %d, streak %d; want now, 0, 0", k.nextProbe, k.probes, k.streak)
			}
		}},
		{name: "another's failure is counted", from: Probing, n: failure(ClassRefused), want: Probing, check: streakIs(1)},
		{name: "another's answer", from: Probing, n: news{ev: evSuccess}, want: Probing},
		{name: "one probe at a time", from: Probing, n: news{ev: evProbe}, want: Probing},
		{name: "the probe's answer starts the recovery", from: Probing, n: news{ev: evProbeAnswered}, prep: func(k *admKey) { k.q = []*admWaiter{{k: k}} }, want: Recovering, check: limitIs(2)},
		{name: "the probe's answer with nobody waiting settles it", from: Probing, n: news{ev: evProbeAnswered}, want: Healthy},
		{name: "but not an answer that spent the rate limit", from: Probing, n: news{ev: evProbeAnswered, until: until}, want: Recovering},
		{name: "the probe's delay", from: Probing, n: news{ev: evNotBefore, probe: true, until: until}, want: Down, check: nextProbeIn(30*time.Second, 30*time.Second)},
		{name: "another's delay waits for the probe", from: Probing, n: news{ev: evNotBefore, until: until}, want: Probing, check: func(t *testing.T, k *admKey) {
			if !k.notBefore.Equal(until) {
				t.Errorf("not before %v, want %v", k.notBefore, until)
			}
		}},
		{name: "a waiter at its bound is not sent", from: Probing, n: news{ev: evBound}, want: Probing},
		{name: "ours is the probe", from: Probing, n: told(Down), want: Probing},

		// Recovering.
		{name: "a 429 halves the limit", from: Recovering, n: failure(ClassRateLimited), want: Recovering, check: limitIs(2)},
		{name: "a 429 at a limit of 1", from: Recovering, n: failure(ClassRateLimited), prep: func(k *admKey) { k.limit = 1 }, want: Down, check: nextProbeIn(time.Second, 1500*time.Millisecond)},
		{name: "a 529 halves the limit", from: Recovering, n: failure(ClassOverloaded), want: Recovering, check: func(t *testing.T, k *admKey) {
			limitIs(2)(t, k)
			streakIs(1)(t, k)
		}},
		{name: "DownAfter outage failures in a row", from: Recovering, n: failure(ClassStatus5xx), prep: func(k *admKey) { k.streak = 2 }, want: Down},
		{name: "a success grows the limit", from: Recovering, n: news{ev: evSuccess}, want: Recovering, check: limitIs(4.5)},
		{name: "at MaxLimit with nobody waiting", from: Recovering, n: news{ev: evSuccess}, fleet: true, prep: func(k *admKey) { k.limit, k.q = 7.5, nil }, want: Healthy},
		{name: "half the limit in flight, nobody waiting", from: Recovering, n: news{ev: evSuccess}, prep: emptyQueue, want: Healthy},
		{name: "in a fleet, not before MaxLimit", from: Recovering, n: news{ev: evSuccess}, fleet: true, prep: emptyQueue, want: Recovering},
		{name: "a not-before time holds it", from: Recovering, n: news{ev: evSuccess}, prep: func(k *admKey) { k.q, k.notBefore = nil, until }, want: Recovering},
		{name: "so does the answer's own", from: Recovering, n: news{ev: evSuccess, until: until}, prep: emptyQueue, want: Recovering},
		{name: "no probe to send", from: Recovering, n: news{ev: evProbe}, want: Recovering},
		{name: "a late probe's answer is an answer", from: Recovering, n: news{ev: evProbeAnswered}, want: Recovering, check: limitIs(4.5)},
		{name: "a not-before time marks it down", from: Recovering, n: news{ev: evNotBefore, until: until}, want: Down, check: nextProbeIn(30*time.Second, 30*time.Second)},
		{name: "a waiter at its bound goes past the limit", from: Recovering, n: news{ev: evBound}, want: Recovering, send: true},
		{name: "but not past a not-before time", from: Recovering, n: news{ev: evBound}, prep: func(k *admKey) { k.notBefore = until }, want: Recovering, send: false},
		{name: "the fleet found it down", from: Recovering, n: told(Down), want: Down},
		{name: "the fleet found it healthy: the waiters go under MaxLimit", from: Recovering, n: told(Healthy), want: Recovering, check: limitIs(8)},
	}
	walked := map[[2]int]bool{}
	for _, c := range cells {
		t.Run(c.from.String()+"/"+c.n.ev.String()+"/"+c.name, func(t *testing.T) {
			a := &Admission{MaxLimit: 8}
			if c.fleet {
				a.Fleet = nopFleet{}
			}
			k := stepKey(a, c.from)
			if c.prep != nil {
				c.prep(k)
			}
			var changes []transition
			send := a.step(k, c.n, stepNow, &changes)
			if k.state != c.want || send != c.send {
				t.Errorf("state %v, send %v; want %v, %v", k.state, send, c.want, c.send)
			}
			if c.want != c.from && (len(changes) == 0 || changes[len(changes)-1].to != c.want) {
				t.Errorf("changes %+v, want the last to be to %v", changes, c.want)
			}
			if c.check != nil {
				c.check(t, k)
			}
		})
		walked[[2]int{int(c.from), int(c.n.ev)}] = true
	}
	for s := range len(stateNames) {
		for e := range numEvents {
			if !walked[[2]int{s, int(e)}] {
				t.Errorf("no cell for %v × %v", UpstreamState(s), e)
			}
		}
	}
}

// nopFleet is a Fleet that step never calls: it only says the Admission
// is in one.
type nopFleet struct{}

func (nopFleet) Tell(string, FleetState)                           {}
func (nopFleet) Probe(string) (func(FleetState), bool)             { return nil, false }
func (nopFleet) Send(context.Context, string, int) (func(), error) { return nil, nil }

// TestNewsOfNotBefore checks that an answer which spent the rate limit
// carries its not-before time, which comes as the next event, so that
// step does not settle the key healthy for a moment before it goes down.
func TestNewsOfNotBefore(t *testing.T) {
	a := &Admission{}
	k := &admKey{key: "k"}
	tok := &admToken{a: a, k: k, probe: true, granted: stepNow}
	ns, n := a.newsOf(outcome{pause: 5 * time.Second}, tok, true, 5*time.Second, stepNow)
	if n != 2 || ns[0].ev != evProbeAnswered || ns[1].ev != evNotBefore {
		t.Fatalf("got %d events %+v, want the probe's answer, then the not-before time", n, ns[:n])
	}
	if ns[0].until.IsZero() || !ns[0].until.Equal(ns[1].until) {
		t.Errorf("the answer's not-before time %v, the event's %v: want the same", ns[0].until, ns[1].until)
	}
}
