package outlast

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/outlast-llm/outlast/internal/owned"
)

// ErrPoolSpent is what a [Pool] returns, wrapped in a *StatusError of 429
// or 503 with a RetryAfter, when no member can take a request before its
// deadline less its reserve.
var ErrPoolSpent = errors.New("outlast: no member of the pool can take the request in time")

// DefaultOutputTokens is the answer's length that a Pool counts for a
// request whose body names no bound (max_tokens and the like), when it
// estimates the tokens the request will count against a member's limit.
const DefaultOutputTokens = 1024

// poolCooldown is how long a member that answered 429 without saying
// when to come back (no Retry-After, no spent limit with a reset) is
// left alone.
const poolCooldown = time.Second

// Pool is an http.RoundTripper that serves each request from one of
// several members that serve the same model: API keys of one provider,
// deployments of a model in several regions, or servers of one model.
// Each member is a [Transport] of its own, with its own Name, Gate and
// Admission; Rewrite makes each member's request (its URL, its
// credential, its model's name).
//
// # Routing by headroom
//
// The Pool keeps a ledger for each member: what its latest response's
// rate-limit headers said was left of its requests and tokens
// ([ReadHeadroom]), less what was sent to it since, refilled steadily at
// its limit a minute (the window of the providers' requests and tokens
// per minute, and their token buckets' pace), or faster when the headers'
// reset says so. Each request's tokens are estimated before it is sent
// (Estimate, by default [EstimateTokens] with DefaultOutputTokens), and
// the answer's headers correct the count: those of an answer to an
// attempt sent before the one whose answer counted last are left out, and
// the attempts sent after an answered one, or just before it, are still
// counted against what its headers say is left. A request goes to the
// member that can take it now, ranked by:
//
//  1. healthy before down: a member whose Admission holds it down takes
//     a request only as its probe, and only when the probe is due;
//  2. a free place in its Gate, if the Gate says its capacity;
//  3. the largest share of its limits left, in steps of a tenth, the
//     smaller of the requests' and the tokens' (a limit its headers do
//     not state counts as whole);
//  4. the fewest requests in flight for its weight;
//  5. in turn, by weight.
//
// A member can take a request when it is not held by a server's delay
// (a 429's Retry-After) or by its Admission, and has at least one request
// and the request's estimated tokens left. A request larger than a
// member's whole token limit waits for the limit to be whole. A member's
// Admission leaves its rate limits to the Pool: it does not pause a
// member whose headers say none is left (see [RateLimitReset]).
//
// # Pacing
//
// When no member can take a request, it waits, in the order requests
// came, for the member that will have room for it first, rather than be
// sent to collect a 429. A request that came later goes ahead of it only
// to another member, so that it never delays one that came before it.
//
// A request waits no later than its bound: its deadline less its
// reserve, or less the time its answer is expected to take, if that is
// longer, so that no member's quota is spent on an answer its caller
// will have stopped waiting for. The Pool expects an answer to take the
// time that all but one in twenty of its latest answers read to their end
// would have taken for the same bound of tokens (max_tokens and the like,
// as EstimateTokens reads it, or DefaultOutputTokens): the quickest
// answer, plus a time for each token of the bound. Until it has seen 16
// answers, the reserve alone counts. A request that a member can take at
// once is sent, whatever its deadline.
//
// A request that would wait past its bound, for the members' refill of
// its own tokens and those of the requests waiting ahead of it, is
// refused at once with a *StatusError wrapping ErrPoolSpent: 429 when the
// members are out of quota, 503 when they are down, with RetryAfter the
// time until there is room for it. A request already waiting gets the
// same error as soon as the members' counts show that it cannot have room
// before its bound, so that it holds no member back from the requests
// after it.
//
// # Retries
//
// The Pool retries under its policy (the context's, see WithPolicy, or
// Policy), as a Transport does, and is the layer that retries: each
// member makes one attempt per turn. A 429 or a retryable failure at one
// member is retried at once at another that can take the request and
// has not failed it yet. When none can now, the retry waits as the policy
// says (a 429's delay holds its member alone), and then for room, at a
// member that has not failed it if one can take it; it keeps its place
// ahead of the requests that came after it. Each member's Admission sees
// its own failures, and the Pool asks it of the key of the last request
// made for its member (Rewrite may change what the key is made of). A
// response with a body returned to the caller is never sent again. Under
// an outer layer that retries (see Do), the Pool makes one attempt.
//
// The request's body is sent again from Request.GetBody; a request
// without one is sent once.
type Pool struct {
	// Members serve the requests. Each is named by its Transport.Name in
	// the attempts it reports. At least one is needed. A member's own
	// Policy is not used: the Pool retries.
	Members []*Transport

	// Weights, if not nil, has a weight of at least 1 for each member:
	// among members with the same share of their limits left, a member
	// of weight 2 takes twice the requests of one of weight 1. Nil means
	// 1 for each.
	Weights []int

	// Rewrite, if not nil, returns the request for Members[i] made from
	// r, a clone of the caller's request with a fresh body: set its URL,
	// its model or its credentials. An error ends the request with it.
	Rewrite func(r *http.Request, i int) (*http.Request, error)

	// Policy says when to retry, unless the request's context carries a
	// policy (see WithPolicy). Nil means one attempt.
	Policy *Policy

	// Estimate, if not nil, returns the tokens a request will count
	// against a member's limit. Nil means EstimateTokens of the body
	// from GetBody, with DefaultOutputTokens.
	Estimate func(r *http.Request) int

	// OnMove, if not nil, is told of each retry that goes to another
	// member, from Members[from] to Members[to], with the failure it
	// moved on from, before the attempt there.
	OnMove func(r *http.Request, from, to int, err error)

	// Share, if not nil, shares the members' ledgers with the Pools of
	// other processes that send to the same members, named by their
	// Transport.Name, so that together they spend each member's limits
	// once: each attempt is counted there before it is sent, and held
	// back while the shared ledger has no room, and each answer's
	// headers count the member afresh there. Package redisgate has one.
	// Nil means this process's ledger alone.
	Share PoolShare

	once    sync.Once
	initErr error
	sh      *poolShared
}

