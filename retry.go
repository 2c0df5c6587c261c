package outlast

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"
)

// markKey marks a context whose request is in flight under a layer that may
// retry it. A layer that sees the mark makes exactly one attempt, so k
// retries in each of two nested layers make k+1 attempts, not (k+1)²
// (seed 000, "only the outermost request retries").
type markKey struct{}

func marked(ctx context.Context) bool { return ctx.Value(markKey{}) != nil }

func mark(ctx context.Context) context.Context {
	return context.WithValue(ctx, markKey{}, true)
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
// Attempts are reported to the [Hooks] that ctx carries (see [WithHooks]),
// and each retry is logged at warn level through slog.Default().
func Do(ctx context.Context, p *Policy, attempt func(ctx context.Context) error) error {
	if p == nil {
		p, _ = policyFrom(ctx)
	}
	rep := reporter{b: hooksFrom(ctx)}
	if p == nil || marked(ctx) {
		return doOnce(ctx, 1, rep, attempt, nil)
	}
	if err := p.Validate(); err != nil {
		return err
	}
	ctx = mark(ctx)
	s := schedule{p: p, first: time.Now()}
	for {
		err := doOnce(ctx, s.n+1, rep, attempt, &s)
		if err == nil || s.wait < 0 {
			return err
		}
		if werr := sleep(ctx, s.wait); werr != nil {
			return waitErr(werr, s.wait, err)
		}
	}
}

// doOnce makes attempt n and reports it. With a schedule, it decides the
// next wait before reporting the attempt's end, so that the end carries it.
func doOnce(ctx context.Context, n int, rep reporter, attempt func(context.Context) error, s *schedule) error {
	var at Attempt
	if rep.active() {
		at = Attempt{CallID: NewCallID(), N: n, Start: time.Now()}
		rep.start(at)
	}
	err := attempt(ctx)
	if s != nil {
		s.n = n
		s.wait = -1
		if err != nil {
			d, has := errDelay(err)
			if w, ok := s.next(ctx, err, d, has); ok {
				s.wait = w
				at.RetryIn = w
				logRetry(ctx, slog.Default(), "", n, err, w)
			}
		}
	}
	if rep.active() {
		at.End, at.Err = time.Now(), err
		var se *StatusError
		if errors.As(err, &se) {
			at.Status, at.RetryAfter = se.StatusCode, se.RetryAfter
		}
		rep.end(at)
	}
	return err
}

// errDelay returns the server's delay that err carries, if any.
func errDelay(err error) (time.Duration, bool) {
	var se *StatusError
	if !errors.As(err, &se) {
		return 0, false
	}
	if se.RetryAfter > 0 {
		return se.RetryAfter, true
	}
	return RetryAfter(se.Header, time.Now())
}

// schedule carries a request's retry state from one failure to the next.
type schedule struct {
	p     *Policy
	first time.Time     // the first attempt's start, for Window
	n     int           // attempts made so far
	wait  time.Duration // the next wait, or -1 for none
}

// next decides whether attempt s.n, which failed with err, is followed by
// another, and how long to wait first. serverDelay is the server's delay,
// if it gave one (has).
func (s *schedule) next(ctx context.Context, err error, serverDelay time.Duration, has bool) (time.Duration, bool) {
	p := s.p
	if ctx.Err() != nil || !p.retryable(err) {
		return 0, false
	}
	if p.MaxAttempts > 0 && s.n >= p.MaxAttempts {
		return 0, false
	}
	deadline, hasDeadline := ctx.Deadline()
	if !hasDeadline && s.n > len(p.Waits) {
		return 0, false // without a deadline, the list is the bound
	}
	w := p.Waits[min(s.n, len(p.Waits))-1]
	serverSet := false
	if has {
		switch p.RetryAfter {
		case RetryAfterAtLeast:
			serverSet = serverDelay >= w
			w = max(w, serverDelay)
		case RetryAfterExact:
			w, serverSet = serverDelay, true
		}
	}
	limit := s.limit(deadline, hasDeadline)
	if w > limit {
		// Never sleep into a retry that cannot leave the reserve; this
		// also ends retrying when the server's delay breaks a bound.
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
		limit = deadline.Sub(now) - s.p.reserve()
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

// logRetry logs one retry at warn, as seed 003 asks: the status, the number
// of the attempt about to start, and the wait. The error is logged without
// the request's URL, whose query may carry an API key.
func logRetry(ctx context.Context, l *slog.Logger, key string, n int, err error, wait time.Duration) {
	if !l.Enabled(ctx, slog.LevelWarn) {
		return
	}
	status := 0
	var se *StatusError
	if errors.As(err, &se) {
		status = se.StatusCode
	}
	attrs := []slog.Attr{
		slog.Int("attempt", n+1),
		slog.Int("status", status),
		slog.Duration("wait", wait),
		slog.String("error", redactedError(err)),
	}
	if key != "" {
		attrs = append(attrs, slog.String("key", key))
	}
	l.LogAttrs(ctx, slog.LevelWarn, "outlast: retrying", attrs...)
}

// redactedError returns err's text without a URL that a *url.Error names.
func redactedError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + ": " + ue.Err.Error()
	}
	return err.Error()
}
