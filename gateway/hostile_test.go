package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/record"
	"github.com/outlast-llm/outlast/timeline"
)

var updateDoc = flag.Bool("update", false, "rewrite the hostile-client table of docs/reliability.md")

// hostile is a gateway served as outlast serve serves it, on a listener of
// its own, in front of an upstream that counts what reaches it, and a
// foreign host that must never be reached.
type hostile struct {
	addr     string
	g        *gateway.Gateway
	seen     atomic.Int64 // requests the upstream got
	upBytes  atomic.Int64 // the body bytes it got
	foreign  atomic.Int64 // requests the foreign host got
	foreignU string
	records  chan record.Request
}

func newHostile(t *testing.T, change func(*gateway.Config, *gateway.ServerConfig)) *hostile {
	t.Helper()
	h := &hostile{records: make(chan record.Request, 1024)}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		h.upBytes.Add(n)
		h.seen.Add(1)
		if r.Header.Get("X-Wait") != "" {
			<-r.Context().Done() // answers nobody: only the caller's leaving ends it
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/fail") {
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, `{"error":"down"}`)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/big") {
			io.WriteString(w, `{"text":"`+strings.Repeat("x", 60<<10)+`"}`)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(up.Close)
	foreign := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.foreign.Add(1) }))
	t.Cleanup(foreign.Close)
	h.foreignU = foreign.URL
	u, _ := url.Parse(up.URL + "/base")
	cfg := gateway.Config{
		Upstreams: []gateway.Upstream{{URL: u, Policy: &outlast.Policy{Waits: []time.Duration{time.Millisecond}}}},
		Logger:    slog.New(slog.DiscardHandler),
		Observer:  record.Observer{Done: func(r *record.Request) { h.records <- *r }},
	}
	var sc gateway.ServerConfig
	if change != nil {
		change(&cfg, &sc)
	}
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.g = g
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gateway.Serve(ctx, l, g, sc) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return h
}

// dial opens a raw connection to the gateway, which the caller closes.
func (h *hostile) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// exchange writes text on a fresh connection and reads one response, and
// then whether the connection was closed after it.
func (h *hostile) exchange(t *testing.T, text string) (resp *http.Response, body string, closed bool) {
	t.Helper()
	c := h.dial(t)
	defer c.Close()
	if _, err := io.WriteString(c, text); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, "", true
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// A closed connection reads EOF at once; an open one, nothing until
	// its keep-alive timeout.
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = br.ReadByte()
	closed = err == io.EOF || (err != nil && !isTimeout(err))
	return resp, string(b), closed
}

// clientClosed checks that the gateway recorded the request that h's
// caller left as 499 client-closed, and returns the row's answer.
func (h *hostile) clientClosed(t *testing.T) string {
	t.Helper()
	select {
	case r := <-h.records:
		if r.Status != 499 || r.Error != record.ErrorClientClosed {
			t.Errorf("recorded %d %s, want 499 %s", r.Status, r.Error, record.ErrorClientClosed)
		}
	case <-time.After(10 * time.Second): // a bound on a hang, not a timing
		t.Error("no record")
	}
	return "no answer, connection closed; recorded 499 client-closed"
}