// poolShared is the state of a Pool that Sharing shares: the members'
// ledgers and the queue.
type poolShared struct {
	mu      sync.Mutex
	members []poolMember
	q       []*poolWaiter // in the order they came
	timer   *time.Timer   // wakes the queue's head at the earliest room
	wakeAt  time.Time     // when timer fires, if it is set
	seq     uint64        // numbers the attempts sent, for their answers' headers
	answers answerTimes   // the time its answers took
}

// Sharing returns a Pool like p, sending through members, that shares
// p's ledgers and queue: members are p's members in the same order, with
// other settings, such as a ResponseHeaderTimeout for requests that
// stream. Requests through either pool count against the same headroom
// and wait in the same queue. It returns p's error if p is not valid.
func (p *Pool) Sharing(members []*Transport) (*Pool, error) {
	if err := p.setup(); err != nil {
		return nil, err
	}
	if len(members) != len(p.Members) {
		return nil, fmt.Errorf("outlast: Pool.Sharing: %d members for a pool of %d", len(members), len(p.Members))
	}
	q := &Pool{Members: members, Weights: p.Weights, Rewrite: p.Rewrite, Policy: p.Policy, Estimate: p.Estimate, OnMove: p.OnMove, Share: p.Share, sh: p.sh}
	q.once.Do(func() {})
	return q, nil
}

// A PoolShare keeps the ledgers of a [Pool]'s members for the Pools of
// several processes (Pool.Share). Its methods are safe for concurrent
// use. On an error the Pool goes on with its own ledger, as if alone.
type PoolShare interface {
	// Take counts an attempt of tokens at the member named member, if its
	// shared ledger has room for it and for one more request, and returns
	// an id for the attempt's answer. If it has none, it returns how long
	// until it may, and counts nothing.
	Take(ctx context.Context, member string, tokens float64) (id string, wait time.Duration, err error)

	// Count counts the member's limits afresh from h, the headroom that
	// the answer to attempt id states, read now; an answer to an attempt
	// older than the one that counted last is left out, and the attempts
	// taken after id, or just before it, are still counted against it.
	Count(ctx context.Context, member, id string, h Headroom) error
}

// A MemberState is what a [Pool] knows of one member now.
type MemberState struct {
	// Name is the member's Transport.Name.
	Name string
	// Requests and Tokens are the member's limits as the Pool counts
	// them now: the latest headers, refilled since, less what was sent
	// since. A limit its headers never stated is not Known.
	Requests, Tokens Quota
	// InFlight counts the requests sent to it and not yet answered.
	InFlight int
	// NotBefore is when a server's delay (a 429's Retry-After) lets it
	// take requests again, if that is still ahead.
	NotBefore time.Time
}

// State returns what the pool knows of Members[i] now.
func (p *Pool) State(i int) MemberState {
	if p.setup() != nil || i < 0 || i >= len(p.sh.members) {
		return MemberState{Requests: unknownQuota, Tokens: unknownQuota}
	}
	now := time.Now()
	p.sh.mu.Lock()
	defer p.sh.mu.Unlock()
	m := &p.sh.members[i]
	s := MemberState{Name: p.Members[i].Name, Requests: m.req.quota(now), Tokens: m.tok.quota(now), InFlight: m.inFlight}
	if now.Before(m.notBefore) {
		s.NotBefore = m.notBefore
	}
	return s
}

// poolMember is a member's ledger.
type poolMember struct {
	req, tok  ledger
	weight    float64
	inFlight  int
	turns     float64   // requests taken, over its weight: the turn's order
	notBefore time.Time // a 429's delay
	sent      []sending // the attempts that an answer to come may not count, in the order sent
	applied   uint64    // the attempt whose answer's headers last counted the limits
	key       *string   // its Admission's key for the last request made for it, once one was
}

// maxSent bounds a member's attempts kept for the count of its limits:
// past it, the oldest is forgotten, as if an answer had counted it.
const maxSent = 1024

// sending is an attempt in flight: its number and its estimate.
type sending struct {
	seq    uint64
	at     time.Time // when it was sent
	done   uint64    // the last attempt sent when it was answered; 0 while in flight
	tokens float64
}

// uncounted reports whether s may be left out of the count of the
// headers that answer t: sent after it, or sent just before it and not
// answered before it was sent, so that it may have reached the member
// after it.
func (s sending) uncounted(t poolTicket) bool {
	switch {
	case s.seq > t.seq:
		return true
	case s.seq == t.seq:
		return false
	}
	return !s.at.Before(t.at.Add(-reorderWindow)) && (s.done == 0 || s.done >= t.seq)
}

// reorderWindow is how long before another an attempt may be sent and
// still reach its member after it: the network, or goroutines at one
// instant, may reorder them.
const reorderWindow = 250 * time.Millisecond

// A ledger is one limit of a member as the Pool counts it.
type ledger struct {
	known bool
	limit float64   // the window's allowance; -1 if not stated
	left  float64   // what was left at
	at    time.Time // when left was counted
	rate  float64   // refill per second; 0 if not known
	reset time.Time // when the headers said the limit is whole again
}

// defaultWindow is the window over which a limit is taken to refill
// fully, unless its reset rules it out: a minute, the window of the
// providers' requests and tokens per minute.
const defaultWindow = time.Minute

