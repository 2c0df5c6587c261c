package gate_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/outlast-llm/outlast/gate"
)

// A llama.cpp server started with --parallel 1 serves one request at a time.
// The gate lets one more wait its turn and refuses the rest at once.
func Example() {
	g := gate.New(1, 1)
	ctx := context.Background()

	release, err := g.Acquire(ctx, "llama:8080", nil)
	if err != nil {
		panic(err)
	}

	inQueue := make(chan struct{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		release, err := g.Acquire(ctx, "llama:8080", func(ahead int) {
			fmt.Println("second request queued,", ahead, "ahead")
			close(inQueue)
		})
		if err != nil {
			panic(err)
		}
		fmt.Println("second request served")
		release()
	}()
	<-inQueue

	_, err = g.Acquire(ctx, "llama:8080", nil)
	fmt.Println("third request:", err, errors.Is(err, gate.ErrBusy))
	fmt.Println(g.Load("llama:8080"))

	release()
	<-served
	fmt.Println(g.Load("llama:8080"))
	// Output:
	// second request queued, 1 ahead
	// third request: gate: queue is full true
	// 1 1
	// second request served
	// 0 0
}
