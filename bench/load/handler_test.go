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
// With cache=cold, each request comes after the caches were filled with
// other data (a walk over evictBytes), as a process finds them when it
// wakes for a request on a machine whose other processes ran meanwhile:
// ns/op then counts the walk too; read ns-to-answer/op.
//
//	cd bench && go test -run '^$' -bench Handler -count 10 ./load | benchstat -col /target -
func BenchmarkHandler(b *testing.B) {
	up := &url.URL{Scheme: "http", Host: "upstream.test"}
	body := requestBodies(0)[0]
	targets := []struct {
		name string
		h    func(b *testing.B) http.Handler
	}{
		{"proxy", func(b *testing.B) http.Handler {
			h := newProxy(up, 64, true).(*httputil.ReverseProxy)
			h.Transport = memUpstream{}
			return h
		}},
		{"gateway", func(b *testing.B) http.Handler {
			cfg, flushLog, err := cli.ServeConfig([]string{"--upstream", up.String(), "--journal", "off"}, io.Discard)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(flushLog)
			cfg.Gateway.Transport = memUpstream{}
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
		for _, tc := range targets {
			b.Run("cache="+cache+"/target="+tc.name, func(b *testing.B) {
				h := tc.h(b)
				w := &discard{h: http.Header{}}
				var toAnswer time.Duration
				b.ReportAllocs()
				for b.Loop() {
					r, _ := http.NewRequest(http.MethodPost, "http://gateway.test"+chatPath, bytes.NewReader(body))
					r.Header = sdkHeader.Clone()
					r.ContentLength = int64(len(body))
					r.RemoteAddr = "127.0.0.1:1234"
					clear(w.h)
					w.status, w.n, w.flushed = 0, 0, time.Time{}
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
					if w.status != http.StatusOK || w.n != len(completion) {
						b.Fatalf("status %d, %d bytes; want 200, %d", w.status, w.n, len(completion))
					}
				}
				b.ReportMetric(float64(toAnswer.Nanoseconds())/float64(b.N), "ns-to-answer/op")
			})
		}
	}
}

// evictBytes is more than the last-level cache of the machines the
// benchmark runs on (32 MiB on the 2-core VM of the README's figures).
const evictBytes = 48 << 20

// memUpstream answers every request with the upstream's completion, from
// memory, once it has read the request's body.
type memUpstream struct{}

func (memUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{
		Status:        "200 OK",
		StatusCode:    http.StatusOK,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(completion))}},
		Body:          io.NopCloser(bytes.NewReader(completion)),
		ContentLength: int64(len(completion)),
		Request:       r,
	}, nil
}

// discard is a ResponseWriter that counts what it is given.
type discard struct {
	h       http.Header
	status  int
	n       int
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
	w.n += len(p)
	return len(p), nil
}

// SetReadDeadline is the server's, which the gateway sets while it reads
// a request body.
func (w *discard) SetReadDeadline(time.Time) error { return nil }

func (w *discard) Flush() {
	w.WriteHeader(http.StatusOK)
	if w.flushed.IsZero() && w.n > 0 {
		w.flushed = time.Now()
	}
}
