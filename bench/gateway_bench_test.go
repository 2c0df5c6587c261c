package bench_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/outlast-llm/outlast/bench/internal/bufpool"
	"github.com/outlast-llm/outlast/bench/internal/events"
	"github.com/outlast-llm/outlast/cmd/outlast/cli"
	"github.com/outlast-llm/outlast/server"
)

// answer is a ~300-byte OpenAI chat completion, what the canned upstream
// answers every request with.
const answer = `{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench-model",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"The quick brown fox jumps over the lazy dog."},` +
	`"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":10,"total_tokens":22}}`

// streamAnswer is a streamed chat completion of five chunks, as the load
// benchmark's upstream sends, each event a read of its own.
var streamAnswer = func() [][]byte {
	var evs [][]byte
	for i := range 5 {
		evs = append(evs, []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench-model",`+
			`"choices":[{"index":0,"delta":{"content":"tok`+strconv.Itoa(i)+` "},"finish_reason":null}]}`+"\n\n"))
	}
	return append(evs, []byte("data: [DONE]\n\n"))
}()

// cannedUpstream answers every request at once with answer, or with
// streamAnswer if stream, reading its body first as a server would, and
// allocating only the response.
type cannedUpstream struct{ stream bool }

func (c cannedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	resp := &http.Response{
		StatusCode: http.StatusOK,
		Status:     "200 OK",
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Request:    r,
	}
	if c.stream {
		resp.Header, resp.ContentLength = http.Header{"Content-Type": {"text/event-stream"}}, -1
		resp.Body = events.NewReader(streamAnswer)
		return resp, nil
	}
	resp.Header = http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(answer))}}
	resp.ContentLength = int64(len(answer))
	resp.Body = io.NopCloser(strings.NewReader(answer))
	return resp, nil
}

// BenchmarkServe measures one non-streaming chat completion with the
// OpenAI SDK's headers through a loopback server in front of an
// in-memory upstream: a bare httputil.ReverseProxy, and the gateway as
// outlast serve runs it with --journal off and its defaults otherwise.
// The client and the loopback hop are the same for both, so the
// difference per request is the gateway's own CPU and allocations; the
// load benchmark (go run ./load) measures the latency.
func BenchmarkServe(b *testing.B) {
	for _, impl := range serveTargets(b, cannedUpstream{}) {
		b.Run("impl="+impl.name, func(b *testing.B) { serveBench(b, impl.h, chatBody) })
	}
}

// BenchmarkServeStream is BenchmarkServe for a streamed answer of five
// chunks: the gateway holds none of it, and forwards it whole events at
// a time, watching each for an error.
func BenchmarkServeStream(b *testing.B) {
	body := strings.Replace(chatBody, "{", `{"stream":true,`, 1)
	for _, impl := range serveTargets(b, cannedUpstream{stream: true}) {
		b.Run("impl="+impl.name, func(b *testing.B) { serveBench(b, impl.h, body) })
	}
}

// serveTarget is a handler under benchmark.
type serveTarget struct {
	name string
	h    http.Handler
}

// serveTargets returns a bare proxy and the gateway as outlast serve
// builds it with --journal off, each in front of upstream, and closes
// them when the benchmark ends.
func serveTargets(b *testing.B, upstream http.RoundTripper) []serveTarget {
	up, _ := url.Parse("http://upstream.invalid")
	proxy := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(up) },
		Transport:  upstream,
		ErrorLog:   log.New(io.Discard, "", 0),
		BufferPool: &bufpool.Pool{}, // the gateway pools its buffers too
	}
	// serve's log goes to a pipe, drained, as its stderr goes to a log
	// collector.
	pr, pw, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	b.Cleanup(func() { pw.Close(); pr.Close() })
	b.Cleanup(cli.TuneGC()) // as serve collects, for both
	cfg, flushLog, err := cli.ServeConfig([]string{"--upstream", up.String(), "--journal", "off"}, pw)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(flushLog)
	cfg.Gateway.Transport = upstream
	gw, err := server.New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { gw.Close(context.Background()) })
	return []serveTarget{{"proxy", proxy}, {"serve", gw}}
}

// serveBench sends body to h through a loopback server, once an
// iteration, and reads the answer whole.
func serveBench(b *testing.B, h http.Handler, body string) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		for k, v := range sdkHeaders {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}
