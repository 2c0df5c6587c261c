package outlast

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast/internal/redact"
)

// markKey marks a context whose request is in flight under a layer that may
// retry it. A layer that sees the mark makes exactly one attempt, so k
// retries in each of two nested layers make k+1 attempts, not (k+1)².
type markKey struct{}

// markCtx is a marked context. It carries what an inner layer needs to
// wait as the outer one would: the outer policy's reserve, and the number
// of the outer attempt under way, so that a wait at an inner gate or
// admission before an outer retry stops where the outer reserve begins.
// It is its own context type, so that marking costs one allocation.
type markCtx struct {
	context.Context
	reserve time.Duration
	n       atomic.Int32 // the outer layer's attempt under way
}

func (m *markCtx) Value(key any) any {
	if key == (markKey{}) {
		return m
	}
	return m.Context.Value(key)
}

// markOf returns ctx's mark, or nil if it has none.
func markOf(ctx context.Context) *markCtx {
	m, _ := ctx.Value(markKey{}).(*markCtx)
	return m
}

func marked(ctx context.Context) bool { return markOf(ctx) != nil }

// mark marks ctx for a layer that retries under p.
func mark(ctx context.Context, p *Policy) *markCtx {
	return &markCtx{Context: ctx, reserve: p.ReserveInForce()}
}