// avail returns what is left at now: left, refilled at rate since at, and
// never above the limit. Without a rate (a limit not stated), left until
// the reset, and then whole, by an amount not known.
func (l *ledger) avail(now time.Time) float64 {
	if !l.known {
		return math.Inf(1)
	}
	if l.rate > 0 {
		v := l.left + l.rate*now.Sub(l.at).Seconds()
		if l.limit >= 0 {
			v = min(v, max(l.limit, l.left))
		}
		return v
	}
	if !l.reset.IsZero() && !now.Before(l.reset) {
		return math.Inf(1)
	}
	return l.left
}

// spend takes n from what is left at now.
func (l *ledger) spend(now time.Time, n float64) {
	if !l.known {
		return
	}
	v := l.avail(now)
	if math.IsInf(v, 1) {
		l.known = false // whole again, of a limit not known: the next answer tells
		return
	}
	l.left, l.at = v-n, now
}

// when returns when at least n will be left, from now: now if it is, the
// zero time if never (a limit below n that is not known to refill). For n
// above the whole limit, when the limit is whole.
func (l *ledger) when(now time.Time, n float64) time.Time {
	if l.fits(now, n) {
		return now
	}
	v := l.avail(now)
	if l.limit >= 0 && n > l.limit {
		n = l.limit
	}
	if l.rate > 0 {
		return now.Add(time.Duration(math.Ceil((n - v) / l.rate * float64(time.Second))))
	}
	if l.reset.After(now) {
		return l.reset
	}
	return time.Time{}
}

// fits reports whether n is left at now, or, for n above the whole limit,
// whether the limit is whole.
func (l *ledger) fits(now time.Time, n float64) bool {
	v := l.avail(now)
	if l.limit >= 0 && n > l.limit {
		return v >= l.limit
	}
	return v >= n
}

// share returns the share of the limit left at now, 1 if not known.
func (l *ledger) share(now time.Time) float64 {
	if !l.known || l.limit <= 0 {
		return 1
	}
	return min(max(l.avail(now)/l.limit, 0), 1)
}

// set counts the limit afresh from q, a response's headers read at now,
// less pending, what was sent after the request they answer, and its
// rate of refill.
func (l *ledger) set(q Quota, now time.Time, pending float64) {
	if !q.Known() {
		return
	}
	l.known, l.limit, l.left, l.at = true, float64(q.Limit), float64(q.Remaining)-pending, now
	l.reset = q.Reset
	if l.reset.IsZero() {
		// Azure may state what is left alone: it holds for a window, as a
		// limit a minute's count does, and is whole after it, by how much
		// the next answer tells.
		l.reset = now.Add(defaultWindow)
	}
	if q.Limit <= 0 {
		l.rate = 0
		return
	}
	// A limit a minute refills at a steady limit/minute, as OpenAI's and
	// Anthropic's token buckets do; the reset says so only roughly, since
	// what is left is rounded down to a whole number, so it is believed
	// only when it rules a minute out: the refill is between what is
	// missing, and one less, over the time to the reset.
	l.rate = float64(q.Limit) / defaultWindow.Seconds()
	if d := q.Reset.Sub(now).Seconds(); d > 0 && q.Remaining < q.Limit {
		lo, hi := float64(q.Limit-q.Remaining-1)/d, float64(q.Limit-q.Remaining)/d
		l.rate = min(max(l.rate, lo), hi)
	}
}

// quota returns the ledger as a Quota at now.
func (l *ledger) quota(now time.Time) Quota {
	if !l.known {
		return unknownQuota
	}
	q := Quota{Limit: int64(l.limit), Remaining: -1, Reset: l.reset}
	if v := l.avail(now); !math.IsInf(v, 1) {
		q.Remaining = max(int64(math.Floor(v)), 0)
	}
	return q
}

// poolWaiter is a request waiting for room.
type poolWaiter struct {
	tokens float64
	req    *http.Request // for the members' Admission keys
	bound  time.Time     // the latest it may be sent; zero for none
	ready  chan poolTicket
}

// poolTicket is a member's place taken for an attempt.
type poolTicket struct {
	i       int
	seq     uint64
	at      time.Time // when it was taken
	tokens  float64
	shareID string // the Share's id of the attempt, if it counted it
}

func (p *Pool) setup() error {
	p.once.Do(func() {
		if len(p.Members) == 0 {
			p.initErr = errors.New("outlast: Pool has no members")
			return
		}
		if i := slices.Index(p.Members, nil); i >= 0 {
			p.initErr = fmt.Errorf("outlast: Pool member %d is nil", i)
			return
		}
		if p.Weights != nil && len(p.Weights) != len(p.Members) {
			p.initErr = fmt.Errorf("outlast: Pool has %d weights for %d members", len(p.Weights), len(p.Members))
			return
		}
		p.sh = &poolShared{members: make([]poolMember, len(p.Members))}
		for i := range p.sh.members {
			m := &p.sh.members[i]
			m.weight = 1
			if p.Weights != nil {
				if p.Weights[i] < 1 {
					p.initErr = fmt.Errorf("outlast: Pool member %d (%s) has weight %d: want 1 or more", i, p.Members[i].Name, p.Weights[i])
					return
				}
				m.weight = float64(p.Weights[i])
			}
			m.req.limit, m.tok.limit = -1, -1
		}
	})
	return p.initErr
}

