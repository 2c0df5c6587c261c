package outlast

import (
	"context"
	"time"
)

// A Fleet shares an [Admission]'s view of each key with the other
// processes that front the same upstream (gateway replicas, say), so
// that they act as one:
//
//   - a key that one process finds down is down for all of them, with
//     its next probe and its not-before time;
//   - exactly one probe is in flight for the whole fleet;
//   - while the key recovers, the fleet's requests in flight follow one
//     limit.
//
// The Admission tells the Fleet of each state change it makes (Tell),
// asks it before it sends a probe (Probe) and before each request it
// sends under a recovering key's limit (Send), and is told of the
// others' changes through [Admission.Learn], which the Fleet calls. A
// healthy key costs the Fleet nothing: it is asked only while a key is
// troubled.
//
// A Fleet must not block for long: Tell must return at once (it may
// send in the background), and Probe and Send must return within a
// bound of their own, even when the store behind them is unreachable.
// When it is, a Fleet should let the process act alone, granting its
// probes and places, rather than hold its requests. The package
// redisgate has one, through Redis.
type Fleet interface {
	// Tell shares key's state as this process has just changed it.
	Tell(key string, s FleetState)

	// Probe asks to send key's probe. It reports ok when no other
	// process holds the probe and the key's shared state is not
	// Recovering; done, called once with the state that the probe's
	// answer led to, shares that state and lets the next probe go. The
	// probe is held until done is called or a lease of the Fleet's own
	// runs out. A process refused is told the shared state (Learn): one
	// that asks after another's probe was answered, before it learned
	// so, then sends under the fleet's limit rather than probing a
	// second time beside that limit's requests.
	Probe(key string) (done func(FleetState), ok bool)

	// Send waits for a place under key's limit, counted across the
	// fleet, for a request this process sends while key recovers; done
	// gives it back. It returns ctx's error if ctx ends first.
	Send(ctx context.Context, key string, limit int) (done func(), err error)
}

// FleetState is what a process of a [Fleet] tells the others of a key.
type FleetState struct {
	State UpstreamState
	// NextProbe is when the next probe may go, while the key is down.
	NextProbe time.Time
	// NotBefore is the not-before time a server set, if any.
	NotBefore time.Time
	// Limit is the limit of requests in flight while recovering.
	Limit int
}

// fleetState returns k's state as the Fleet is told it.
func (a *Admission) fleetState(k *admKey) FleetState {
	s := FleetState{State: k.state, NotBefore: k.notBefore}
	if k.state == Down || k.state == Probing {
		s.NextProbe = k.nextProbe
	}
	if k.state == Recovering {
		s.Limit = int(k.limit)
	}
	return s
}

// Learn merges a state that another process of a.Fleet told of key into
// a's own, as the key's event evFleet (see step). Changes that Learn
// makes, and those that follow from them, are told to OnState, not back
// to the Fleet.
func (a *Admission) Learn(key string, s FleetState) {
	now := time.Now()
	var changes []transition
	a.mu.Lock()
	k := a.keys[key]
	if k == nil && s.State == Healthy {
		a.mu.Unlock()
		return
	}
	if k == nil {
		k = a.troubledKey(key)
	}
	a.step(k, news{ev: evFleet, told: s}, now, &changes)
	a.grantQueued(k, now, &changes)
	for i := range changes {
		// What follows from the state told is the fleet's already:
		// telling it back would echo between the processes.
		changes[i].learned = true
	}
	a.mu.Unlock()
	a.notify(changes)
}

// peers is whom an Admission shares its keys with: no one, for a process
// alone, or the other processes of its Fleet. It is the one place where
// the two differ.
type peers interface {
	// probe grants down key k's probe, which is due, or asks for it.
	// It is called with the lock held.
	probe(k *admKey, now time.Time, changes *[]transition) *admToken
	// send waits, until bound, for a place for tok, a request granted a
	// place under a recovering key's limit.
	send(ctx context.Context, tok *admToken, bound time.Time) error
	// tell shares key's state, as this process has just changed it.
	tell(key string)
	// ownsDemand reports whether this process's queue is all of a
	// key's demand, so that a recovering key whose queue is empty may
	// be healthy before its limit reaches MaxLimit.
	ownsDemand() bool
}

