package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/apierr"
	"github.com/outlast-llm/outlast/internal/parse"
	"github.com/outlast-llm/outlast/internal/redact"
	"github.com/outlast-llm/outlast/record"
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

// headerSDKTimeout is the timeout, in seconds, that the Stainless-made
// SDKs send with each request: Anthropic's always (600 by default), and
// OpenAI's Python SDK. The gateway takes it as the request's deadline
// when the request names none of its own.
const headerSDKTimeout = "X-Stainless-Timeout"

// options are what a request's Outlast-* headers ask for, held to the
// upstream's settings.
type options struct {
	deadline time.Time       // zero: none
	source   string          // where deadline came from: a record.Deadline* source, "" for none
	policy   *outlast.Policy // the request's policy, nil for none; the operator's, or own
	own      outlast.Policy  // the request's own policy, when policy points to it
	run      string
	slot     string // "" or a slot the upstream has, 0 to Slots-1
	progress bool
	outer    bool // an outer outlast layer is retrying: one attempt only
	off      bool // Outlast-Retry: off: no retries
}

// parse reads the Outlast-* headers, and the SDK's timeout, of a request
// that arrived at now for upstream u into o. The headers may only tighten
// the operator's settings (see tighten and parseDeadline), but for the
// reserve, which is the caller's own. Its errors name the header.
func (o *options) parse(h http.Header, u *Upstream, now time.Time) error {
	*o = options{outer: header(h, outlast.AttemptHeader) != ""}
	var err error
	if o.deadline, o.source, err = parseDeadline(h, now, u); err != nil {
		return err
	}
	if err = o.parsePolicy(h, u, now); err != nil {
		return err
	}
	if o.outer {
		o.policy = nil
	}
	if o.run, err = parseRun(header(h, HeaderRun)); err != nil {
		return err
	}
	if v := header(h, HeaderSlot); v != "" {
		if o.slot, err = u.slot(v); err != nil {
			return fmt.Errorf("outlast: %s %q: %w", HeaderSlot, v, err)
		}
	}
	switch v := strings.ToLower(strings.TrimSpace(header(h, HeaderProgress))); v {
	case "":
	case "sse":
		o.progress = true
	default:
		return fmt.Errorf("outlast: %s %q: the only value is \"sse\"", HeaderProgress, v)
	}
	return nil
}

// parseDeadline returns a request's deadline and its source. A deadline
// of the request's own, Outlast-Timeout or Outlast-Deadline (the earlier
// governs), comes first; then the SDK's timeout, less a margin
// (sdkDeadline); then the upstream's Timeout. None reaches past the
// operator's MaxTimeout after now.
func parseDeadline(h http.Header, now time.Time, u *Upstream) (time.Time, string, error) {
	var deadline time.Time
	source := ""
	if v := header(h, HeaderTimeout); v != "" {
		d, err := parse.Duration(v)
		if errors.Is(err, parse.ErrTooLong) && !strings.HasPrefix(strings.TrimSpace(v), "-") {
			// Longer than a Duration holds: as any long one, cut to
			// MaxTimeout below.
			d, err = maxSDKTimeout, nil
		}
		if err != nil || d <= 0 {
			return deadline, "", fmt.Errorf("outlast: %s %q: want a positive duration such as 300s", HeaderTimeout, v)
		}
		deadline, source = now.Add(d), record.DeadlineOutlast
	}
	if v := header(h, HeaderDeadline); v != "" {
		t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(v))
		if err != nil {
			return deadline, "", fmt.Errorf("outlast: %s %q: want an RFC 3339 time such as 2026-11-29T12:00:00Z", HeaderDeadline, v)
		}
		if deadline.IsZero() || t.Before(deadline) {
			deadline = t // the earlier of the two governs
		}
		source = record.DeadlineOutlast
	}
	if deadline.IsZero() {
		if d, ok := sdkDeadline(header(h, headerSDKTimeout)); ok {
			deadline, source = now.Add(d), record.DeadlineSDK
		} else if u.Timeout > 0 {
			deadline, source = now.Add(u.Timeout), record.DeadlineDefault
		}
	}
	if limit := now.Add(u.MaxTimeout); u.MaxTimeout > 0 && !deadline.IsZero() && deadline.After(limit) {
		deadline = limit
	}
	return deadline, source, nil
}

