package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/apierr"
	"github.com/outlast-llm/outlast/internal/parse"
	"github.com/outlast-llm/outlast/internal/redact"
)

// The gateway's request headers. All are optional, and all are removed
// before the request is forwarded, except AttemptHeader, which an outer
// outlast layer set and which passes on so that a further gateway also
// makes one attempt.
const (
	HeaderTimeout     = "Outlast-Timeout"      // the run's deadline, relative to arrival: "300s" or "300"
	HeaderDeadline    = "Outlast-Deadline"     // the run's deadline, RFC 3339
	HeaderRetry       = "Outlast-Retry"        // "off" turns retries off for the request
	HeaderWaits       = "Outlast-Waits"        // "15s,45s,120s,240s"
	HeaderReserve     = "Outlast-Reserve"      // "60s"; "0" means none
	HeaderMaxAttempts = "Outlast-Max-Attempts" // "4"; "0" means no cap
	HeaderRun         = "Outlast-Run"          // groups requests into a run in the record
	HeaderSlot        = "Outlast-Slot"         // a slot to wait for alone, as llama.cpp's id_slot
	HeaderProgress    = "Outlast-Progress"     // "sse": SSE comments while a stream waits

	HeaderToken = "Outlast-Token" // the gateway's token, when it has one (Config.Token)

	HeaderRequestID = "Outlast-Request-Id" // response: the request's ID in the record
	HeaderUpstream  = "Outlast-Upstream"   // response: the upstream that answered, by name (a fallback's, if the request moved)
	HeaderAttempts  = "Outlast-Attempts"   // response: how many attempts were made
	HeaderError     = apierr.Header        // response: the kind of an error the gateway made
)

// headerShouldRetry tells the OpenAI and Anthropic SDKs whether to retry a
// failure, overriding their own judgement of its status. The gateway sends
// "false" on a failure it has already retried or decided.
const headerShouldRetry = "X-Should-Retry"

// options are what a request's Outlast-* headers ask for, held to the
// upstream's settings.
type options struct {
	deadline time.Time       // zero: none
	policy   *outlast.Policy // the request's policy, nil for none
	run      string
	slot     string // "" or a slot the upstream has, 0 to Slots-1
	progress bool
	outer    bool // an outer outlast layer is retrying: one attempt only
}

// parseOptions reads the Outlast-* headers of a request that arrived at
// now for upstream u. They may only tighten the operator's settings (see
// tighten and parseDeadline). Its errors name the header.
func parseOptions(h http.Header, u *Upstream, now time.Time) (options, error) {
	o := options{outer: h.Get(outlast.AttemptHeader) != ""}
	var err error
	if o.deadline, err = parseDeadline(h, now, u.MaxTimeout); err != nil {
		return o, err
	}
	if o.policy, err = parsePolicy(h, u.Policy, !o.deadline.IsZero()); err != nil {
		return o, err
	}
	if o.outer {
		o.policy = nil
	}
	if o.run, err = parseRun(h.Get(HeaderRun)); err != nil {
		return o, err
	}
	if v := h.Get(HeaderSlot); v != "" {
		if o.slot, err = u.slot(v); err != nil {
			return o, fmt.Errorf("outlast: %s %q: %w", HeaderSlot, v, err)
		}
	}
	switch v := strings.ToLower(strings.TrimSpace(h.Get(HeaderProgress))); v {
	case "":
	case "sse":
		o.progress = true
	default:
		return o, fmt.Errorf("outlast: %s %q: the only value is \"sse\"", HeaderProgress, v)
	}
	return o, nil
}

