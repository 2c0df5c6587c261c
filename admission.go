package outlast

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrUpstreamDown is wrapped, with the last failure that the upstream gave
// any request since it was last healthy (if it failed: a server's delay or
// a spent rate limit holds a key too), by the error of a request that an
// [Admission] sends away
// while its upstream is down: the next chance to send it, a probe or the
// server's not-before time, comes too late for its deadline less its
// reserve. It is never retried: waiting has already been judged not to fit.
var ErrUpstreamDown = errors.New("outlast: the upstream is down")

// ErrRetryBudget is wrapped, with the last failure, by the error of a
// request whose retry an [Admission]'s retry budget refused: retries have
// been failing for the upstream as a whole, and another would add load
// without the outage's end being known. It is never retried.
var ErrRetryBudget = errors.New("outlast: the retry budget is spent")

// retryBudgetTokens is the bucket of Admission.RetryBudget: 10 tokens, as
// gRPC's retry throttling suggests, held in thousandths.
const retryBudgetTokens = 10 * 1000

// Admission's defaults.
const (
	// DefaultDownAfter is how many outage failures in a row mark a key down.
	DefaultDownAfter = 3
	// DefaultAdmissionQueue is how many requests per key may wait.
	DefaultAdmissionQueue = 1024
	// DefaultMaxLimit is the limit at which a recovering key is healthy.
	DefaultMaxLimit = 64
)

// DefaultProbeWaits are the waits between probes of a down key: 1 s after
// the failure that marked it down, then 2 s, then every 4 s. A probe costs
// the upstream one attempt, not one per waiting request, so it can afford to
// probe often: a request waiting behind a 30 s outage is sent at most 4 s
// after the upstream is back, where its own backoff would have waited up to
// its longest wait.
var DefaultProbeWaits = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}

// DefaultProbeTime is how long a probe's answer is counted on to take,
// unless ProbeTime says otherwise: two and a half times the median answer
// of the outage benchmark's API (2 s), and the shortest of the guesses
// tried there (2 s, 3 s, 5 s, 10 s) that left no request to idle to its
// bound (docs/outage.md).
const DefaultProbeTime = 5 * time.Second

// An UpstreamState is what an [Admission] knows of a key's upstream.
type UpstreamState uint8

// The states. A key is healthy until DownAfter outage failures come in a
// row, or a server sets a not-before time; it is then down, and probing
// while its one probe is in flight; once a probe is answered it is
// recovering, under a limit that grows while attempts succeed, and healthy
// again when nobody waits and the limit reaches MaxLimit or, without a
// Fleet, is no longer half used.
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

