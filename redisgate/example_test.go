package redisgate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/redisgate"
)

// Every gateway in front of a llama.cpp server started with --parallel 2
// shares one gate: two requests at a time in all, eight more waiting in
// arrival order, whichever gateway they came through. The example has no
// output to check, because it needs a Redis.
func Example() {
	client := redis.NewClient(&redis.Options{
		Addr: "127.0.0.1:6379",
		// Let each call's context bound its reads and writes, so that
		// Options.Timeout holds when Redis goes silent.
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	g := redisgate.New(client, redisgate.Options{Capacity: 2, MaxQueue: 8})
	defer g.Close()

	release, err := g.Acquire(context.Background(), "llama:8080", func(ahead int) {
		fmt.Println("waiting behind", ahead)
	})
	switch {
	case errors.Is(err, redisgate.ErrUnavailable):
		// Redis is down: a caller may fall back to an in-process gate.
		fmt.Println("no shared gate:", err)
		return
	case errors.Is(err, outlast.ErrBusy):
		fmt.Println("the queue is full")
		return
	case err != nil:
		fmt.Println(err)
		return
	}
	defer release()
	fmt.Println(g.Load(context.Background(), "llama:8080"))
}

// A Gate serves as an outlast.Transport's gate like package gate's does.
func Example_transport() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	g := redisgate.New(client, redisgate.Options{Capacity: 2, MaxQueue: 8})
	defer g.Close()
	c := &http.Client{Transport: &outlast.Transport{Gate: g}}
	resp, err := c.Get("http://llama:8080/health")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close() // gives the slot back
	fmt.Println(resp.Status)
}
