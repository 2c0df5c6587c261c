package gateway

import (
	"fmt"
	"testing"
	"time"
)

// A model's hedge delay is DefaultHedgeDelay until half the samples are
// known, then the 95th percentile of its recent times to first content,
// never under minHedgeDelay, each model apart.
func TestHedgeDelayLearned(t *testing.T) {
	var h hedging
	for i := range hedgeSamples/2 - 1 {
		h.learn("slow", time.Duration(i+1)*time.Second)
	}
	if d := h.delay("slow"); d != DefaultHedgeDelay {
		t.Errorf("delay with %d samples = %v, want the default %v", hedgeSamples/2-1, d, DefaultHedgeDelay)
	}
	// 1 s … 32 s: the 95th percentile of 32 is the 31st.
	h.learn("slow", 32*time.Second)
	if d := h.delay("slow"); d != 31*time.Second {
		t.Errorf("delay of 1 s … 32 s = %v, want 31 s", d)
	}
	// Only the last hedgeSamples count: 64 fast ones push the slow out.
	for range hedgeSamples {
		h.learn("slow", 2*time.Second)
	}
	if d := h.delay("slow"); d != 2*time.Second {
		t.Errorf("delay after %d of 2 s = %v, want 2 s", hedgeSamples, d)
	}
	for range hedgeSamples {
		h.learn("fast", 100*time.Millisecond)
	}
	if d := h.delay("fast"); d != minHedgeDelay {
		t.Errorf("delay of a fast model = %v, want the floor %v", d, minHedgeDelay)
	}
	if d := h.delay("unknown"); d != DefaultHedgeDelay {
		t.Errorf("delay of an unknown model = %v, want the default", d)
	}
}

// The models learned are bounded: a caller that names a new model in
// each request cannot grow the map without end.
func TestHedgeModelsBounded(t *testing.T) {
	var h hedging
	for i := range 3 * maxHedgeModels {
		h.learn(fmt.Sprint("m", i), time.Second)
	}
	if n := len(h.ttfc); n > maxHedgeModels {
		t.Errorf("%d models learned, want at most %d", n, maxHedgeModels)
	}
}

// The budget gives one hedge for every hedgeEvery streams, and holds at
// most hedgeBurst.
func TestHedgeBudget(t *testing.T) {
	h := hedging{shares: hedgeEvery} // as newUpstream makes it
	if !h.spend() {
		t.Fatal("the first hedge was refused")
	}
	if h.spend() {
		t.Fatal("a second hedge was allowed before any stream earned it")
	}
	for range hedgeEvery - 1 {
		h.earn()
	}
	if h.spend() {
		t.Fatalf("a hedge was allowed after %d streams, want %d", hedgeEvery-1, hedgeEvery)
	}
	h.earn()
	if !h.spend() {
		t.Fatalf("no hedge after %d streams", hedgeEvery)
	}
	for range 100 * hedgeEvery {
		h.earn()
	}
	n := 0
	for h.spend() {
		n++
	}
	if n != hedgeBurst {
		t.Errorf("%d hedges after a long calm, want the burst of %d", n, hedgeBurst)
	}
}
