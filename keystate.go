package outlast

import (
	"fmt"
	"time"
)

// An UpstreamState is what an [Admission] knows of a key's upstream.
type UpstreamState uint8

// The states. A key is healthy until DownAfter outage failures come in a
// row, or a server sets a not-before time; it is then down, and probing
// while its one probe is in flight; once the probe is answered it is
// recovering, under a limit that grows while attempts succeed, and
// healthy again at MaxLimit.
const (
	Healthy UpstreamState = iota
	Down
	Probing
	Recovering
)

var stateNames = [...]string{"healthy", "down", "probing", "recovering"}

// String returns the state's name, such as "down".
func (s UpstreamState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("UpstreamState(%d)", uint8(s))
}

// An event is what happens to a key. The Admission's callers only say
// what happened, as events; step alone decides what each does to the key.
type event uint8

const (
	// evFailure: an attempt failed as an outage does (a refused or reset
	// connection, a 5xx, a 529, no first byte in time), or got a 429,
	// which says the upstream is up but full. It may be the probe's, or
	// the probe given up by its caller (ClassCanceled).
	evFailure event = iota
	// evSuccess: an attempt other than the probe was answered, and the
	// answer says the upstream is up, whatever it thought of the request.
	evSuccess
	// evProbe: the probe is sent.
	evProbe
	// evProbeAnswered: the probe was answered, and not with a 429.
	evProbeAnswered
	// evNotBefore: a server set a not-before time (Retry-After on a 429,
	// 503 or 529, or a rate limit spent until its reset).
	evNotBefore
	// evBound: a waiter reached its deadline less its reserve, the latest
	// it may be sent.
	evBound
	// evFleet: another process told the key's state, through the Fleet.
	evFleet
	numEvents
)

var eventNames = [...]string{"failure", "success", "probe sent", "probe answered", "not-before time", "waiter's bound", "fleet's word"}

func (e event) String() string { return eventNames[e] }

// news is an event with what step needs to know of it.
type news struct {
	ev    event
	probe bool          // evFailure, evNotBefore: the attempt was the probe
	class Class         // evFailure: ClassRateLimited for a 429; ClassCanceled for a probe given up
	err   error         // evFailure, evNotBefore: the failure, the key's last
	rtt   time.Duration // evSuccess, evProbeAnswered: from the grant to the answer, if timed
	timed bool          // the attempt held a token, whose grant times its round trip
	until time.Time     // evNotBefore: the not-before time, jittered; an answer's: the one that follows it, if any
	told  FleetState    // evFleet
}

// admKey is one troubled key: its state, and what the state needs.
type admKey struct {
	key       string
	ceiling   int // the capacity of the reporting Transport's Gate, if it says
	state     UpstreamState
	streak    int           // outage failures in a row
	probes    int           // failed probes since the key went down
	nextProbe time.Time     // Down: when the next probe may go
	notBefore time.Time     // the latest not-before time a server set
	limit     float64       // Recovering: the limit of requests in flight
	rtt       time.Duration // a smoothed round trip of the answers to grants, 0 until one
	pace      time.Duration // Recovering: the round trip that paces grants, rtt or the latest answer's if shorter
	nextGrant time.Time     // Recovering: grants are paced a round trip over the limit apart
	inFlight  int           // sent as the probe or under the limit, not yet released
	probe     *admToken     // Probing: the probe in flight
	q         []*admWaiter
	last      error // the last failure since the key was last healthy
	timer     *time.Timer
	asking    bool // the Fleet is being asked for the probe
}

// step applies one event to k, and is the one place where k's state is
// set. It returns whether a waiter at its bound (evBound) is sent now.
//
// Each cell of the table says what an event does to a key in a state
// (→ a new state; "−" none but the counts and times named):
//
//	              failure            success       probe sent  probe answered  not-before   waiter's bound  fleet's word
//	healthy       DownAfter in a     streak ends   −           −               → down       −               → its state
//	              row: → down
//	down          counted            streak ends   → probing   −               later probe  −               → its state
//	probing       the probe's:       streak ends   −           → recovering    the probe's: −               − (ours is
//	              → down; others                                               → down                       the probe)
//	              counted
//	recovering    429 or 529 halves  limit grows;  −           −               → down       sent now, past  → its state
//	              the limit; a 429   with nobody                                            the limit
//	              at 1, or DownAfter waiting, at
//	              in a row: → down   MaxLimit or
//	                                 half of it in
//	                                 flight:
//	                                 → healthy
//
// A 429 is a failure that ends a streak rather than adding to it: the
// upstream answered. A key goes down with its next probe the first probe
// wait away, or at the not-before time; a failed probe moves the next to
// the following wait. A waiter's bound sends it only when no not-before
// time holds the key.
func (a *Admission) step(k *admKey, n news, now time.Time, changes *[]transition) (send bool) {
	from, limit := k.state, int(k.limit)
	next := from
	switch n.ev {
	case evFailure:
		next = a.onFailure(k, n, now)
	case evSuccess, evProbeAnswered:
		next = a.onAnswer(k, n, now)
	case evProbe:
		if from == Down {
			next = Probing
		}
	case evNotBefore:
		next = a.onNotBefore(k, n)
	case evBound:
		send = from == Recovering && !now.Before(k.notBefore)
	case evFleet:
		next = a.onFleet(k, n.told, now)
	}
	a.record(k, from, next, limit, n, now, changes)
	if next == Recovering && (n.ev == evSuccess || n.ev == evProbeAnswered) && a.settled(k, n, now) {
		a.record(k, Recovering, Healthy, int(k.limit), n, now, changes) // an answer that settles the recovery
	}
	return send
}

