package metrics_test

import (
	"bufio"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/metrics"
)

// The metrics come first, since the gateway's Config takes their
// Observer; the gateway's Loads come after.
func Example() {
	m := metrics.New([]string{"llama"})
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{Name: "llama", URL: &url.URL{Scheme: "http", Host: "127.0.0.1:8080"}, Slots: 4}},
		Observer:  m.Observer(),
		Endpoints: map[string]http.Handler{"metrics": m.Handler()},
	})
	if err != nil {
		log.Fatal(err)
	}
	m.SetLoads(g.Loads)

	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/outlast/metrics", nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "outlast_gate_queue_depth{") || strings.HasPrefix(line, "outlast_requests_total{") {
			fmt.Println(line)
		}
	}
	// Output:
	// outlast_gate_queue_depth{slot="",upstream="llama"} 0
	// outlast_requests_total{code="200",upstream="llama"} 0
	// outlast_requests_total{code="499",upstream="llama"} 0
	// outlast_requests_total{code="502",upstream="llama"} 0
	// outlast_requests_total{code="503",upstream="llama"} 0
	// outlast_requests_total{code="504",upstream="llama"} 0
}
