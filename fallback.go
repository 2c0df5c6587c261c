package outlast

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// A FallbackReason says why a [Fallback] moved a request on from an
// upstream.
type FallbackReason string

// The reasons.
const (
	// FallbackDown: the upstream is down and its next chance to send
	// (a probe, or a server's not-before time) comes too late for the
	// request, or, with PreferAvailable, it is down at all.
	FallbackDown FallbackReason = "down"
	// FallbackSpent: the upstream's attempts ended in retryable failures,
	// and its policy had no retry left that fitted the deadline.
	FallbackSpent FallbackReason = "spent"
	// FallbackBusy: the upstream's queue (its gate's, or its
	// Admission's) was full.
	FallbackBusy FallbackReason = "busy"
)

// A Preference says when a [Fallback] leaves a down upstream.
type Preference uint8

const (
	// PreferPrimary, the default, waits for an upstream that is down
	// while its next chance to send still fits the request's deadline
	// less its reserve, as its Admission decides, and moves on only when
	// it does not: the fallback serves what the primary cannot in time.
	PreferPrimary Preference = iota
	// PreferAvailable moves on at once from an upstream whose Admission
	// holds it down, without waiting for its next chance.
	PreferAvailable
)

// Fallback is an http.RoundTripper that sends each request to Upstreams[0]
// and, when that upstream cannot serve it in time, to the next, in order.
// Each upstream is a [Transport] of its own, with its own policy, gate and
// Admission; Rewrite, if set, makes each upstream's request (its URL, a
// model name, credentials). Fallback is meant for upstreams that speak the
// same API, such as two regions or deployments of one provider; it does
// not translate between APIs.
//
// A request moves on only before the commit point, and only for a
// failure that another upstream might not have:
//
//   - the upstream is down and its next chance comes after the request's
//     deadline less its reserve ([ErrUpstreamDown]): [FallbackDown];
//   - its attempts ended in retryable failures and its policy had no retry
//     left (a retryable status or error): [FallbackSpent];
//   - its queue was full ([ErrBusy]): [FallbackBusy].
//
// A failure that is not retryable, such as a 400 or a 401, is returned as
// it is, and so is a response that was returned to be read: a stream that
// has sent its first byte never moves. A request that waited in an
// upstream's queue and was then sent away may still move on, if the next
// upstream has time left for an attempt: the wait cost the upstream
// nothing, and the next one is the request's best chance. A request sent
// away when its wait reached its deadline less its reserve has just that
// reserve left, and moves. It does not move on once its deadline less the
// next upstream's reserve has passed (by more than 50 ms, a timer's
// lateness); it then gets the last failure. So that the next upstream
// has that time, each upstream but the last is sent the request under its
// policy with its reserve raised by the next one's: its retries, and its
// Admission's wait, stop that much earlier. If every upstream fails, the
// request gets the last upstream's failure.
//
// The request's body is sent again from Request.GetBody, which
// http.NewRequest sets for in-memory bodies; a request without one is sent
// to Upstreams[0] only.
type Fallback struct {
	// Upstreams are tried in order. Each is named by its Transport.Name
	// in the attempts it reports. At least one is needed.
	Upstreams []*Transport

	// Rewrite, if not nil, returns the request for Upstreams[i], i ≥ 1,
	// made from r, a clone of the caller's request with a fresh body:
	// set its URL, its model or its credentials. An error ends the
	// request with it.
	Rewrite func(r *http.Request, i int) (*http.Request, error)

	// Prefer says when a down upstream is left. The zero value is
	// PreferPrimary.
	Prefer Preference

	// OnFallback, if not nil, is told of each move, from Upstreams[from]
	// to Upstreams[to], with its reason and the failure it moved on
	// from, before the next upstream's first attempt.
	OnFallback func(r *http.Request, from, to int, reason FallbackReason, err error)
}