// record moves k from one state to the next, and appends the change to
// changes if there is one: a move of state, or, for the Fleet to follow,
// of a recovering key's limit alone (limit is the one before).
func (a *Admission) record(k *admKey, from, next UpstreamState, limit int, n news, now time.Time, changes *[]transition) {
	if next == from && (next != Recovering || a.Fleet == nil || int(k.limit) == limit) {
		return
	}
	if from == Probing {
		k.probe = nil // the probe's answer, if it comes, is an ordinary one
	}
	k.state = next
	*changes = append(*changes, transition{key: k.key, from: from, to: next, at: now, learned: n.ev == evFleet})
}

// onFailure returns the state that failure n leaves k in.
func (a *Admission) onFailure(k *admKey, n news, now time.Time) UpstreamState {
	busy := n.class == ClassRateLimited
	switch {
	case busy:
		k.streak = 0 // the upstream answered
	case n.class != ClassCanceled:
		k.streak++
		k.last = n.err
	}
	switch k.state {
	case Probing:
		if !n.probe {
			return Probing // sent before the key went down
		}
		if n.class != ClassCanceled {
			k.probes++
			k.nextProbe = now.Add(a.probeWait(k.probes))
		}
		return Down
	case Recovering:
		if (busy || n.class == ClassOverloaded) && k.limit >= 2 {
			k.limit /= 2
		} else if busy {
			return a.down(k, now) // full even at one at a time
		}
	}
	if k.state != Down && !busy && k.streak >= a.downAfter() {
		return a.down(k, now)
	}
	return k.state
}

// onAnswer returns the state that answer n leaves k in.
func (a *Admission) onAnswer(k *admKey, n news, now time.Time) UpstreamState {
	k.streak = 0
	if n.timed {
		// A moving average, but never above the latest answer's, so
		// that the pace follows an upstream that has become faster.
		if k.rtt == 0 {
			k.rtt = n.rtt
		} else {
			k.rtt += (n.rtt - k.rtt) / 8
		}
		k.pace = min(k.rtt, n.rtt)
	}
	switch {
	case n.ev == evProbeAnswered && k.state == Probing:
		// Only the probe's answer ends an outage: an answer to an
		// attempt sent before the key went down says nothing of
		// whether it is back.
		k.probes = 0
		k.limit = a.startLimit(k)
		return Recovering
	case k.state == Recovering:
		k.limit = min(k.limit+recoveryGrowth, float64(a.maxLimit(k)))
	}
	return k.state
}

// settled reports whether recovering key k, just answered, is healthy:
// nobody waits and no not-before time holds it, and its limit is at
// MaxLimit, or at most half of it is in flight, the answered attempt
// among them, since demand is then under the limit. Not in a Fleet, where
// this process's queue is not the fleet's demand.
func (a *Admission) settled(k *admKey, n news, now time.Time) bool {
	if len(k.q) > 0 || now.Before(latest(k.notBefore, n.until)) {
		return false
	}
	return int(k.limit) >= a.maxLimit(k) || a.peers().ownsDemand() && k.inFlight <= int(k.limit)/2
}

// onNotBefore returns the state that a server's not-before time leaves k
// in: down until then, unless a probe of another request is in flight.
func (a *Admission) onNotBefore(k *admKey, n news) UpstreamState {
	k.notBefore = latest(k.notBefore, n.until)
	if k.last == nil {
		k.last = n.err // stands in until an outage failure
	}
	if k.state == Probing && !n.probe {
		return Probing
	}
	if k.state != Down {
		k.probes = 0
	}
	k.nextProbe = latest(k.nextProbe, k.notBefore) // after a failed probe, its wait too
	return Down
}

// onFleet returns the state that another process's word leaves k in. A
// key another process found down is down here too, its next probe never
// brought earlier; a recovering key takes the limit told; a key told
// healthy releases its waiters under MaxLimit first. A probe of this
// process's in flight keeps the key probing: its answer will tell.
func (a *Admission) onFleet(k *admKey, s FleetState, now time.Time) UpstreamState {
	k.notBefore = latest(k.notBefore, s.NotBefore)
	if k.state == Probing {
		return Probing
	}
	switch s.State {
	case Down, Probing:
		if k.state != Down || s.NextProbe.After(k.nextProbe) {
			k.nextProbe = s.NextProbe
		}
		return Down
	case Recovering:
		// Told in whole requests: a key already recovering keeps the
		// fraction its own successes grew.
		if told := float64(min(max(s.Limit, 1), a.maxLimit(k))); k.state != Recovering || int(k.limit) != int(told) {
			k.limit = told
		}
		return Recovering
	}
	k.streak = 0
	if len(k.q) > 0 || now.Before(k.notBefore) {
		k.limit = float64(a.maxLimit(k))
		return Recovering
	}
	return Healthy
}

// down returns Down for k, with its next probe the first probe wait away.
func (a *Admission) down(k *admKey, now time.Time) UpstreamState {
	k.probes = 0
	k.nextProbe = now.Add(a.probeWait(0))
	return Down
}
