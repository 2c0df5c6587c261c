package bench_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sync/semaphore"

	"github.com/outlast-llm/outlast/gate"
)

// The gate is measured against semaphore.Weighted, the x/sync primitive it
// is shaped after. Sub-benchmark names are impl=..., so that benchstat puts
// the two side by side.

// BenchmarkAcquireRelease measures one uncontended Acquire and release on one
// key: the cost the gate adds to every request when the server is not busy.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=gate", func(b *testing.B) {
		g := gate.New(1, 0)
		b.ReportAllocs()
		for b.Loop() {
			release, err := g.Acquire(ctx, "k", nil)
			if err != nil {
				b.Fatal(err)
			}
			release()
		}
	})
	b.Run("impl=semaphore", func(b *testing.B) {
		s := semaphore.NewWeighted(1)
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Acquire(ctx, 1); err != nil {
				b.Fatal(err)
			}
			s.Release(1)
		}
	})
}

// contenders is how many goroutines BenchmarkHandoff runs against one slot:
// a restart pile-up, in miniature.
const contenders = 64

// BenchmarkHandoff measures throughput when contenders goroutines share one
// key of capacity 1, so that nearly every release hands the slot to a
// waiter. Both serve waiters in arrival order.
func BenchmarkHandoff(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=gate", func(b *testing.B) {
		g := gate.New(1, contenders)
		handoff(b, func() (func(), error) { return g.Acquire(ctx, "k", nil) })
	})
	b.Run("impl=semaphore", func(b *testing.B) {
		s := semaphore.NewWeighted(1)
		release := func() { s.Release(1) }
		handoff(b, func() (func(), error) { return release, s.Acquire(ctx, 1) })
	})
}

// handoff runs b.N rounds of acquire, a little work, release, spread over
// contenders goroutines.
func handoff(b *testing.B, acquire func() (func(), error)) {
	b.ReportAllocs()
	var left atomic.Int64
	left.Store(int64(b.N))
	// rounds is guarded by the slot itself: a count short of b.N would mean
	// two holders at once.
	rounds := 0
	var wg sync.WaitGroup
	for range contenders {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				release, err := acquire()
				if err != nil {
					b.Error(err)
					return
				}
				rounds++
				work()
				release()
			}
		})
	}
	wg.Wait()
	if rounds != b.N {
		b.Fatalf("%d rounds counted, want %d", rounds, b.N)
	}
}

var sink uint64

// work stands for the little a holder does before releasing.
func work() {
	x := sink
	for i := range uint64(16) {
		x = x*31 + i
	}
	sink = x
}