// maxSDKTimeout bounds the SDK's timeout as it is read, so that the
// seconds cannot overflow a Duration; MaxTimeout bounds it further.
const maxSDKTimeout = 100 * 365 * 24 * time.Hour

// sdkDeadline reads the SDK's timeout v, in seconds, and returns the
// request's deadline after its arrival: the timeout less a tenth of it,
// and at most 5 s less, so that the SDK reads the gateway's answer rather
// than giving up a moment before it and sending the request again. A
// value that is not a positive number of seconds is not the gateway's
// to refuse, since the header is the SDK's: it is ignored.
func sdkDeadline(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	d, ok := wholeSeconds(v)
	if !ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(f > 0) {
			return 0, false
		}
		d = maxSDKTimeout
		if f < maxSDKTimeout.Seconds() {
			d = time.Duration(f * float64(time.Second))
		}
	}
	return d - min(d/10, 5*time.Second), d > 0
}

// wholeSeconds reads v if it is one to nine digits, as the Node SDKs
// send their timeout ("600"), without strconv.ParseFloat: ok is false
// for anything else, which sdkDeadline then parses as a float.
func wholeSeconds(v string) (d time.Duration, ok bool) {
	if len(v) == 0 || len(v) > 9 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return time.Duration(n) * time.Second, true
}

// parsePolicy sets the request's policy: the policy headers applied to
// u.Policy, the operator's, which they may only tighten (see tighten),
// and the reserve of a request with a deadline held to u.ReserveShare of
// it when the request sets none of its own. Without an operator's policy
// there is nothing to tighten, and the headers cannot add retries.
func (o *options) parsePolicy(h http.Header, u *Upstream, now time.Time) error {
	o.policy = nil
	switch v := strings.ToLower(strings.TrimSpace(header(h, HeaderRetry))); v {
	case "", "on":
	case "off":
		o.off = true
		return nil
	default:
		return fmt.Errorf("outlast: %s %q: want \"off\" or \"on\"", HeaderRetry, v)
	}
	ask, err := parseAsked(h)
	if err != nil || u.Policy == nil {
		return err
	}
	o.policy = u.Policy
	if ask.waits != nil || ask.hasReserve || ask.hasMaxAttempts {
		o.own = tighten(*u.Policy, ask, !o.deadline.IsZero())
		if err := o.own.Validate(); err != nil {
			return fmt.Errorf("outlast: the Outlast-* policy headers: %w", err)
		}
		o.policy = &o.own
	}
	if ask.hasReserve || u.ReserveShare <= 0 || o.deadline.IsZero() {
		return nil
	}
	// The reserve in force is at most the share of the deadline, so
	// that a short deadline still leaves room for retries.
	share := time.Duration(u.ReserveShare * float64(o.deadline.Sub(now)))
	if share >= o.policy.ReserveInForce() {
		return nil
	}
	if o.policy != &o.own {
		o.own = *o.policy
		o.policy = &o.own
	}
	o.own.Reserve = share
	if share <= 0 {
		o.own.Reserve = -1 // none: Policy's zero is the default
	}
	return nil
}

// parseAsked reads what the policy headers ask for. Its errors name the
// header.
func parseAsked(h http.Header) (asked, error) {
	var ask asked
	if v := header(h, HeaderWaits); v != "" {
		w, err := parse.Waits(v)
		if err != nil {
			return ask, fmt.Errorf("outlast: %s %q: %w", HeaderWaits, v, err)
		}
		ask.waits = w
	}
	if v := header(h, HeaderReserve); v != "" {
		d, err := parse.Duration(v)
		if err != nil || d < 0 {
			return ask, fmt.Errorf("outlast: %s %q: want a duration such as 60s, or 0 for none", HeaderReserve, v)
		}
		ask.reserve, ask.hasReserve = d, true
	}
	if v := header(h, HeaderMaxAttempts); v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return ask, fmt.Errorf("outlast: %s %q: want a whole number, 0 for no cap", HeaderMaxAttempts, v)
		}
		ask.maxAttempts, ask.hasMaxAttempts = n, true
	}
	return ask, nil
}

