package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/outlast-llm/outlast/internal/sse"
	"github.com/outlast-llm/outlast/record"
)

// A follower reads the events that a relay forwards, on their way to the
// caller.
type follower interface {
	// event takes one whole block of the stream, its bytes and its
	// fields (which share raw's), and returns what goes to the caller:
	// raw, a rewritten event, or nil for none; or an error that ends the
	// stream there.
	event(raw []byte, ev sse.Event) ([]byte, error)
	// passed tells of a block too long to hold (over maxPending), which
	// went to the caller as it came.
	passed(ev sse.Event)
	// ended says, once the stream's copy ended with err (nil at its
	// clean end), how the stream the follower saw ended.
	ended(err error) streamEnd
}

// A carrier is a follower that can carry a broken stream on: with a
// prefill (splice), or by resuming it (resumer).
type carrier interface {
	follower
	// carryOn sends, as r's next continuation, the request that carries
	// the stream on after it broke with broke; it returns the stream that
	// carries it on, or a *notContinued that says why there is none.
	carryOn(r *relay, broke error) (*continued, error)
}

// streamEnd is how a stream that a relay forwarded ended.
type streamEnd uint8

const (
	// endWhole: the caller has the answer's end, or it came but for its
	// last events, which the relay adds (see splice's finish).
	endWhole streamEnd = iota
	// endFailed: the upstream's own error event reached the caller, and
	// ends the stream.
	endFailed
	// endBroken: the stream broke before its end: cut, silent, closed
	// early, or ended by an error event held back from the caller.
	endBroken
)

// errEndedEarly is a stream that ended, cleanly, before its last event.
var errEndedEarly = errors.New("the stream ended before its last event")

// upstreamError is a stream that the upstream ended with an error event
// of its own, mid-answer, which the relay held back from the caller: the
// caller's error event quotes it.
type upstreamError struct{ data []byte }

func (e *upstreamError) Error() string { return "the upstream ended the stream with an error event" }

// relay carries a committed event stream to the caller, to its end. It
// is what the exchange does once the answer is committed: it forwards
// whole events only, so that an error the gateway adds after a break is
// an event a client reads, never joined to half of one; its follower
// reads each event on the way, to tell a stream that ended in the
// upstream's error event, or to carry the stream on when it breaks. Its
// one way back to the exchange's attempts is exchange.again.
type relay struct {
	x     *exchange
	n     int   // continuations made
	watch watch // the follower of a stream that is not carried on
}

