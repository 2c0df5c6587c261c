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
	side  *side
}

// side is what one side of a hedge knows of its attempts, written by its
// hooks and Fallback in its own goroutine, and read once its result is in.
type side struct {
	lost atomic.Bool // cancelled by the other side's win
	// why is the fallback reason of the side's next attempt: a hedge's
	// first, or the first after one of its moves.
	why   string
	at    *upstream     // where its last attempt went
	moves []record.Move // the hedge's moves along the chain, made the request's if it wins
	last  int           // its last attempt's index in the record; -1 before one
	event bool          // its last attempt failed with an error event before its answer
}

// answered reports whether the leg got an answer to forward: a status
// under 400 that is not a stream its upstream gave up on after an error
// event (see outlast.ErrErrorEvent), returned, body intact, for the caller.
func (l leg) answered() bool {
	return l.err == nil && l.resp != nil && l.resp.StatusCode < 400 && !l.side.event
}

// hedged sends req's stream to its upstream, through its fallbacks as
// usual, and, if no content has come when its hedge delay is over, to
// its fallbacks too, in order, as the budget allows: the first side to
// answer wins, and the other is cancelled, recorded as it ended. Once
// the hedge is sent, the request's side moves no more: the fallbacks are
// the hedge's. If both fail, the request's side is the result, unless it
// stopped at a move, which the hedge made instead.
func (x *exchange) hedged(ctx context.Context) (*http.Response, error) {
	defer x.up.hedging.earn() // after this stream's own hedge, if any
	var fired atomic.Bool
	// Each side's context, which the other's win cancels: the winner's
	// goes on as its answer's (the request's own ends it at last).
	sides := [2]*side{{at: x.up, last: -1}, {at: x.up.chain[1], why: record.ReasonHedge, last: -1}} // by leg.hedge
	ctxA, cancelA := context.WithCancelCause(outlast.WithHooks(ctx, x.legHooks(sides[0])))
	ctxB, cancelB := context.WithCancelCause(outlast.WithHooks(ctx, x.legHooks(sides[1])))
	cancel := [2]context.CancelCauseFunc{cancelA, cancelB} // by leg.hedge
	results := make(chan leg, 2)
	primary := x.chainTripper(fired.Load)
	go func() {
		resp, err := primary.RoundTrip(x.outbound(ctxA, x.up))
		results <- leg{resp: resp, err: err, side: sides[0]}
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
	moves := len(x.rec.Moves)
	x.hooksMu.Unlock()
	if !fired.Load() {
		first = <-results
		return first.resp, first.err
	}
	x.comment("hedge to=%s", x.up.chain[1].Name)
	go func() {
		resp, err := x.hedgeTripper(sides[1]).RoundTrip(x.outbound(ctxB, x.up.chain[1]))
		results <- leg{hedge: true, resp: resp, err: err, side: sides[1]}
	}()
	first = <-results
	if !first.answered() {
		second := <-results
		own, hedge := first, second
		if first.hedge {
			own, hedge = second, first
		}
		switch {
		case second.answered():
			discardResp(first.resp)
			first = second
		case errors.Is(own.err, errHedged):
			discardResp(own.resp)
			first = hedge
		default:
			discardResp(hedge.resp)
			first = own
		}
		return x.won(first, moves)
	}
	// The loser is cancelled, and waited for, so that its attempt is in
	// the record before the winner is forwarded.
	loser := sides[b2i(!first.hedge)]
	loser.lost.Store(true)
	cancel[b2i(!first.hedge)](errHedged)
	discardResp((<-results).resp)
	x.hooksMu.Lock()
	if i := loser.last; i >= 0 && x.rec.Attempts[i].Class == outlast.ClassNone {
		// Its answer came as the winner's did, and was cancelled after
		// its first byte: it lost all the same.
		x.rec.Attempts[i].Class, x.rec.Attempts[i].Error = outlast.ClassCanceled, record.HedgedError
	}
	x.hooksMu.Unlock()
	return x.won(first, moves)
}

// hedgeTripper is the hedge's side: the request's fallbacks in order,
// each move kept on s until the hedge wins.
func (x *exchange) hedgeTripper(s *side) http.RoundTripper {
	chain := x.up.chain[1:]
	if len(chain) == 1 {
		return chain[0].stream
	}
	return &outlast.Fallback{
		Upstreams: streamsOf(chain),
		Prefer:    x.up.Prefer,
		Rewrite: func(r *http.Request, i int) (*http.Request, error) {
			return x.outbound(r.Context(), chain[i]), nil
		},
		OnFallback: func(_ *http.Request, from, to int, reason outlast.FallbackReason, _ error) {
			s.why, s.at = string(reason), chain[to]
			s.moves = append(s.moves, record.Move{From: chain[from].Name, To: chain[to].Name, Reason: string(reason)})
		},
	}
}

// won makes l, the side of a hedge whose result the caller gets, the
// exchange's: at the fallback, a move the record lists after the moves
// made before the hedge, the first of them, with the hedge's own after.
func (x *exchange) won(l leg, moves int) (*http.Response, error) {
	if l.hedge {
		x.hooksMu.Lock()
		x.cur = l.side.at
		hedge := record.Move{From: x.up.Name, To: x.up.chain[1].Name, Reason: record.ReasonHedge}
		x.rec.Moves = append(append(x.rec.Moves[:moves:moves], hedge), l.side.moves...)
		x.hooksMu.Unlock()
	}
	return l.resp, l.err
}

// legHooks are the hooks of one side of a hedge: the exchange's own, each
// attempt marked with the side's pending fallback reason, and an attempt
// that the other side's win cancelled (once s.lost is set) failing with
// errHedged.
func (x *exchange) legHooks(s *side) outlast.Hooks {
	return outlast.Hooks{
		Queued:       x.Queued,
		AttemptStart: x.AttemptStart,
		AttemptEnd: func(a outlast.Attempt) {
			why := s.why
			s.why = ""
			if s.lost.Load() && a.Class == outlast.ClassCanceled {
				a.Err = errHedged
			}
			s.event = a.Class == outlast.ClassErrorEvent
			x.endAttempt(a, why)
			x.hooksMu.Lock()
			s.last = len(x.rec.Attempts) - 1
			x.hooksMu.Unlock()
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