// RoundTrip sends req to the member that can take it soonest, retrying
// at another as Pool's doc says.
func (p *Pool) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := p.setup(); err != nil {
		closeBody(req)
		return nil, err
	}
	ctx := req.Context()
	pol, ok := policyFrom(ctx)
	if !ok {
		pol = p.Policy
	}
	var s schedule
	var m *markCtx
	if pol != nil && !marked(ctx) && (req.Body == nil || req.Body == http.NoBody || req.GetBody != nil) {
		if err := pol.Validate(); err != nil {
			closeBody(req)
			return nil, err
		}
		s.p = pol
		m = mark(ctx, pol)
		ctx = m
	} else if !marked(ctx) {
		ctx = WithPolicy(ctx, nil) // one attempt, whatever a member's own Policy
	}
	n, answer := p.estimate(req)
	tokens := float64(n)
	bound := p.bound(ctx, pol)
	failed := make([]bool, len(p.Members))
	var resp *http.Response
	var err error
	from := -1
	var last error // the last attempt's failure
	// held keeps the latest attempt's end from the request's hooks until
	// the wait before its retry is known; whatever else ends the request,
	// the end is told then, with none.
	var held *heldEnd
	defer func() { held.tell(0) }()
	for n := 1; ; n++ {
		if m != nil {
			m.n.Store(int32(min(n, math.MaxInt32)))
		}
		t, werr := p.take(ctx, req, tokens, failed, p.waitBound(ctx, bound, answer), n > 1) // a retry keeps its place ahead of later arrivals
		if werr != nil {
			if n > 1 && !errors.Is(werr, ErrPoolSpent) {
				return resp, err // the caller left: the last failure says more
			}
			// No member can take the retry in time: the caller hears when
			// the first can, not one member's delay.
			discard(resp)
			closeBody(req)
			return nil, werr
		}
		if n > 1 {
			discard(resp)
			if p.OnMove != nil && from != t.i {
				p.OnMove(req, from, t.i, last)
			}
		}
		held = holdEnd(ctx, n)
		r, rerr := p.request(req, held.into(ctx), t.i, n, m != nil)
		if rerr != nil {
			p.answered(t, nil, rerr)
			closeBody(req)
			return nil, rerr
		}
		if p.Members[t.i].Admission != nil {
			p.noteKey(t.i, p.Members[t.i].admissionKey(r))
		}
		start := time.Now()
		resp, err = p.Members[t.i].RoundTrip(r)
		fail, paced := p.answered(t, resp, err)
		last = fail
		if fail == nil {
			return p.timeAnswer(resp, answer, start), nil
		}
		if s.p == nil || req.GetBody == nil && req.Body != nil && req.Body != http.NoBody {
			return resp, err
		}
		failed[t.i] = true
		from = t.i
		if p.canTakeNow(req, tokens, failed) {
			// Another member can take it now: no wait, whatever this
			// member's delay, which holds this member alone.
			held.tell(0)
			if s.n == 0 {
				s.first = start
			}
			s.n++
			if s.p.MaxAttempts > 0 && n >= s.p.MaxAttempts || !s.p.retryable(fail) || ctx.Err() != nil || s.listSpent(ctx) {
				return resp, err
			}
			if !slices.Contains(failed, false) {
				clear(failed)
			}
			continue
		}
		// No member that has not failed it can take it now: the retry
		// waits as the policy says, and then for room, at one that has
		// not failed it if it can.
		if !slices.Contains(failed, false) {
			clear(failed)
		}
		news := keyNews{}
		if paced {
			// A member out of quota said when it has room: its delay
			// holds it, and the wait for room that follows waits for the
			// first member that has some, within the policy's bounds. A
			// 429 that says nothing waits as the policy says.
			news = keyNews{spaced: true, held: true}
		}
		wait, retry, derr := s.decide(ctx, fail, start, false, news)
		if retry && derr == nil {
			held.tell(wait)
		}
		if derr != nil {
			discard(resp)
			return nil, derr
		}
		if !retry {
			return resp, err
		}
		if serr := sleep(ctx, wait); serr != nil {
			discard(resp)
			return nil, waitErr(serr, wait, fail)
		}
	}
}

// heldEnd stands in for a request's hooks while a member makes an
// attempt of it: the attempt's start and queue go through at once, its
// end is held until tell, which gives it the wait before the pool's retry
// (Attempt.RetryIn), as a Transport's own retries report theirs.
type heldEnd struct {
	next callHooks
	n    int // the pool's number of the attempt, which its member numbers 1

	mu       sync.Mutex
	at       Attempt
	ended    bool // the attempt's end came, and is held
	released bool // tell was called: an end that comes now goes at once
}

// holdEnd returns a heldEnd for the hooks ctx carries, or nil if it
// carries none.
func holdEnd(ctx context.Context, n int) *heldEnd {
	next := hooksOf(nil, ctx)
	if !next.active() {
		return nil
	}
	return &heldEnd{next: next, n: n}
}

// into returns ctx with h in place of its hooks; ctx itself for a nil h.
func (h *heldEnd) into(ctx context.Context) context.Context {
	if h == nil {
		return ctx
	}
	return context.WithValue(ctx, owned.HooksKey{}, methodHooks(h))
}

func (h *heldEnd) AttemptStart(at Attempt) {
	at.N = h.n
	h.next.start(at)
}

func (h *heldEnd) Queued(key string, ahead int) { h.next.queued(key, ahead) }

func (h *heldEnd) AttemptEnd(at Attempt) {
	at.N = h.n
	h.mu.Lock()
	if !h.released {
		h.at, h.ended = at, true
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.next.end(at)
}

// tell tells the held end, if any, with retryIn as the wait before the
// next attempt, and lets any later end through at once. Only its first
// call counts; a nil h has nothing to tell.
func (h *heldEnd) tell(retryIn time.Duration) {
	if h == nil {
		return
	}
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return
	}
	h.released = true
	at, ended := h.at, h.ended
	h.mu.Unlock()
	if ended {
		at.RetryIn = retryIn
		h.next.end(at)
	}
}

