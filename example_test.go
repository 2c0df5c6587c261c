package outlast_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast"
)

// A policy under a deadline: the last wait repeats for as long as the
// deadline would still have the reserve left after it. Here that is
// 200 ms waits while at least 900 ms of the 2 s deadline would remain:
// six attempts, then the last failure, returned with the reserve intact.
func ExamplePolicy_deadline() {
	p := &outlast.Policy{
		Waits:   []time.Duration{200 * time.Millisecond},
		Reserve: 900 * time.Millisecond,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	attempts := 0
	err := outlast.Do(ctx, p, func(ctx context.Context) error {
		attempts++
		return &outlast.StatusError{StatusCode: 503}
	})
	deadline, _ := ctx.Deadline()
	fmt.Println("attempts:", attempts)
	fmt.Println("error:", err)
	fmt.Println("reserve kept:", time.Until(deadline) >= p.Reserve)
	// Output:
	// attempts: 6
	// error: outlast: status 503 Service Unavailable
	// reserve kept: true
}

// A Transport under an http.Client, as an SDK would use it: the server
// fails once, and the caller sees only the answer. The hooks see both
// attempts.
func ExampleTransport() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After-Ms", "20")
			http.Error(w, "overloaded", 529)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	client := &http.Client{Transport: &outlast.Transport{
		Policy: &outlast.Policy{Waits: []time.Duration{10 * time.Millisecond}},
		Hooks: outlast.Hooks{AttemptEnd: func(a outlast.Attempt) {
			fmt.Printf("attempt %d: status %d, retry in %v\n", a.N, a.Status, a.RetryIn)
		}},
	}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	// Output:
	// attempt 1: status 529, retry in 20ms
	// attempt 2: status 200, retry in 0s
	// 200 hello
}

// Two layers, each with two retries: only the outer one retries, so the
// server sees three attempts, not nine.
func ExampleTransport_nested() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	p := &outlast.Policy{Waits: []time.Duration{time.Millisecond, time.Millisecond}}
	inner := &outlast.Transport{Policy: p, Logger: discardLogger()}
	outer := &outlast.Transport{Base: inner, Policy: p, Logger: discardLogger()}
	resp, err := (&http.Client{Transport: outer}).Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", calls.Load(), "attempts")
	// Output: 503 after 3 attempts
}

// Exponential doubles from a base, up to a cap.
func ExampleExponential() {
	fmt.Println(outlast.Exponential(time.Second, 10*time.Second, 5))
	// Output: [1s 2s 4s 8s 10s]
}
