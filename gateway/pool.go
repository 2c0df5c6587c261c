package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/apierr"
	"github.com/outlast-llm/outlast/internal/redact"
	"github.com/outlast-llm/outlast/record"
)

// newPool checks u, the i-th of Config.Upstreams, a pool, and builds its
// members, each an upstream of its own, and the outlast.Pool over them.
func newPool(i int, u Upstream, base http.RoundTripper, logger *slog.Logger, gates func(string, bool, int, int) Gate) (*upstream, error) {
	switch {
	case u.Name == "":
		return nil, fmt.Errorf("gateway: upstreams[%d]: a pool needs a name, for the record and metrics", i)
	case u.URL != nil:
		return nil, fmt.Errorf("gateway: upstreams[%d] (%s): a pool has members instead of a url %q: give each member its url", i, u.Name, redact.URL(u.URL))
	case u.Admission != nil:
		return nil, fmt.Errorf("gateway: upstreams[%d] (%s): a pool has no admission of its own: give each member its own", i, u.Name)
	case len(u.Fallbacks) > 0:
		return nil, fmt.Errorf("gateway: upstreams[%d] (%s): a pool has no fallbacks: its members stand in for each other", i, u.Name)
	case u.Slots < 0:
		return nil, fmt.Errorf("gateway: upstreams[%d] (%s): slots %d is negative", i, u.Name, u.Slots)
	}
	if u.Policy != nil {
		if err := u.Policy.Validate(); err != nil {
			return nil, fmt.Errorf("gateway: upstreams[%d] (%s): %w", i, u.Name, err)
		}
	}
	u.Prefix = "/" + strings.Trim(u.Prefix, "/")
	if u.StatusPaths == nil {
		u.StatusPaths = DefaultStatusPaths
	}
	up := &upstream{Upstream: u, gates: newSlotGates(u.Name, 0, 0, nil)}
	weights := make([]int, len(u.Members))
	var transports, streams []*outlast.Transport
	for j, m := range u.Members {
		mu := u
		mu.Members, mu.Name, mu.URL, mu.Admission = nil, m.Name, m.URL, m.Admission
		if m.Auth != nil {
			mu.Auth = m.Auth
		}
		if m.Slots != 0 {
			mu.Slots = m.Slots
		}
		if m.Models != nil {
			mu.Models = m.Models
		}
		if m.Weight < 0 {
			return nil, fmt.Errorf("gateway: upstreams[%d] (%s): members[%d]: weight %d is negative", i, u.Name, j, m.Weight)
		}
		weights[j] = max(m.Weight, 1)
		mup, err := newUpstream(i, mu, base, logger, gates)
		if err != nil {
			return nil, fmt.Errorf("%w (members[%d] of pool %s)", err, j, u.Name)
		}
		mup.in = up
		up.members = append(up.members, mup)
		transports, streams = append(transports, mup.transport), append(streams, mup.stream)
	}
	up.pool = &outlast.Pool{
		Members:  transports,
		Weights:  weights,
		Policy:   u.Policy,
		Rewrite:  up.poolRequest,
		Estimate: poolEstimate,
		OnMove:   up.poolMove,
		Share:    u.Share,
	}
	var err error
	if up.streamPool, err = up.pool.Sharing(streams); err != nil {
		return nil, fmt.Errorf("gateway: upstreams[%d] (%s): %w", i, u.Name, err)
	}
	// A status path goes to the first member.
	up.transport, up.stream = up.members[0].transport, up.members[0].stream
	return up, nil
}

// checkNames refuses a member whose name another upstream or member has:
// a request's attempts, metrics and health name each member.
func checkNames(ups []*upstream) error {
	seen := map[string]string{}
	for _, u := range ups {
		if seen[u.Name] != "" {
			return fmt.Errorf("gateway: upstream name %q is used twice (prefixes %s and %s): health, metrics and the record tell upstreams by name; give each its own (name:)", u.Name, seen[u.Name], u.Prefix)
		}
		seen[u.Name] = u.Prefix
	}
	clear(seen)
	for _, u := range ups {
		if len(u.members) == 0 {
			continue
		}
		for _, m := range u.members {
			if where, ok := seen[m.Name]; ok {
				return fmt.Errorf("gateway: pool %s: member name %q is used twice (also %s): give each member its own name", u.Name, m.Name, where)
			}
			seen[m.Name] = "in pool " + u.Name
		}
	}
	for _, u := range ups {
		if where, ok := seen[u.Name]; ok {
			return fmt.Errorf("gateway: upstream name %q is a member's name %s: give each its own name", u.Name, where)
		}
	}
	return nil
}