// Admission treats an outage as a property of the upstream, not of each
// request: all requests of a [Transport] (Transport.Admission) share it,
// keyed like the gate (Transport.GateKey, the host by default).
//
// While a key is healthy it costs one atomic load a request and no lock or
// allocation. When DownAfter outage failures come in a row (a connection
// refused or reset, a 5xx, a 529, no first byte in time), or a 429 or 503
// names a delay (Retry-After, retry-after-ms), the key is down:
//
//   - new requests and retries are not sent; they wait in one FIFO queue
//     per key, by the order in which their requests first arrived, at most
//     MaxQueue of them (past it, ErrBusy);
//   - exactly one probe is in flight at a time, and it is a real request:
//     the front of the queue's attempt, sent on the ProbeWaits schedule and
//     never before the not-before time that a server set;
//   - a request whose deadline less its policy's reserve comes before the
//     next probe brings the probe forward to then, though no sooner than
//     the first probe wait after the last failure, if it is at the front
//     of the queue, whose attempt the probe is, so that it has the
//     upstream's answer before it must give up (not for a request without
//     a reserve, which would have no time left to use it, nor with a
//     Fleet, whose probe is granted away from the lock);
//   - a waiting request leaves at once, with an error that wraps
//     ErrUpstreamDown and the last failure, when the next chance to send,
//     brought forward as far as it may be, or the not-before time comes
//     after its deadline less its policy's reserve, and, behind the
//     front, when the probe's answer after a server's not-before time
//     would (ProbeTime).
//
// When a probe is answered the key recovers: the queue is released under a
// limit of requests in flight, which starts at a quarter of MaxLimit (at
// least 2), grows by half a request with each success (by half each round
// trip: the whole of MaxLimit in about four round trips), halves on a 429
// or 529 (at a limit of 1, and on the probe's own 429, a 429 holds the key
// for the first probe wait instead, and for the next at each 429 in a
// row, jittered as probes are: the upstream is full of others' requests),
// and ends at MaxLimit, where the key is healthy again; it is healthy
// sooner when nobody waits and less than half the limit is in use, since
// demand is then below it (not with a Fleet: this process's queue is not
// the fleet's, and its "healthy" would lift the limit for the others,
// whose backlogs may still be going out). While it recovers its requests
// are paced, one every round trip over the limit (the round trip a moving
// average of the time to a success, or the latest success's if
// shorter), so that a limit's worth goes out over a round trip and their
// answers, and the places those free, do not come in bursts. A waiter
// that reaches its deadline less its reserve while the key recovers is
// sent then, its last chance: past the pace, the limit, the hold after
// 429s and the waiters ahead, since its reserve is for this attempt and
// the upstream is answering, so that a request fails on an answer, not on
// a wait (never past a server's not-before time, nor while the key is
// down or probing, and not with a Fleet, where it waits for its place).
// A 429 without a delay on a healthy key is left to the request's own
// policy: it is rate limiting, not an outage.
//
// A request's failed attempts that went through a troubled key count
// against its policy's MaxAttempts but, in the Transport's own retries
// (not those of Do around it), do not advance its Waits; and when the
// failure is one the key's state answers (an outage failure, a 429, a
// server's delay) and the key is still troubled after it, the retry has
// no wait of its own (a server's delay aside): it rejoins the queue at
// once, in the place its arrival gave it. The Admission, not the
// request's backoff, spaces the key's attempts; a wait of the request's
// own would let later arrivals go first, keep it from hearing at once
// that no chance is left before its deadline, and, for the request at the
// front of the queue, which probes for everyone, grow too long for its
// deadline by the time the upstream is back. Any other failure, which
// says the upstream is up, waits as the policy says.
//
// The zero value is ready to use with the defaults. An Admission is safe for
// concurrent use and must not be copied after first use.
type Admission struct {
	// DownAfter is how many outage failures in a row, with no success
	// between them, mark a key down. Zero means DefaultDownAfter.
	DownAfter int

	// ProbeWaits are the waits between probes of a down key: the first
	// after the failure that marked it down, the last repeated. Nil means
	// DefaultProbeWaits.
	ProbeWaits []time.Duration

	// MaxQueue bounds the requests per key that wait to be sent while it
	// is down or recovering. Zero means DefaultAdmissionQueue.
	MaxQueue int

	// MaxLimit is the limit of requests in flight at which a recovering
	// key is healthy again: set it to the upstream's capacity. Zero means
	// the capacity of the Gate of the Transport that reports the key's
	// attempts, if that Gate has a Capacity method (gate.Gate has), and
	// DefaultMaxLimit if not.
	MaxLimit int

	// DelaySpread is how much later, at most, a key's not-before time
	// may be than a server's delay (Retry-After, retry-after-ms, or a
	// rate limit's reset) asks, drawn at random so that the clients that
	// got the same delay do not all come back at once. It is capped at
	// half the delay. Zero or less means a tenth of the delay, enough for
	// one Admission, and for a Fleet, which keeps the latest time any of
	// its processes draws; many processes that each have an Admission of
	// their own, and no Fleet, all told the same time, need a spread of a
	// few round trips.
	DelaySpread time.Duration

	// ProbeTime is how long the answer to the probe sent at a server's
	// not-before time is counted on to take. Until that answer, only the
	// front of the queue, whose attempt the probe is (with a Fleet, the
	// fleet's probe), may be sent. So while a down key waits for a
	// server's not-before time at least ProbeTime away, a request behind
	// the front leaves at once, with ErrUpstreamDown, when its deadline
	// less its reserve comes before its turn, rather than idle through
	// the server's delay for a chance that comes only if the upstream
	// answers sooner. Its turn is counted as ProbeTime after that time,
	// for the probe's answer, and then a round trip for each MaxLimit of
	// the waiters between it and the front, as if the limit had reached
	// its ceiling at once: the key's round trip, or half ProbeTime before
	// one is measured. As a request joins the queue (a retry too), at a
	// MaxLimit of 1 each such turn also counts the first probe wait, for
	// which a 429 holds such a key while other clients fill the upstream.
	// A front that a retry which arrived before it displaces is checked
	// so too. Too long sends away requests that a quick answer would have
	// let go; too short leaves requests to idle to their bound and fail
	// there, or, in many processes that each have an Admission of their
	// own and share an upstream, be sent at their bound into an upstream
	// that the others fill. Zero means DefaultProbeTime; below zero, such
	// a request waits for its bound. A shorter delay, and a down key's
	// own probe schedule, whose waits are short and whose probe a waiter
	// at the front may bring forward, are not counted on this way: there
	// a request idles for less.
	ProbeTime time.Duration

	// OnState, if not nil, is called when a key's state changes, without
	// a lock held, in the goroutine that changed it, with the time of the
	// change: changes made by different goroutines may be told out of
	// order, but at orders them.
	OnState func(key string, from, to UpstreamState, at time.Time)

	// RetryBudget, if above zero, throttles retries as gRPC's retry
	// throttling does (gRFC A6), for all keys together: a bucket of 10
	// tokens, full at first, loses one with each failed attempt and gains
	// RetryBudget with each success; a retry is sent only while more than
	// half the tokens are left, and is otherwise refused with an error
	// wrapping ErrRetryBudget and the last failure. 0.1 holds retries to
	// about a tenth of successes, the SRE book's ratio. Zero, the
	// default, is off: admission alone already sends one probe, not a
	// retry per request, while a key is down.
	RetryBudget float64
	spent       atomic.Int64 // thousandths of a token taken from the budget's bucket

	// Fleet, if not nil, shares each key's state with the other
	// processes that front the same upstream, so that they act as one
	// Admission: see [Fleet]. Nil, the default, is this process alone.
	Fleet Fleet

	// troubled counts the keys in keys: those not healthy, or with an
	// outage failure not yet followed by a success. While it is zero,
	// nothing is locked.
	troubled atomic.Int64
	mu       sync.Mutex
	keys     map[string]*admKey
}

// AdmissionState is a snapshot of one key of an [Admission].
type AdmissionState struct {
	State UpstreamState
	// NotBefore is the not-before time a server set, if it is still ahead.
	NotBefore time.Time
	// NextProbe is when the next probe may go, while the key is down.
	NextProbe time.Time
	// Limit is the limit of requests in flight while recovering, else 0.
	Limit int
	// MaxLimit is the limit at which a recovering key is healthy: the
	// Admission's MaxLimit, or the capacity of the Gate its attempts
	// went through, or DefaultMaxLimit.
	MaxLimit int
	// InFlight counts the requests sent under the limit or as the probe.
	InFlight int
	// Waiting counts the requests in the queue.
	Waiting int
}