// estimate returns r's tokens as Estimate or EstimateTokens counts them,
// and the bound of its answer's tokens, as EstimateTokens reads it.
func (p *Pool) estimate(r *http.Request) (tokens, answer int) {
	var body []byte
	if r.GetBody != nil {
		if b, err := r.GetBody(); err == nil {
			body, err = io.ReadAll(io.LimitReader(b, DefaultMaxBufferedBody))
			b.Close()
			if err != nil {
				body = nil
			}
		}
	}
	answer = DefaultOutputTokens
	if body != nil {
		_, answer = estimateParts(body, DefaultOutputTokens)
	}
	switch {
	case p.Estimate != nil:
		return p.Estimate(r), answer
	case body == nil:
		return DefaultOutputTokens, answer
	}
	return EstimateTokens(body, DefaultOutputTokens), answer
}

// bound returns the latest a request under pol may be sent, the zero
// time for none: its deadline less the reserve of the layer that retries.
func (p *Pool) bound(ctx context.Context, pol *Policy) time.Time {
	deadline, ok := ctx.Deadline()
	if !ok {
		return time.Time{}
	}
	var reserve time.Duration
	switch m := markOf(ctx); {
	case m != nil:
		reserve = m.reserve
	case pol != nil:
		reserve = pol.ReserveInForce()
	}
	return boundOf(deadline, reserve)
}

// request returns the request for Members[i], attempt n: req itself for
// the first attempt without Rewrite of a pool that does not retry, else
// a clone with a fresh body, AttemptHeader if the pool is retrying,
// rewritten. A member never queues while its Admission holds it down:
// the pool has others.
func (p *Pool) request(req *http.Request, ctx context.Context, i, n int, retrying bool) (*http.Request, error) {
	ctx = context.WithValue(ctx, leaveKey{}, true)
	ctx = context.WithValue(ctx, poolKey{}, true)
	if n == 1 && p.Rewrite == nil && !retrying {
		return req.WithContext(ctx), nil
	}
	r := req.Clone(ctx)
	if retrying {
		// The pool is the layer that retries: across HTTP, each attempt
		// says so, as a Transport's does, and an outlast layer there
		// makes one attempt.
		if r.Header == nil {
			r.Header = make(http.Header, 1)
		}
		r.Header[AttemptHeader] = attemptValue(n)
	}
	if n > 1 && req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = body
	}
	if p.Rewrite == nil {
		return r, nil
	}
	return p.Rewrite(r, i)
}

// poolKey marks the context of a pool member's attempt: its Admission
// leaves the pacing of the member's rate limits to the pool (see
// RateLimitReset).
type poolKey struct{}

// inPool reports whether ctx is a pool member's attempt's.
func inPool(ctx context.Context) bool {
	v, _ := ctx.Value(poolKey{}).(bool)
	return v
}

// take returns a member's place for a request of tokens: at once if one
// can take it, and no request waits ahead, else when one can, in order.
// A member that failed the request is taken at once only if no other
// can be. It returns a *StatusError wrapping ErrPoolSpent when the room
// comes after bound, or the context's error.
func (p *Pool) take(ctx context.Context, req *http.Request, tokens float64, failed []bool, bound time.Time, front bool) (poolTicket, error) {
	for {
		t, err := p.takeLocal(ctx, req, tokens, failed, bound, front)
		if err != nil || p.Share == nil {
			return t, err
		}
		id, wait, serr := p.Share.Take(ctx, p.Members[t.i].Name, tokens)
		if serr != nil || wait <= 0 {
			t.shareID = id
			return t, nil
		}
		// Other processes spent its room: hold the member that long, and
		// take a place again, first in the queue.
		p.refund(t, time.Now().Add(wait))
		front = true
	}
}

// refund gives back t, a place that the Share refused until until, and
// counts the member as the Share does: room for t's tokens then, or, when
// its tokens are not counted, none before then.
func (p *Pool) refund(t poolTicket, until time.Time) {
	now := time.Now()
	p.sh.mu.Lock()
	defer p.sh.mu.Unlock()
	m := &p.sh.members[t.i]
	m.inFlight--
	m.turns -= 1 / m.weight
	if j := slices.IndexFunc(m.sent, func(s sending) bool { return s.seq == t.seq }); j >= 0 {
		m.sent = slices.Delete(m.sent, j, j+1)
	}
	m.req.left++
	m.tok.left += t.tokens
	if wait := until.Sub(now); m.tok.known && m.tok.rate > 0 {
		// The share has room for this request's tokens only after
		// wait: the member's count says so, and a smaller request may
		// still find room sooner.
		m.tok.left, m.tok.at = min(m.tok.avail(now), t.tokens-m.tok.rate*wait.Seconds()), now
	} else {
		m.notBefore = later(m.notBefore, until)
	}
	p.dispatchLocked(now)
}

// takeLocal is take by this process's ledger alone; front puts a request
// that must wait at the head of the queue.
func (p *Pool) takeLocal(ctx context.Context, req *http.Request, tokens float64, failed []bool, bound time.Time, front bool) (poolTicket, error) {
	now := time.Now()
	p.sh.mu.Lock()
	if len(p.sh.q) == 0 {
		if i, ok := p.pick(now, req, tokens, failed); ok {
			t := p.takeLocked(now, i, tokens)
			p.sh.mu.Unlock()
			return t, nil
		}
	}
	at, down := p.earliest(now, req, tokens)
	if !at.IsZero() {
		at = later(at, p.queueRoom(now, tokens))
	}
	if at.IsZero() || !bound.IsZero() && at.After(bound) {
		p.sh.mu.Unlock()
		return poolTicket{}, p.spent(now, at, down)
	}
	w := &poolWaiter{tokens: tokens, req: req, bound: bound, ready: make(chan poolTicket, 1)}
	if front {
		p.sh.q = slices.Insert(p.sh.q, 0, w)
	} else {
		p.sh.q = append(p.sh.q, w)
	}
	p.dispatchLocked(now) // it may go ahead to a member none before it waits for
	p.sh.mu.Unlock()

	var expire <-chan time.Time
	if !bound.IsZero() {
		tm := time.NewTimer(time.Until(bound))
		defer tm.Stop()
		expire = tm.C
	}
	select {
	case t := <-w.ready:
		if t.i < 0 {
			return poolTicket{}, p.refused(req, tokens, t.at)
		}
		return t, nil
	case <-ctx.Done():
		if t, ok := p.leave(w); ok && t.i >= 0 {
			return t, nil // taken as it left: use it rather than waste it
		}
		return poolTicket{}, ctx.Err()
	case <-expire:
		if t, ok := p.leave(w); ok && t.i >= 0 {
			return t, nil
		}
		now := time.Now()
		p.sh.mu.Lock()
		at, down := p.earliest(now, req, tokens)
		p.sh.mu.Unlock()
		return poolTicket{}, p.spent(now, at, down)
	}
}

