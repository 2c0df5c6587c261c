package gateway

import (
	"github.com/outlast-llm/outlast"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// target returns the upstream URL for path and query: the upstream's path
// joined to the request's, and both queries, as
// httputil.NewSingleHostReverseProxy does.
func (u *upstream) target(path, rawQuery string) *url.URL {
	t := *u.URL
	t.User = nil
	t.Path = joinPath(u.URL.Path, path)
	t.RawPath = ""
	switch {
	case u.URL.RawQuery == "":
		t.RawQuery = rawQuery
	case rawQuery != "":
		t.RawQuery = u.URL.RawQuery + "&" + rawQuery
	}
	return &t
}

func joinPath(a, b string) string {
	switch as, bs := strings.HasSuffix(a, "/"), strings.HasPrefix(b, "/"); {
	case as && bs:
		return a + b[1:]
	case !as && !bs:
		return a + "/" + b
	}
	return a + b
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

// ewma is a moving average of durations, safe for concurrent use.
type ewma struct{ ns atomic.Int64 }

func (e *ewma) observe(d time.Duration) {
	for {
		old := e.ns.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if e.ns.CompareAndSwap(old, next) {
			return
		}
	}
}

// busyRetryAfter estimates, in whole seconds, when a refused request might
// find room: the queue ahead of it, served at the upstream's recent pace.
func (u *upstream) busyRetryAfter() int {
	_, waiting, _ := u.gates.load()
	per := time.Duration(u.latency.ns.Load())
	if per <= 0 {
		per = time.Second
	}
	slots := max(u.Slots, 1)
	d := time.Duration(float64(per) * float64(waiting+1) / float64(slots))
	return max(1, int(math.Ceil(d.Seconds())))
}

// credentials are the request headers never handed to observers.
var credentials = []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "Api-Key", "X-Goog-Api-Key"}

// observedHeader is Request.Header: a copy of h without credentials, made
// only when an observer may read it.
func (g *Gateway) observedHeader(h http.Header) http.Header {
	o := g.cfg.Observer
	if o.Queued == nil && o.AttemptStart == nil && o.AttemptEnd == nil && o.Done == nil {
		return nil
	}
	return redact(h, g.cfg.Redact)
}

// redact copies h without credentials and the headers named in extra.
func redact(h http.Header, extra []string) http.Header {
	out := make(http.Header, len(h))
	for k, v := range h {
		if !named(k, credentials) && !named(k, extra) {
			out[k] = v
		}
	}
	return out
}

func named(k string, names []string) bool {
	for _, n := range names {
		if strings.EqualFold(k, n) {
			return true
		}
	}
	return false
}
