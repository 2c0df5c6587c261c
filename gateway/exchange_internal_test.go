package gateway

import (
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/outlast-llm/outlast"
)

// bodyFor renames the model to the JSON string of the upstream's name for
// it, and the request pays one allocation at most, the body it sends: the
// names' JSON is made once, with the upstream.
func TestBodyFor(t *testing.T) {
	// Not parallel: AllocsPerRun counts every allocation in the process.
	u, err := newUpstream(0, Upstream{URL: &url.URL{Scheme: "http", Host: "up.test"}, Models: map[string]string{
		"gpt-4o": "my-deployment",
		"quoted": `a "b"`, // a name JSON must escape
	}}, nil, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ body, want string }{
		{`{"model":"gpt-4o","messages":[]}`, `{"model":"my-deployment","messages":[]}`},
		{`{"model":"quoted"}`, `{"model":"a \"b\""}`},
		// A model the upstream does not rename is sent as it came.
		{`{"model":"other"}`, `{"model":"other"}`},
	} {
		body := []byte(c.body)
		f, _ := scanBody(body)
		x := &exchange{body: body, fields: f}
		if got := string(x.bodyFor(u)); got != c.want {
			t.Errorf("%s: got %s, want %s", c.body, got, c.want)
		}
		// One at most: a small body may be made on the stack.
		if n := testing.AllocsPerRun(100, func() { x.bodyFor(u) }); n > 1 {
			t.Errorf("%s: got %v allocations, want at most 1", c.body, n)
		}
	}
}

// TestForwardHeader checks what goes upstream: the caller's headers less
// hop-by-hop ones, those Connection names and the gateway's own, with
// Outlast-Attempt kept, in a map of its own, so that neither the
// upstream's credential nor the Transport's attempt header ever changes
// the caller's request; or, taken, in the caller's own map, stripped.
func TestForwardHeader(t *testing.T) {
	in := http.Header{
		"Authorization":   {"Bearer sk-caller"},
		"Content-Type":    {"application/json"},
		"Outlast-Attempt": {"1"},
	}
	own := forwardHeader(in, false)
	if !maps.EqualFunc(own, in, slices.Equal) {
		t.Errorf("clean headers: got %v, want %v", own, in)
	}
	own.Set("Authorization", "Bearer sk-upstream")
	own.Set("Outlast-Attempt", "2")
	if in.Get("Authorization") != "Bearer sk-caller" || in.Get("Outlast-Attempt") != "1" {
		t.Errorf("a change to the upstream's copy reached the caller's headers: %v", in)
	}
	dirty := in.Clone()
	dirty["Connection"] = []string{"X-Hop"}
	dirty["X-Hop"] = []string{"1"}
	dirty["Keep-Alive"] = []string{"timeout=5"}
	dirty["Outlast-Timeout"] = []string{"30s"}
	got := forwardHeader(dirty, false)
	for _, k := range []string{"Connection", "X-Hop", "Keep-Alive", "Outlast-Timeout"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s was forwarded", k)
		}
	}
	if got.Get("Outlast-Attempt") != "1" || got.Get("Authorization") != "Bearer sk-caller" || len(dirty) != 7 {
		t.Errorf("got %v from %v; want Outlast-Attempt and Authorization kept, the caller's headers unchanged", got, dirty)
	}
	taken := forwardHeader(dirty, true)
	if !maps.EqualFunc(taken, got, slices.Equal) {
		t.Errorf("taken: got %v, want %v", taken, got)
	}
	taken.Set("X-Upstream", "1")
	if dirty.Get("X-Upstream") != "1" {
		t.Error("taken: the result is a copy, want the caller's own map")
	}
}