// refused returns the error for a waiting request of tokens that the
// queue refused: no member has room for it before its bound, the first
// at at.
func (p *Pool) refused(req *http.Request, tokens float64, at time.Time) error {
	now := time.Now()
	p.sh.mu.Lock()
	_, down := p.earliest(now, req, tokens)
	p.sh.mu.Unlock()
	return p.spent(now, at, down)
}

// leave takes w out of the queue; if it was given a place meanwhile, or
// refused one (a ticket of member -1), it returns that.
func (p *Pool) leave(w *poolWaiter) (poolTicket, bool) {
	p.sh.mu.Lock()
	defer p.sh.mu.Unlock()
	if i := slices.Index(p.sh.q, w); i >= 0 {
		p.sh.q = slices.Delete(p.sh.q, i, i+1)
		p.dispatchLocked(time.Now()) // the next may fit where w did not
		return poolTicket{}, false
	}
	select {
	case t := <-w.ready:
		return t, true
	default:
		return poolTicket{}, false
	}
}

// spent returns the error for a request that no member can take before
// its bound: 503 if the members are down, else 429, with the time until
// at, the first room, if known.
func (p *Pool) spent(now, at time.Time, down bool) error {
	e := &StatusError{StatusCode: http.StatusTooManyRequests, Err: ErrPoolSpent}
	if down {
		e.StatusCode = http.StatusServiceUnavailable
	}
	if !at.IsZero() {
		e.RetryAfter = max(at.Sub(now), time.Millisecond)
	}
	return e
}

// canTakeNow reports whether a member that has not failed the request
// can take it now.
func (p *Pool) canTakeNow(req *http.Request, tokens float64, failed []bool) bool {
	p.sh.mu.Lock()
	defer p.sh.mu.Unlock()
	if !slices.Contains(failed, false) {
		return false
	}
	i, ok := p.pick(time.Now(), req, tokens, failed)
	return ok && !failed[i]
}

// pick returns the member that takes a request of tokens now, by the
// ranks of Pool's doc, preferring those that have not failed it.
func (p *Pool) pick(now time.Time, req *http.Request, tokens float64, failed []bool) (int, bool) {
	return p.pickOf(now, req, tokens, failed, nil)
}

// pickOf is pick among the members that claimed, if not nil, leaves out.
func (p *Pool) pickOf(now time.Time, req *http.Request, tokens float64, failed, claimed []bool) (int, bool) {
	best, bestRank := -1, poolRank{}
	for i := range p.sh.members {
		if claimed != nil && claimed[i] {
			continue
		}
		r, ok := p.rank(now, req, i, tokens)
		if !ok {
			continue
		}
		r.failed = failed != nil && failed[i]
		if best < 0 || r.before(bestRank) {
			best, bestRank = i, r
		}
	}
	return best, best >= 0
}

// poolRank orders the members that can take a request: lower first.
type poolRank struct {
	failed bool
	down   bool
	full   bool
	share  int // tenths of its limits left, negated
	load   float64
	turns  float64
}

func (a poolRank) before(b poolRank) bool {
	switch {
	case a.failed != b.failed:
		return !a.failed
	case a.down != b.down:
		return !a.down
	case a.full != b.full:
		return !a.full
	case a.share != b.share:
		return a.share < b.share
	case a.load != b.load:
		return a.load < b.load
	}
	return a.turns < b.turns
}

// rank returns Members[i]'s rank for a request of tokens now, and
// whether it can take the request now.
func (p *Pool) rank(now time.Time, req *http.Request, i int, tokens float64) (poolRank, bool) {
	m := &p.sh.members[i]
	if now.Before(m.notBefore) || !m.req.fits(now, 1) || !m.tok.fits(now, tokens) {
		return poolRank{}, false
	}
	var r poolRank
	t := p.Members[i]
	if a := t.Admission; a != nil && a.troubled.Load() != 0 {
		st := a.State(p.admissionKey(i, req))
		if now.Before(st.NotBefore) {
			return r, false
		}
		switch st.State {
		case Down:
			if now.Before(st.NextProbe) {
				return r, false
			}
			r.down = true
		case Probing:
			return r, false
		}
	}
	if c := t.gateCapacity(); c > 0 && m.inFlight >= c {
		r.full = true
	}
	r.share = -int(math.Floor(min(m.req.share(now), m.tok.share(now)) * 10))
	r.load = float64(m.inFlight) / m.weight
	r.turns = m.turns
	return r, true
}

// admissionKey returns the key of Members[i]'s Admission for req: the key
// of the last request made for it, since Rewrite may change what the key
// is made of (its URL's host, by default), or else req's own.
func (p *Pool) admissionKey(i int, req *http.Request) string {
	if k := p.sh.members[i].key; k != nil {
		return *k
	}
	return p.Members[i].admissionKey(req)
}

// noteKey keeps key, the Admission key of the request just made for
// Members[i].
func (p *Pool) noteKey(i int, key string) {
	p.sh.mu.Lock()
	defer p.sh.mu.Unlock()
	if k := p.sh.members[i].key; k == nil || *k != key {
		p.sh.members[i].key = &key
	}
}