// asked is what a request's policy headers ask for.
type asked struct {
	waits                      []time.Duration // nil: not asked
	reserve                    time.Duration   // 0: none
	maxAttempts                int             // 0: no cap
	hasReserve, hasMaxAttempts bool
}

// tighten returns p with what a request asked for, never looser than p in
// its waits and attempts: whatever a client sends, the upstream sees no
// more attempts, and none sooner, than the operator's waits and cap
// allow. The reserve is the request's own: the time its caller needs
// after the last attempt is the caller's to know.
//   - Retry k waits at least what p waits before retry k, both lists read
//     as a Policy reads them (past the end, the last entry repeats, as it
//     does under a deadline), and there are as many waits as p has:
//     without a deadline, their number bounds the retries.
//   - Without a deadline (hasDeadline false), a shorter list than p's
//     means fewer retries: MaxAttempts is at most one more than its
//     length.
//   - The reserve is the request's, lower or higher than p's; 0 is none.
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
		p.Reserve = parse.ZeroIsNone(a.reserve)
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
	case strings.ContainsFunc(v, unkept):
		return "", fmt.Errorf("outlast: %s %q: control and bidirectional formatting characters are not allowed", HeaderRun, v)
	}
	return v, nil
}

// header returns the first value of h's key k, which is canonical, as
// every header name the gateway reads is: h.Get(k) without Get's
// canonicalization of k, which a request would pay a dozen times.
func header(h http.Header, k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// isHop reports whether k, in the canonical form of an http.Header's
// keys, is a hop-by-hop header of RFC 9110 §7.6.1 or one that older
// proxies use, which a proxy must not forward.
func isHop(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// forwardHeader returns the headers to send upstream: the caller's, in,
// less hop-by-hop headers and the gateway's own, but keeping
// Outlast-Attempt (see HeaderTimeout's group). Authorization and
// x-api-key pass through. With take, the headers that do not go are
// removed from in, which is returned: the caller's map becomes the
// request's own (see package internal/owned), which costs no copy.
// Without take, the result is a new map, whose values are shared with in
// and never changed.
func forwardHeader(in http.Header, take bool) http.Header {
	if take {
		removeNamed(in, in) // before the loop drops Connection, which names them
		for k := range in {
			if !forwarded(k) {
				delete(in, k)
			}
		}
		return in
	}
	// One more for the upstream's Transport, which adds Outlast-Attempt
	// to it in place.
	out := make(http.Header, len(in)+1)
	for k, v := range in {
		if forwarded(k) {
			out[k] = v
		}
	}
	removeNamed(out, in)
	return out
}

// forwarded reports whether a header named k, in canonical form, may go
// upstream, unless the Connection header names it.
func forwarded(k string) bool {
	return !isHop(k) && (!strings.HasPrefix(k, "Outlast-") || k == outlast.AttemptHeader)
}

// copyHeader copies an upstream response's headers to the caller's,
// less hop-by-hop headers, which it removes from src, and Outlast-Error,
// which names an error of the gateway's own; the caller's own hop-by-hop
// headers, such as the gateway's Connection: close, stay. The values are
// shared with src, which nothing changes afterwards.
func copyHeader(dst, src http.Header) {
	removeHop(src) // an upstream response's header is the gateway's to change
	delete(src, HeaderError)
	for k, v := range src {
		dst[k] = v
	}
}

func removeHop(h http.Header) {
	removeNamed(h, h)
	for k := range h {
		if isHop(k) {
			delete(h, k)
		}
	}
}

// removeNamed removes from h the headers that conn's Connection header
// names, which are hop-by-hop too (RFC 9110 §7.6.1). A name that is
// itself hop-by-hop, as keep-alive is, is left to isHop.
func removeNamed(h, conn http.Header) {
	for _, v := range conn["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			f = strings.TrimSpace(f)
			if f == "" || strings.EqualFold(f, "keep-alive") {
				continue // what SDKs send, which isHop removes
			}
			if f = http.CanonicalHeaderKey(f); !isHop(f) {
				delete(h, f)
			}
		}
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
