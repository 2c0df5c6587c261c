package main

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// A sizeClass is one kind of request of the workload: its share of the
// requests, the range of its body's length in bytes (drawn uniformly),
// and its max_tokens.
type sizeClass struct {
	Name      string
	Share     float64
	MinBytes  int
	MaxBytes  int
	MaxTokens int
}

// mix is the workload's blend of sizes: mostly small requests, which run
// into a member's request limit first, and some large ones, which run
// into its token limit.
var mix = []sizeClass{
	{Name: "small", Share: 0.55, MinBytes: 50, MaxBytes: 1_000, MaxTokens: 64},
	{Name: "medium", Share: 0.25, MinBytes: 1_000, MaxBytes: 4_000, MaxTokens: 256},
	{Name: "large", Share: 0.20, MinBytes: 4_000, MaxBytes: 8_000, MaxTokens: 1_024},
}

// minOutputShare is the least share of max_tokens an answer generates;
// the share is drawn uniformly from [minOutputShare, 1].
const minOutputShare = 0.1

// bodyHead and bodyTail frame a request body around its prompt.
const (
	bodyHead = `{"model":"sim","max_tokens":%d,"messages":[{"role":"user","content":"`
	bodyTail = `"}]}`
)

// A simRequest is one request of the workload, the same for every policy.
type simRequest struct {
	Level  int           // the index in config.Levels of the level it arrives in
	Class  int           // its size, an index in mix
	At     time.Duration // its arrival, from the start of the run
	Body   []byte        // a chat completion's JSON body
	Cost   int           // the tokens it counts against a member's limit
	Output int           // the tokens a member generates for it
}

// A workload is a run's requests and the capacity they are measured
// against.
type workload struct {
	Requests []simRequest
	Offered  []int // requests arriving at each level
	MeanCost float64

	// The pool's capacity: requests a second as the request limits allow
	// (ReqCap), as the token limits allow at the mix's mean cost (TokCap),
	// and the smaller of the two (Capacity), which the load levels are
	// shares of.
	ReqCap, TokCap, Capacity float64
}

// drawn is one draw of a request's size and answer.
type drawn struct {
	class                      int // its index in mix
	bodyLen, maxTokens, output int
}

// draw draws a request's size and answer from the mix.
func draw(rng *rand.Rand) drawn {
	u := rng.Float64()
	ci := len(mix) - 1
	for i, k := range mix {
		if u < k.Share {
			ci = i
			break
		}
		u -= k.Share
	}
	c := mix[ci]
	n := c.MinBytes + rng.IntN(c.MaxBytes-c.MinBytes+1)
	share := minOutputShare + (1-minOutputShare)*rng.Float64()
	head := len(fmt.Sprintf(bodyHead, c.MaxTokens)) + len(bodyTail)
	return drawn{class: ci, bodyLen: max(n, head+1), maxTokens: c.MaxTokens, output: max(1, int(math.Round(share*float64(c.MaxTokens))))}
}

// cost returns what a drawn request counts against a member's token limit:
// what requestCost reads from its body.
func (d drawn) cost() int { return (d.bodyLen+3)/4 + d.maxTokens }

// body returns a JSON body of d's length and max_tokens.
func (d drawn) body(prompt []byte) []byte {
	head := fmt.Sprintf(bodyHead, d.maxTokens)
	b := make([]byte, 0, d.bodyLen)
	b = append(b, head...)
	b = append(b, prompt[:d.bodyLen-len(head)-len(bodyTail)]...)
	return append(b, bodyTail...)
}

// meanCostSamples is how many draws, of a seed of their own, measure the
// mix's mean cost: the capacity is the mix's, not the run's sample of it.
const meanCostSamples = 200_000

// meanCost returns the mix's mean cost in tokens, drawn once.
var meanCost = sync.OnceValue(func() float64 {
	rng := rand.New(rand.NewPCG(0x6d6978, 0x636f7374))
	total := 0
	for range meanCostSamples {
		total += draw(rng).cost()
	}
	return float64(total) / meanCostSamples
})

// capacity returns the pool's capacity in requests a second, as the
// request limits allow and as the token limits allow at a mean cost of
// mean tokens a request, and the smaller of the two.
func capacity(mean float64) (reqCap, tokCap, capacity float64) {
	rpm, tpm := 0, 0
	for _, s := range memberSpecs {
		rpm += s.RPM
		tpm += s.TPM
	}
	reqCap = float64(rpm) / 60
	tokCap = float64(tpm) / 60 / mean
	return reqCap, tokCap, min(reqCap, tokCap)
}

// newWorkload draws a run's requests from its seed: at each level, Poisson
// arrivals at the level's share of the capacity, for the level's duration.
func newWorkload(c config) *workload {
	w := &workload{MeanCost: meanCost(), Offered: make([]int, len(c.Levels))}
	w.ReqCap, w.TokCap, w.Capacity = capacity(w.MeanCost)
	rng := rand.New(rand.NewPCG(c.Seed, 0x706f6f6c))
	prompt := bytes.Repeat([]byte("lorem ipsum "), mix[len(mix)-1].MaxBytes/12+1)
	for l, pct := range c.Levels {
		rate := float64(pct) / 100 * w.Capacity
		start := time.Duration(l) * c.LevelDuration
		end := start + c.LevelDuration
		t := start
		for {
			t += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
			if t >= end {
				break
			}
			d := draw(rng)
			w.Requests = append(w.Requests, simRequest{Level: l, Class: d.class, At: t, Body: d.body(prompt), Cost: d.cost(), Output: d.output})
			w.Offered[l]++
		}
	}
	return w
}
