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
	"github.com/outlast-llm/outlast/internal/cli"
	"github.com/outlast-llm/outlast/server"
)

// answer is a ~300-byte OpenAI chat completion, what the canned upstream
// answers every request with.
const answer = `{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench-model",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"The quick brown fox jumps over the lazy dog."},` +
	`"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":10,"total_tokens":22}}`

// cannedUpstream answers every request at once with answer, reading its
// body first as a server would, and allocating only the response.
type cannedUpstream struct{}

func (cannedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{
		StatusCode:    http.StatusOK,
		Status:        "200 OK",
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(answer))}},
		ContentLength: int64(len(answer)),
		Body:          io.NopCloser(strings.NewReader(answer)),
		Request:       r,
	}, nil
}

// BenchmarkServe measures one non-streaming chat completion with the
// OpenAI SDK's headers through a loopback server in front of an
// in-memory upstream: a bare httputil.ReverseProxy, and the gateway as
// outlast serve runs it with --journal off and its defaults otherwise.
// The client and the loopback hop are the same for both, so the
// difference per request is the gateway's own CPU and allocations; the
// load benchmark (go run ./load) measures the latency.
func BenchmarkServe(b *testing.B) {
	up, _ := url.Parse("http://upstream.invalid")
	proxy := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(up) },
		Transport:  cannedUpstream{},
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
	defer pr.Close()
	defer pw.Close()
	defer cli.TuneGC()() // as serve collects, for both
	cfg, flushLog, err := cli.ServeConfig([]string{"--upstream", up.String(), "--journal", "off"}, pw)
	if err != nil {
		b.Fatal(err)
	}
	defer flushLog()
	cfg.Gateway.Transport = cannedUpstream{}
	gw, err := server.New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer gw.Close(context.Background())
	for _, impl := range []struct {
		name string
		h    http.Handler
	}{{"proxy", proxy}, {"serve", gw}} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			srv := httptest.NewServer(impl.h)
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
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
		})
	}
}