func (a *Admission) peers() peers {
	if a.Fleet == nil {
		return alone{a}
	}
	return inFleet{a}
}

// alone is a process alone: its probe is granted at once, and its limit
// is the only one.
type alone struct{ a *Admission }

func (p alone) probe(k *admKey, now time.Time, changes *[]transition) *admToken {
	return p.a.sendProbe(k, now, changes, nil)
}
func (alone) send(context.Context, *admToken, time.Time) error { return nil }
func (alone) tell(string)                                      {}
func (alone) ownsDemand() bool                                 { return true }

// inFleet is a process of a Fleet: its probe is the fleet's one, asked
// for away from the lock, and a place under its limit is one under the
// fleet's too.
type inFleet struct{ a *Admission }

func (p inFleet) probe(k *admKey, _ time.Time, _ *[]transition) *admToken {
	if !k.asking {
		k.asking = true
		go p.a.askProbe(k)
	}
	return nil
}

func (p inFleet) send(ctx context.Context, tok *admToken, bound time.Time) error {
	return p.a.fleetSend(ctx, tok, bound)
}

// ownsDemand is false: another process's backlog may still be going out
// under the fleet's limit, which "healthy" would lift for all of them.
func (inFleet) ownsDemand() bool { return false }

func (p inFleet) tell(key string) {
	a := p.a
	a.mu.Lock()
	s := FleetState{} // forgotten: healthy
	if k := a.keys[key]; k != nil {
		s = a.fleetState(k)
	}
	a.mu.Unlock()
	a.Fleet.Tell(key, s)
}

// askProbe asks the Fleet for k's probe, in a goroutine of its own, since
// the Fleet may reach over the network: if it is granted, the front
// waiter probes; if another process holds it, k waits for that probe's
// answer, or, if none is told, for the first probe wait.
func (a *Admission) askProbe(k *admKey) {
	done, ok := a.Fleet.Probe(k.key)
	now := time.Now()
	var changes []transition
	a.mu.Lock()
	k.asking = false
	switch {
	case ok && k.state == Down && len(k.q) > 0 && !now.Before(k.nextChance(now)):
		w := k.q[0]
		k.q = k.q[1:]
		w.tok = a.sendProbe(k, now, &changes, done)
		close(w.ready)
	case ok:
		// Nothing to probe with any more: let another process probe.
		defer done(a.fleetState(k))
	default:
		if next := now.Add(a.probeWait(0)); k.state == Down && next.After(k.nextProbe) {
			k.nextProbe = next
		}
		a.arm(k, now)
	}
	a.mu.Unlock()
	a.notify(changes)
}

// fleetTry is how long a request granted at or past its bound, which may
// not wait, has for the Fleet to give it a place that is free: a call's
// round trip, with room.
const fleetTry = 100 * time.Millisecond

// fleetSend waits for a place under key's fleet-wide limit for a request
// granted a place under the local one, until bound (zero for none), or
// for fleetTry if bound is that near: a request that may not wait still
// takes a place that is free, as it would from the local limit alone. On
// an error the local place is given back.
func (a *Admission) fleetSend(ctx context.Context, tok *admToken, bound time.Time) error {
	a.mu.Lock()
	limit := max(int(tok.k.limit), 1)
	a.mu.Unlock()
	wctx := ctx
	if !bound.IsZero() {
		bound = latest(bound, time.Now().Add(fleetTry))
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, bound)
		defer cancel()
	}
	done, err := a.Fleet.Send(wctx, tok.k.key, limit)
	if err != nil {
		tok.release()
		if ctx.Err() == nil && wctx.Err() != nil {
			// The bound came first: the caller's context has its
			// reserve left, and is told why it was not sent.
			a.mu.Lock()
			last := tok.k.last
			a.mu.Unlock()
			return downError(tok.k.key, "no place under the fleet's limit came before the request's deadline less its reserve", true, last)
		}
		return err
	}
	tok.fleetDone = func(FleetState) { done() }
	return nil
}
