package gateway

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

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

	HeaderRequestID = "Outlast-Request-Id" // response: the request's ID in the record
	HeaderAttempts  = "Outlast-Attempts"   // response: how many attempts were made
	HeaderError     = apierr.Header        // response: the kind of an error the gateway made
)

// headerShouldRetry tells the OpenAI and Anthropic SDKs whether to retry a
// failure, overriding their own judgement of its status. The gateway sends
// "false" on a failure it has already retried or decided.
const headerShouldRetry = "X-Should-Retry"

// maxRunLen bounds Outlast-Run, which the record stores.
const maxRunLen = 200

// options are what a request's Outlast-* headers ask for.
type options struct {
	deadline time.Time       // zero: none
	policy   *outlast.Policy // the request's policy, nil for none
	run      string
	slot     string // "" or a non-negative integer
	progress bool
	outer    bool // an outer outlast layer is retrying: one attempt only
}

// parseOptions reads the Outlast-* headers of a request that arrived at
// now, starting from the upstream's policy. Its errors name the header.
func parseOptions(h http.Header, base *outlast.Policy, now time.Time) (options, error) {
	o := options{policy: base, outer: h.Get(outlast.AttemptHeader) != ""}
	var err error
	if o.deadline, err = parseDeadline(h, now); err != nil {
		return o, err
	}
	if o.policy, err = parsePolicy(h, base); err != nil {
		return o, err
	}
	if o.outer {
		o.policy = nil
	}
	if o.run, err = parseRun(h.Get(HeaderRun)); err != nil {
		return o, err
	}
	if v := h.Get(HeaderSlot); v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return o, fmt.Errorf("outlast: %s %q: want a slot number, 0 or more", HeaderSlot, v)
		}
		o.slot = strconv.Itoa(n)
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

func parseDeadline(h http.Header, now time.Time) (time.Time, error) {
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
	return deadline, nil
}

// parsePolicy applies the policy headers to a copy of base.
func parsePolicy(h http.Header, base *outlast.Policy) (*outlast.Policy, error) {
	switch v := strings.ToLower(strings.TrimSpace(h.Get(HeaderRetry))); v {
	case "", "on":
	case "off":
		return nil, nil
	default:
		return nil, fmt.Errorf("outlast: %s %q: want \"off\" or \"on\"", HeaderRetry, v)
	}
	waits, reserve, maxAttempts := h.Get(HeaderWaits), h.Get(HeaderReserve), h.Get(HeaderMaxAttempts)
	if waits == "" && reserve == "" && maxAttempts == "" {
		return base, nil
	}
	var p outlast.Policy
	if base != nil {
		p = *base
	}
	if waits != "" {
		w, err := parse.Waits(waits)
		if err != nil {
			return nil, fmt.Errorf("outlast: %s %q: %w", HeaderWaits, waits, err)
		}
		p.Waits = w
	}
	if reserve != "" {
		d, err := parse.Duration(reserve)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("outlast: %s %q: want a duration such as 60s, or 0 for none", HeaderReserve, reserve)
		}
		p.Reserve = parse.ZeroIsNone(d)
	}
	if maxAttempts != "" {
		n, err := strconv.Atoi(strings.TrimSpace(maxAttempts))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("outlast: %s %q: want a whole number, 0 for no cap", HeaderMaxAttempts, maxAttempts)
		}
		p.MaxAttempts = n
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("outlast: the Outlast-* policy headers: %w", err)
	}
	return &p, nil
}

func parseRun(v string) (string, error) {
	v = strings.TrimSpace(v)
	if len(v) > maxRunLen {
		return "", fmt.Errorf("outlast: %s is %d bytes long; the most is %d", HeaderRun, len(v), maxRunLen)
	}
	for _, c := range v {
		if c < 0x20 || c == 0x7f {
			return "", fmt.Errorf("outlast: %s %q: control characters are not allowed", HeaderRun, v)
		}
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
// less hop-by-hop headers.
func copyHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = append([]string(nil), v...)
	}
	removeHop(dst)
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

// observedHeader is the record's Request.Header: a copy of h without the
// credential headers (redact's one list) and Config.Redact, made only when
// an observer reads it. The upstream still gets them all.
func (g *Gateway) observedHeader(h http.Header) http.Header {
	if !g.cfg.Observer.Headers {
		return nil
	}
	return redact.Header(h, g.cfg.Redact)
}
