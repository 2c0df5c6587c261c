package gate_test

import (
	"testing"

	"github.com/outlast-llm/outlast/gate"
	"github.com/outlast-llm/outlast/internal/gatetest"
)

// TestSuite holds the in-process gate to the rules that every gate of this
// module follows, in real time, as package redisgate's is.
func TestSuite(t *testing.T) {
	t.Parallel()
	gatetest.Run(t, func(t *testing.T, capacity, maxQueue int) gatetest.Gate {
		return gate.New(capacity, maxQueue)
	})
}
