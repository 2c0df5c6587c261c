package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/events"
	"github.com/outlast-llm/outlast/cmd/outlast/cli"
	"github.com/outlast-llm/outlast/server"
)

// BenchmarkHandler measures the handlers' own work on a request's path,
// the bare proxy's and outlast serve's (its defaults, --journal off),
// with the network taken out: the upstream is a RoundTripper that answers
// from memory, and the caller a ResponseWriter that discards. What is
// left is the CPU each spends on a request, and ns-to-answer/op, the time
// from the request's arrival to its answer's flush, which the caller
// waits for: the work the deployed benchmark sees as latency, without its
// noise. The metrics' and the page's observers run as in serve.
//
// With mode=stream, the request asks for a stream and the upstream sends
// its events one a read, as they come over a network when the upstream
// flushes each; ns-to-answer/op is then the time to the first flush with
// a body, the first token's.
//
// With cache=cold, each request comes after the caches were filled with
// other data (a walk over evictBytes), as a process finds them when it
// wakes for a request on a machine whose other processes ran meanwhile:
// ns/op then counts the walk too; read ns-to-answer/op.
//
//	cd bench && go test -run '^$' -bench Handler -count 10 ./load | benchstat -col /target -
func BenchmarkHandler(b *testing.B) {
	up := &url.URL{Scheme: "http", Host: "upstream.test"}
	bodies := requestBodies(0)
	events := newUpstream(5).events
	stream := bytes.Join(events, nil)
	targets := []struct {
		name string
		h    func(b *testing.B) http.Handler
	}{
		{"proxy", func(b *testing.B) http.Handler {
			h := newProxy(up, 64, true).(*httputil.ReverseProxy)
			h.Transport = memUpstream{events}
			return h
		}},
		{"gateway", func(b *testing.B) http.Handler {
			cfg, flushLog, err := cli.ServeConfig([]string{"--upstream", up.String(), "--journal", "off"}, io.Discard)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(flushLog)
			cfg.Gateway.Transport = memUpstream{events}
			srv, err := server.New(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { srv.Close(context.Background()) })
			return srv
		}},
	}
	for _, cold := range []bool{false, true} {
		cache := "hot"
		var evict []byte
		if cold {
			cache, evict = "cold", make([]byte, evictBytes)
		}
		for i, body := range bodies {
			mode, want := "whole", completion
			if i == 1 {
				mode, want = "stream", stream
			}
			for _, tc := range targets {
				b.Run("cache="+cache+"/mode="+mode+"/target="+tc.name, func(b *testing.B) {
					benchHandler(b, tc.h(b), body, want, evict)
				})
			}
		}
	}
}

// benchHandler sends h the request body, after a walk over evict, until
// b is done, and fails b unless each answer is 200 and want.
func benchHandler(b *testing.B, h http.Handler, body, want, evict []byte) {
	w := &discard{h: http.Header{}}
	var toAnswer time.Duration
	b.ReportAllocs()
	for b.Loop() {
		r, _ := http.NewRequest(http.MethodPost, "http://gateway.test"+chatPath, bytes.NewReader(body))
		r.Header = sdkHeader.Clone()
		r.ContentLength = int64(len(body))
		r.RemoteAddr = "127.0.0.1:1234"
		clear(w.h)
		w.status, w.got, w.flushed = 0, w.got[:0], time.Time{}
		for i := 0; i < len(evict); i += 64 {
			evict[i]++
		}
		start := time.Now()
		h.ServeHTTP(w, r)
		end := w.flushed
		if end.IsZero() { // the proxy's answer goes once its handler returns
			end = time.Now()
		}
		toAnswer += end.Sub(start)
		if w.status != http.StatusOK || !bytes.Equal(w.got, want) {
			b.Fatalf("status %d, answer %q; want 200, %q", w.status, w.got, want)
		}
	}
	b.ReportMetric(float64(toAnswer.Nanoseconds())/float64(b.N), "ns-to-answer/op")
}

// evictBytes is more than the last-level cache of the machines the
// benchmark runs on (32 MiB on the 2-core VM of the README's figures).
const evictBytes = 48 << 20

// memUpstream answers every request from memory, once it has read the
// request's body: with the upstream's completion, or, to a request for a
// stream, with events, one a read.
type memUpstream struct{ events [][]byte }

func (u memUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	var stream bool
	if r.Body != nil {
		buf := reqBufs.Get().(*bytes.Buffer)
		buf.Reset()
		buf.ReadFrom(r.Body)
		r.Body.Close()
		stream = bytes.Contains(buf.Bytes(), []byte(`"stream":true`))
		reqBufs.Put(buf)
	}
	resp := &http.Response{
		Status:     "200 OK",
		StatusCode: http.StatusOK,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Request:    r,
	}
	if stream {
		resp.Header = http.Header{"Content-Type": {"text/event-stream"}, "Cache-Control": {"no-cache"}}
		resp.Body = events.NewReader(u.events)
		resp.ContentLength = -1
		return resp, nil
	}
	resp.Header = http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(completion))}}
	resp.Body = io.NopCloser(bytes.NewReader(completion))
	resp.ContentLength = int64(len(completion))
	return resp, nil
}

// discard is a ResponseWriter that keeps what it is given.
type discard struct {
	h       http.Header
	status  int
	got     []byte
	flushed time.Time // the first flush with a body: when the caller has the answer
}

func (w *discard) Header() http.Header { return w.h }
func (w *discard) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}
func (w *discard) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.got = append(w.got, p...)
	return len(p), nil
}

// SetReadDeadline and SetWriteDeadline are the server's, which the
// gateway sets while it reads a request body and writes an answer.
func (w *discard) SetReadDeadline(time.Time) error  { return nil }
func (w *discard) SetWriteDeadline(time.Time) error { return nil }

func (w *discard) Flush() {
	w.WriteHeader(http.StatusOK)
	if w.flushed.IsZero() && len(w.got) > 0 {
		w.flushed = time.Now()
	}
}
