// Package bench_test compares outlast with the libraries users would pick
// instead. It is a separate module so that none of them enters the
// library's go.mod.
package bench_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/outlast-llm/outlast"
)

// canned answers every request at once with the same response, so that a
// benchmark over it measures only the layers above it.
type canned struct{ resp *http.Response }

func (c canned) RoundTrip(*http.Request) (*http.Response, error) {
	r := *c.resp
	r.Body = http.NoBody
	return &r, nil
}

// layers returns each retrying client the benchmark compares, over base,
// configured to retry (so that its retry machinery is armed) with the same
// budget of two retries.
func layers(base http.RoundTripper) []struct {
	name string
	do   func(*http.Request) (*http.Response, error)
} {
	rc := retryablehttp.NewClient()
	rc.HTTPClient = &http.Client{Transport: base}
	rc.Logger = nil
	rc.RetryMax = 2
	fs := &http.Client{Transport: failsafehttp.NewRoundTripper(base,
		failsafehttp.NewRetryPolicyBuilder().WithMaxRetries(2).Build())}
	ol := &http.Client{Transport: &outlast.Transport{
		Base:   base,
		Policy: &outlast.Policy{Waits: outlast.Exponential(time.Second, time.Minute, 2)},
		Logger: slog.New(slog.DiscardHandler),
	}}
	// outlast as the gateway runs it: with an admission controller,
	// which costs an atomic load a request while the upstream is healthy.
	adm := &http.Client{Transport: &outlast.Transport{
		Base:      base,
		Policy:    &outlast.Policy{Waits: outlast.Exponential(time.Second, time.Minute, 2)},
		Logger:    slog.New(slog.DiscardHandler),
		Admission: &outlast.Admission{},
	}}
	bare := &http.Client{Transport: base}
	return []struct {
		name string
		do   func(*http.Request) (*http.Response, error)
	}{
		{"bare", bare.Do},
		// The bare transport sending the one header outlast adds: what
		// the header itself costs, on the wire and in the server that
		// parses it, apart from outlast's own work.
		{"bare+header", func(r *http.Request) (*http.Response, error) {
			r.Header.Set(outlast.AttemptHeader, "1")
			return bare.Do(r)
		}},
		{"outlast", ol.Do},
		{"outlast+admission", adm.Do},
		{"retryablehttp", func(r *http.Request) (*http.Response, error) {
			rr, err := retryablehttp.FromRequest(r)
			if err != nil {
				return nil, err
			}
			return rc.Do(rr)
		}},
		{"failsafehttp", fs.Do},
	}
}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hello"}]}`

// sdkHeaders are the headers the OpenAI SDK for Node sends with each request (its Connection among them, which a proxy must not forward): a
// dozen, so that a layer that copies the header map pays what it would
// under a real client (a map past eight keys allocates more).
var sdkHeaders = map[string]string{
	"Authorization":               "Bearer sk-test",
	"Content-Type":                "application/json",
	"Accept":                      "application/json",
	"User-Agent":                  "OpenAI/JS 6.49.0",
	"X-Stainless-Lang":            "js",
	"X-Stainless-Package-Version": "6.49.0",
	"X-Stainless-Os":              "Linux",
	"X-Stainless-Arch":            "x64",
	"X-Stainless-Runtime":         "node",
	"X-Stainless-Runtime-Version": "v20.20.2",
	"X-Stainless-Retry-Count":     "0",
	"X-Stainless-Timeout":         "600",
	"Connection":                  "keep-alive",
	"Accept-Language":             "*",
	"Sec-Fetch-Mode":              "cors",
	"Accept-Encoding":             "gzip, deflate",
}

// BenchmarkSuccess measures a request that succeeds at once, with the
// headers an SDK sends: the cost of each retry layer on the path nobody
// should pay for. "overhead" uses an in-memory base transport that
// allocates nothing but its response, so the numbers are the layer's
// alone; "loopback" adds a real http.Transport and httptest server.
func BenchmarkSuccess(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"content":"hi"}}]}`)
	}))
	defer srv.Close()
	bases := []struct {
		name string
		rt   http.RoundTripper
	}{
		{"overhead", canned{&http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}}}},
		{"loopback", &http.Transport{MaxIdleConnsPerHost: 16}},
	}
	for _, base := range bases {
		for _, l := range layers(base.rt) {
			b.Run("base="+base.name+"/impl="+l.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
					for k, v := range sdkHeaders {
						req.Header.Set(k, v)
					}
					resp, err := l.do(req)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
}