// State returns a snapshot of key.
func (a *Admission) State(key string) AdmissionState {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := a.keys[key]
	if k == nil {
		return AdmissionState{MaxLimit: cmpOr(a.MaxLimit, DefaultMaxLimit)}
	}
	s := AdmissionState{State: k.state, InFlight: k.inFlight, Waiting: len(k.q), MaxLimit: a.maxLimit(k)}
	if time.Now().Before(k.notBefore) {
		s.NotBefore = k.notBefore
	}
	if k.state == Down {
		s.NextProbe = k.nextProbe
	}
	if k.state == Recovering {
		s.Limit = int(k.limit)
	}
	return s
}

// admKey is one troubled key.
type admKey struct {
	key       string
	ceiling   int // the capacity of the reporting Transport's Gate, if it says
	state     UpstreamState
	streak    int           // outage failures in a row
	probes    int           // failed probes since the key went down
	busy      int           // 429s in a row at a limit of 1
	nextProbe time.Time     // Down: when the next probe may go
	earliest  time.Time     // Down: the soonest a probe may be brought forward to, the first probe wait after the last failure
	notBefore time.Time     // the latest not-before time a server set
	held      time.Time     // Recovering: the hold after a 429 at a limit of 1, which a waiter at its bound goes past
	limit     float64       // Recovering: the limit of requests in flight
	rtt       time.Duration // a smoothed round trip of the answers to tokens, 0 until one
	pace      time.Duration // Recovering: the round trip that paces grants, rtt or the latest answer's if shorter
	nextGrant time.Time     // Recovering: grants are paced a round trip over the limit apart
	inFlight  int           // sent as the probe or under the limit, not yet released
	probe     *admToken     // Probing: the probe in flight
	q         []*admWaiter
	last      error // the last outage failure
	timer     *time.Timer
	asking    bool // the Fleet is being asked for the probe
}

// An arrival places a request in a key's queue: by when it arrived, its
// first attempt's start, and among requests that arrived at the same
// instant, by when each first reached a troubled key.
type arrival struct {
	at  time.Time
	seq uint64 // 0 until the request first reaches a troubled key
}

// arrivals numbers requests as they first reach a troubled key.
var arrivals atomic.Uint64

// before reports whether a arrived before b.
func (a arrival) before(b arrival) bool {
	if !a.at.Equal(b.at) {
		return a.at.Before(b.at)
	}
	return a.seq < b.seq
}

// admWaiter is one request waiting to be sent.
type admWaiter struct {
	arrived arrival   // its request's, for the queue's order
	bound   time.Time // its deadline less its reserve; zero for none
	early   bool      // a probe may be brought forward to bound: its deadline is later
	ready   chan struct{}
	// Set under the lock before ready is closed.
	tok *admToken
	err error
}

// done reports whether w has been granted or sent away. It is called
// with the lock held.
func (w *admWaiter) done() bool {
	select {
	case <-w.ready:
		return true
	default:
		return false
	}
}

// admToken is a request sent while its key was troubled: the probe, or
// one of those under the limit. Its release is idempotent.
type admToken struct {
	a        *Admission
	k        *admKey
	probe    bool
	released bool
	granted  time.Time // when it was let go, then sent (sending), for the key's round trip
	// fleetDone, if not nil, gives back what the Fleet granted: the
	// probe, told the state its answer led to, or a place under the
	// fleet's limit.
	fleetDone func(FleetState)
}

// transition records a state change for OnState, called once the lock is
// released.
type transition struct {
	key      string
	from, to UpstreamState
	at       time.Time
	learned  bool // from the Fleet: not told back to it
}

func (a *Admission) downAfter() int { return cmpOr(a.DownAfter, DefaultDownAfter) }
func (a *Admission) maxQueue() int  { return cmpOr(a.MaxQueue, DefaultAdmissionQueue) }

// maxLimit returns k's MaxLimit: the field, the capacity of the Gate its
// attempts went through, or DefaultMaxLimit.
func (a *Admission) maxLimit(k *admKey) int {
	if a.MaxLimit > 0 {
		return a.MaxLimit
	}
	return cmpOr(k.ceiling, DefaultMaxLimit)
}

