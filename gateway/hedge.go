package gateway

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/record"
)

// The hedge's rules (see Upstream.Hedge).
const (
	// DefaultHedgeDelay is how long a stream waits for its first content
	// before it is hedged, until its upstream and model have answered
	// hedgeSamples streams: a model that thinks longer is hedged, one that
	// answers sooner is not.
	DefaultHedgeDelay = 10 * time.Second
	// minHedgeDelay is the shortest learned delay: a hedge costs a whole
	// second request, and a quicker first token gains the caller little.
	minHedgeDelay = time.Second
	// hedgeSamples is how many recent times to first content, per model,
	// the delay is learned from; it is learned once half are known.
	hedgeSamples = 64
	// hedgeEvery is how many streams earn one hedge: each earns a share
	// of one, and a hedge spends a whole one, as gRPC's hedging throttle
	// does, so that at most one stream in hedgeEvery is hedged. The
	// bucket starts with one hedge, and holds hedgeBurst.
	hedgeEvery = 20
	hedgeBurst = 10
	// maxHedgeModels bounds the models an upstream learns delays for:
	// a model is the caller's to name.
	maxHedgeModels = 256
)

// errHedged ends the losing side of a hedge, and keeps the primary's
// side from moving to the fallback the hedge went to.
var errHedged = errors.New(record.HedgedError)

// hedging is an upstream's learned delays and its budget of hedges. It is
// safe for concurrent use.
// Its zero value has no hedge in its budget: newUpstream gives it one.
type hedging struct {
	mu     sync.Mutex // guards ttfc and shares
	ttfc   map[string][]time.Duration
	shares int // the budget, in streams' shares: hedgeEvery make a hedge
}

// learn notes a stream's time to its first content, d, for model.
func (h *hedging) learn(model string, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ttfc == nil {
		h.ttfc = map[string][]time.Duration{}
	}
	s, ok := h.ttfc[model]
	if !ok && len(h.ttfc) >= maxHedgeModels {
		for m := range h.ttfc { // make room: any other model
			delete(h.ttfc, m)
			break
		}
	}
	if len(s) == hedgeSamples {
		s = s[1:]
	}
	h.ttfc[model] = append(s, d)
}

// delay returns how long a stream of model waits for its first content
// before it is hedged: the 95th percentile of its recent times, at least
// minHedgeDelay, once half of hedgeSamples are known; DefaultHedgeDelay
// before.
func (h *hedging) delay(model string) time.Duration {
	h.mu.Lock()
	s := slices.Clone(h.ttfc[model])
	h.mu.Unlock()
	if len(s) < hedgeSamples/2 {
		return DefaultHedgeDelay
	}
	slices.Sort(s)
	return max(s[(len(s)*95+99)/100-1], minHedgeDelay)
}

// earn adds a stream's share of a hedge to the budget.
func (h *hedging) earn() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.shares = min(h.shares+1, hedgeBurst*hedgeEvery)
}

// spend takes a hedge from the budget, and reports whether one was left.
func (h *hedging) spend() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shares < hedgeEvery {
		return false
	}
	h.shares -= hedgeEvery
	return true
}

// hedges reports whether the exchange may be hedged: a stream, at an
// upstream with a fallback and hedging on, under the gateway's own
// policy (an outer layer's request makes one attempt, and a request with
// Outlast-Retry: off none more).
func (x *exchange) hedges() bool {
	return x.rec.Stream && len(x.up.chain) > 1 && x.up.Hedge && x.retried() && !x.opts.outer
}

// leg is one side of a hedge: the upstream it went to first, and what it
// got.
type leg struct {
	hedge bool // the fallback's side
	resp  *http.Response
	err   error
}

// answered reports whether the leg got an answer to forward.
func (l leg) answered() bool { return l.err == nil && l.resp != nil && l.resp.StatusCode < 400 }