// An exchange's first request upstream takes the caller's header map,
// stripped, when no other upstream can be tried: later ones, a stream's
// continuation, copy it. With fallbacks every request copies it, so that
// the primary's credential never reaches a fallback that has none.
func TestOutboundTakesTheHeaderOnce(t *testing.T) {
	newUp := func(auth *Credential) *upstream {
		u, err := newUpstream(0, Upstream{URL: &url.URL{Scheme: "http", Host: "up.test"}, Auth: auth}, nil, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	newReq := func() *http.Request {
		r, _ := http.NewRequest(http.MethodPost, "http://gateway.test/v1/chat/completions", nil)
		r.Header = http.Header{
			"Authorization":   {"Bearer sk-caller"},
			"Connection":      {"keep-alive"},
			"Content-Type":    {"application/json"},
			"Outlast-Timeout": {"30s"},
		}
		return r
	}
	want := http.Header{"Authorization": {"Bearer sk-caller"}, "Content-Type": {"application/json"}}

	u := newUp(nil)
	r := newReq()
	x := &exchange{up: u, cur: u, r: r, path: "/v1/chat/completions"}
	first := x.outbound(t.Context(), u)
	if !maps.EqualFunc(first.Header, want, slices.Equal) {
		t.Errorf("first request: headers %v, want %v", first.Header, want)
	}
	first.Header.Set("X-Mark", "1")
	if r.Header.Get("X-Mark") != "1" {
		t.Error("first request: its headers are a copy, want the caller's map")
	}
	second := x.outbound(t.Context(), u)
	second.Header.Set("X-Second", "1")
	if r.Header.Get("X-Second") != "" || second.Header.Get("Authorization") != "Bearer sk-caller" {
		t.Errorf("second request: headers %v, want a copy of the caller's", second.Header)
	}

	primary, fallback := newUp(NewCredential("Authorization", "Bearer sk-held")), newUp(nil)
	primary.chain = []*upstream{primary, fallback}
	r = newReq()
	x = &exchange{up: primary, cur: primary, r: r, path: "/v1/chat/completions"}
	if got := x.outbound(t.Context(), primary).Header.Get("Authorization"); got != "Bearer sk-held" {
		t.Errorf("primary: Authorization %q, want the held credential", got)
	}
	if got := x.outbound(t.Context(), fallback).Header.Get("Authorization"); got != "Bearer sk-caller" {
		t.Errorf("fallback: Authorization %q, want the caller's", got)
	}
}

// FuzzForwardHeader checks forwardHeader against the rule as RFC 9110
// §7.6.1 and httputil.ReverseProxy state it: copy the headers, delete
// each one Connection names, then the hop-by-hop ones, and the gateway's
// own but Outlast-Attempt.
func FuzzForwardHeader(f *testing.F) {
	f.Add("keep-alive", "X-Hop", "1", "Outlast-Timeout", "30s")
	f.Add("close, X-Hop ,te", "Te", "trailers", "Keep-Alive", "timeout=5")
	f.Add(" x-hop,, Upgrade", "X-Hop", "", "Outlast-Attempt", "2")
	f.Fuzz(func(t *testing.T, conn, k1, v1, k2, v2 string) {
		in := http.Header{"Authorization": {"Bearer sk"}, "Connection": {conn}}
		in[http.CanonicalHeaderKey(k1)] = []string{v1}
		in[http.CanonicalHeaderKey(k2)] = []string{v2}
		want := in.Clone()
		for _, v := range want["Connection"] {
			for _, f := range strings.Split(v, ",") {
				if f = strings.TrimSpace(f); f != "" {
					want.Del(f)
				}
			}
		}
		for _, k := range []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
			"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
			want.Del(k)
		}
		for k := range want {
			if strings.HasPrefix(k, "Outlast-") && k != outlast.AttemptHeader {
				delete(want, k)
			}
		}
		got := forwardHeader(in, false)
		if !maps.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("forwardHeader(%v)\n= %v\nwant %v", in, got, want)
		}
		if taken := forwardHeader(in.Clone(), true); !maps.EqualFunc(taken, want, slices.Equal) {
			t.Fatalf("forwardHeader(%v), taken\n= %v\nwant %v", in, taken, want)
		}
		resp := in.Clone()
		removeHop(resp)
		for k := range resp {
			if strings.HasPrefix(k, "Outlast-") && k != outlast.AttemptHeader {
				delete(resp, k)
			}
		}
		if !maps.EqualFunc(resp, want, slices.Equal) {
			t.Fatalf("removeHop(%v)\n= %v\nwant %v", in, resp, want)
		}
	})
}

// header reads a name as it is, without Get's canonicalization: a name
// that is not canonical would never match the server's map, and the
// caller's header would go unseen.
func TestHeaderNamesAreCanonical(t *testing.T) {
	for _, k := range []string{
		outlast.AttemptHeader, HeaderTimeout, HeaderDeadline, HeaderRetry, HeaderWaits, HeaderReserve,
		HeaderMaxAttempts, HeaderRun, HeaderSlot, HeaderProgress, HeaderToken, headerSDKTimeout, "Accept",
	} {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("%q is read as it is, but its canonical form is %q", k, c)
		}
	}
	h := http.Header{}
	h.Set("outlast-timeout", "30s")
	if got := header(h, HeaderTimeout); got != "30s" {
		t.Errorf("header(%v, %q) = %q, want 30s", h, HeaderTimeout, got)
	}
}
