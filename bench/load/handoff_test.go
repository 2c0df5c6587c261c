package main

import (
	"runtime/metrics"
	"testing"
)

// TestNoGoroutineARequest checks that a request through the gateway
// starts no goroutine that a request through the bare proxy does not: a
// goroutine a request is a hand-off, which costs little in one busy
// process and a wake-up on an idle machine. Every target here shares one
// process with the client and the upstream, so each count has theirs in
// it; the difference between the two targets is the gateway's own.
func TestNoGoroutineARequest(t *testing.T) {
	c := defaults()
	c.GateSlots, c.Journal = 0, false
	st, err := newStack(t.Context(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.close() })
	const n = 200
	created := func(name string, stream bool) float64 {
		tg := st.target(name)
		for range 20 { // connections and pools warmed
			if _, err := tg.do(t.Context(), stream); err != nil {
				t.Fatal(err)
			}
		}
		s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
		metrics.Read(s)
		before := s[0].Value.Uint64()
		for range n {
			if _, err := tg.do(t.Context(), stream); err != nil {
				t.Fatal(err)
			}
		}
		metrics.Read(s)
		return float64(s[0].Value.Uint64()-before) / n
	}
	for _, stream := range []bool{false, true} {
		proxy, gw := created("proxy", stream), created("gateway", stream)
		t.Logf("stream %v: goroutines started a request: proxy %.2f, gateway %.2f", stream, proxy, gw)
		if gw > proxy+0.05 {
			t.Errorf("stream %v: the gateway starts %.2f goroutines a request, the bare proxy %.2f: a hand-off on the success path", stream, gw, proxy)
		}
	}
}
