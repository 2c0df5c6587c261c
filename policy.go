package outlast

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// DefaultReserve is the time a deadline must still have left after a wait
// for the retry to be worth making, when [Policy.Reserve] is zero.
const DefaultReserve = 60 * time.Second

// A Policy says when a failed request is sent again and how long to wait
// first. The zero value is not valid: Waits must name at least one wait.
// A Policy is read, never written, by the retry code, so one Policy may be
// shared by many goroutines as long as nobody changes it.
//
// The bounds work together. Retry k waits Waits[k-1], or the last entry
// once past the end; in a [Transport]'s own retries, failures of attempts
// that its [Admission] let through a troubled key are not counted in k
// (they count against MaxAttempts; Do around a Transport cannot tell them
// apart, and counts them). Without a context deadline there are
// len(Waits) retries at most. With a deadline, the last wait repeats for
// as long as the deadline would still have Reserve left after the wait,
// and no longer. MaxAttempts and Window bound both cases. A wait that would break any bound
// is never started: the last failure is returned at once.
type Policy struct {
	// Waits is the pause before retry 1, 2, …. It must not be empty, and no
	// wait may be negative. See Exponential for a doubling list.
	Waits []time.Duration

	// Jitter randomizes the waits. The zero value adds none, so tests can
	// name exact waits.
	Jitter Jitter

	// Reserve is the time the context's deadline must still have left after
	// a wait. Zero means DefaultReserve (60 s); a negative value means none,
	// so a retry may use the deadline to its end.
	Reserve time.Duration

	// MaxAttempts caps the attempts, the first included. Zero means no cap.
	MaxAttempts int

	// Window caps the time from the start of the first attempt to the end
	// of the last wait, as a local server's host bounds its retries. Zero
	// means no cap.
	Window time.Duration

	// RetryAfter says how a server's delay (Retry-After, retry-after-ms)
	// combines with the wait. The zero value is RetryAfterAtLeast.
	RetryAfter RetryAfterMode

	// Retryable decides whether a failure is worth another attempt. Nil
	// means IsRetryable. It sees a *StatusError for a failed status, and
	// the transport's or attempt's error otherwise.
	Retryable func(error) bool
}

// RetryAfterMode says how a server's requested delay combines with the
// policy's wait.
type RetryAfterMode int

const (
	// RetryAfterAtLeast waits max(wait, server's delay): the server's delay
	// is a floor. It is the default.
	RetryAfterAtLeast RetryAfterMode = iota
	// RetryAfterExact waits the server's delay instead of the policy's wait
	// when the server gives one.
	RetryAfterExact
	// RetryAfterIgnore never looks at the server's delay.
	RetryAfterIgnore
)

// String returns the mode's name: "at-least", "exact" or "ignore".
func (m RetryAfterMode) String() string {
	switch m {
	case RetryAfterAtLeast:
		return "at-least"
	case RetryAfterExact:
		return "exact"
	case RetryAfterIgnore:
		return "ignore"
	}
	return fmt.Sprintf("RetryAfterMode(%d)", int(m))
}

// Jitter randomizes waits so that clients that failed together do not come
// back together. The zero value adds no jitter.
//
// Jitter never shortens a wait that the server asked for. When the server's
// delay sets the wait, the jitter is mirrored upward: Spread gives a wait in
// [d, d·(1+Spread)] and Full one in [d, 2d]. Jitter also never pushes a wait
// past a bound: a wait that fits without its jitter is cut to what fits.
type Jitter struct {
	// Spread moves a wait by up to this fraction of it either way: 0.25
	// turns a 4 s wait into one in [3 s, 5 s]. It must be in [0, 1]. Zero
	// means none.
	Spread float64

	// Full draws a wait uniformly from [0, wait], the "full jitter" of
	// exponential backoff. It may not be combined with Spread.
	Full bool
}

// apply returns the jittered wait. serverSet says that the server's delay
// set w, so jitter may only lengthen it.
func (j Jitter) apply(w time.Duration, serverSet bool) time.Duration {
	return j.at(w, serverSet, rand.Float64()*2-1)
}

// at jitters w by u, a draw in [-1, 1]: Spread moves w by u·Spread·w, and
// Full maps u onto [0, w]. It is apply without the randomness, for tests.
func (j Jitter) at(w time.Duration, serverSet bool, u float64) time.Duration {
	if w <= 0 {
		return w
	}
	var delta time.Duration
	switch {
	case j.Full:
		delta = -time.Duration((u + 1) / 2 * float64(w)) // [-w, 0]
	case j.Spread > 0:
		delta = time.Duration(u * j.Spread * float64(w)) // [-Spread·w, Spread·w]
	}
	if serverSet && delta < 0 {
		delta = -delta
	}
	if w+delta < 0 { // an overflow of a wait near the largest Duration
		return w
	}
	return w + delta
}

