package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/outlast-llm/outlast"
)

// A strategy is how a baseline router picks the member for an attempt.
type strategy int

// The strategies of the baselines.
const (
	// roundRobin sends to the members in turn, as gateways that rotate
	// API keys do.
	roundRobin strategy = iota
	// leastBusy sends to the member with the fewest requests in flight,
	// as LiteLLM's least-busy routing does.
	leastBusy
	// usageBased sends to the member with the lowest token use in the
	// current minute that stays under its configured limits with the
	// request, as LiteLLM's usage-based routing (v2) does: requests are
	// counted as they are sent, tokens as the answers' usage reports
	// them, and the request's input is what it checks against the limit.
	usageBased
)

// errCooling is the failure of a baseline router's request that found
// every member cooling down until past its deadline less its reserve.
var errCooling = errors.New("pool bench: every member is cooling down past the deadline")

// errNoDeployments is the usage-based router's answer when no member is
// under its limits with the request, as LiteLLM's "No deployments
// available".
var errNoDeployments = errors.New("pool bench: no deployments available: every member is at its limits this minute")

// defaultCooldown is how long a member that answered 429 without a
// delay is left alone.
const defaultCooldown = time.Second

// A router is a baseline: the routing of the gateways and proxies users
// would pick instead of outlast.Pool, behind the same retry semantics so
// that the comparison is about routing. A 429 cools its member down for
// the answer's Retry-After, and the request is retried at once at another
// member that is not cooling down; when every member is, the request
// waits for the first to come back, unless that is past its deadline
// less the reserve, when it fails with errCooling. No attempt is sent
// past that bound either.
type router struct {
	strategy strategy
	members  []*member
	reserve  time.Duration

	mu       sync.Mutex
	next     int         // the member whose turn is next
	cool     []time.Time // when each member's cooldown ends
	inFlight []int
	window   time.Time // usage-based: the start of the minute counted
	rpm, tpm []int     // usage-based: the requests sent to each member in it, and the tokens its answers reported
}

// newRouter returns a baseline router over ms.
func newRouter(s strategy, ms []*member, reserve time.Duration) *router {
	n := len(ms)
	return &router{strategy: s, members: ms, reserve: reserve, cool: make([]time.Time, n), inFlight: make([]int, n), rpm: make([]int, n), tpm: make([]int, n)}
}

// RoundTrip sends req to a member as the strategy picks, retrying on 429s
// as router's doc says.
func (r *router) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	input := (len(body) + 3) / 4
	var bound time.Time
	if d, ok := ctx.Deadline(); ok {
		bound = d.Add(-r.reserve)
	}
	var last *http.Response
	for {
		now := time.Now()
		if !bound.IsZero() && now.After(bound) {
			if last != nil {
				return last, nil // the last 429, to the caller
			}
			return nil, &outlast.StatusError{StatusCode: http.StatusTooManyRequests, Err: errCooling}
		}
		i, wake, full := r.choose(now, input)
		if full {
			discard(last)
			return nil, &outlast.StatusError{StatusCode: http.StatusTooManyRequests, Err: errNoDeployments}
		}
		if i < 0 {
			if !bound.IsZero() && wake.After(bound) {
				discard(last)
				return nil, &outlast.StatusError{StatusCode: http.StatusTooManyRequests, RetryAfter: wake.Sub(now), Err: errCooling}
			}
			if err := sleepUntil(ctx, wake); err != nil {
				discard(last)
				return nil, err
			}
			continue
		}
		discard(last)
		last = nil
		a := req.Clone(ctx)
		a.Body = io.NopCloser(bytes.NewReader(body))
		resp, err := r.members[i].RoundTrip(a)
		if err == nil && resp.StatusCode == http.StatusOK && r.strategy == usageBased {
			if uerr := r.countUsage(i, resp); uerr != nil {
				resp, err = nil, uerr
			}
		}
		r.mu.Lock()
		r.inFlight[i]--
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			r.mu.Unlock()
			return resp, err
		}
		now = time.Now()
		d, ok := outlast.RetryAfter(resp.Header, now)
		if !ok || d <= 0 {
			d = defaultCooldown
		}
		r.cool[i] = later(r.cool[i], now.Add(d))
		r.mu.Unlock()
		last = resp
	}
}

// countUsage adds the tokens that resp, r.members[i]'s answer, reports in
// its usage to the member's count for the current minute, and leaves
// resp's body to be read again; on an error, resp's body is closed.
func (r *router) countUsage(i int, resp *http.Response) error {
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	var u struct {
		Usage struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &u); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.roll(time.Now())
	r.tpm[i] += u.Usage.TotalTokens
	return nil
}

// roll starts the usage counts afresh when now is in a minute after the
// one counted. r.mu is held.
func (r *router) roll(now time.Time) {
	if w := now.Truncate(time.Minute); !w.Equal(r.window) {
		r.window = w
		clear(r.rpm)
		clear(r.tpm)
	}
}

// choose picks the member for an attempt of input tokens at now and counts
// the attempt as sent to it. It returns -1 when every member is cooling
// down, with the time the first comes back; and full when the usage-based
// strategy finds no member under its limits.
func (r *router) choose(now time.Time, input int) (i int, wake time.Time, full bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.members)
	i = -1
	switch r.strategy {
	case roundRobin:
		for k := range n {
			j := (r.next + k) % n
			if !now.Before(r.cool[j]) {
				i = j
				break
			}
		}
	case leastBusy:
		for k := range n {
			j := (r.next + k) % n
			if now.Before(r.cool[j]) {
				continue
			}
			if i < 0 || r.inFlight[j] < r.inFlight[i] {
				i = j
			}
		}
	case usageBased:
		r.roll(now)
		cooling := 0
		for j := range n {
			if now.Before(r.cool[j]) {
				cooling++
				continue
			}
			s := r.members[j].spec
			if r.rpm[j]+1 > s.RPM || r.tpm[j]+input > s.TPM {
				continue
			}
			if i < 0 || r.tpm[j] < r.tpm[i] {
				i = j
			}
		}
		if i < 0 && cooling < n {
			return -1, time.Time{}, true
		}
		if i >= 0 {
			r.rpm[i]++
		}
	}
	if i < 0 {
		for j := range n {
			if wake.IsZero() || r.cool[j].Before(wake) {
				wake = r.cool[j]
			}
		}
		return -1, wake, false
	}
	r.next = (i + 1) % n
	r.inFlight[i]++
	return i, time.Time{}, false
}

// readBody reads req's body and closes it; a request without one has a
// nil body.
func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer req.Body.Close()
	return io.ReadAll(req.Body)
}

// discard reads and closes a response that is thrown away; nil is none.
func discard(resp *http.Response) {
	if resp == nil {
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// sleepUntil waits until at, or until ctx ends, and returns ctx's error
// if it did.
func sleepUntil(ctx context.Context, at time.Time) error {
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