// earliest returns when a member can first take a request of tokens, the
// zero time if none is known to, and whether the members are held down
// (by their Admissions) rather than out of quota.
func (p *Pool) earliest(now time.Time, req *http.Request, tokens float64) (time.Time, bool) {
	at, _, down := p.earliestOf(now, req, tokens, nil)
	return at, down
}

// earliestOf is earliest among the members that claimed, if not nil,
// leaves out; it also returns the member, -1 if none.
func (p *Pool) earliestOf(now time.Time, req *http.Request, tokens float64, claimed []bool) (time.Time, int, bool) {
	var first time.Time
	member, downs := -1, 0
	for i := range p.sh.members {
		if claimed != nil && claimed[i] {
			continue
		}
		m := &p.sh.members[i]
		reqAt, tokAt := m.req.when(now, 1), m.tok.when(now, tokens)
		if reqAt.IsZero() || tokAt.IsZero() {
			continue // spent, and not known to refill
		}
		at := later(later(m.notBefore, reqAt), tokAt)
		t := p.Members[i]
		if a := t.Admission; a != nil && a.troubled.Load() != 0 {
			st := a.State(p.admissionKey(i, req))
			if (st.State == Down || st.State == Probing) && !m.notBefore.After(now) {
				downs++ // down for its failures, not held for a 429
			}
			at = later(at, st.NotBefore)
			if st.State == Down {
				at = later(at, st.NextProbe)
			}
		}
		if at.Before(now) {
			at = now // room now, but its gate is full or its probe out: a request's end wakes the queue
		}
		if first.IsZero() || at.Before(first) {
			first, member = at, i
		}
	}
	return first, member, downs == len(p.sh.members)
}

// queueRoom returns when a request of tokens would have room, behind the
// requests waiting that may still be sent (see placements). It is an
// estimate from below (the waiting requests may go to members their
// claims keep from it, and its own gate and Admission may hold it
// longer), and now where a member's ledger is not known.
func (p *Pool) queueRoom(now time.Time, tokens float64) time.Time {
	pl := p.placements(now)
	for _, w := range p.sh.q {
		pl.place(w)
	}
	at, ok := pl.place(&poolWaiter{tokens: tokens})
	if !ok {
		return now
	}
	return at
}

// placements is a reckoning of when the waiting requests will have room:
// each, in order, comes off a copy of the ledger of the member that has
// room for it first, as the members' ledgers refill, unless that comes
// after its bound, when it will leave unsent.
type placements struct {
	now     time.Time
	members []placement
}

// placement is a member's ledgers, as placements reckons them.
type placement struct {
	req, tok  ledger
	notBefore time.Time
}

func (p *Pool) placements(now time.Time) *placements {
	pl := &placements{now: now, members: make([]placement, len(p.sh.members))}
	for i := range p.sh.members {
		m := &p.sh.members[i]
		pl.members[i] = placement{m.req, m.tok, m.notBefore}
	}
	return pl
}

