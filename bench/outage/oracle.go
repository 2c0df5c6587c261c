package main

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"time"
)

// simulateOracle runs the physical limit: one central FIFO queue in front
// of the provider that sends a request only when a slot is free and the
// provider is up, and drops a request that cannot finish by its deadline,
// knowing its service time. Each request is sent once or never. It runs no
// client code, so it needs no bubble: it is a plain discrete-event loop over
// the same arrivals and service-time stream as the simulated runs.
//
// "Up" means outside the outage, except in the capacity shape, where the
// oracle keeps using the K/4 slots left. In the brownout and headers shapes
// it sends nothing during the outage, as a client that knew would not. It
// is never rejected, so in the storm shape it is as in down.
//
// With --fallback it sends a request to the fallback's K/2 slots when the
// primary has no slot free (or is down), and to the primary first
// otherwise: one FIFO queue over both providers' slots, the same service
// times for both, so that the limit is that of K + K/2 slots while the
// primary is up and of K/2 during the outage.
func simulateOracle(sc *scenario, seed uint64) simRun {
	o := oracle{
		sc:  sc,
		rng: rand.New(rand.NewPCG(seed, streamService)),
	}
	arr := arrivals(sc, seed)
	o.reqs = make([]requestRecord, len(arr))
	next := 0
	for next < len(arr) || len(o.queue) > 0 {
		// The next event: an arrival, a completion, or the recovery.
		t := time.Duration(math.MaxInt64)
		if next < len(arr) {
			t = arr[next].At
		}
		if len(o.busy) > 0 {
			t = min(t, o.busy[0])
		}
		if len(o.fbusy) > 0 {
			t = min(t, o.fbusy[0])
		}
		if o.now < sc.OutageEnd() && len(o.queue) > 0 {
			t = min(t, sc.OutageEnd())
		}
		if t == time.Duration(math.MaxInt64) {
			break
		}
		o.now = t
		for len(o.busy) > 0 && o.busy[0] <= t {
			heap.Pop(&o.busy)
		}
		for len(o.fbusy) > 0 && o.fbusy[0] <= t {
			heap.Pop(&o.fbusy)
		}
		for next < len(arr) && arr[next].At <= t {
			a := arr[next]
			o.reqs[next] = requestRecord{Client: int32(a.Client), Arrival: a.At}
			o.queue = append(o.queue, next)
			next++
		}
		o.dispatch()
	}
	return simRun{Policy: oracleName, Seed: seed, Requests: o.reqs, Attempts: o.attempts, Errors: o.errs()}
}

type oracle struct {
	sc       *scenario
	rng      *rand.Rand
	now      time.Duration
	queue    []int    // waiting requests, oldest first
	busy     timeHeap // completion times of the attempts in service at the primary
	fbusy    timeHeap // the same at the fallback, with --fallback
	reqs     []requestRecord
	attempts []attemptRecord
	dropped  int
}

// slots returns how many attempts the provider can serve now: 0 while it
// is down.
func (o *oracle) slots() int {
	if o.now < o.sc.OutageStart || o.now >= o.sc.OutageEnd() {
		return o.sc.Slots
	}
	if o.sc.Shape == "capacity" {
		return max(o.sc.Slots/4, 1)
	}
	return 0
}

// dispatch sends queued requests, oldest first, while there are slots:
// the primary's, then the fallback's.
func (o *oracle) dispatch() {
	for len(o.queue) > 0 {
		busy, upstream := &o.busy, primary
		if len(o.busy) >= o.slots() {
			if len(o.fbusy) >= o.sc.FallbackSlots() {
				return
			}
			busy, upstream = &o.fbusy, fallback
		}
		i := o.queue[0]
		o.queue = o.queue[1:]
		r := &o.reqs[i]
		deadline := r.Arrival + o.sc.Deadline
		service := time.Duration(float64(o.sc.Median) * math.Exp(o.sc.Sigma*o.rng.NormFloat64()))
		if o.now+service > deadline {
			r.End = min(o.now, deadline) // dropped: it fails as soon as that is known
			o.dropped++
			continue
		}
		end := o.now + service
		heap.Push(busy, end)
		r.End, r.OK = end, true
		o.attempts = append(o.attempts, attemptRecord{
			Req: int32(i), Client: r.Client, Upstream: upstream, Start: o.now, End: end,
			Outcome: served, Admitted: true, Committed: true,
		})
	}
}

func (o *oracle) errs() map[string]int {
	if o.dropped == 0 {
		return map[string]int{}
	}
	return map[string]int{"dropped: cannot finish by its deadline": o.dropped}
}

// timeHeap is a min-heap of times.
type timeHeap []time.Duration

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(time.Duration)) }
func (h *timeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
