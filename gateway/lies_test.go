package gateway_test

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/record"
)

// An upstream that answers 101 Switching Protocols to a plain request,
// with no Upgrade, fails the attempt, with an error the policy does not
// know and so does not retry: forwarded, the 101 would leave the caller
// waiting on a protocol nobody speaks.
func TestUpstreamSwitchesProtocols(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n\r\n")
		brw.Flush()
		<-r.Context().Done() // and says nothing more until the gateway leaves
	})
	base, _ := gw(t, up, nil)
	client := &http.Client{Timeout: 20 * time.Second} // a bound on a hang
	resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "101 Switching Protocols") {
		t.Errorf("got %d %s, want 502 naming the 101", resp.StatusCode, body)
	}
}

// The gateway's own error, which quotes the upstream's answer, never
// carries the credential the gateway holds for it, even when the upstream
// echoes it.
func TestErrorQuoteHidesHeldKey(t *testing.T) {
	const key = "sk-HELD-0123456789"
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"error":{"message":"bad key `+r.Header.Get("Authorization")+`"}}`)
	})
	base, _ := gw(t, up, func(u *gateway.Upstream) { u.Auth = gateway.NewCredential("Authorization", key) })
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	req.Header.Set("Outlast-Progress", "sse") // its retry comment commits a 200 stream: the failure comes as an event quoting the upstream
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var all strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		all.WriteString(sc.Text() + "\n")
	}
	got := all.String()
	if !strings.Contains(got, "event: error") || !strings.Contains(got, "bad key") {
		t.Fatalf("got %q, want an error event quoting the upstream", got)
	}
	if strings.Contains(got, key) {
		t.Errorf("the caller got the gateway's key: %q", got)
	}
}

// After progress comments have begun an event stream, an answer that is
// not one comes as an error event that says why: a request that asks for
// an event stream in its Accept header but not in its body gets the
// upstream's JSON, which the stream cannot carry.
func TestProgressThenWholeAnswer(t *testing.T) {
	up := newUpstream(t, status(http.StatusServiceUnavailable, ""), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","object":"chat.completion","choices":[]}`)
	})
	base, _ := gw(t, up, nil)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Outlast-Progress", "sse")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"event: error", `with \"application/json\", not the event stream`, `does not ask for one (\"stream\": true)`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("got %s, want it to contain %s", b, want)
		}
	}
}

// A status path goes with the upstream's held credential in place of the
// caller's, as a model request does: a caller's key for another provider
// never reaches this upstream, and /v1/models is answered with the key
// the gateway holds.
func TestStatusPathTakesHeldCredential(t *testing.T) {
	up := newUpstream(t, status(200, `{"data":[]}`))
	base, _ := gw(t, up, func(u *gateway.Upstream) { u.Auth = gateway.NewCredential("api-key", "held-key") })
	resp, _ := send(t, http.MethodGet, base+"/v1/models", "", map[string]string{"Authorization": "Bearer caller-key", "X-Api-Key": "caller-key"})
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/models: %d", resp.StatusCode)
	}
	h := up.request(0).Header
	if h.Get("Api-Key") != "held-key" || h.Get("Authorization") != "" || h.Get("X-Api-Key") != "" {
		t.Errorf("the upstream got api-key %q, Authorization %q, x-api-key %q; want the held key alone",
			h.Get("Api-Key"), h.Get("Authorization"), h.Get("X-Api-Key"))
	}
}