// parseDeadline reads Outlast-Timeout and Outlast-Deadline; the earlier
// governs, and neither reaches past now+max (zero: no bound), the
// operator's --max-timeout.
func parseDeadline(h http.Header, now time.Time, max time.Duration) (time.Time, error) {
	var deadline time.Time
	if v := h.Get(HeaderTimeout); v != "" {
		d, err := parse.Duration(v)
		if err != nil || d <= 0 {
			return deadline, fmt.Errorf("outlast: %s %q: want a positive duration such as 300s", HeaderTimeout, v)
		}
		deadline = now.Add(d)
	}
	if v := h.Get(HeaderDeadline); v != "" {
		t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(v))
		if err != nil {
			return deadline, fmt.Errorf("outlast: %s %q: want an RFC 3339 time such as 2026-11-29T12:00:00Z", HeaderDeadline, v)
		}
		if deadline.IsZero() || t.Before(deadline) {
			deadline = t // the earlier of the two governs
		}
	}
	if limit := now.Add(max); max > 0 && !deadline.IsZero() && deadline.After(limit) {
		deadline = limit
	}
	return deadline, nil
}

// parsePolicy applies the policy headers to base, the operator's policy,
// which they may only tighten (see tighten), for a request with a deadline
// or without. Without a base policy there is nothing to tighten, and the
// headers cannot add retries.
func parsePolicy(h http.Header, base *outlast.Policy, hasDeadline bool) (*outlast.Policy, error) {
	switch v := strings.ToLower(strings.TrimSpace(h.Get(HeaderRetry))); v {
	case "", "on":
	case "off":
		return nil, nil
	default:
		return nil, fmt.Errorf("outlast: %s %q: want \"off\" or \"on\"", HeaderRetry, v)
	}
	var ask asked
	if v := h.Get(HeaderWaits); v != "" {
		w, err := parse.Waits(v)
		if err != nil {
			return nil, fmt.Errorf("outlast: %s %q: %w", HeaderWaits, v, err)
		}
		ask.waits = w
	}
	if v := h.Get(HeaderReserve); v != "" {
		d, err := parse.Duration(v)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("outlast: %s %q: want a duration such as 60s, or 0 for none", HeaderReserve, v)
		}
		ask.reserve, ask.hasReserve = d, true
	}
	if v := h.Get(HeaderMaxAttempts); v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("outlast: %s %q: want a whole number, 0 for no cap", HeaderMaxAttempts, v)
		}
		ask.maxAttempts, ask.hasMaxAttempts = n, true
	}
	if base == nil || (ask.waits == nil && !ask.hasReserve && !ask.hasMaxAttempts) {
		return base, nil
	}
	p := tighten(*base, ask, hasDeadline)
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("outlast: the Outlast-* policy headers: %w", err)
	}
	return &p, nil
}

// asked is what a request's policy headers ask for.
type asked struct {
	waits                      []time.Duration // nil: not asked
	reserve                    time.Duration   // 0: none
	maxAttempts                int             // 0: no cap
	hasReserve, hasMaxAttempts bool
}

// tighten returns p with what a request asked for, but never looser than
// p: whatever a client sends, the upstream sees no more attempts, and no
// sooner, than the operator's policy allows.
//   - Retry k waits at least what p waits before retry k, both lists read
//     as a Policy reads them (past the end, the last entry repeats, as it
//     does under a deadline), and there are as many waits as p has:
//     without a deadline, their number bounds the retries.
//   - Without a deadline (hasDeadline false), a shorter list than p's
//     means fewer retries: MaxAttempts is at most one more than its
//     length.
//   - The reserve is at least p's; 0, none, is p's.
//   - MaxAttempts is at most p's cap, if it has one; 0, no cap, is p's.
func tighten(p outlast.Policy, a asked, hasDeadline bool) outlast.Policy {
	if a.waits != nil {
		at := func(w []time.Duration, k int) time.Duration { return w[min(k, len(w)-1)] }
		waits := make([]time.Duration, len(p.Waits))
		for k := range waits {
			waits[k] = max(at(a.waits, k), p.Waits[k])
		}
		if !hasDeadline && len(a.waits) < len(p.Waits) {
			a.maxAttempts, a.hasMaxAttempts = capAttempts(a, len(a.waits)+1), true
		}
		p.Waits = waits
	}
	if a.hasReserve {
		floor := p.Reserve // p's reserve in force, as Policy reads it
		switch {
		case floor == 0:
			floor = outlast.DefaultReserve
		case floor < 0:
			floor = 0
		}
		p.Reserve = parse.ZeroIsNone(max(a.reserve, floor))
	}
	if a.hasMaxAttempts && a.maxAttempts > 0 && (p.MaxAttempts == 0 || a.maxAttempts < p.MaxAttempts) {
		p.MaxAttempts = a.maxAttempts
	}
	return p
}

