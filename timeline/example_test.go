package timeline_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/mockllm"
	"github.com/outlast-llm/outlast/record"
	"github.com/outlast-llm/outlast/timeline"
)

// The feed is made first, for the gateway's Observer and Endpoints, and
// given the gateway's Loads once there is a gateway.
func Example() {
	mock := mockllm.NewServer("502,ok")
	defer mock.Close()
	u, _ := url.Parse(mock.URL)

	feed := timeline.New(0, 0)
	// answered hears of each request's end after the feed does: the
	// caller may read the last byte before the gateway records it.
	answered := make(chan struct{}, 1)
	g, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{
			Name:   "mock",
			URL:    u,
			Policy: &outlast.Policy{Waits: []time.Duration{10 * time.Millisecond}},
		}},
		Logger: slog.New(slog.DiscardHandler),
		Observer: record.Observers(feed.Observer(), record.Observer{
			Done: func(*record.Request) { answered <- struct{}{} },
		}),
		Endpoints: feed.Endpoints(), // GET /outlast/ is the page
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	feed.SetLoads(g.Loads)
	srv := httptest.NewServer(g)
	defer srv.Close()
	defer feed.Close() // ends the pages' event streams, so that Close need not wait

	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	<-answered

	for _, r := range feed.Snapshot().Requests {
		fmt.Print(r.Status, " after")
		for _, a := range r.Attempts {
			fmt.Print(" ", a.Outcome)
		}
		fmt.Println()
	}
	// Output:
	// 200 after 5xx ok
}