// A body that starts with a UTF-8 byte order mark is read as any other
// (JSON forbids one, but Python's json and nlohmann's, llama.cpp's, skip
// it, so the upstream streams): its "stream": true makes it a stream.
func TestBodyWithByteOrderMark(t *testing.T) {
	up := newUpstream(t, sse("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n", "data: [DONE]\n\n"))
	done := make(chan record.Request, 1)
	base, _ := gwObserved(t, up, nil, record.Observer{Done: func(r *record.Request) { done <- *r }})
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader("\ufeff"+`{"model":"m","stream":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if r := <-done; !r.Stream || r.Model != "m" {
		t.Errorf("recorded stream %v, model %q; want a stream of m", r.Stream, r.Model)
	}
}

// An upstream that labels a whole JSON answer as an event stream: the
// caller gets the answer, after one attempt, where it got a 502 "closed
// before its first byte" after three.
func TestJSONLabelledAStream(t *testing.T) {
	const answer = `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, answer)
	})
	base, _ := gw(t, up, nil)
	resp, body := send(t, http.MethodPost, base+"/v1/chat/completions", `{"model":"m","messages":[]}`, nil)
	if resp.StatusCode != 200 || strings.TrimSpace(body) != answer || up.attempts() != 1 {
		t.Errorf("got %d %q after %d attempts, want 200 with the answer after 1", resp.StatusCode, body, up.attempts())
	}
}

// A streaming request asks for no coding, whatever the caller's
// Accept-Encoding, which SDKs send with every request: the gateway reads
// each event, which it could not in a compressed stream. Without the
// header at all, a server may take the request to accept any coding. A
// request that is not a stream keeps the caller's, and its answer passes
// as it came.
func TestStreamAsksForNoCoding(t *testing.T) {
	up := newUpstream(t, status(200, "{}"))
	base, _ := gw(t, up, nil)
	cases := []struct {
		body, sent, want string
	}{
		{`{"model":"m","stream":true,"messages":[]}`, "gzip, deflate, br", "identity"},
		{`{"model":"m","stream":true,"messages":[]}`, "", "identity"},
		{`{"model":"m","messages":[]}`, "gzip, deflate, br", "gzip, deflate, br"},
	}
	for i, tc := range cases {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(tc.body))
		if tc.sent != "" {
			req.Header.Set("Accept-Encoding", tc.sent)
		}
		// The client's own transport would add gzip to a request without
		// one, and decode the answer.
		resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := up.request(i).Header.Values("Accept-Encoding"); len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s with Accept-Encoding %q: the upstream got %q, want %q", tc.body, tc.sent, got, tc.want)
		}
	}
}

// Outlast-Error names an error the gateway made. An upstream that sends
// one of its own (another outlast, say, or a server that lies) does not
// pass it on: the caller would take the upstream's answer for the
// gateway's. Its body, and its other headers, pass as they came.
func TestUpstreamOutlastErrorNotForwarded(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Outlast-Error", "busy")
		w.Header().Set("X-Request-Id", "up-1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"bad"}}`)
	})
	base, _ := gw(t, up, nil)
	for _, path := range []string{"/v1/chat/completions", "/health"} { // a model request, and a status path's
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(`{"model":"m","messages":[]}`))
		if path == "/health" {
			req, _ = http.NewRequest(http.MethodGet, base+path, nil)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Outlast-Error") != "" || resp.Header.Get("X-Request-Id") != "up-1" || !strings.Contains(string(body), "bad") {
			t.Errorf("%s: got %d, Outlast-Error %q, X-Request-Id %q, %s; want the upstream's 400 without the Outlast-Error", path, resp.StatusCode, resp.Header.Get("Outlast-Error"), resp.Header.Get("X-Request-Id"), body)
		}
	}
}

// A body that starts with white space or a byte order mark has its model
// renamed where the model is: the upstream gets the same JSON with the
// new name, never one spliced at the offsets of the body without them.
func TestRenameAfterLeadingBytes(t *testing.T) {
	for _, lead := range []string{"\n  ", "\ufeff", "\ufeff\r\n"} {
		up := newUpstream(t, status(200, "{}"))
		base, _ := gw(t, up, func(u *gateway.Upstream) { u.Models = map[string]string{"gpt-4o": "gpt-4o-prod"} })
		send(t, http.MethodPost, base+"/v1/chat/completions", lead+`{"model":"gpt-4o","messages":[]}`, nil)
		if got, want := up.bodies[0], lead+`{"model":"gpt-4o-prod","messages":[]}`; got != want {
			t.Errorf("after %q: the upstream got %q, want %q", lead, got, want)
		}
	}
}