// Validate reports whether p can be used, naming the first field that is
// wrong. Its errors wrap ErrInvalidPolicy.
func (p *Policy) Validate() error {
	if p == nil {
		return fmt.Errorf("%w: policy is nil", ErrInvalidPolicy)
	}
	if len(p.Waits) == 0 {
		// An empty list would fail at the first retry under a deadline,
		// far from where it was set: refuse it where the policy is made.
		return fmt.Errorf("%w: Waits is empty: give at least one wait", ErrInvalidPolicy)
	}
	for i, w := range p.Waits {
		if w < 0 {
			return fmt.Errorf("%w: Waits[%d] is negative (%v)", ErrInvalidPolicy, i, w)
		}
	}
	switch {
	case p.Jitter.Spread < 0 || p.Jitter.Spread > 1 || p.Jitter.Spread != p.Jitter.Spread:
		return fmt.Errorf("%w: Jitter.Spread %v is outside [0, 1]", ErrInvalidPolicy, p.Jitter.Spread)
	case p.Jitter.Full && p.Jitter.Spread != 0:
		return fmt.Errorf("%w: Jitter.Full and Jitter.Spread are both set: choose one", ErrInvalidPolicy)
	case p.MaxAttempts < 0:
		return fmt.Errorf("%w: MaxAttempts %d is negative", ErrInvalidPolicy, p.MaxAttempts)
	case p.Window < 0:
		return fmt.Errorf("%w: Window %v is negative", ErrInvalidPolicy, p.Window)
	case p.RetryAfter < RetryAfterAtLeast || p.RetryAfter > RetryAfterIgnore:
		return fmt.Errorf("%w: RetryAfter %v is not a mode", ErrInvalidPolicy, p.RetryAfter)
	}
	return nil
}

// ReserveInForce returns the reserve p keeps: Reserve, DefaultReserve if
// Reserve is zero, or none if it is negative or p is nil.
func (p *Policy) ReserveInForce() time.Duration {
	if p == nil {
		return 0
	}
	return inForce(p.Reserve, DefaultReserve)
}

// Bound returns how long a request with deadline still has for waits and
// retries under p: the latest a wait may end, its deadline less p's
// reserve in force. A zero deadline has no bound, and Bound returns the
// zero time. Retries, a gate's queue, an Admission's queue, a Fallback's
// moves and the gateway's continuations all stop at this instant.
func (p *Policy) Bound(deadline time.Time) time.Time {
	return boundOf(deadline, p.ReserveInForce())
}

// boundOf is Bound for a reserve known already, such as an outer layer's.
func boundOf(deadline time.Time, reserve time.Duration) time.Time {
	if deadline.IsZero() {
		return time.Time{}
	}
	return deadline.Add(-reserve)
}

// inForce returns the duration a setting of v means, where zero means def
// and a negative value means none (0).
func inForce(v, def time.Duration) time.Duration {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// retryable applies p.Retryable, or IsRetryable. A busy refusal is never
// retried, whatever the predicate says: the gate already said so.
func (p *Policy) retryable(err error) bool {
	if isBusy(err) {
		return false
	}
	if p.Retryable != nil {
		return p.Retryable(err)
	}
	return IsRetryable(err)
}

// Exponential returns n waits that double from base, each capped at max:
// base, 2·base, 4·base, …. It returns nil when n < 1 (which Validate
// refuses) and never overflows.
func Exponential(base, max time.Duration, n int) []time.Duration {
	if n < 1 {
		return nil
	}
	waits := make([]time.Duration, n)
	w := base
	for i := range waits {
		if w > max || w < 0 {
			w = max
		}
		waits[i] = w
		if w <= max/2 {
			w *= 2
		} else {
			w = max
		}
	}
	return waits
}

type policyKey struct{}

// policyValue is stored in a context so that WithPolicy(ctx, nil) can turn
// retries off for one request under a Transport that has a Policy.
type policyValue struct{ p *Policy }

// WithPolicy returns a copy of ctx that carries p. [Do] with a nil policy,
// and a [Transport], use the context's policy in place of their own, so a
// host can set the policy per request. A nil p turns retries off for
// requests made with the returned context.
//
// The policy is read only after a failure, so an invalid p is reported then,
// as an error wrapping ErrInvalidPolicy; call p.Validate first to learn of
// it sooner.
func WithPolicy(ctx context.Context, p *Policy) context.Context {
	return context.WithValue(ctx, policyKey{}, policyValue{p})
}

// policyFrom returns the policy that ctx carries, and whether it carries one.
func policyFrom(ctx context.Context) (*Policy, bool) {
	v, ok := ctx.Value(policyKey{}).(policyValue)
	return v.p, ok
}