// exchangeKey carries a pool's request's exchange in its context, for
// the pool's Rewrite and Estimate.
type exchangeKey struct{}

// poolRequest is the pool's Rewrite: the request for member i, made from
// the exchange's request with member i's URL, credential and model name.
// The exchange is then at member i.
func (u *upstream) poolRequest(r *http.Request, i int) (*http.Request, error) {
	x, ok := r.Context().Value(exchangeKey{}).(*exchange)
	if !ok {
		return nil, errors.New("gateway: a pool's request without its exchange")
	}
	m := u.members[i]
	x.hooksMu.Lock()
	x.cur = m
	x.hooksMu.Unlock()
	return x.outbound(r.Context(), m), nil
}

// poolMove is the pool's OnMove: the exchange notes the move to another
// member, as a fallback's, with its reason.
func (u *upstream) poolMove(r *http.Request, from, to int, err error) {
	x, ok := r.Context().Value(exchangeKey{}).(*exchange)
	if !ok {
		return
	}
	reason := memberReason(err)
	if se, ok := errors.AsType[*outlast.StatusError](err); ok && se.StatusCode == http.StatusTooManyRequests {
		reason = record.ReasonRateLimited
	}
	x.onMove(u.members[from], u.members[to], outlast.FallbackReason(reason), err)
}

// memberReason names why a request left a member after err, as a
// Fallback's reasons do.
func memberReason(err error) string {
	switch {
	case errors.Is(err, outlast.ErrUpstreamDown):
		return string(outlast.FallbackDown)
	case errors.Is(err, outlast.ErrBusy):
		return string(outlast.FallbackBusy)
	case errors.Is(err, outlast.ErrStalled):
		return string(outlast.FallbackSilent)
	}
	return string(outlast.FallbackSpent)
}

// poolEstimate is the pool's Estimate: the tokens of the exchange's body.
func poolEstimate(r *http.Request) int {
	x, ok := r.Context().Value(exchangeKey{}).(*exchange)
	if !ok {
		return outlast.DefaultOutputTokens
	}
	return outlast.EstimateTokens(x.body, outlast.DefaultOutputTokens)
}

// poolOutbound is the request a pool's exchange gives its outlast.Pool:
// the caller's, with ctx, which carries the exchange, for the pool's
// choice; the pool's Rewrite makes each member's request from the
// exchange. Its GetBody gives the caller's body, from which the pool
// reads the bound of the answer (max_tokens), to judge how long it takes.
func (x *exchange) poolOutbound(ctx context.Context) *http.Request {
	out := x.r.WithContext(context.WithValue(ctx, exchangeKey{}, x))
	body := x.callerBody
	out.Body = http.NoBody
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return out
}

// headroom returns what u's pool knows of member u's limits, if u is a
// member.
func (u *upstream) headroom() (outlast.MemberState, bool) {
	if u.in == nil {
		return outlast.MemberState{}, false
	}
	for i, m := range u.in.members {
		if m == u {
			return u.in.pool.State(i), true
		}
	}
	return outlast.MemberState{}, false
}

// poolSpent answers for a request that no member of its pool could take
// before its deadline less its reserve: 429 when they are out of quota,
// 503 when they are down, with Retry-After (and retry-after-ms, which
// the OpenAI SDKs read first) the time until the first can.
func (x *exchange) poolSpent(err error) {
	code, kind, why := http.StatusTooManyRequests, apierr.RateLimited, "is out of its rate limits"
	se, ok := errors.AsType[*outlast.StatusError](err)
	if ok && se.StatusCode == http.StatusServiceUnavailable {
		code, kind, why = http.StatusServiceUnavailable, apierr.Down, "is down"
	}
	msg := fmt.Sprintf("outlast: every member of pool %s %s until after the request's deadline less its reserve", x.up.Name, why)
	h := http.Header{}
	if ok && se.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(se.RetryAfter.Seconds()))))
		h.Set("Retry-After-Ms", strconv.FormatInt(int64(math.Ceil(float64(se.RetryAfter)/float64(time.Millisecond))), 10))
		msg += fmt.Sprintf("; the first has room in %v", se.RetryAfter.Round(time.Millisecond))
	}
	x.fail(code, kind, msg, h)
}

// all returns the gateway's upstreams, each pool followed by its members,
// for health and loads.
func (g *Gateway) all() []*upstream {
	n := len(g.upstreams)
	for _, u := range g.upstreams {
		n += len(u.members)
	}
	if n == len(g.upstreams) {
		return g.upstreams
	}
	all := make([]*upstream, 0, n)
	for _, u := range g.upstreams {
		all = append(append(all, u), u.members...)
	}
	return all
}
