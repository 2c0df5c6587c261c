package mockllm

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limits rate-limits model requests per API key, as a provider does: each
// key has an allowance of requests and of tokens per Window, refilled
// continuously, and a request that would take more than is left gets 429
// with Retry-After (and retry-after-ms) saying when it would fit. Every
// answer carries the API's rate-limit headers: OpenAI's
// x-ratelimit-{limit,remaining,reset}-{requests,tokens} for chat
// completions and the Responses API (the reset the time until the limit
// has refilled fully), and Anthropic's
// anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset} for
// Messages (an RFC 3339 time). A request's tokens are counted up front,
// as providers count them: its input's words plus its max_tokens (or
// max_completion_tokens, max_output_tokens), or the answer's length
// without one.
type Limits struct {
	// Requests is each key's allowance of requests per Window; zero
	// means no limit.
	Requests int
	// Tokens is each key's allowance of tokens per Window; zero means no
	// limit.
	Tokens int
	// Window is the period an allowance refills in: a minute, as most
	// providers count, or less, as Azure's sub-minute windows do. Zero
	// means a minute.
	Window time.Duration
}

// on reports whether l limits anything.
func (l Limits) on() bool { return l.Requests > 0 || l.Tokens > 0 }

func (l Limits) window() time.Duration {
	if l.Window <= 0 {
		return time.Minute
	}
	return l.Window
}

// limiter keeps each key's buckets.
type limiter struct {
	l    Limits
	mu   sync.Mutex
	keys map[string]*buckets
}

// buckets is one key's allowances: what is left, as of at.
type buckets struct {
	requests, tokens float64
	at               time.Time
}

// quota is what one allowance says after a request: its limit, what is
// left, and when it is whole again.
type quota struct {
	limit, left int
	full        time.Time
}

// refund gives back to key's allowances a request of cost tokens that
// take took, and that was then not served.
func (lm *limiter) refund(key string, cost int) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	b := lm.keys[key]
	if b == nil {
		return
	}
	if lm.l.Requests > 0 {
		b.requests = min(b.requests+1, float64(lm.l.Requests))
	}
	if lm.l.Tokens > 0 {
		b.tokens = min(b.tokens+float64(cost), float64(lm.l.Tokens))
	}
}

// take takes a request of cost tokens from key's allowances at now. It
// reports whether the request fits, the wait until it would when it does
// not (-1 for a request larger than the whole allowance, which never
// fits, as OpenAI refuses one "too large"), and the quotas to state in
// the answer's headers.
func (lm *limiter) take(key string, cost int, now time.Time) (ok bool, wait time.Duration, reqs, toks quota) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if lm.keys == nil {
		lm.keys = map[string]*buckets{}
	}
	b := lm.keys[key]
	if b == nil {
		b = &buckets{requests: float64(lm.l.Requests), tokens: float64(lm.l.Tokens), at: now}
		lm.keys[key] = b
	}
	w := lm.l.window()
	refill := func(left *float64, limit int) {
		if limit > 0 {
			*left = min(float64(limit), *left+float64(limit)*float64(now.Sub(b.at))/float64(w))
		}
	}
	refill(&b.requests, lm.l.Requests)
	refill(&b.tokens, lm.l.Tokens)
	b.at = now
	// The wait until an allowance holds what is asked.
	short := func(left float64, limit int, need float64) time.Duration {
		if limit <= 0 || left >= need {
			return 0
		}
		return time.Duration(math.Ceil((need - left) / float64(limit) * float64(w)))
	}
	wait = max(short(b.requests, lm.l.Requests, 1), short(b.tokens, lm.l.Tokens, float64(cost)))
	if lm.l.Tokens > 0 && cost > lm.l.Tokens {
		wait = -1
	}
	if ok = wait == 0; ok {
		if lm.l.Requests > 0 {
			b.requests--
		}
		if lm.l.Tokens > 0 {
			b.tokens -= float64(cost)
		}
	}
	state := func(left float64, limit int) quota {
		full := now.Add(time.Duration(math.Ceil((float64(limit) - left) / float64(limit) * float64(w))))
		return quota{limit: limit, left: int(math.Floor(left)), full: full}
	}
	if lm.l.Requests > 0 {
		reqs = state(b.requests, lm.l.Requests)
	}
	if lm.l.Tokens > 0 {
		toks = state(b.tokens, lm.l.Tokens)
	}
	return ok, wait, reqs, toks
}

// apiKey is the key a request is counted under: its bearer token or its
// x-api-key, "" for none.
func apiKey(r *http.Request) string {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	if a, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return a
	}
	return r.Header.Get("Api-Key") // Azure's
}

// tokenCost is a request's tokens as the limits count them, up front: its
// input's words and its answer's bound, or the answer's length.
func tokenCost(req *request, answer int) int {
	bound := max(req.MaxTokens, req.MaxCompletionTokens, req.MaxOutputTokens)
	if bound <= 0 {
		bound = answer
	}
	return countWords(req) + bound
}

// setLimitHeaders states reqs and toks in h, in the form a's API uses.
func setLimitHeaders(h http.Header, a api, reqs, toks quota, now time.Time) {
	_, isAnthropic := a.(anthropic)
	for name, q := range map[string]quota{"requests": reqs, "tokens": toks} {
		if q.limit == 0 {
			continue
		}
		if isAnthropic {
			h.Set("Anthropic-Ratelimit-"+name+"-Limit", strconv.Itoa(q.limit))
			h.Set("Anthropic-Ratelimit-"+name+"-Remaining", strconv.Itoa(q.left))
			// Whole seconds, as Anthropic states them: rounded up, so
			// that a client that waits until then finds the room.
			reset := q.full.UTC()
			if reset.Nanosecond() > 0 {
				reset = reset.Truncate(time.Second).Add(time.Second)
			}
			h.Set("Anthropic-Ratelimit-"+name+"-Reset", reset.Format(time.RFC3339))
			continue
		}
		h.Set("X-Ratelimit-Limit-"+name, strconv.Itoa(q.limit))
		h.Set("X-Ratelimit-Remaining-"+name, strconv.Itoa(q.left))
		h.Set("X-Ratelimit-Reset-"+name, (q.full.Sub(now) + time.Millisecond - 1).Truncate(time.Millisecond).String())
	}
}