// Do calls attempt until it succeeds, p says to stop, or ctx ends, waiting
// between calls as p says. It returns nil or the last attempt's error.
//
// A nil p means the policy that ctx carries (see [WithPolicy]); with none,
// attempt is called once. So is it when ctx shows that an outer layer (Do or
// a [Transport]) is already retrying: only the outermost layer retries.
// Do refuses a policy that fails Validate before calling attempt.
//
// An attempt names a failed status, and the delay its server asked for,
// by returning a *StatusError (set RetryAfter, or Header for Do to read
// Retry-After from). If ctx ends during a wait, Do returns an error that
// wraps both ctx.Err() and the last attempt's error.
//
// Attempts are reported to the [Hooks] that ctx carries (see [WithHooks]).
// Do logs nothing.
func Do(ctx context.Context, p *Policy, attempt func(ctx context.Context) error) error {
	if p == nil {
		p, _ = policyFrom(ctx)
	}
	hooks := hooksOf(nil, ctx)
	if p == nil || marked(ctx) {
		_, _, err := doOnce(ctx, 1, hooks, attempt, &schedule{})
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	m := mark(ctx, p)
	ctx = m
	s := schedule{p: p}
	for n := 1; ; n++ {
		m.n.Store(int32(min(n, math.MaxInt32)))
		wait, retry, err := doOnce(ctx, n, hooks, attempt, &s)
		if !retry {
			return err
		}
		if werr := sleep(ctx, wait); werr != nil {
			return waitErr(werr, wait, err)
		}
	}
}

// doOnce makes attempt n, asks s whether a failure is retried, and reports
// the attempt, whose end carries the wait that follows.
func doOnce(ctx context.Context, n int, hooks callHooks, attempt func(context.Context) error, s *schedule) (time.Duration, bool, error) {
	at := Attempt{N: n, Start: time.Now()}
	if hooks.active() {
		at.CallID = NewCallID()
		hooks.start(at)
	}
	err := attempt(ctx)
	var wait time.Duration
	retry := false
	if err != nil {
		// Do validated the policy, so decide cannot fail.
		wait, retry, _ = s.decide(ctx, err, at.Start, false, keyNews{})
		if retry {
			at.RetryIn = wait
		}
	}
	if hooks.active() {
		at.End, at.Err, at.Class = time.Now(), err, Classify(err)
		if se, ok := errors.AsType[*StatusError](err); ok {
			at.Status, at.RetryAfter = se.StatusCode, se.RetryAfter
		}
		hooks.end(at)
	}
	return wait, retry, err
}

// errDelay returns the server's delay that err carries, if any: its
// RetryAfter as given, or read from its Header, cut to
// DefaultMaxRetryAfter as a Transport cuts it.
func errDelay(err error) (time.Duration, bool) {
	var se *StatusError
	if !errors.As(err, &se) {
		return 0, false
	}
	if se.RetryAfter > 0 {
		return se.RetryAfter, true
	}
	d, ok := RetryAfter(se.Header, time.Now())
	return min(d, DefaultMaxRetryAfter), ok
}

// schedule decides, failure by failure, whether a request is tried again.
// Its zero value never retries.
type schedule struct {
	p        *Policy   // nil: no retries
	once     bool      // the request's body cannot be sent again
	first    time.Time // the first attempt's start, for Window
	n        int       // the failures decided on so far
	admitted int       // of those, attempts that an Admission let through a troubled key
}

// decide reports whether a request whose latest attempt, sent at start,
// failed with err is tried again, and after how long a wait. The policy
// is read only now that a request has failed: the first call checks it,
// and a policy that fails Validate is an error wrapping err. admitted says
// that the attempt went through a troubled key of an Admission: its
// failure counts against MaxAttempts but does not advance the waits, since
// the Admission, not the request's backoff, spaces the key's attempts.
// k says what the Admission made of the failure (see keyNews).
func (s *schedule) decide(ctx context.Context, err error, start time.Time, admitted bool, k keyNews) (time.Duration, bool, error) {
	if s.p == nil || s.once {
		return 0, false, nil
	}
	if s.n == 0 {
		if verr := s.p.Validate(); verr != nil {
			return 0, false, fmt.Errorf("%w (the request failed: %w)", verr, err)
		}
		s.first = start
	}
	s.n++
	if admitted {
		s.admitted++
	}
	if ctx.Err() != nil || !s.p.retryable(err) {
		return 0, false, nil
	}
	if errors.Is(err, ErrStalled) && mayLeave(ctx) {
		// A silent upstream with a fallback after it is left at once:
		// another wait for its headers would cost the caller the same
		// silence again (see FallbackSilent).
		return 0, false, nil
	}
	if s.p.MaxAttempts > 0 && s.n >= s.p.MaxAttempts {
		return 0, false, nil
	}
	wait, ok := s.waitFor(ctx, err, k)
	return wait, ok, nil
}

// keyNews is what an Admission made of a failure, for its retry's wait.
type keyNews struct {
	// spaced says that the key, still troubled after the failure, spaces
	// the retry itself (an outage failure, a 429, a server's delay): the
	// retry has no wait of its own.
	spaced bool
	// held says that the failure's server delay is the key's not-before
	// time, which holds the retry until then: the delay is not slept
	// either, but still ends retrying when it breaks a bound.
	held bool
	// own says that the server's delay was short and left to the
	// request (Admission.ShortDelay): the retry waits that delay, as the
	// key would have held it, and not the policy's own wait.
	own bool
}

// listSpent reports whether, without a deadline, the retries that the
// policy's Waits allow have all been made: the list is the bound.
func (s *schedule) listSpent(ctx context.Context) bool {
	_, hasDeadline := ctx.Deadline()
	return !hasDeadline && s.n > len(s.p.Waits)
}

// waitFor returns the wait before the retry after failure s.n, err, and
// whether that wait fits the bounds.
func (s *schedule) waitFor(ctx context.Context, err error, k keyNews) (time.Duration, bool) {
	p := s.p
	deadline, hasDeadline := ctx.Deadline()
	if s.listSpent(ctx) {
		return 0, false
	}
	// A spaced failure's retry waits for nothing but the Admission,
	// whose queue it rejoins at once, in its place: its own wait would
	// only let later arrivals go first, and keep it from hearing at once
	// that no chance is left before its deadline. A server's delay that
	// became the key's not-before time (held) holds it there, so it is
	// not slept here either, but it still ends retrying when it breaks a
	// bound, unless the policy ignores it; any other delay (on a 502, say,
	// which the Admission does not take as one) is slept as before.
	var w time.Duration
	if !k.spaced {
		w = p.Waits[min(max(s.n-s.admitted, 1), len(p.Waits))-1]
	}
	limit := s.limit(deadline, hasDeadline)
	serverSet := false
	if d, has := errDelay(err); has {
		switch {
		case p.RetryAfter == RetryAfterIgnore:
			// Never looked at.
		case k.held:
			if d > limit {
				return 0, false
			}
		case k.own:
			w, serverSet = d, true
		case p.RetryAfter == RetryAfterAtLeast:
			serverSet = d >= w
			w = max(w, d)
		case p.RetryAfter == RetryAfterExact:
			w, serverSet = d, true
		}
	}
	if w > limit || limit <= 0 {
		// Never sleep into a retry that cannot leave the reserve; this
		// also ends retrying when the server's delay breaks a bound. At
		// the bound itself nothing is left to retry in, not even with
		// no wait: a spaced retry would be let go there at once, and
		// again, at the same instant.
		return 0, false
	}
	return min(p.Jitter.apply(w, serverSet), limit), true
}

// limit returns the longest wait the deadline, reserve and window allow now.
func (s *schedule) limit(deadline time.Time, hasDeadline bool) time.Duration {
	const forever = time.Duration(1<<63 - 1)
	limit := forever
	now := time.Now()
	if hasDeadline {
		limit = s.p.Bound(deadline).Sub(now)
	}
	if s.p.Window > 0 {
		limit = min(limit, s.first.Add(s.p.Window).Sub(now))
	}
	return limit
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// waitErr is the error for a wait that ctx cut short: it wraps both the
// context's error and the failure that was to be retried.
func waitErr(ctxErr error, wait time.Duration, last error) error {
	return fmt.Errorf("outlast: %w while waiting %v to retry: %w", ctxErr, wait, last)
}

// logRetry logs retry n, as it is sent, at warn: its number, the status
// of the failure it retries, and how long it waited since. The error's
// text goes through redact.Text: the URL that a transport error quotes
// may carry an API key in its query.
func logRetry(ctx context.Context, l *slog.Logger, key string, n int, err error, waited time.Duration) {
	if !l.Enabled(ctx, slog.LevelWarn) {
		return
	}
	status := 0
	var se *StatusError
	if errors.As(err, &se) {
		status = se.StatusCode
	}
	attrs := []slog.Attr{
		slog.Int("attempt", n),
		slog.Int("status", status),
		slog.Duration("waited", waited),
		slog.String("error", redact.Text(err.Error())),
	}
	if key != "" {
		attrs = append(attrs, slog.String("key", key))
	}
	l.LogAttrs(ctx, slog.LevelWarn, "outlast: retrying", attrs...)
}