// place returns when w will have room, and whether that is known; it
// counts w off its member's ledger unless the room comes after its bound.
func (pl *placements) place(w *poolWaiter) (time.Time, bool) {
	best, bi := time.Time{}, -1
	for i := range pl.members {
		m := &pl.members[i]
		from := later(later(pl.now, m.req.at), m.tok.at) // after what was placed on it
		r, t := m.req.when(from, 1), m.tok.when(from, w.tokens)
		if r.IsZero() || t.IsZero() {
			continue
		}
		at := later(later(r, t), m.notBefore)
		if bi < 0 || at.Before(best) {
			best, bi = at, i
		}
	}
	if bi < 0 {
		return time.Time{}, false
	}
	if w.bound.IsZero() || !best.After(w.bound) {
		pl.members[bi].req.spend(best, 1)
		pl.members[bi].tok.spend(best, w.tokens)
	}
	return best, true
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// takeLocked counts an attempt of tokens at Members[i] and returns its
// ticket.
func (p *Pool) takeLocked(now time.Time, i int, tokens float64) poolTicket {
	m := &p.sh.members[i]
	m.req.spend(now, 1)
	m.tok.spend(now, tokens)
	m.inFlight++
	m.turns += 1 / m.weight
	p.sh.seq++
	// Attempts a window old have been counted by the member's answers,
	// or never will be; a member whose answers state no limits has no
	// answer that trims them.
	old := 0
	for old < len(m.sent) && (len(m.sent)-old >= maxSent || m.sent[old].at.Before(now.Add(-defaultWindow))) {
		old++
	}
	clear(m.sent[:old])
	m.sent = append(m.sent[old:], sending{seq: p.sh.seq, at: now, tokens: tokens})
	return poolTicket{i: i, seq: p.sh.seq, at: now, tokens: tokens}
}

// answered ends t's attempt with its result: the answer's headers count
// the member's limits afresh, and a 429 holds the member for its delay.
// It returns the attempt's failure, nil for a response to return, and
// whether it is a 429 that said when its member has room: a Retry-After,
// or a limit its headers say is spent until a reset.
func (p *Pool) answered(t poolTicket, resp *http.Response, err error) (fail error, paced bool) {
	now := time.Now()
	var h http.Header
	status := 0
	switch {
	case err != nil:
		fail = err
		if se, ok := errors.AsType[*StatusError](err); ok {
			h, status = se.Header, se.StatusCode
		}
	case resp != nil:
		h, status = resp.Header, resp.StatusCode
		if isFailure(status) {
			d, _ := RetryAfter(h, now)
			se := &StatusError{StatusCode: status, Header: h, RetryAfter: d}
			if statusRetryable(se) {
				fail = se
			}
		} else if se := streamFailure(resp); se != nil {
			// A stream that opened with an error event (Anthropic's
			// overloaded_error after message_start): the member's
			// failure as the status it stands for.
			status = se.StatusCode
			if statusRetryable(se) {
				fail = se
			}
		}
	}
	hr := ReadHeadroom(h, now)
	if limit := p.Members[t.i].maxRetryAfter(); limit > 0 {
		// A reset is a server's delay as a Retry-After is: one far off,
		// from a server that lies or a limit of the day, is cut as one.
		hr = hr.resetBy(now.Add(limit))
	}
	stated := hr.Requests.Known() || hr.Tokens.Known() || hr.InputTokens.Known()
	if p.Share != nil && t.shareID != "" && stated {
		// Not on the caller's time; an error leaves the shared count to
		// the next answer.
		go p.Share.Count(context.Background(), p.Members[t.i].Name, t.shareID, hr)
	}
	p.sh.mu.Lock()
	defer p.sh.mu.Unlock()
	m := &p.sh.members[t.i]
	m.inFlight--
	if j, ok := slices.BinarySearchFunc(m.sent, t.seq, func(s sending, seq uint64) int { return cmp.Compare(s.seq, seq) }); ok {
		m.sent[j].done = p.sh.seq
	}
	if t.seq > m.applied && stated {
		// The headers count what the member had taken by this attempt;
		// the attempts sent after it, answered or not, they may not, nor
		// those sent just before, answered or not, which may have reached
		// the member after it. Older answers than the one that last
		// counted are left out; the attempts sent before this one's
		// window never count again, since later answers' windows start
		// later still.
		from := sort.Search(len(m.sent), func(j int) bool {
			return m.sent[j].seq > t.seq || !m.sent[j].at.Before(t.at.Add(-reorderWindow))
		})
		clear(m.sent[:from])
		m.sent, m.applied = m.sent[from:], t.seq
		var pendReq, pendTok float64
		for _, s := range m.sent {
			if s.uncounted(t) {
				pendReq++
				pendTok += s.tokens
			}
		}
		m.req.set(hr.Requests, now, pendReq)
		m.tok.set(hr.Tokens, now, pendTok)
		if !hr.Tokens.Known() && hr.InputTokens.Known() {
			m.tok.set(hr.InputTokens, now, pendTok)
		}
	}
	if status == http.StatusTooManyRequests {
		d, ok := RetryAfter(h, now)
		until, spent := spentUntil(hr, now)
		paced = ok && d > 0 || spent && until > 0
		if !ok {
			d, ok = until, spent
		}
		if !ok || d <= 0 {
			d = poolCooldown
		}
		if limit := p.Members[t.i].maxRetryAfter(); limit > 0 {
			d = min(d, limit)
		}
		m.notBefore = later(m.notBefore, now.Add(d))
	}
	p.dispatchLocked(now)
	return fail, paced
}

// spentUntil returns the time until the latest reset of a limit that hr
// says is spent.
func spentUntil(hr Headroom, now time.Time) (time.Duration, bool) {
	var at time.Time
	for _, q := range []Quota{hr.Requests, hr.Tokens, hr.InputTokens, hr.OutputTokens} {
		if q.Remaining == 0 && q.Reset.After(now) {
			at = later(at, q.Reset)
		}
	}
	if at.IsZero() {
		return 0, false
	}
	return at.Sub(now), true
}

// dispatchLocked gives places to the waiting requests, in order: each
// that a member can take now is sent; one that none can claims the member
// that will have room for it first, and a request after it may go ahead
// only to another member, so that it never delays one that came before
// it. Then it arms the timer for the earliest room of a waiter.
func (p *Pool) dispatchLocked(now time.Time) {
	if len(p.sh.q) == 0 {
		return
	}
	// A waiter that cannot have room before its bound, even as early as
	// the members' refill allows behind those ahead of it, is refused now
	// rather than hold a claim on a member until then.
	pl := p.placements(now)
	kept := p.sh.q[:0]
	for _, w := range p.sh.q {
		if at, ok := pl.place(w); ok && !w.bound.IsZero() && at.After(w.bound) {
			w.ready <- poolTicket{i: -1, at: at}
			continue
		}
		kept = append(kept, w)
	}
	clear(p.sh.q[len(kept):])
	p.sh.q = kept
	claimed := make([]bool, len(p.sh.members))
	free := len(claimed)
	var wake time.Time
	kept = p.sh.q[:0]
	for _, w := range p.sh.q {
		if free == 0 {
			kept = append(kept, w)
			continue
		}
		if i, ok := p.pickOf(now, w.req, w.tokens, nil, claimed); ok {
			w.ready <- p.takeLocked(now, i, w.tokens)
			continue
		}
		kept = append(kept, w)
		at, i, _ := p.earliestOf(now, w.req, w.tokens, claimed)
		if i < 0 {
			continue
		}
		claimed[i] = true
		free--
		if at.After(now) && (wake.IsZero() || at.Before(wake)) {
			wake = at
		}
	}
	clear(p.sh.q[len(kept):])
	p.sh.q = kept
	p.armLocked(now, wake)
}

// armLocked sets the timer for at, the earliest room of a waiter; the
// zero time for none, when a request's end wakes the queue.
func (p *Pool) armLocked(now, at time.Time) {
	if at.IsZero() || !at.After(now) {
		return
	}
	if p.sh.timer != nil && p.sh.wakeAt.Equal(at) {
		return
	}
	if p.sh.timer != nil {
		p.sh.timer.Stop()
	}
	p.sh.wakeAt = at
	p.sh.timer = time.AfterFunc(at.Sub(now), func() {
		p.sh.mu.Lock()
		defer p.sh.mu.Unlock()
		p.sh.timer = nil
		p.dispatchLocked(time.Now())
	})
}