func cmpOr(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// recoveryGrowth is what each success adds to a recovering key's limit:
// half a request, so the limit grows by half each round trip, from a
// quarter of MaxLimit to all of it in about four round trips.
const recoveryGrowth = 0.5

// startLimit is a recovering key's first limit: a quarter of MaxLimit, at
// least 2 (at most MaxLimit).
func (a *Admission) startLimit(k *admKey) float64 {
	m := a.maxLimit(k)
	return float64(min(max(2, m/4), m))
}

// delaySpread returns the most a server's delay is lengthened for a key:
// DelaySpread, at most half the delay, or a tenth of the delay if unset.
func (a *Admission) delaySpread(delay time.Duration) time.Duration {
	if a.DelaySpread > 0 {
		return min(a.DelaySpread, delay/2)
	}
	return delay / 10
}

// probeTime returns ProbeTime, DefaultProbeTime if it is zero, or 0 if
// it is below zero.
func (a *Admission) probeTime() time.Duration {
	switch {
	case a.ProbeTime < 0:
		return 0
	case a.ProbeTime == 0:
		return DefaultProbeTime
	}
	return a.ProbeTime
}

// probeGap is the least time between a failure that the key's probe
// schedule follows and a probe brought forward for a waiter: the first
// probe wait, unjittered.
func (a *Admission) probeGap() time.Duration { return a.probeWaits()[0] }

// probeWaits returns ProbeWaits, or DefaultProbeWaits if it is empty.
func (a *Admission) probeWaits() []time.Duration {
	if len(a.ProbeWaits) == 0 {
		return DefaultProbeWaits
	}
	return a.ProbeWaits
}

// probeWait returns the wait before probe n+1, n probes having failed,
// jittered up by as much as half of it: the processes of a fleet, each
// with its own Admission, see an outage begin at about the same time,
// and would otherwise probe in step, and then release their queues in
// step.
func (a *Admission) probeWait(n int) time.Duration {
	w := a.probeWaits()
	d := w[min(n, len(w)-1)]
	return d + time.Duration(rand.Int64N(int64(d/2)+1))
}

// admit lets a request's attempt be sent, or waits until it may be.
// arrived is the request's arrival, set here if it is not yet: a retry
// keeps the place its arrival gave it, even when its first attempt went
// while the key was healthy; bound is its deadline less its
// reserve, zero for none. A nil token with a nil error means the key is
// healthy: nothing is held. waited is how long it waited; ahead is reported
// once through queued if it must wait.
func (a *Admission) admit(ctx context.Context, key string, arrived *arrival, bound time.Time, queued func(ahead int)) (tok *admToken, waited time.Duration, err error) {
	if a.troubled.Load() == 0 {
		return nil, 0, nil
	}
	now := time.Now()
	if arrived.at.IsZero() {
		arrived.at = now
	}
	if arrived.seq == 0 {
		arrived.seq = arrivals.Add(1)
	}
	var changes []transition
	a.mu.Lock()
	k := a.keys[key]
	if k == nil || k.state == Healthy {
		a.mu.Unlock()
		return nil, 0, nil
	}
	if tok := a.grantNow(k, now, &changes); tok != nil {
		a.mu.Unlock()
		a.notify(changes)
		if !tok.probe && a.Fleet != nil {
			if err := a.fleetSend(ctx, tok, bound); err != nil {
				return nil, time.Since(now), err
			}
			return tok, time.Since(now), nil
		}
		return tok, 0, nil
	}
	if (k.state == Down || k.state == Probing) && mayLeave(ctx) {
		// A request with a fallback to go to does not wait for a down
		// upstream: it was its probe if one was due, and moves on now.
		last := k.last
		a.mu.Unlock()
		return nil, 0, downError(key, "the request has a fallback to go to", false, last)
	}
	if len(k.q) >= a.maxQueue() {
		a.mu.Unlock()
		return nil, 0, fmt.Errorf("outlast: admission %q: %w", key, ErrBusy)
	}
	// A probe is brought forward only for a request with time left
	// after its bound (one without a reserve could not use it), and
	// not with a Fleet, whose probe is granted away from the lock, too
	// late for a request at its bound.
	deadline, ok := ctx.Deadline()
	w := &admWaiter{arrived: *arrived, bound: bound, early: ok && deadline.After(bound) && a.Fleet == nil, ready: make(chan struct{})}
	if err := a.tooLate(k, w, k.position(w), now, true); err != nil {
		a.mu.Unlock()
		return nil, 0, err
	}
	i := k.enqueue(w)
	ahead := i + k.inFlight
	if i == 0 && len(k.q) > 1 && k.state == Down {
		// A retry took the front's place: the waiter it displaced is no
		// longer the probe's, and may now have no chance.
		a.sendAway(k, now)
	}
	a.arm(k, now)
	a.mu.Unlock()
	if queued != nil {
		queued(ahead)
	}
	wctx, stop := ctx, context.CancelFunc(func() {})
	if !bound.IsZero() {
		wctx, stop = context.WithDeadline(ctx, bound)
	}
	defer stop()
	select {
	case <-w.ready:
	case <-wctx.Done():
		a.mu.Lock()
		if ctx.Err() == nil {
			// The bound is the latest a request may be sent: what the
			// key lets go at that instant, this waiter may be, whether
			// or not the key's timer has run yet; and a recovering
			// key lets it go, wherever it is in the queue.
			at := time.Now()
			a.grantQueued(k, at, &changes)
			if a.lastChance(k, at) && !w.done() {
				k.remove(w)
				w.tok = a.grant(k, at)
				close(w.ready)
			}
		}
		select {
		case <-w.ready: // granted or sent away meanwhile
		default:
			k.remove(w)
			last := k.last
			a.mu.Unlock()
			a.notify(changes)
			if ctx.Err() != nil {
				return nil, time.Since(now), ctx.Err()
			}
			return nil, time.Since(now), downError(key, "no chance to send came before the request's deadline less its reserve", true, last)
		}
		a.mu.Unlock()
		a.notify(changes)
		if w.tok != nil && ctx.Err() != nil {
			w.tok.release()
			return nil, time.Since(now), ctx.Err()
		}
	}
	if w.tok != nil && !w.tok.probe && a.Fleet != nil {
		if err := a.fleetSend(ctx, w.tok, bound); err != nil {
			return nil, time.Since(now), err
		}
	}
	return w.tok, time.Since(now), w.err
}

// grantNow returns a token for a request that may go at once, with
// nobody waiting ahead of it, or nil.
func (a *Admission) grantNow(k *admKey, now time.Time, changes *[]transition) *admToken {
	if len(k.q) > 0 {
		return nil
	}
	return a.take(k, now, changes)
}

// take returns a token for one more attempt at k now, if k lets one go,
// or nil: the probe of a down key whose probe is due, or a place under a
// recovering key's limit, never before a server's not-before time.
func (a *Admission) take(k *admKey, now time.Time, changes *[]transition) *admToken {
	if now.Before(k.notBefore) {
		return nil
	}
	var tok *admToken
	switch {
	case k.state == Down && !now.Before(k.nextProbe) && a.Fleet != nil:
		// The fleet's one probe: the Fleet is asked first, away from
		// the lock, and the front waiter probes if it grants it.
		if !k.asking {
			k.asking = true
			go a.askProbe(k)
		}
		return nil
	case k.state == Down && !now.Before(k.nextProbe):
		a.setState(k, Probing, changes)
		tok = &admToken{a: a, k: k, probe: true}
		k.probe = tok
	case k.state == Recovering && k.inFlight < int(k.limit) && !now.Before(k.held) && !now.Before(k.nextGrant):
		return a.grant(k, now)
	default:
		return nil
	}
	tok.granted = now
	k.inFlight++
	return tok
}

// grant returns a token for a place under recovering key k's limit, or
// past it for a waiter at its bound (lastChance), and paces the next.
func (a *Admission) grant(k *admKey, now time.Time) *admToken {
	if k.pace > 0 {
		// A limit's worth goes out over a round trip, not at once:
		// their answers, and the grants those free, do not bunch.
		k.nextGrant = now.Add(time.Duration(float64(k.pace) / k.limit))
	}
	k.inFlight++
	return &admToken{a: a, k: k, granted: now}
}

// lastChance reports whether a waiter of k that has reached its deadline
// less its reserve, the latest it may be sent, goes now: if k is
// recovering, past its pace, its limit, its hold after 429s and the
// waiters ahead, since the reserve is for this last attempt and the
// upstream is answering; not past a server's not-before time, nor while
// k is down. Not with a Fleet, whose place is waited for after the
// grant, past the bound.
func (a *Admission) lastChance(k *admKey, now time.Time) bool {
	return a.Fleet == nil && k.state == Recovering && !now.Before(k.notBefore)
}

// tooLate returns the error for waiter w, which cannot wait: the next
// chance to send comes after its bound, a down key's next probe or a
// server's not-before time for any key, and for a waiter behind the front
// of a down key's queue, its turn after the probe's answer after a
// server's not-before time at least ProbeTime away (turnAfterProbe).
// ahead is how many wait ahead of w; joining says w is joining the queue,
// not being checked again while it waits (see turnAfterProbe). For a
// waiter at the front of the queue (ahead is 0), whose attempt the probe
// is, and that may have it brought forward (early), a down key's next
// probe is brought forward to its bound when it may be.
func (a *Admission) tooLate(k *admKey, w *admWaiter, ahead int, now time.Time, joining bool) error {
	bound := w.bound
	if bound.IsZero() {
		return nil
	}
	front := ahead == 0
	next := k.nextChance(now) // a probing or recovering key's: a server's not-before time, if any
	why := "its next chance to send"
	if pt := a.probeTime(); !front && k.state == Down && pt > 0 && next.Equal(k.notBefore) && next.Sub(now) >= pt {
		// The chance at a server's not-before time is the probe's, the
		// front's attempt; this waiter's comes with the probe's answer,
		// and then only after those between it and the front.
		next = next.Add(a.turnAfterProbe(k, ahead-1, joining))
		why = "its turn after the probe's answer after a server's not-before time"
	}
	if !next.After(bound) {
		return nil
	}
	if front && w.early && k.state == Down && !now.After(bound) && !k.earliest.After(bound) && !k.notBefore.After(bound) {
		// The probe, this request's attempt, is brought forward to
		// bound, so that it has the upstream's answer before it must
		// give up.
		k.nextProbe = bound
		return nil
	}
	return downError(k.key, fmt.Sprintf("%s, in %v, comes after the request's deadline less its reserve", why, next.Sub(now).Round(time.Millisecond)), true, k.last)
}

// turnAfterProbe returns the soonest that a waiter with n others between
// it and the front of down key k's queue can be sent, counted from the
// probe's sending: ProbeTime for the probe's answer, then a turn for each
// MaxLimit of the n, as if the limit were already at its ceiling. A turn
// is k's round trip, or half ProbeTime before k has one, ProbeTime being
// a long guess at an answer on purpose. For a request joining the queue
// (joining: a new one or a retry rejoining), at a MaxLimit of 1 a turn
// also counts the first probe wait: there a 429 holds the key for that
// wait rather than halving its limit, and a key of one at a time is one
// client among others that fill the upstream, whose 429s may come at any
// turn. That guess is made only at the door, where a request sent away
// loses nothing: one that joined on it is sent away later only when the
// server's time or the queue moves its turn, counted by round trips,
// past its bound, since by then it has waited and its last chance may
// still come.
func (a *Admission) turnAfterProbe(k *admKey, n int, joining bool) time.Duration {
	pt := a.probeTime()
	turn := k.rtt
	if turn == 0 {
		turn = pt / 2
	}
	limit := a.maxLimit(k)
	if limit == 1 && joining {
		turn += a.probeGap()
	}
	return pt + time.Duration(int64(turn)*int64(n)/int64(limit))
}

// A DownError is the error of a request that an [Admission] sent away
// while its upstream was down. It wraps ErrUpstreamDown and, if there is
// one, Last: errors.Is(err, ErrUpstreamDown) tells it.
type DownError struct {
	// Key is the Admission's key, or "" for a Transport whose key is the
	// whole upstream.
	Key string
	// Reason says why the request could not wait, as a phrase: "its next
	// chance to send, in 3.2s, comes after its deadline less its
	// reserve".
	Reason string
	// Late says that the request was sent away for its deadline less
	// its reserve: a later deadline or a smaller reserve would have let
	// it wait.
	Late bool
	// Last is the last failure that the upstream gave any request since
	// it was last healthy, or nil: a key held only by a server's
	// not-before time or a spent rate limit may have none, and so may
	// one that a Fleet's news made troubled.
	Last error
}

// Error says what happened once: "outlast: the upstream is down: " and
// the reason, with the key if it has one, then the last failure.
func (e *DownError) Error() string {
	var b strings.Builder
	b.WriteString(ErrUpstreamDown.Error())
	if e.Key != "" {
		fmt.Fprintf(&b, " (key %q)", e.Key)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	if e.Last != nil {
		b.WriteString("; the last failure: ")
		b.WriteString(e.Last.Error())
	}
	return b.String()
}

// Unwrap returns ErrUpstreamDown and Last, if any.
func (e *DownError) Unwrap() []error {
	if e.Last == nil {
		return []error{ErrUpstreamDown}
	}
	return []error{ErrUpstreamDown, e.Last}
}

// downError is the error of a request sent away from key for reason, late
// if for its deadline less its reserve, with last, the last failure since
// the key was last healthy.
func downError(key, reason string, late bool, last error) error {
	return &DownError{Key: key, Reason: reason, Late: late, Last: last}
}

// nextChance returns when a down key may next send: its next probe, or
// the not-before time a server set, whichever is later.
func (k *admKey) nextChance(now time.Time) time.Time {
	next := now
	if k.state == Down && k.nextProbe.After(next) {
		next = k.nextProbe
	}
	if k.notBefore.After(next) {
		next = k.notBefore
	}
	return next
}

// position returns how many would wait ahead of w in k's queue: those
// whose requests arrived before its own. A retry, whose request arrived
// earlier, goes ahead of later arrivals.
func (k *admKey) position(w *admWaiter) int {
	i := len(k.q)
	for i > 0 && w.arrived.before(k.q[i-1].arrived) {
		i--
	}
	return i
}

// enqueue puts w in k's queue by its arrival and returns how many wait
// ahead of it.
func (k *admKey) enqueue(w *admWaiter) int {
	i := k.position(w)
	k.q = append(k.q, nil)
	copy(k.q[i+1:], k.q[i:])
	k.q[i] = w
	return i
}

// remove takes w out of k's queue, if it is there.
func (k *admKey) remove(w *admWaiter) {
	for i, x := range k.q {
		if x == w {
			k.q = append(k.q[:i], k.q[i+1:]...)
			return
		}
	}
}

// arm sets k's timer for the next time a waiter may go: the probe of a
// down key, or the end of a not-before time of any key.
func (a *Admission) arm(k *admKey, now time.Time) {
	if len(k.q) == 0 || k.asking {
		return // askProbe arms it, if the probe is not granted
	}
	at := k.nextChance(now)
	if k.state == Recovering && k.inFlight < int(k.limit) {
		at = latest(at, k.nextGrant, k.held)
	}
	d := at.Sub(now)
	if d <= 0 && k.state != Down {
		return // a recovering key's waiters go as places free up
	}
	if k.timer == nil {
		k.timer = time.AfterFunc(d, func() { a.wake(k) })
		return
	}
	k.timer.Reset(d)
}

// wake runs when k's timer fires: it grants what may go now.
func (a *Admission) wake(k *admKey) {
	var changes []transition
	a.mu.Lock()
	a.grantQueued(k, time.Now(), &changes)
	a.mu.Unlock()
	a.notify(changes)
}

// grantQueued hands out what k allows now to the front of its queue, after
// sending away the waiters that cannot wait for the next chance.
func (a *Admission) grantQueued(k *admKey, now time.Time, changes *[]transition) {
	if k.state == Down || now.Before(k.notBefore) {
		a.sendAway(k, now)
	}
	for len(k.q) > 0 {
		tok := a.take(k, now, changes)
		if tok == nil {
			a.arm(k, now) // for the next probe or the end of a not-before time, if one is ahead
			break
		}
		w := k.q[0]
		k.q = k.q[1:]
		w.tok = tok
		close(w.ready)
	}
	if k.state == Recovering && len(k.q) == 0 && !now.Before(k.notBefore) && !now.Before(k.held) && (int(k.limit) >= a.maxLimit(k) || (a.Fleet == nil && k.inFlight < int(k.limit)/2)) {
		// The limit is reached, or no longer needed: nobody waits,
		// and less than half of it is in use. Not with a Fleet, for
		// which this process's queue is not the fleet's: another
		// process's backlog may still be going out under the limit,
		// which "healthy" would lift for all of them.
		a.setState(k, Healthy, changes)
	}
	if k.state == Healthy && k.streak == 0 {
		a.forget(k)
	}
}

// sendAway sends away the waiters of down key k that the next chance to
// send comes too late for.
func (a *Admission) sendAway(k *admKey, now time.Time) {
	kept := k.q[:0]
	for _, w := range k.q {
		if err := a.tooLate(k, w, len(kept), now, false); err != nil {
			w.err = err
			close(w.ready)
			continue
		}
		kept = append(kept, w)
	}
	clear(k.q[len(kept):])
	k.q = kept
}

// sending marks the token's attempt as sent now, past any wait at the
// Fleet or the gate, so that the key's round trip is the upstream's. It
// is called by the goroutine that sends, which alone reads it after.
func (t *admToken) sending() {
	if t != nil {
		t.granted = time.Now()
	}
}

// release ends a token's hold on its key: the probe or a place under the
// limit passes to the next waiter. It reports whether the key is still
// troubled after it: a release can leave it healthy.
func (t *admToken) release() (troubled bool) {
	if t == nil {
		return false
	}
	a := t.a
	var changes []transition
	var fleetDone func(FleetState)
	var told FleetState
	a.mu.Lock()
	if !t.released {
		t.released = true
		k := t.k
		k.inFlight--
		fleetDone, t.fleetDone = t.fleetDone, nil
		if t == k.probe && k.state == Probing {
			// The probe ended without a result (its caller gave up):
			// the next waiter may probe at once.
			a.setState(k, Down, &changes)
		}
		a.grantQueued(k, time.Now(), &changes)
		if fleetDone != nil {
			told = a.fleetState(k)
		}
	}
	troubled = t.k.state != Healthy
	a.mu.Unlock()
	if fleetDone != nil {
		fleetDone(told)
	}
	a.notify(changes)
	return troubled
}

// report tells a of an attempt's result at key. tok is the attempt's token,
// or nil if it went while the key was healthy; the caller releases it after
// report, so that a failed probe's end is judged as a failure, not as a
// probe abandoned. delay is the delay its server asked for on a failed
// status, if any; pause is how long until the rate limit that the
// response reports spent lets a request through (RateLimitReset). It
// reports whether the key's state answers the result, and so spaces what
// follows it while the key stays troubled: an outage failure, a 429, or a
// failure whose server set a delay (a probe schedule, a smaller limit, a
// hold). Another failure, one that says the upstream is up, leaves the
// request's retry to its own waits. held reports whether the delay, or
// pause, became the key's not-before time (a delay counts only on a 429,
// 503 or 529), which then holds the retry as long as the server asked.
// troubled reports whether the key is left not healthy: a request whose
// attempt went while it was healthy then follows the key's recovery too.
func (a *Admission) report(key string, ceiling int, tok *admToken, o outcome) (spaces, held, troubled bool) {
	class, status, delay, pause, err := o.class, o.status, o.delay, o.pause, o.err
	if tok == nil && class == ClassNone && pause == 0 && a.troubled.Load() == 0 {
		return false, false, false // the success path: nothing is troubled
	}
	if class == ClassCanceled || class == ClassBusy || class == ClassDown {
		return false, false, false // says nothing of the upstream
	}
	now := time.Now()
	var changes []transition
	a.mu.Lock()
	k := a.keys[key]
	outage := isOutage(class)
	if !(status == 429 || status == 503 || status == 529) {
		delay = 0 // a delay paces the key only on these
	}
	delay = max(delay, pause)
	paced := delay > 0
	if k == nil {
		if !outage && !paced {
			a.mu.Unlock()
			return false, false, false
		}
		k = a.troubledKey(key)
	}
	if ceiling > 0 {
		k.ceiling = ceiling
	}
	if paced {
		// Jittered upward, never earlier.
		until := now.Add(delay + time.Duration(rand.Int64N(int64(a.delaySpread(delay))+1)))
		if o.limit > 0 {
			// The spread never takes a delay past the Transport's
			// bound: the key is probed within it.
			if bound := now.Add(o.limit); until.After(bound) {
				until = bound
			}
		}
		k.pause(until)
	}
	probe := tok != nil && tok == k.probe && k.state == Probing
	first := len(changes)
	limit := k.limit
	switch {
	case class == ClassNone || (!outage && !paced && class != ClassRateLimited):
		// An answer: the upstream is up, whatever it thought of the
		// request.
		k.streak = 0
		k.busy = 0
		if tok != nil {
			// The round trip that paces grants: a moving average, but
			// never above the latest answer's, so that the pace follows
			// an upstream that has become faster at once.
			d := now.Sub(tok.granted)
			if k.rtt == 0 {
				k.rtt = d
			} else {
				k.rtt += (d - k.rtt) / 8
			}
			k.pace = min(k.rtt, d)
		}
		switch {
		case probe:
			// Only the probe's answer ends a down key: an answer to an
			// attempt sent before the key went down was served before
			// the failures that marked it down, and says nothing of
			// whether it is back. A server's not-before time still
			// holds.
			k.probes = 0
			k.limit = a.startLimit(k)
			a.setState(k, Recovering, &changes)
		case k.state == Recovering:
			k.limit = min(k.limit+recoveryGrowth, float64(a.maxLimit(k)))
		}
	case class == ClassRateLimited && !paced:
		// Rate limiting, not an outage: a recovering key halves its
		// limit; a probe says the upstream is back, but busy.
		k.streak = 0
		switch {
		case probe:
			k.probes = 0
			k.limit = 1
			a.setState(k, Recovering, &changes)
			fallthrough // and holds, as at a 429 at a limit of 1
		case k.state == Recovering && k.limit < 2:
			// Busy even at one at a time: others that share the
			// upstream hold it. The key holds for the first probe
			// wait, jittered, before the next one goes, so that
			// many small clients, each at a limit of 1, do not
			// keep it full of their 429s. A waiter at its bound
			// goes past the hold, as past the limit; with a Fleet,
			// which tells the others of it, it holds as a server's
			// delay does.
			until := now.Add(a.probeWait(k.busy))
			if a.Fleet != nil {
				k.pause(until)
			} else {
				k.held = latest(k.held, until)
			}
			k.busy++
		case k.state == Recovering:
			k.limit = max(1, k.limit/2)
		}
	default: // an outage failure, or a delay a server set
		if outage {
			k.streak++
		}
		if outage || k.last == nil { // a delay's failure stands in until an outage's
			k.last = err
		}
		switch {
		case probe:
			k.probes++
			k.busy = 0
			k.nextProbe = now.Add(a.probeWait(k.probes))
			k.earliest = now.Add(a.probeGap())
			a.setState(k, Down, &changes)
		case k.state == Recovering && class == ClassOverloaded:
			k.limit = max(1, k.limit/2)
			fallthrough
		case k.state == Recovering || k.state == Healthy:
			if k.streak >= a.downAfter() || paced {
				k.probes = 0
				k.nextProbe = k.notBefore // a server's delay, or the first probe wait
				if !paced {
					k.nextProbe = now.Add(a.probeWait(0))
				}
				k.earliest = now.Add(a.probeGap())
				k.busy = 0
				a.setState(k, Down, &changes)
			}
		}
	}
	if pause > 0 && class == ClassNone && k.state != Probing {
		// Answered, but with no request left until the limit's reset:
		// the key holds until then, and a probe goes first. A probe in
		// flight stays the probe, and a down key's probe schedule holds.
		if k.state != Down || k.nextProbe.Before(k.notBefore) {
			k.nextProbe = k.notBefore
		}
		a.setState(k, Down, &changes)
	}
	if a.Fleet != nil && k.state == Recovering && k.limit != limit && len(changes) == first {
		// The limit moved with no change of state: the fleet's
		// follows it.
		changes = append(changes, transition{key: k.key, from: Recovering, to: Recovering, at: now})
	}
	a.grantQueued(k, now, &changes)
	spaces = outage || paced || class == ClassRateLimited
	troubled = k.state != Healthy
	var fleetDone func(FleetState)
	var told FleetState
	if probe && tok.fleetDone != nil {
		// The probe's answer goes to the fleet with the probe's end,
		// in one step, not as a change of its own.
		fleetDone, tok.fleetDone, told = tok.fleetDone, nil, a.fleetState(k)
		for i := first; i < len(changes); i++ {
			changes[i].learned = true
		}
	}
	a.mu.Unlock()
	if fleetDone != nil {
		fleetDone(told)
	}
	a.notify(changes)
	return spaces, paced, troubled
}

// outcome is what an attempt's result tells an Admission.
type outcome struct {
	class  Class
	status int
	delay  time.Duration // the delay its server asked for on a failed status, if any
	pause  time.Duration // until the rate limit the response reports spent lets a request through
	limit  time.Duration // the Transport's MaxRetryAfter, which delay and pause are within; 0 for none
	err    error
}

// latest returns the latest of times.
func latest(times ...time.Time) time.Time {
	var t time.Time
	for _, u := range times {
		if u.After(t) {
			t = u
		}
	}
	return t
}

// pause holds k until at least until: no request goes before it.
func (k *admKey) pause(until time.Time) {
	if until.After(k.notBefore) {
		k.notBefore = until
	}
}

// isOutage reports whether an attempt's class says that the whole upstream
// is failing, rather than this request.
func isOutage(c Class) bool {
	switch c {
	case ClassStatus5xx, ClassOverloaded, ClassRefused, ClassReset, ClassStalled, ClassClosedEarly, ClassTimeout, ClassErrorEvent:
		return true
	}
	return false
}

// troubledKey returns key's state, adding it as a healthy key.
func (a *Admission) troubledKey(key string) *admKey {
	if k := a.keys[key]; k != nil {
		return k
	}
	if a.keys == nil {
		a.keys = make(map[string]*admKey)
	}
	k := &admKey{key: key}
	a.keys[key] = k
	a.troubled.Add(1)
	return k
}

// forget drops a healthy key with nothing left to track.
func (a *Admission) forget(k *admKey) {
	if len(k.q) > 0 || k.inFlight > 0 || k.state != Healthy || k.streak > 0 || time.Now().Before(k.notBefore) {
		return
	}
	if a.keys[k.key] == k {
		delete(a.keys, k.key)
		a.troubled.Add(-1)
	}
	if k.timer != nil {
		k.timer.Stop()
	}
}

// setState moves k to state s, noting the change for OnState.
func (a *Admission) setState(k *admKey, s UpstreamState, changes *[]transition) {
	if k.state == s {
		return
	}
	if k.state == Probing {
		k.probe = nil // the probe's answer, if it comes, is an ordinary one
	}
	if k.state == Recovering {
		k.held = time.Time{} // a hold is the recovery's: a later one starts anew
	}
	if a.OnState != nil || a.Fleet != nil {
		*changes = append(*changes, transition{key: k.key, from: k.state, to: s, at: time.Now()})
	}
	k.state = s
}

// notify calls OnState for each change, with no lock held, and tells the
// Fleet, if any, of the state of each key that this process changed.
func (a *Admission) notify(changes []transition) {
	if len(changes) == 0 {
		return
	}
	if a.OnState != nil {
		for _, c := range changes {
			if c.from != c.to { // not a limit's move, told to the Fleet alone
				a.OnState(c.key, c.from, c.to, c.at)
			}
		}
	}
	if a.Fleet == nil {
		return
	}
	var keys []string
	for _, c := range changes {
		if !c.learned && !slices.Contains(keys, c.key) {
			keys = append(keys, c.key)
		}
	}
	for _, key := range keys {
		a.mu.Lock()
		k := a.keys[key]
		s := FleetState{} // forgotten: healthy
		if k != nil {
			s = a.fleetState(k)
		}
		a.mu.Unlock()
		a.Fleet.Tell(key, s)
	}
}

// rateLimitPause returns RateLimitReset's delay for h, or 0. It reads the
// clock only when a header says no request is left.
func rateLimitPause(h http.Header) time.Duration {
	if len(h["X-Ratelimit-Remaining-Requests"]) == 0 && len(h["Anthropic-Ratelimit-Requests-Remaining"]) == 0 {
		return 0
	}
	d, _ := RateLimitReset(h, time.Now())
	return d
}

// retryAllowed reports whether the retry budget, if on, lets a retry go.
func (a *Admission) retryAllowed() bool {
	return a.RetryBudget <= 0 || a.spent.Load() < retryBudgetTokens/2
}

// spend moves the retry budget's bucket after an attempt: a token less
// for a failure, RetryBudget more for a success.
func (a *Admission) spend(failed bool) {
	delta := int64(-a.RetryBudget * 1000)
	if failed {
		delta = 1000
	}
	for {
		old := a.spent.Load()
		next := min(max(old+delta, 0), retryBudgetTokens)
		if next == old || a.spent.CompareAndSwap(old, next) {
			return
		}
	}
}
