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

// ErrUpstreamDown is wrapped by the error of a request that an
// [Admission] sent away while its upstream was down: the next chance to
// send it, a probe or a server's not-before time, comes after its
// deadline less its reserve. The error is a [*DownError], which also
// wraps the last failure the upstream gave since it was last healthy. It
// is never retried: waiting has already been judged not to fit.
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
	// DefaultShortDelay is the longest server's delay that leaves a key
	// as it is (see Admission.ShortDelay): a few seconds, the first waits
	// of a policy.
	DefaultShortDelay = 5 * time.Second
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

// Admission treats an outage as the upstream's, not each request's, so
// that an upstream that is down gets one probe rather than every
// request's retries. All requests of a [Transport] (Transport.Admission)
// share it, keyed like the gate (Transport.GateKey, the host by
// default). While every key is healthy it costs one atomic load a
// request.
//
// Each key is healthy, down, probing or recovering:
//
//   - After DownAfter outage failures in a row (a refused or reset
//     connection, a 5xx, a 529, no first byte in time), or when a server
//     names a delay longer than ShortDelay (Retry-After on a 429, 503 or
//     529), or a rate limit spent until its reset, the key is down. A
//     short delay is the request's own to wait, at the same upstream,
//     unless its failure puts the key down: then it holds the key.
//   - While it is down, requests wait in one queue in the order they
//     arrived, at most MaxQueue of them. One probe goes at a time, the
//     front request's own attempt, on the ProbeWaits schedule and never
//     before a server's not-before time.
//   - A request leaves at once, with a [*DownError], when the next chance
//     to send comes after its deadline less its reserve.
//   - The probe's answer starts the recovery: the queue goes out under a
//     limit of requests in flight, paced a round trip over the limit
//     apart. The limit starts at a quarter of MaxLimit, grows by half a
//     request per success, halves on a 429 or 529, and at MaxLimit the
//     key is healthy. A 429 at a limit of 1 puts the key down again.
//   - A request that reaches its deadline less its reserve while the key
//     recovers is sent then, past the limit: the upstream is answering.
//
// The state machine, event by event, is in keystate.go and
// docs/admission.md. A request's failed attempts through a troubled key
// count against its MaxAttempts but do not advance its Waits, and after a
// failure the key answers it retries with no wait of its own, in its
// place in the queue: the key, not each request, spaces the attempts.
//
// The zero value is ready to use with the defaults. An Admission is safe for
// concurrent use and must not be copied after first use.
type Admission struct {
	// DownAfter is how many outage failures in a row, with no success
	// between them, mark a key down. Zero means DefaultDownAfter.
	DownAfter int

	// ProbeWaits are the waits between probes of a down key: the first
	// after the failure that marked it down, the last repeated, each
	// jittered up by as much as half. Nil means DefaultProbeWaits. A
	// fleet of processes that each have an Admission probes once per
	// process: there, longer waits spread the fleet's probes.
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

	// ShortDelay is the longest delay a server may name on a failed
	// status (Retry-After on a 429, 503 or 529) and still leave the key
	// as it is: such a wait is the request's own, which its policy waits
	// out at the same upstream, as a rate limit that ends in a second or
	// two should be, not an outage to hold every request for or to send
	// them to a fallback. A longer delay is the key's not-before time,
	// and so is a short one named by the failure that puts the key down.
	// Zero means DefaultShortDelay (5 s); a negative value makes every
	// delay the key's.
	ShortDelay time.Duration

	// DelaySpread is the most a server's delay is lengthened, at random,
	// so that the clients told the same not-before time do not all come
	// back at once. It is capped at half the delay. Zero means a tenth of
	// the delay, enough for one Admission or a Fleet; many processes
	// that each have an Admission need a few round trips.
	DelaySpread time.Duration

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
	// wrapping ErrRetryBudget and the last failure. Zero, the default, is
	// off: admission alone already sends one probe, not a retry per
	// request, while a key is down.
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
	mu       sync.Mutex // guards keys and every admKey, admWaiter and admToken in them
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

// An arrival places a request in a key's queue: by when it arrived, its
// first attempt's start, and among requests that arrived at the same
// instant, by when each first reached a troubled key.
type arrival struct {
	at  time.Time
	seq uint64 // 0 until the request first reaches a troubled key
}

// arrivals numbers requests as they first reach a troubled key.
var arrivals atomic.Uint64

// stamp sets what is not yet set of a: a retry keeps the place its
// arrival gave it, even when its first attempt went while the key was
// healthy.
func (a *arrival) stamp(now time.Time) {
	if a.at.IsZero() {
		a.at = now
	}
	if a.seq == 0 {
		a.seq = arrivals.Add(1)
	}
}

// before reports whether a arrived before b.
func (a arrival) before(b arrival) bool {
	if !a.at.Equal(b.at) {
		return a.at.Before(b.at)
	}
	return a.seq < b.seq
}

// admWaiter is one request waiting to be sent.
type admWaiter struct {
	k       *admKey
	arrived arrival   // its request's, for the queue's order
	bound   time.Time // its deadline less its reserve; zero for none
	ahead   int       // how many waited or were in flight ahead of it as it joined
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

// transition records a change for OnState and the Fleet, told once the
// lock is released: of state, or of a recovering key's limit alone.
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

// shortDelay returns ShortDelay in force: 0 when no delay is short.
func (a *Admission) shortDelay() time.Duration {
	return inForce(a.ShortDelay, DefaultShortDelay)
}

// delaySpread returns the most a server's delay is lengthened for a key:
// DelaySpread, at most half the delay, or a tenth of the delay if unset.
func (a *Admission) delaySpread(delay time.Duration) time.Duration {
	if a.DelaySpread > 0 {
		return min(a.DelaySpread, delay/2)
	}
	return delay / 10
}

// probeWait returns the wait before probe n+1, n probes having failed,
// jittered up by as much as half of it: the processes of a fleet, each
// with its own Admission, see an outage begin at about the same time,
// and would otherwise probe in step, and then release their queues in
// step.
func (a *Admission) probeWait(n int) time.Duration {
	w := a.ProbeWaits
	if len(w) == 0 {
		w = DefaultProbeWaits
	}
	d := w[min(n, len(w)-1)]
	return d + time.Duration(rand.Int64N(int64(d/2)+1))
}

// admit lets a request's attempt be sent, or waits until it may be.
// arrived is the request's arrival, set here if it is not yet; bound is
// its deadline less its reserve, zero for none. A nil token with a nil
// error means the key is healthy: nothing is held. waited is how long it
// waited; ahead is reported once through queued if it must wait.
func (a *Admission) admit(ctx context.Context, key string, arrived *arrival, bound time.Time, queued func(ahead int)) (tok *admToken, waited time.Duration, err error) {
	if a.troubled.Load() == 0 {
		return nil, 0, nil
	}
	start := time.Now()
	arrived.stamp(start)
	tok, w, err := a.join(ctx, key, *arrived, bound, start)
	if w != nil {
		if queued != nil {
			queued(w.ahead)
		}
		tok, err = a.wait(ctx, w)
	}
	viaFleet := err == nil && tok != nil && !tok.probe && a.Fleet != nil
	if err == nil && tok != nil && !tok.probe {
		if err = a.peers().send(ctx, tok, bound); err != nil {
			tok = nil // the refusal released it
		}
	}
	if w != nil || viaFleet {
		waited = time.Since(start)
	}
	return tok, waited, err
}

// join lets a request go at once if its key lets one go and nobody waits
// ahead of it; otherwise it puts the request in the key's queue, as the
// returned waiter, or sends it away with an error.
func (a *Admission) join(ctx context.Context, key string, arrived arrival, bound, now time.Time) (*admToken, *admWaiter, error) {
	var changes []transition
	a.mu.Lock()
	defer func() {
		a.mu.Unlock()
		a.notify(changes)
	}()
	k := a.keys[key]
	if k == nil || k.state == Healthy {
		return nil, nil, nil
	}
	if len(k.q) == 0 {
		if tok := a.take(k, now, &changes); tok != nil {
			return tok, nil, nil
		}
	}
	switch {
	case (k.state == Down || k.state == Probing) && mayLeave(ctx):
		// A request with a fallback to go to does not wait for a down
		// upstream: it was its probe if one was due, and moves on now.
		return nil, nil, downError(key, "the request has a fallback to go to", false, k.last)
	case len(k.q) >= a.maxQueue():
		return nil, nil, fmt.Errorf("outlast: admission %q: %w", key, ErrBusy)
	}
	w := &admWaiter{k: k, arrived: arrived, bound: bound, ready: make(chan struct{})}
	if err := tooLate(k, w, now); err != nil {
		return nil, nil, err
	}
	w.ahead = k.enqueue(w) + k.inFlight
	a.arm(k, now)
	return nil, w, nil
}

// wait waits for w to be let go or sent away, until its bound or the end
// of ctx.
func (a *Admission) wait(ctx context.Context, w *admWaiter) (*admToken, error) {
	wctx, stop := ctx, context.CancelFunc(func() {})
	if !w.bound.IsZero() {
		wctx, stop = context.WithDeadline(ctx, w.bound)
	}
	defer stop()
	select {
	case <-w.ready:
		return w.tok, w.err
	case <-wctx.Done():
	}
	return a.atBound(ctx, w)
}

// atBound ends w's wait at its bound, the latest it may be sent, or at
// the end of ctx. At its bound, w may go if the key lets it go then,
// whether or not the key's timer has run yet; and a recovering key sends
// it there, wherever it is in the queue (evBound).
func (a *Admission) atBound(ctx context.Context, w *admWaiter) (*admToken, error) {
	k := w.k
	var changes []transition
	a.mu.Lock()
	if ctx.Err() == nil {
		now := time.Now()
		a.grantQueued(k, now, &changes)
		if !w.done() && a.step(k, news{ev: evBound}, now, &changes) {
			k.remove(w)
			w.tok = a.grant(k, now)
			close(w.ready)
		}
	}
	if !w.done() {
		k.remove(w)
		w.err = ctx.Err()
		if w.err == nil {
			w.err = downError(k.key, "no chance to send came before the request's deadline less its reserve", true, k.last)
		}
		close(w.ready)
		a.forget(k)
	}
	a.mu.Unlock()
	a.notify(changes)
	if w.tok != nil && ctx.Err() != nil {
		w.tok.release()
		return nil, ctx.Err()
	}
	return w.tok, w.err
}

// take returns a token for one more attempt at k now, if k lets one go,
// or nil: the probe of a down key whose probe is due, or a place under a
// recovering key's limit, never before a server's not-before time.
func (a *Admission) take(k *admKey, now time.Time, changes *[]transition) *admToken {
	switch {
	case now.Before(k.notBefore):
		return nil
	case k.state == Down && !now.Before(k.nextProbe):
		return a.peers().probe(k, now, changes)
	case k.state == Recovering && k.inFlight < int(k.limit) && !now.Before(k.nextGrant):
		return a.grant(k, now)
	}
	return nil
}

// sendProbe returns the token of down key k's probe, which done, if not
// nil, gives back to the Fleet.
func (a *Admission) sendProbe(k *admKey, now time.Time, changes *[]transition, done func(FleetState)) *admToken {
	a.step(k, news{ev: evProbe}, now, changes)
	tok := &admToken{a: a, k: k, probe: true, granted: now, fleetDone: done}
	k.probe = tok
	k.inFlight++
	return tok
}

// grant returns a token for a place under recovering key k's limit, or
// past it for a waiter at its bound, and paces the next.
func (a *Admission) grant(k *admKey, now time.Time) *admToken {
	if k.pace > 0 {
		// A limit's worth goes out over a round trip, not at once:
		// their answers, and the grants those free, do not bunch.
		k.nextGrant = now.Add(time.Duration(float64(k.pace) / k.limit))
	}
	k.inFlight++
	return &admToken{a: a, k: k, granted: now}
}

// tooLate returns the error for waiter w if k's next chance to send comes
// after its bound.
func tooLate(k *admKey, w *admWaiter, now time.Time) error {
	if w.bound.IsZero() {
		return nil
	}
	next := k.nextChance(now)
	if !next.After(w.bound) {
		return nil
	}
	return downError(k.key, fmt.Sprintf("its next chance to send, in %v, comes after the request's deadline less its reserve", next.Sub(now).Round(time.Millisecond)), true, k.last)
}

// nextChance returns when k may next send: a down key's next probe, or
// the not-before time a server set, whichever is later.
func (k *admKey) nextChance(now time.Time) time.Time {
	next := latest(now, k.notBefore)
	if k.state == Down {
		next = latest(next, k.nextProbe)
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
// down key, the end of a not-before time, or a recovering key's next
// paced grant.
func (a *Admission) arm(k *admKey, now time.Time) {
	if len(k.q) == 0 || k.asking {
		return // askProbe arms it, if the probe is not granted
	}
	at := k.nextChance(now)
	if k.state == Recovering && k.inFlight < int(k.limit) {
		at = latest(at, k.nextGrant)
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
			a.arm(k, now) // for the next probe, the end of a not-before time, or the next grant
			break
		}
		w := k.q[0]
		k.q = k.q[1:]
		w.tok = tok
		close(w.ready)
	}
	a.forget(k)
}

// sendAway sends away the waiters of k that the next chance to send
// comes too late for.
func (a *Admission) sendAway(k *admKey, now time.Time) {
	kept := k.q[:0]
	for _, w := range k.q {
		if err := tooLate(k, w, now); err != nil {
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
// limit passes to the next waiter. A probe released before report had its
// answer was given up by its caller, and the next waiter may probe at
// once. It reports whether the key is still troubled after it.
func (t *admToken) release() (troubled bool) {
	if t == nil {
		return false
	}
	a, k := t.a, t.k
	var changes []transition
	var fleetDone func(FleetState)
	var told FleetState
	a.mu.Lock()
	if !t.released {
		t.released = true
		k.inFlight--
		now := time.Now()
		if t == k.probe {
			a.step(k, news{ev: evFailure, probe: true, class: ClassCanceled}, now, &changes)
		}
		a.grantQueued(k, now, &changes)
		if fleetDone, t.fleetDone = t.fleetDone, nil; fleetDone != nil {
			told = a.fleetState(k)
		}
	}
	troubled = k.state != Healthy
	a.mu.Unlock()
	if fleetDone != nil {
		fleetDone(told)
	}
	a.notify(changes)
	return troubled
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

// report tells a of an attempt's result at key, as the key's events. tok
// is the attempt's token, or nil if it went while the key was healthy;
// the caller releases it after report, so that a failed probe's end is
// judged as a failure, not as a probe given up. spaces reports whether
// the key answers the result and so spaces the retry while it stays
// troubled: an outage failure, a 429 or a server's delay. held reports
// whether a server's delay became the key's not-before time, which then
// holds the retry as long as the server asked; own, whether it was short
// and left to the request, whose retry waits it out itself (see
// ShortDelay). troubled reports whether the key is left not healthy.
func (a *Admission) report(key string, ceiling int, tok *admToken, o outcome) (spaces, held, own, troubled bool) {
	if o.class == ClassCanceled || o.class == ClassBusy || o.class == ClassDown {
		return false, false, false, false // says nothing of the upstream
	}
	delay := max(o.delay, o.pause)
	if o.delay > 0 && !(o.status == 429 || o.status == 503 || o.status == 529) {
		delay = o.pause // a server's delay holds the key only on these
	}
	failed := isOutage(o.class) || o.class == ClassRateLimited
	now := time.Now()
	var changes []transition
	a.mu.Lock()
	k := a.keys[key]
	if delay == o.delay && o.delay > 0 && o.delay <= a.shortDelay() && (k == nil || k.state == Healthy) {
		// A short delay at a healthy key is the request's own to wait
		// out: the key, and every other request, go on as they were.
		delay, own = o.pause, true
	}
	if k == nil && !isOutage(o.class) && delay == 0 {
		a.mu.Unlock()
		return false, false, own, false // a healthy key's answer, or a 429 left to the request's policy
	}
	if k == nil {
		k = a.troubledKey(key)
	}
	if ceiling > 0 {
		k.ceiling = ceiling
	}
	probe := tok != nil && tok == k.probe
	ns, n := a.newsOf(o, tok, probe, delay, now)
	for _, e := range ns[:n] {
		a.step(k, e, now, &changes)
	}
	if own && k.state != Healthy {
		// The failure that named the short delay put the key down: the
		// delay is the key's now, and its probe waits for it (rule 5).
		delay, own = o.delay, false
		a.step(k, news{ev: evNotBefore, probe: probe, until: a.notBefore(o, delay, now), err: o.err}, now, &changes)
	}
	var fleetDone func(FleetState)
	var told FleetState
	if probe && tok.fleetDone != nil {
		// The probe's answer goes to the fleet with the probe's end,
		// in one step, not as a change of its own.
		fleetDone, tok.fleetDone, told = tok.fleetDone, nil, a.fleetState(k)
		for i := range changes {
			changes[i].learned = true
		}
	}
	a.grantQueued(k, now, &changes)
	troubled = k.state != Healthy
	a.mu.Unlock()
	if fleetDone != nil {
		fleetDone(told)
	}
	a.notify(changes)
	return failed || delay > 0, delay > 0, own, troubled
}

// newsOf translates an attempt's outcome into the events of its key: a
// failure or an answer, then the not-before time of a server's delay.
func (a *Admission) newsOf(o outcome, tok *admToken, probe bool, delay time.Duration, now time.Time) (ns [2]news, n int) {
	switch {
	case isOutage(o.class) || o.class == ClassRateLimited:
		ns[0] = news{ev: evFailure, probe: probe, class: o.class, err: o.err}
	case probe:
		ns[0] = news{ev: evProbeAnswered, rtt: now.Sub(tok.granted), timed: true}
	case tok != nil:
		ns[0] = news{ev: evSuccess, rtt: now.Sub(tok.granted), timed: true}
	default:
		ns[0] = news{ev: evSuccess}
	}
	if delay <= 0 {
		return ns, 1
	}
	// The answer carries it too, so that it does not settle a recovery
	// that the not-before time, coming next, holds.
	until := a.notBefore(o, delay, now)
	ns[0].until = until
	ns[1] = news{ev: evNotBefore, probe: probe, until: until, err: o.err}
	return ns, 2
}

// notBefore returns the not-before time of a server's delay at now:
// jittered upward, never earlier, and never past the Transport's bound,
// so that the key is probed within it.
func (a *Admission) notBefore(o outcome, delay time.Duration, now time.Time) time.Time {
	until := now.Add(delay + time.Duration(rand.Int64N(int64(a.delaySpread(delay))+1)))
	if bound := now.Add(o.limit); o.limit > 0 && until.After(bound) {
		until = bound
	}
	return until
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
	if k.state != Healthy || k.streak > 0 || len(k.q) > 0 || k.inFlight > 0 || time.Now().Before(k.notBefore) {
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

// notify calls OnState for each change of state, with no lock held, and
// tells the key's peers of each key this process changed.
func (a *Admission) notify(changes []transition) {
	if a.OnState != nil {
		for _, c := range changes {
			if c.from != c.to { // not a limit's move, told to the Fleet alone
				a.OnState(c.key, c.from, c.to, c.at)
			}
		}
	}
	p := a.peers()
	for i, c := range changes {
		if !c.learned && !slices.ContainsFunc(changes[:i], func(d transition) bool { return !d.learned && d.key == c.key }) {
			p.tell(c.key)
		}
	}
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
