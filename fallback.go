package outlast

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
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
	// FallbackContextLength: the upstream answered 400 that the
	// request is longer than its model's context (see Fallback).
	FallbackContextLength FallbackReason = "context-length"
	// FallbackSilent: the upstream's attempt got no headers, or no first
	// byte, in time (ErrStalled): with PreferAvailable the request leaves
	// it after that one attempt, rather than wait out the silence again;
	// the upstream's Admission, not the request, tries it again.
	FallbackSilent FallbackReason = "silent"
)

// A Preference says when a [Fallback] leaves an upstream that fails.
type Preference uint8

const (
	// PreferAvailable, the default, moves on from an upstream as soon as
	// its Admission holds it down, unless the request can be its probe,
	// and after DefaultFallbackAttempts failed attempts of the request's
	// own there (Fallback.MaxAttempts): the next upstream is there to
	// serve now what this one cannot.
	PreferAvailable Preference = iota
	// PreferPrimary waits for an upstream that is down while its next
	// chance to send still fits the request's deadline less its reserve,
	// as its Admission decides, and retries there as its policy allows:
	// the request moves on only when the upstream cannot serve it in
	// time, so that a costlier fallback serves as little as it can.
	PreferPrimary
)

// DefaultFallbackAttempts is how many failed attempts a request makes at
// an upstream before it moves on, with PreferAvailable, when
// Fallback.MaxAttempts is zero: as many failures as mark an Admission's
// key down (DefaultDownAfter).
const DefaultFallbackAttempts = DefaultDownAfter

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
//   - the upstream is down ([ErrUpstreamDown]): [FallbackDown]. With
//     PreferAvailable, the default, a request never waits at a down
//     upstream that it may leave: it is the upstream's probe if one is
//     due and nobody waits ahead of it, and otherwise moves on at once,
//     so that the upstream is still probed on its schedule and takes
//     requests again once a probe is answered. With PreferPrimary, it
//     moves when the upstream's next chance comes after its deadline
//     less its reserve;
//   - its attempts ended in retryable failures and its policy had no retry
//     left (a retryable status or error, or a stream's error event before
//     its answer began, [ErrErrorEvent], judged by its status): [FallbackSpent]. With
//     PreferAvailable, each upstream but the last gets at most
//     MaxAttempts attempts of the request;
//   - its attempt was silent: no headers or no first byte in time
//     ([ErrStalled]): [FallbackSilent]. With PreferAvailable, the
//     request leaves after that one attempt, without a retry there;
//   - its queue was full ([ErrBusy]): [FallbackBusy];
//   - it answered 400 because the request is longer than its model's
//     context, as OpenAI (code "context_length_exceeded"), Anthropic
//     (invalid_request_error "prompt is too long"), llama.cpp
//     (exceed_context_size_error) and vLLM ("maximum context length")
//     say it: [FallbackContextLength]. A fallback with a longer context
//     may serve it.
//
// A rate limit that ends soon is none of these: a 429, 503 or 529 whose
// delay is at most the Admission's ShortDelay leaves the upstream healthy, and
// the request's retry waits it out there. Any other failure that is not
// retryable, such as another 400 or a 401, is returned as it is, and so
// is a response that was returned to be read: a stream that has sent its
// first byte never moves. A request that waited in an upstream's queue
// and was then sent away may still move on, if the next upstream has time
// left for an attempt: the wait cost the upstream nothing, and the next
// one is the request's best chance. A request sent away when its wait
// reached its deadline less its reserve has just that reserve left, and
// moves. It does not move on once its deadline less the next upstream's
// reserve has passed (by more than 50 ms, a timer's lateness); it then
// gets the last failure. So that the next upstream has that time, each
// upstream but the last is sent the request under its policy with its
// reserve raised by the next one's: its retries, and its Admission's
// wait, stop that much earlier. If every upstream fails, the request gets
// the last upstream's failure.
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

	// Prefer says when a failing upstream is left. The zero value is
	// PreferAvailable.
	Prefer Preference

	// MaxAttempts, with PreferAvailable, caps a request's attempts at
	// each upstream but the last, below its policy's own MaxAttempts, so
	// that it moves on after that many retryable failures. Zero means
	// DefaultFallbackAttempts (3).
	MaxAttempts int

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
	if i := slices.Index(f.Upstreams, nil); i >= 0 {
		closeBody(req)
		return nil, fmt.Errorf("outlast: Fallback upstream %d is nil", i)
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
		if i+1 < len(f.Upstreams) {
			r = f.leaveRoom(r, t, f.Upstreams[i+1])
		}
		resp, err = t.RoundTrip(r)
		if i+1 == len(f.Upstreams) {
			break
		}
		reason, ok := fallbackReason(resp, err)
		if !ok && resp != nil && resp.StatusCode == http.StatusBadRequest && contextTooLong(resp) {
			reason, ok = FallbackContextLength, true
		}
		if !ok || req.GetBody == nil || !f.fits(req.Context(), f.Upstreams[i+1]) {
			break
		}
		failure := err
		if failure == nil {
			failure = &StatusError{StatusCode: resp.StatusCode, Header: resp.Header}
			if se := streamFailure(resp); se != nil {
				failure = se
			}
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

// leaveRoom returns r for t, an upstream with next after it, such that
// the request leaves t in time for next: t's policy's reserve is raised by
// next's, so that t's retries and waits stop where next still has the
// time for an attempt, and with PreferAvailable, its attempts are capped
// at MaxAttempts and it never waits at t while t is down. r's context,
// and so its deadline, is left as it is: a response that t returns is
// read to its end under it.
func (f *Fallback) leaveRoom(r *http.Request, t, next *Transport) *http.Request {
	ctx := r.Context()
	if f.Prefer == PreferAvailable {
		ctx = context.WithValue(ctx, leaveKey{}, true)
	}
	p, np := t.policy(ctx), next.policy(ctx)
	if p == nil {
		return r.WithContext(ctx)
	}
	q := *p
	if np != nil {
		q.Reserve = p.ReserveInForce() + np.ReserveInForce()
	}
	if f.Prefer == PreferAvailable {
		n := cmpOr(f.MaxAttempts, DefaultFallbackAttempts)
		if q.MaxAttempts == 0 || q.MaxAttempts > n {
			q.MaxAttempts = n
		}
	}
	return r.WithContext(WithPolicy(ctx, &q))
}

// leaveKey marks the context of a request that may leave its upstream
// for a fallback: an Admission never queues it while the upstream is
// down (see Fallback).
type leaveKey struct{}

// mayLeave reports whether ctx's request may leave a down upstream for a
// fallback rather than wait for it.
func mayLeave(ctx context.Context) bool {
	v, _ := ctx.Value(leaveKey{}).(bool)
	return v
}

// maxErrorBody bounds what is read of a 400's body to judge it.
const maxErrorBody = 64 << 10

// contextTooLong reports whether resp, a 400, says that the request is
// longer than the model's context. It reads up to maxErrorBody of the
// body and puts back what it read, so that the caller gets the body
// whole when the request does not move.
func contextTooLong(resp *http.Response) bool {
	stop := closeAfter(resp.Body, failureRead)
	head, err := peekBody(resp, maxErrorBody)
	stop()
	return err == nil && isContextTooLong(decoded(head, resp.Header, maxErrorBody))
}

// isContextTooLong reports whether body, an error's JSON, says that the
// request is longer than the model's context: OpenAI's and Azure's code
// "context_length_exceeded", Anthropic's invalid_request_error whose
// message begins "prompt is too long", llama.cpp's
// exceed_context_size_error, or vLLM's message "This model's maximum
// context length is …". Anything else, and a body that is not JSON, is
// not.
func isContextTooLong(body []byte) bool {
	type apiError struct {
		Code    any    `json:"code"` // a string, or llama.cpp's and vLLM's number
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	var e struct {
		apiError
		Error *apiError `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return false
	}
	for _, x := range []*apiError{e.Error, &e.apiError} {
		switch {
		case x == nil:
		case x.Code == "context_length_exceeded", x.Type == "exceed_context_size_error":
			return true
		case x.Type == "invalid_request_error" && strings.HasPrefix(x.Message, "prompt is too long"):
			return true
		case strings.Contains(x.Message, "maximum context length is"):
			return true
		}
	}
	return false
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
	return !ok || time.Until(t.policy(ctx).Bound(deadline)) >= -fallbackSlack
}

// fallbackReason says why a result lets a request move on, if it does.
func fallbackReason(resp *http.Response, err error) (FallbackReason, bool) {
	switch {
	case err == nil && resp != nil && isFailure(resp.StatusCode):
		if statusRetryable(&StatusError{StatusCode: resp.StatusCode, Header: resp.Header}) {
			return FallbackSpent, true
		}
	case err == nil && resp != nil:
		// A stream that failed before its answer began (an error event
		// after Anthropic's message_start) fails as its status would.
		if se := streamFailure(resp); se != nil && statusRetryable(se) {
			return FallbackSpent, true
		}
	case err == nil:
	case errors.Is(err, ErrUpstreamDown):
		return FallbackDown, true
	case isBusy(err):
		return FallbackBusy, true
	case isCallerDone(err):
	case errors.Is(err, ErrStalled):
		return FallbackSilent, true
	case IsRetryable(err), errors.Is(err, ErrRetryBudget):
		return FallbackSpent, true
	}
	return "", false
}
