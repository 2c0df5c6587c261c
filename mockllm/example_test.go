package mockllm_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/outlast-llm/outlast/mockllm"
)

// A test gets a provider that is down for two requests, then up, on a
// loopback port, and counts what it saw.
func Example() {
	srv := mockllm.NewServer("502x2,ok")
	defer srv.Close()

	for range 3 {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	fmt.Println(srv.Stats().Paths["/v1/chat/completions"])
	// Output:
	// 502 Bad Gateway
	// 502 Bad Gateway
	// 200 OK
	// map[502:2 ok:1]
}

// A Server with settings: llama.cpp with two slots, streaming three
// chunks, rate-limited for its first request.
func ExampleServer() {
	srv := &mockllm.Server{
		Script: mockllm.MustParseScript("429:retry-after=1,ok"),
		Slots:  2,
		Chunks: 3,
	}
	if err := srv.Start(""); err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	for range 2 {
		resp, err := http.Post(srv.URL+"/completion", "application/json", strings.NewReader(`{"prompt":"hi"}`))
		if err != nil {
			fmt.Println(err)
			return
		}
		var out struct{ Content string }
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		fmt.Printf("%s, Retry-After %q, %q\n", resp.Status, resp.Header.Get("Retry-After"), out.Content)
	}
	// Output:
	// 429 Too Many Requests, Retry-After "1", ""
	// 200 OK, Retry-After "", "The quick brown"
}

// A script prints in its canonical form; one that does not parse says
// which step is wrong.
func ExampleParseScript() {
	s, err := mockllm.ParseScript("502 x3, 429:retry-after=1 for 10s, ok")
	fmt.Println(s, err)

	_, err = mockllm.ParseScript("502x3,oops")
	fmt.Println(err)
	// Output:
	// 502x3,429:retry-after=1 for 10s,ok <nil>
	// mockllm: script step 2 "oops" (line 1, column 7): unknown fault "oops"
}