// hedged sends req's stream to its upstream, through its fallbacks as
// usual, and, if no content has come when its hedge delay is over, to
// its first fallback too, as the budget allows: the first side to answer
// wins, and the other is cancelled, recorded as it ended. If both fail,
// the upstream's side is the result. The request may not move to the
// fallback on its own once the hedge went there.
func (x *exchange) hedged(ctx context.Context) (*http.Response, error) {
	defer x.up.hedging.earn() // after this stream's own hedge, if any
	var fired atomic.Bool
	// Each side's context, which the other's win cancels: the winner's
	// goes on as its answer's (the request's own ends it at last).
	var lost [2]atomic.Bool // by leg.hedge: the side cancelled by the other's win
	ctxA, cancelA := context.WithCancelCause(outlast.WithHooks(ctx, x.legHooks(false, &lost[0])))
	ctxB, cancelB := context.WithCancelCause(outlast.WithHooks(ctx, x.legHooks(true, &lost[1])))
	cancel := [2]context.CancelCauseFunc{cancelA, cancelB} // by leg.hedge
	results := make(chan leg, 2)
	primary := x.chainTripper(fired.Load)
	go func() {
		resp, err := primary.RoundTrip(x.outbound(ctxA, x.up))
		results <- leg{resp: resp, err: err}
	}()
	timer := time.NewTimer(x.up.hedging.delay(x.fields.model))
	defer timer.Stop()
	var first leg
	select {
	case first = <-results:
		return first.resp, first.err // answered or failed before the hedge
	case <-timer.C:
	}
	// A request that moved to the fallback on its own is there already;
	// once the hedge is fired, the request's side moves no more.
	x.hooksMu.Lock()
	moved := x.cur != x.up
	if !moved && x.up.hedging.spend() {
		fired.Store(true)
	}
	x.hooksMu.Unlock()
	if !fired.Load() {
		first = <-results
		return first.resp, first.err
	}
	fallback := x.up.chain[1]
	x.comment("hedge to=%s", fallback.Name)
	go func() {
		resp, err := fallback.stream.RoundTrip(x.outbound(ctxB, fallback))
		results <- leg{hedge: true, resp: resp, err: err}
	}()
	first = <-results
	if !first.answered() {
		second := <-results
		if second.answered() || !second.hedge {
			discardResp(first.resp)
			first = second
		} else {
			discardResp(second.resp)
		}
		return x.won(first, fallback)
	}
	// The loser is cancelled, and waited for, so that its attempt is in
	// the record before the winner is forwarded.
	lost[b2i(!first.hedge)].Store(true)
	cancel[b2i(!first.hedge)](errHedged)
	discardResp((<-results).resp)
	return x.won(first, fallback)
}

// won makes l, the side of a hedge whose result the caller gets, the
// exchange's: at the fallback, a move the record lists.
func (x *exchange) won(l leg, fallback *upstream) (*http.Response, error) {
	if l.hedge {
		x.hooksMu.Lock()
		x.cur = fallback
		x.rec.Moves = append(x.rec.Moves, record.Move{From: x.up.Name, To: fallback.Name, Reason: record.ReasonHedge})
		x.hooksMu.Unlock()
	}
	return l.resp, l.err
}

// legHooks are the hooks of one side of a hedge: the exchange's own, the
// hedge's first attempt marked as the hedge's, and an attempt that the
// other side's win cancelled (once lost is set) failing with errHedged.
func (x *exchange) legHooks(hedge bool, lost *atomic.Bool) outlast.Hooks {
	first := hedge
	return outlast.Hooks{
		Queued:       x.Queued,
		AttemptStart: x.AttemptStart,
		AttemptEnd: func(a outlast.Attempt) {
			why := ""
			if first {
				why, first = record.ReasonHedge, false
			}
			if lost.Load() && a.Class == outlast.ClassCanceled {
				a.Err = errHedged
			}
			x.endAttempt(a, why)
		},
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// discardResp throws a response away, if there is one.
func discardResp(resp *http.Response) {
	if resp != nil {
		discardBody(resp)
	}
}