// halfClosed sends text, a request the upstream never answers, and
// closes the connection's sending side; it fails t if the gateway answers
// anything before it closes the connection.
func halfClosed(t *testing.T, h *hostile, text string) {
	t.Helper()
	c := h.dial(t)
	defer c.Close()
	if _, err := io.WriteString(c, text); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a bound on a hang
	got, err := io.ReadAll(c)
	if len(got) > 0 || err != nil {
		t.Errorf("read %q (%v), want the connection closed without an answer", got, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// growth measures what f adds to the heap, goroutines and descriptors, once
// its work has been let go: what a hostile client could leave behind.
type growth struct {
	heap       int64
	goroutines int
	fds        int
}

func measure(f func()) growth {
	before := snapshot()
	f()
	var after growth
	// Goroutines that f's connections started end shortly after they
	// close: wait for them to settle (each check is an event: the count
	// changing), up to a second.
	for i := 0; i < 100; i++ {
		after = snapshot()
		if after.goroutines <= before.goroutines+2 {
			break
		}
		time.Sleep(10 * time.Millisecond) // settling after closes; no event to wait on
	}
	return growth{after.heap - before.heap, after.goroutines - before.goroutines, after.fds - before.fds}
}

func snapshot() growth {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	fds := -1
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		fds = len(ents)
	}
	return growth{heap: int64(m.HeapInuse), goroutines: runtime.NumGoroutine(), fds: fds}
}

// hostileRow is one line of the hostile-client table.
type hostileRow struct{ attack, answer, forwarded, left string }

var hostileRows []hostileRow

// The hostile clients of issue 12, as raw TCP where an HTTP client would
// clean the request up. Each gets a clear 4xx, 5xx or a closed
// connection, nothing reaches the upstream or any other host, and
// nothing grows beyond a stated bound.
func TestHostileClients(t *testing.T) {
	hostileRows = nil          // each run, under -count, writes its own table
	var feed *timeline.Feed    // the page's feed, in the cases that have one
	const heapBound = 16 << 20 // what 40 hostile connections may leave on the heap
	cases := []struct {
		name   string
		change func(*gateway.Config, *gateway.ServerConfig)
		attack func(t *testing.T, h *hostile) string // returns the answer seen
		sent   int64                                 // what the upstream may see
	}{
		{"40 connections announce 32 MiB bodies and send 1 byte each", func(c *gateway.Config, _ *gateway.ServerConfig) { c.BodyTimeout = 300 * time.Millisecond }, func(t *testing.T, h *hostile) string {
			answers := make(chan string, 40)
			for range 40 {
				go func() {
					c, err := net.Dial("tcp", h.addr)
					if err != nil {
						answers <- err.Error()
						return
					}
					defer c.Close()
					fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n{", 32<<20)
					c.SetReadDeadline(time.Now().Add(10 * time.Second))
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					if err != nil {
						answers <- "no answer: " + err.Error()
						return
					}
					answers <- fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("Outlast-Error"))
				}()
			}
			seen := map[string]int{}
			for range 40 {
				seen[<-answers]++
			}
			if seen["408 too-slow"] != 40 {
				t.Errorf("got %v, want 40 × 408 too-slow", seen)
			}
			return "408 too-slow, connection closed"
		}, 0},
		// A short body, whose rest net/http would read to reuse the
		// connection, trickled faster than the server's own timeouts.
		{"a 100-byte body trickled 1 byte every 200 ms", func(c *gateway.Config, _ *gateway.ServerConfig) { c.BodyTimeout = 100 * time.Millisecond }, func(t *testing.T, h *hostile) string {
			c := h.dial(t)
			defer c.Close()
			io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
			closed := make(chan time.Time, 1)
			var answered time.Time
			go func() {
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				if resp, err := http.ReadResponse(br, nil); err == nil && resp.StatusCode == 408 {
					answered = time.Now()
					io.Copy(io.Discard, resp.Body)
				}
				br.ReadByte() // EOF once the gateway closes it
				closed <- time.Now()
			}()
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case at := <-closed:
					if answered.IsZero() || at.Sub(answered) > time.Second {
						t.Errorf("the connection closed %v after its answer (408 at %v), want a 408 and the connection closed at once", at.Sub(answered), answered)
					}
					return "408 too-slow, connection closed"
				case <-tick.C:
					io.WriteString(c, "a") // the trickle goes on, while it can
				}
			}
		}, 0},
		{"a header of 100 KiB", nil, func(t *testing.T, h *hostile) string {
			resp, _, _ := h.exchange(t, "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 100<<10)+"\r\n\r\n")
			if resp == nil || resp.StatusCode != 431 {
				t.Errorf("got %v, want 431", resp)
				return "?"
			}
			return "431"
		}, 0},
		{"headers that never end", func(_ *gateway.Config, s *gateway.ServerConfig) { s.ReadHeaderTimeout = 300 * time.Millisecond }, func(t *testing.T, h *hostile) string {
			c := h.dial(t)
			defer c.Close()
			io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\n")
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadAll(c); err != nil && !strings.Contains(err.Error(), "reset") {
				t.Errorf("got %v, want the connection closed", err)
			}
			return "connection closed"
		}, 0},
		{"an idle keep-alive connection", func(_ *gateway.Config, s *gateway.ServerConfig) { s.KeepAliveTimeout = 300 * time.Millisecond }, func(t *testing.T, h *hostile) string {
			c := h.dial(t)
			defer c.Close()
			io.WriteString(c, "GET /outlast/health HTTP/1.1\r\nHost: x\r\n\r\n")
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("after the keep-alive timeout: got %v, want the connection closed", err)
			}
			return "connection closed"
		}, 0},
		{"one connection past --max-conns", func(_ *gateway.Config, s *gateway.ServerConfig) { s.MaxConns = 2 }, func(t *testing.T, h *hostile) string {
			a, b := h.dial(t), h.dial(t)
			defer a.Close()
			defer b.Close()
			// The two are open once the gateway counts them.
			for h.g.Health().Connections < 2 {
				time.Sleep(time.Millisecond) // the accept loop's count; no event to wait on
			}
			resp, body, closed := h.exchange(t, "GET /outlast/health HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp == nil || resp.StatusCode != 503 || resp.Header.Get("Outlast-Error") != "busy" || !closed || !strings.Contains(body, "--max-conns") {
				t.Errorf("got %v %q (closed %v), want 503 busy naming --max-conns, closed", resp, body, closed)
			}
			return "503 busy, connection closed"
		}, 0},
		{"Content-Length and Transfer-Encoding, another request pipelined", nil, func(t *testing.T, h *hostile) string {
			resp, _, closed := h.exchange(t, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\nPOST /v1/smuggled HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
			if resp == nil || !closed {
				t.Errorf("got %v, closed %v; want an answer, then the connection closed", resp, closed)
			}
			return fmt.Sprintf("%d, then the connection closed", resp.StatusCode)
		}, 1},
		{"a trailer named Content-Length", nil, func(t *testing.T, h *hostile) string {
			resp, body, _ := h.exchange(t, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nContent-Length: 99\r\n\r\n")
			if resp == nil || resp.StatusCode != 400 || !strings.Contains(body, "Content-Length") {
				t.Errorf("got %v %q, want 400 naming the trailer", resp, body)
			}
			return "400 invalid"
		}, 0},
		{"CONNECT", nil, func(t *testing.T, h *hostile) string {
			resp, _, _ := h.exchange(t, "CONNECT "+strings.TrimPrefix(h.foreignU, "http://")+" HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp == nil || resp.StatusCode != 405 {
				t.Errorf("got %v, want 405", resp)
			}
			return "405 method"
		}, 0},
		{"an absolute URI naming another host", nil, func(t *testing.T, h *hostile) string {
			resp, _, _ := h.exchange(t, "GET "+h.foreignU+"/v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp == nil || resp.StatusCode != 200 {
				t.Errorf("got %v, want the upstream's own answer", resp)
			}
			return "200 from the configured upstream"
		}, 1},
		{"a Host header naming another host", nil, func(t *testing.T, h *hostile) string {
			resp, _, _ := h.exchange(t, "GET /v1/models HTTP/1.1\r\nHost: "+strings.TrimPrefix(h.foreignU, "http://")+"\r\n\r\n")
			if resp == nil || resp.StatusCode != 200 {
				t.Errorf("got %v, want the upstream's own answer", resp)
			}
			return "200 from the configured upstream"
		}, 1},
		{"a path that starts with another host", nil, func(t *testing.T, h *hostile) string {
			resp, _, _ := h.exchange(t, "GET //"+strings.TrimPrefix(h.foreignU, "http://")+"/v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp == nil || resp.StatusCode != 200 {
				t.Errorf("got %v, want the upstream's own answer", resp)
			}
			return "200 from the configured upstream, under its base"
		}, 1},
		{"an encoded dot-segment out of the base", nil, func(t *testing.T, h *hostile) string {
			resp, _, _ := h.exchange(t, "GET /..%2f..%2fsecret HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp == nil || resp.StatusCode != 400 {
				t.Errorf("got %v, want 400", resp)
			}
			return "400 invalid"
		}, 0},
		{"no token, with one configured", func(c *gateway.Config, _ *gateway.ServerConfig) { c.Token = "t0ken" }, func(t *testing.T, h *hostile) string {
			for _, path := range []string{"/v1/chat/completions", "/outlast/health", "/outlast/requests"} {
				resp, _, _ := h.exchange(t, "GET "+path+" HTTP/1.1\r\nHost: x\r\nOutlast-Token: t0kem\r\n\r\n")
				if resp == nil || resp.StatusCode != 401 || resp.Header.Get("Outlast-Error") != "token" {
					t.Errorf("%s with a wrong token: got %v, want 401 token", path, resp)
				}
			}
			resp, _, _ := h.exchange(t, "GET /v1/models HTTP/1.1\r\nHost: x\r\nOutlast-Token: t0ken\r\n\r\n")
			if resp == nil || resp.StatusCode != 200 {
				t.Errorf("with the token: got %v, want 200", resp)
			}
			return "401 token; with it, 200"
		}, 1},
		{"3 requests with an 8 MiB model, then /outlast/recent", func(c *gateway.Config, _ *gateway.ServerConfig) {
			feed = timeline.New(0, 0)
			c.Endpoints = feed.Endpoints()
			c.Observer = record.Observers(c.Observer, feed.Observer())
		}, func(t *testing.T, h *hostile) string {
			body := `{"model":"` + strings.Repeat("x", 8<<20) + `","messages":[]}`
			for range 3 {
				resp, _, _ := h.exchange(t, fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
				if resp == nil || resp.StatusCode != 200 {
					t.Fatalf("got %v, want 200: the upstream takes such a model", resp)
				}
			}
			if h.upBytes.Load() != int64(3*len(body)) {
				t.Errorf("the upstream got %d body bytes, want %d: the body is forwarded unchanged", h.upBytes.Load(), 3*len(body))
			}
			resp, recent, _ := h.exchange(t, "GET /outlast/recent HTTP/1.1\r\nHost: x\r\n\r\n")
			var snap timeline.Snapshot
			if resp == nil || json.Unmarshal([]byte(recent), &snap) != nil || len(snap.Requests) != 3 {
				t.Fatalf("/outlast/recent: got %v %.200q, want the 3 requests", resp, recent)
			}
			if m := snap.Requests[0].Model; len(m) > 256 || !strings.HasSuffix(m, "…") {
				t.Errorf("the feed keeps a model of %d bytes, %.20q…; want 256 at most, cut with …", len(m), m)
			}
			if len(recent) > 16<<10 {
				t.Errorf("/outlast/recent is %d bytes, want 16 KiB at most", len(recent))
			}
			return "200, forwarded unchanged; the record keeps 256 bytes of each model; /outlast/recent under 16 KiB"
		}, 3},
		{"a slot the operator did not configure", func(c *gateway.Config, _ *gateway.ServerConfig) { c.Upstreams[0].Slots = 1 }, func(t *testing.T, h *hostile) string {
			resp, _, _ := h.exchange(t, "POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: 14\r\n\r\n{\"id_slot\":49}")
			if resp == nil || resp.StatusCode != 400 {
				t.Errorf("got %v, want 400", resp)
			}
			return "400 invalid"
		}, 0},
		{"a body with white space before it, naming a slot the operator did not configure", func(c *gateway.Config, _ *gateway.ServerConfig) { c.Upstreams[0].Slots = 1 }, func(t *testing.T, h *hostile) string {
			resp, _, _ := h.exchange(t, "POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n \r\n{\"id_slot\":49}")
			if resp == nil || resp.StatusCode != 400 {
				t.Errorf("got %v, want 400", resp)
			}
			return "400 invalid"
		}, 0},
		// net/http takes the end of the caller's side for its leaving;
		// one that only half-closed still reads, and must not read a
		// success for a request never served.
		{"a request, then the caller closes its sending side", nil, func(t *testing.T, h *hostile) string {
			halfClosed(t, h, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Wait: 1\r\nContent-Length: 2\r\n\r\n{}")
			return h.clientClosed(t)
		}, 1},
		{"a body cut short, then the caller closes its sending side", nil, func(t *testing.T, h *hostile) string {
			halfClosed(t, h, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n{}")
			return h.clientClosed(t)
		}, 0},
		{"a status request, then the caller closes its sending side", nil, func(t *testing.T, h *hostile) string {
			halfClosed(t, h, "GET /health HTTP/1.1\r\nHost: x\r\nX-Wait: 1\r\n\r\n")
			return "no answer, connection closed"
		}, 1},
		{"a status request with a body over --max-body", func(c *gateway.Config, _ *gateway.ServerConfig) { c.MaxBody = 1 << 10 }, func(t *testing.T, h *hostile) string {
			resp, _, _ := h.exchange(t, "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n"+strings.Repeat("a", 4096))
			if resp == nil || resp.StatusCode != 200 {
				t.Errorf("got %v, want the upstream's 200", resp)
			}
			if n := h.upBytes.Load(); n != 0 {
				t.Errorf("the upstream got %d bytes of body, want none", n)
			}
			return "200 from the upstream, which gets no body"
		}, 1},
		{"a status request announcing a body that never comes", nil, func(t *testing.T, h *hostile) string {
			resp, _, closed := h.exchange(t, "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
			if resp == nil || resp.StatusCode != 200 || !closed {
				t.Errorf("got %v, closed %v; want the upstream's 200, then the connection closed", resp, closed)
			}
			return "200 from the upstream, connection closed"
		}, 1},
		{"an unknown path announcing a body that never comes", func(c *gateway.Config, _ *gateway.ServerConfig) { c.Upstreams[0].Prefix = "/v1" }, func(t *testing.T, h *hostile) string {
			resp, _, closed := h.exchange(t, "POST /elsewhere HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
			if resp == nil || resp.StatusCode != 404 || !closed {
				t.Errorf("got %v, closed %v; want 404, then the connection closed", resp, closed)
			}
			return "404 not-found, connection closed"
		}, 0},
		{"policy headers that loosen the operator's", func(c *gateway.Config, _ *gateway.ServerConfig) {
			c.Upstreams[0].Policy = &outlast.Policy{Waits: []time.Duration{time.Millisecond}, MaxAttempts: 2}
		}, func(t *testing.T, h *hostile) string {
			// The upstream fails every attempt: only the operator's
			// two may reach it, whatever the headers ask for.
			resp, _, _ := h.exchange(t, "POST /v1/fail HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nOutlast-Max-Attempts: 0\r\nOutlast-Waits: 0\r\nOutlast-Reserve: 0\r\nOutlast-Timeout: 999999s\r\n\r\n{}")
			if resp == nil || resp.StatusCode != 502 {
				t.Fatalf("got %v, want 502", resp)
			}
			if n := h.seen.Load(); n != 2 {
				t.Errorf("the upstream saw %d attempts, want the operator's 2", n)
			}
			return fmt.Sprintf("502 after %s attempts, the operator's maximum", resp.Header.Get("Outlast-Attempts"))
		}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHostile(t, c.change)
			var answer string
			g := measure(func() { answer = c.attack(t, h) })
			if h.seen.Load() > c.sent {
				t.Errorf("the upstream got %d requests, want %d at most", h.seen.Load(), c.sent)
				close(h.records)
				for r := range h.records {
					t.Logf("recorded %s %s %d", r.Method, r.Path, r.Status)
				}
			}
			if h.foreign.Load() != 0 {
				t.Errorf("the foreign host got %d requests, want none", h.foreign.Load())
			}
			if g.heap > heapBound || g.goroutines > 8 || g.fds > 8 {
				t.Errorf("left %d bytes of heap, %d goroutines and %d descriptors; want at most %d, 8 and 8", g.heap, g.goroutines, g.fds, heapBound)
			}
			forwarded := "nothing"
			if c.sent > 0 {
				forwarded = fmt.Sprintf("%d to the upstream, none elsewhere", c.sent)
			}
			hostileRows = append(hostileRows, hostileRow{c.name, answer, forwarded, "≤ 16 MiB heap, ≤ 8 goroutines, ≤ 8 descriptors"})
		})
	}
	if !t.Failed() {
		checkDoc(t, "hostile", hostileTable())
	}
}

func hostileTable() string {
	var b strings.Builder
	b.WriteString("Written by `go test ./gateway -run TestHostileClients -update`; CI fails if a run's answers differ.\n\n")
	b.WriteString("| attack | answer | forwarded | left behind, at most |\n| --- | --- | --- | --- |\n")
	for _, r := range hostileRows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.attack, r.answer, r.forwarded, r.left)
	}
	return b.String()
}

// checkDoc rewrites the section of docs/reliability.md between the
// section's markers with want, with -update; without it, it fails the
// test if the committed section differs.
func checkDoc(t *testing.T, section, want string) {
	t.Helper()
	const path = "../docs/reliability.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := "<!-- "+section+":begin -->\n", "<!-- "+section+":end -->"
	i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %s section", path, section)
	}
	got := string(doc[i+len(begin) : j])
	if *updateDoc {
		out := string(doc[:i+len(begin)]) + want + string(doc[j:])
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got != want {
		committed, run := strings.Split(got, "\n"), strings.Split(want, "\n")
		var diff []string
		for k := range max(len(committed), len(run)) {
			var c, r string
			if k < len(committed) {
				c = committed[k]
			}
			if k < len(run) {
				r = run[k]
			}
			if c != r {
				diff = append(diff, fmt.Sprintf("committed: %s\nthis run:  %s", c, r))
			}
		}
		t.Errorf("%s's %s section is not this run's (run with -update if on purpose):\n%s", path, section, strings.Join(diff, "\n"))
	}
}

// A caller that stops reading is gone once it has taken nothing for the
// idle timeout: its upstream response ends, so that it cannot hold the
// upstream (a llama.cpp slot) for as long as it keeps its connection open.
// So for a stream, and for a held answer too large for the connection's
// buffers.
func TestCallerThatStopsReading(t *testing.T) {
	text := strings.Repeat("x", 16<<10)
	ev := []byte(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + text + `"},"finish_reason":null}]}` + "\n\n")
	whole := []byte(`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("x", 16<<20) + `"},"finish_reason":"stop"}]}`)
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			upDone := make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(upDone)
				if !stream {
					w.Header().Set("Content-Type", "application/json")
					w.Write(whole)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				rc := http.NewResponseController(w)
				for {
					if _, err := w.Write(ev); err != nil {
						return
					}
					if rc.Flush() != nil {
						return
					}
				}
			}))
			defer up.Close()
			records := make(chan record.Request, 1)
			u, _ := url.Parse(up.URL)
			g, err := gateway.New(gateway.Config{
				Upstreams: []gateway.Upstream{{URL: u, IdleTimeout: 200 * time.Millisecond}},
				Logger:    slog.New(slog.DiscardHandler),
				Observer:  record.Observer{Done: func(r *record.Request) { records <- *r }},
			})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(g)
			defer srv.Close()
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.(*net.TCPConn).SetReadBuffer(4 << 10)
			body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			// It reads nothing from here on.
			select {
			case <-upDone:
			case <-time.After(30 * time.Second): // a bound on a hang, not a timing
				t.Fatal("the upstream response still runs 30 s after the caller stopped reading; want it ended after the idle timeout")
			}
			select {
			case r := <-records:
				if r.Error != record.ErrorClientClosed {
					t.Errorf("recorded %d %s, want %s", r.Status, r.Error, record.ErrorClientClosed)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no record 30 s after the caller stopped reading; want the request ended after the idle timeout")
			}
		})
	}
}

// A caller that pipelines requests and reads none of the answers fills
// the connection's buffers with small answers, each of which fits them
// alone: whole answers, the gateway's errors, a status path's. The write
// that finds them full is bounded as a large answer's is, and the
// connection closes, rather than holding its handler, a held answer and
// its place under --max-conns for as long as the caller keeps it open.
// (Loopback TCP may instead stall the caller's requests, where the
// server's header timeout ends the connection: a case whose write is
// unbounded then passes in some runs, and fails in the others.)
func TestPipelinerThatStopsReading(t *testing.T) {
	for _, c := range []struct {
		name, request string
		n             int // requests: answers past any socket's buffers
	}{
		{"whole answers", "POST /v1/chat/big HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 400},
		{"not found", "GET /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n", 100_000},
		{"status path", "GET /v1/health/big HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"the gateway's health", "GET /outlast/health HTTP/1.1\r\nHost: x\r\n\r\n", 100_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHostile(t, func(cfg *gateway.Config, _ *gateway.ServerConfig) {
				cfg.Upstreams[0].Prefix, cfg.Upstreams[0].IdleTimeout = "/v1", 200*time.Millisecond
			})
			conn := h.dial(t)
			defer conn.Close()
			conn.(*net.TCPConn).SetReadBuffer(4 << 10)
			go conn.Write([]byte(strings.Repeat(c.request, c.n)))      // it reads nothing
			bound := time.Now().Add(30 * time.Second)                  // a bound on a hang, not a timing
			for opened := false; ; time.Sleep(10 * time.Millisecond) { // the accept loop's count; no event to wait on
				n := h.g.Health().Connections
				opened = opened || n > 0
				if opened && n == 0 {
					break
				}
				if time.Now().After(bound) {
					t.Fatalf("%d connections open 30 s after the caller stopped reading; want its closed once a write found the buffers full for the idle timeout", n)
				}
			}
			for range len(h.records) {
				if r := <-h.records; r.Error != "" && r.Error != record.ErrorClientClosed {
					t.Errorf("recorded %d %s, want none or %s", r.Status, r.Error, record.ErrorClientClosed)
				}
			}
		})
	}
}