// continued is a stream that carries a broken one on, committed, with
// the context of its attempts and the cancel that ends them.
type continued struct {
	resp   *http.Response
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// relay forwards resp, a committed event stream, through its follower,
// and carries it on each time it breaks, while the follower may. It
// returns the context of the stream forwarded last and nil once the
// caller has the stream's end (the answer's, or the upstream's error
// event), or the error that broke it, with why it was not carried on.
// release, to call once the caller has its stream's end or its error
// event, gives back what nobody will read: a resumed stream's response,
// generating still at the upstream.
func (x *exchange) relay(ctx context.Context, resp *http.Response, cancel context.CancelCauseFunc, failed bool) (_ context.Context, release func(), _ error) {
	r := &relay{x: x}
	var f follower = &r.watch
	if !failed {
		f = r.follower()
	}
	release = func() {}
	if rs, ok := f.(*resumer); ok {
		release = func() { rs.release(r) }
	}
	body := resp.Body
	var broke error // what broke the stream last
	for {
		err := x.out.copyEvents(body, f, x.cur.IdleTimeout, cancel, &x.rec.Committed, &x.rec.Bytes)
		body.Close()
		if errors.Is(err, errClientGone) || x.r.Context().Err() != nil || errors.Is(context.Cause(ctx), errShutdown) {
			return ctx, release, err // the caller left, or the gateway is stopping: nobody to carry it on for
		}
		if errors.Is(err, errRestarted) || errors.Is(err, errDiverged) || errors.Is(err, errForeign) {
			r.repeated(err)
			return ctx, release, &notContinued{broke, err.Error()}
		}
		switch f.ended(err) {
		case endWhole:
			if s, ok := f.(*splice); ok {
				// Whole, though the last events may not have come: the
				// caller gets the end it would have had.
				x.out.endStream(s, &x.rec.Bytes)
			}
			return ctx, release, nil
		case endFailed:
			x.rec.Error = record.ErrorUpstreamError
			return ctx, release, nil
		}
		broke = brokeBy(f, err)
		c, ok := f.(carrier)
		if !ok {
			return ctx, release, broke
		}
		cancel(nil)
		next, cerr := c.carryOn(r, broke)
		if cerr != nil {
			return ctx, release, cerr
		}
		body, ctx, cancel = next.resp.Body, next.ctx, next.cancel
	}
}

// brokeBy returns the failure that broke a stream: the upstream's error
// event that f held back, err, or, at a clean end, errEndedEarly.
func brokeBy(f follower, err error) error {
	if s, ok := f.(*splice); ok && s.broke != nil {
		return &upstreamError{s.broke}
	}
	if err == nil {
		return errEndedEarly
	}
	return err
}

// follower returns the follower of the stream: a resumer for a Responses
// API stream from an upstream that resumes them, a splice for one that
// continues streams with a prefill, and a watch otherwise.
func (r *relay) follower() follower {
	switch r.x.streaming.carry {
	case ContinuePrefill:
		return &splice{}
	case ContinueResume:
		if r.x.resumable() {
			return newResumer()
		}
	}
	return &r.watch
}

// note records a continuation of the stream the caller is reading, under
// the name of the upstream whose stream broke.
func (r *relay) note(outcome, reason string, prefill int64) {
	x := r.x
	x.rec.Continuations = append(x.rec.Continuations, record.Continuation{
		Upstream: x.streaming.Name, After: x.rec.Bytes, Prefill: prefill, Outcome: outcome, Reason: reason,
	})
}

// splice makes the stream of the continuation just recorded the one the
// caller reads: the bytes forwarded so far were the attempt's that broke
// (done counts them so if the continuation fails instead).
func (r *relay) splice() {
	x := r.x
	x.rec.Attempts[x.forwarder].Bytes = x.rec.Bytes - x.spliced
	x.spliced = x.rec.Bytes
	x.forwarder, x.streaming = len(x.rec.Attempts)-1, x.cur
	x.out.sent = x // the continuation's end is told with its first bytes, as the first answer's was
}

// repeated records how the continuation under way failed, err: it started
// the answer over (errRestarted), its replay differed from the answer
// (errDiverged), which the upstream's model then is not sent again for a
// while, or it sent an event not of its API (errForeign). The caller
// never had any of it.
func (r *relay) repeated(err error) {
	outcome := record.ContinuationRestarted
	switch {
	case errors.Is(err, errDiverged):
		outcome = record.ContinuationDiverged
		r.x.cur.replays.refused(r.x.modelKey(), time.Now())
	case errors.Is(err, errForeign):
		outcome = record.ContinuationFailed
	}
	cs := r.x.rec.Continuations
	if n := len(cs); n > 0 {
		why := err.Error()
		if cs[n-1].Reason != "" {
			why = cs[n-1].Reason + "; " + why // a replay's: its prefill was refused
		}
		cs[n-1].Outcome, cs[n-1].Reason = outcome, why
	}
}

// bounded returns why the stream may not be carried on once more, or "":
// a continuation is a retry, and one more attempt (a prefill bills the
// prompt again), so none is made for a request that has no retries (see
// options.parsePolicy), past the attempts its policy allows at the
// upstream, or past the request's deadline less its reserve.
func (r *relay) bounded() string {
	switch {
	case r.x.alone():
		return "the request has no retries (Outlast-Retry: off, or an outer layer's Outlast-Attempt)"
	case r.n == maxContinuations:
		return fmt.Sprintf("it was carried on %d times already", maxContinuations)
	case r.x.attemptsLeft() == 0:
		return fmt.Sprintf("its %d attempts are spent", r.x.opts.policy.MaxAttempts)
	case r.x.pastBound():
		return "its deadline less its reserve has come"
	}
	return ""
}

// attemptsLeft returns how many more attempts the request's policy
// allows at the upstream it is at, or -1 for no cap.
func (x *exchange) attemptsLeft() int {
	if x.opts.policy == nil || x.opts.policy.MaxAttempts <= 0 {
		return -1
	}
	limit := x.opts.policy.MaxAttempts
	n := 0
	for i := range x.rec.Attempts {
		if x.rec.Attempts[i].Upstream == x.cur.Name {
			n++
		}
	}
	return max(limit-n, 0)
}

// modelKey is the request's model as the upstream's refusals know it:
// cut as the record's is, since the caller names it.
func (x *exchange) modelKey() string { return keptText(x.fields.model, maxModelLen) }

// pastBound reports whether the request's deadline less its reserve has
// come: a continuation, like a retry, is not started past it.
func (x *exchange) pastBound() bool {
	bound := x.opts.policy.Bound(x.opts.deadline)
	return !bound.IsZero() && !time.Now().Before(bound)
}

// watch is the follower of a stream that is not carried on: every event
// goes to the caller as it came, and watch notes whether one of them was
// the upstream's error event, which ends the stream as its failure, or
// its last event.
type watch struct {
	failed bool
	done   bool // the stream's last event came: [DONE], message_stop, …
	seen   bool // an event with data came
	// ends says the first event with data was an API's whose stream ends
	// with an event of its own (see sse.EndsWithEvent).
	ends bool
	// finished says the answer's finish came (see sse.Finishes): the
	// stream is whole at a clean end, its last event or not.
	finished bool
}

// over: the stream's last event came, and went to the caller.
func (w *watch) over() bool { return w.done }

func (w *watch) event(raw []byte, ev sse.Event) ([]byte, error) {
	w.passed(ev)
	return raw, nil
}

func (w *watch) passed(ev sse.Event) {
	if !ev.HasData || w.failed || w.done {
		return
	}
	if !w.seen {
		w.seen, w.ends = true, sse.EndsWithEvent(&ev)
	}
	switch {
	case sse.IsFailure(&ev):
		w.failed = true
	case sse.IsEnd(&ev):
		w.done = true
	case w.ends && !w.finished:
		w.finished = sse.Finishes(&ev)
	}
}

// ended: a stream that is not carried on is whole at its last event,
// however the connection ended after it, and the caller has any error
// event it sent. A clean end before the last event is whole only after
// the answer's finish, or for a stream that has no last event of its own
// to wait for: one of an API that ends with such an event (see
// sse.EndsWithEvent) broke there.
func (w *watch) ended(err error) streamEnd {
	switch {
	case w.failed:
		return endFailed
	case w.done, err == nil && (!w.ends || w.finished):
		return endWhole
	}
	return endBroken
}

// ended: a stream continued with a prefill is whole once its answer's end
// came (a finish reason, or the terminal event) with no error held back.
// One of events the splice does not know, which it cannot continue, ends
// as a watch's does.
func (s *splice) ended(err error) streamEnd {
	switch {
	case s.api == apiUnknown:
		return s.unknown.ended(err)
	case s.failed:
		return endFailed
	case (err == nil || s.finished) && s.broke == nil && (s.done || s.finished):
		return endWhole
	}
	return endBroken
}

// quoted returns the upstream's error event that broke err's stream, if
// the relay held one back, for the caller's error event to quote.
func quoted(err error) []byte {
	if ue, ok := errors.AsType[*upstreamError](err); ok {
		return bytes.TrimSpace(ue.data)
	}
	return nil
}

// notContinuedWhy returns why err's stream was not carried on, or "".
func notContinuedWhy(err error) string {
	if nc, ok := errors.AsType[*notContinued](err); ok {
		return nc.why
	}
	return ""
}