// RoundTrip sends req to each upstream in turn, as Fallback's doc says.
func (f *Fallback) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(f.Upstreams) == 0 {
		closeBody(req)
		return nil, errors.New("outlast: Fallback has no upstreams")
	}
	var resp *http.Response
	var err error
	for i, t := range f.Upstreams {
		r := req
		if i > 0 {
			discard(resp)
			if r, err = f.request(req, i); err != nil {
				return nil, err
			}
		}
		if i+1 < len(f.Upstreams) && f.Prefer == PreferAvailable && t.isDown(r) {
			closeBody(r)
			resp, err = nil, downError(t.admissionKey(r), "it is down, and the request prefers an upstream that is up", nil)
			f.moved(req, i, FallbackDown, err)
			continue
		}
		if i+1 < len(f.Upstreams) {
			r = f.leaveRoom(r, t, f.Upstreams[i+1])
		}
		resp, err = t.RoundTrip(r)
		if i+1 == len(f.Upstreams) {
			break
		}
		reason, ok := fallbackReason(resp, err)
		if !ok || req.GetBody == nil || !f.fits(req.Context(), f.Upstreams[i+1]) {
			break
		}
		failure := err
		if failure == nil {
			failure = &StatusError{StatusCode: resp.StatusCode, Header: resp.Header}
		}
		f.moved(req, i, reason, failure)
	}
	return resp, err
}

// moved tells OnFallback of a move from upstream i to the next.
func (f *Fallback) moved(req *http.Request, i int, reason FallbackReason, err error) {
	if f.OnFallback != nil {
		f.OnFallback(req, i, i+1, reason, err)
	}
}

// request returns the request for upstream i: a clone of req with a fresh
// body, rewritten.
func (f *Fallback) request(req *http.Request, i int) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = body
	}
	if f.Rewrite == nil {
		return r, nil
	}
	return f.Rewrite(r, i)
}

// leaveRoom returns r for t with t's policy's reserve raised by next's,
// so that t's retries and waits stop where next still has the time for
// an attempt. r's context, and so its deadline, is left as it is: a
// response that t returns is read to its end under it.
func (f *Fallback) leaveRoom(r *http.Request, t, next *Transport) *http.Request {
	ctx := r.Context()
	p, np := t.policy(ctx), next.policy(ctx)
	if p == nil || np == nil || np.reserve() == 0 {
		return r
	}
	q := *p
	q.Reserve = p.reserve() + np.reserve()
	return r.WithContext(WithPolicy(ctx, &q))
}

// fallbackSlack is how far past the deadline less the reserve a move may
// still start: a request that waited in an Admission's queue is sent
// away when that bound comes, by a timer that fires a little after it.
const fallbackSlack = 50 * time.Millisecond

// fits reports whether an attempt at t still fits ctx's deadline less
// t's reserve, give or take fallbackSlack.
func (f *Fallback) fits(ctx context.Context, t *Transport) bool {
	if ctx.Err() != nil {
		return false
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		return true
	}
	var reserve time.Duration
	if p := t.policy(ctx); p != nil {
		reserve = p.reserve()
	}
	return time.Until(deadline) >= reserve-fallbackSlack
}

// fallbackReason says why a result lets a request move on, if it does.
func fallbackReason(resp *http.Response, err error) (FallbackReason, bool) {
	switch {
	case err == nil && resp != nil && isFailure(resp.StatusCode):
		if statusRetryable(&StatusError{StatusCode: resp.StatusCode, Header: resp.Header}) {
			return FallbackSpent, true
		}
	case err == nil:
	case errors.Is(err, ErrUpstreamDown):
		return FallbackDown, true
	case isBusy(err):
		return FallbackBusy, true
	case isCallerDone(err):
	case IsRetryable(err), errors.Is(err, ErrRetryBudget):
		return FallbackSpent, true
	}
	return "", false
}

// isDown reports whether t's Admission holds r's key down now.
func (t *Transport) isDown(r *http.Request) bool {
	a := t.Admission
	if a == nil || a.troubled.Load() == 0 {
		return false
	}
	s := a.State(t.admissionKey(r))
	return s.State == Down || s.State == Probing
}