// capAttempts returns the smaller of n and the cap a asked for, if any.
func capAttempts(a asked, n int) int {
	if a.hasMaxAttempts && a.maxAttempts > 0 {
		return min(a.maxAttempts, n)
	}
	return n
}

// maxRunLen bounds Outlast-Run, which the record stores.
const maxRunLen = 200

// parseRun reads Outlast-Run, which the record keeps: at most maxRunLen
// bytes of valid UTF-8, without control characters.
func parseRun(v string) (string, error) {
	v = strings.TrimSpace(v)
	switch {
	case len(v) > maxRunLen:
		return "", fmt.Errorf("outlast: %s is %d bytes long; the most is %d", HeaderRun, len(v), maxRunLen)
	case !utf8.ValidString(v):
		return "", fmt.Errorf("outlast: %s %q: not valid UTF-8", HeaderRun, v)
	case strings.ContainsFunc(v, unicode.IsControl):
		return "", fmt.Errorf("outlast: %s %q: control characters are not allowed", HeaderRun, v)
	}
	return v, nil
}

// hopHeaders are the hop-by-hop headers of RFC 9110 §7.6.1, and the ones
// older proxies use, which a proxy must not forward.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// forwardHeader returns the headers to send upstream: the caller's, less
// hop-by-hop headers and the gateway's own, but keeping Outlast-Attempt
// (see HeaderTimeout's group). Authorization and x-api-key pass through.
func forwardHeader(in http.Header) http.Header {
	out := make(http.Header, len(in))
	for k, v := range in {
		if strings.HasPrefix(k, "Outlast-") && k != outlast.AttemptHeader {
			continue
		}
		out[k] = v
	}
	removeHop(out)
	return out
}

// copyHeader copies an upstream response's headers to the caller's,
// less hop-by-hop headers; the caller's own hop-by-hop headers, such as
// the gateway's Connection: close, stay.
func copyHeader(dst, src http.Header) {
	h := make(http.Header, len(src))
	for k, v := range src {
		h[k] = append([]string(nil), v...)
	}
	removeHop(h)
	for k, v := range h {
		dst[k] = v
	}
}

func removeHop(h http.Header) {
	// RFC 9110 §7.6.1: headers named in Connection are hop-by-hop too.
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// token is the gateway's token, kept as its digest so that comparing a
// request's with it takes the same time whatever either's length.
type token struct{ sum [sha256.Size]byte }

func newToken(s string) *token { return &token{sha256.Sum256([]byte(s))} }

// admits reports, in constant time, whether s is the token.
func (t *token) admits(s string) bool {
	got := sha256.Sum256([]byte(s))
	return subtle.ConstantTimeCompare(got[:], t.sum[:]) == 1
}

// forbiddenTrailer returns the name of a trailer that must come as a
// header, if t has one (RFC 9110 §6.5.1): one that frames or routes the
// message, or says how to read its content or who sends it. The gateway
// forwards no trailer: it sends the body it buffered with its length.
func forbiddenTrailer(t http.Header) string {
	for k := range t {
		switch http.CanonicalHeaderKey(k) {
		case "Content-Length", "Transfer-Encoding", "Host", "Content-Type", "Content-Encoding",
			"Content-Range", "Trailer", "Authorization", "Cookie", "Connection", "Te", "Upgrade":
			return k
		}
	}
	return ""
}

// observedHeader is the record's Request.Header: a copy of h without the
// credential headers (redact's one list) and Config.Redact, made only when
// an observer reads it. The upstream still gets them all.
func (g *Gateway) observedHeader(h http.Header) http.Header {
	if !g.cfg.Observer.Headers {
		return nil
	}
	return redact.Header(h, g.cfg.Redact)
}
