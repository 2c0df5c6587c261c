package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/bench/internal/bubble"
)

// A policy is one way of routing the workload: a name, what it is, and
// how to build its RoundTripper over a run's fresh members.
type policy struct {
	Name   string
	Config string
	build  func(ms []*member, c config) http.RoundTripper
}

// outlastName is the policy under test; the checks compare the others to it.
const outlastName = "outlast pool"

// outlastPolicy returns the Policy of the outlast rows: backoff from half
// a second, doubling to 8 s, at least a 429's Retry-After, no jitter (so
// that a seed's run repeats), and the configured reserve.
func outlastPolicy(c config) *outlast.Policy {
	reserve := c.Reserve
	if reserve == 0 {
		reserve = -1 // Policy's zero means the default reserve; the flag's means none
	}
	return &outlast.Policy{
		Waits:      outlast.Exponential(500*time.Millisecond, 8*time.Second, 5),
		RetryAfter: outlast.RetryAfterAtLeast,
		Reserve:    reserve,
	}
}

// policies returns the policies of a run, the outlast pool first.
func policies() []policy {
	return []policy{
		{
			Name:   outlastName,
			Config: "outlast.Pool over the three members (outlast.Transport each); Policy: waits 0.5s doubling to 8s, Retry-After at least, no jitter, the reserve",
			build: func(ms []*member, c config) http.RoundTripper {
				trs := make([]*outlast.Transport, len(ms))
				for i, m := range ms {
					trs[i] = &outlast.Transport{Base: m, Name: m.spec.Name}
				}
				return &outlast.Pool{Members: trs, Policy: outlastPolicy(c)}
			},
		},
		{
			Name:   "round-robin",
			Config: "members in turn; a 429 cools its member down for its Retry-After and the request moves at once to the next member not cooling down; if all are, it waits for the first back within the deadline less the reserve",
			build: func(ms []*member, c config) http.RoundTripper {
				return newRouter(roundRobin, ms, c.Reserve)
			},
		},
		{
			Name:   "least busy",
			Config: "the member with the fewest requests in flight; 429s as round-robin",
			build: func(ms []*member, c config) http.RoundTripper {
				return newRouter(leastBusy, ms, c.Reserve)
			},
		},
		{
			Name:   "usage-based",
			Config: "LiteLLM's usage-based routing (v2): over a fixed 60 s window, it counts each attempt as it is sent and each answer's usage.total_tokens as it comes, and picks the member with the lowest tokens counted that stays under its configured RPM with one more request and under its TPM with the request's input; none: a 429 to the caller at once (“No deployments available”); 429s as round-robin",
			build: func(ms []*member, c config) http.RoundTripper {
				return newRouter(usageBased, ms, c.Reserve)
			},
		},
		{
			Name:   "single key",
			Config: "member a alone, through outlast.Transport with the outlast pool's Policy",
			build: func(ms []*member, c config) http.RoundTripper {
				return &outlast.Transport{Base: ms[0], Name: ms[0].spec.Name, Policy: outlastPolicy(c)}
			},
		},
	}
}

// An outcome is how a request ended.
type outcome int

// The outcomes of a request.
const (
	served   outcome = iota // a 200 within its deadline
	refused                 // the router gave up before the deadline without an answer to return: outlast.ErrPoolSpent, no deployments, every member cooling down
	rejected                // a member's 429, returned to the caller
	late                    // the deadline passed while it waited for a member
	cut                     // the deadline passed while a member was generating its answer, whose cost was spent
	failed                  // anything else
)

// outcomeNames name the outcomes in the report.
var outcomeNames = [...]string{served: "served", refused: "refused", rejected: "429 returned", late: "late", cut: "cut", failed: "failed"}

// A record is what a run learns of one request. The members write the
// atomic counters; the request's goroutine writes the rest.
type record struct {
	output   int          // tokens a member generates for it, set before the run
	attempts atomic.Int32 // attempts the members received
	rejects  atomic.Int32 // of them, 429s
	cut      atomic.Bool  // a member admitted it and its caller left before the answer
	admitted atomic.Int64 // when a member first admitted it, in Unix ns; 0 if none did
	arrived  time.Time
	outcome  outcome
	latency  time.Duration
}

// A result is what a request came to, copied out of its record.
type result struct {
	Level    int
	Class    int // its size, an index in mix
	Outcome  outcome
	Latency  time.Duration // from arrival to the answer or the failure
	Wait     time.Duration // from arrival to a member's admission; -1 if none admitted it
	Attempts int
	Rejects  int
}

// A policyRun is one policy's run of the workload.
type policyRun struct {
	Policy  policy
	Start   time.Time // the run's start, in its bubble's time
	Results []result
	Members []memberStats
}

// simulate runs the workload under p in a bubble of its own, with fresh
// members, and returns what became of each request.
func simulate(b bubble.Bubbler, c config, w *workload, p policy) policyRun {
	out := policyRun{Policy: p}
	b.Run(func() {
		recs := make([]record, len(w.Requests))
		for i := range recs {
			recs[i].output = w.Requests[i].Output
		}
		start := time.Now()
		out.Start = start
		ms := make([]*member, len(memberSpecs))
		for i, s := range memberSpecs {
			ms[i] = newMember(s, recs, start, c.Headers == headersAnswered)
		}
		rt := p.build(ms, c)
		var wg sync.WaitGroup
		for i := range w.Requests {
			time.Sleep(time.Until(start.Add(w.Requests[i].At)))
			wg.Go(func() { send(rt, &w.Requests[i], i, &recs[i], c.Deadline) })
		}
		wg.Wait()
		out.Results = make([]result, len(recs))
		for i := range recs {
			r := &recs[i]
			wait := time.Duration(-1)
			if at := r.admitted.Load(); at != 0 {
				wait = time.Unix(0, at).Sub(r.arrived)
			}
			out.Results[i] = result{Level: w.Requests[i].Level, Class: w.Requests[i].Class, Outcome: r.outcome, Latency: r.latency, Wait: wait, Attempts: int(r.attempts.Load()), Rejects: int(r.rejects.Load())}
		}
		for _, m := range ms {
			out.Members = append(out.Members, m.stats())
		}
	})
	return out
}

// send makes request id through rt under its deadline and records how it
// ended.
func send(rt http.RoundTripper, r *simRequest, id int, rec *record, deadline time.Duration) {
	start := time.Now()
	rec.arrived = start
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://pool.sim/v1/chat/completions", bytes.NewReader(r.Body))
	if err != nil {
		rec.outcome = failed
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idHeader, strconv.Itoa(id))
	resp, err := rt.RoundTrip(req)
	status := 0
	if err == nil {
		status = resp.StatusCode
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	rec.latency = time.Since(start)
	rec.outcome = judge(status, err, ctx.Err() != nil, rec.cut.Load())
}

// judge names a request's outcome from its answer's status (0 for none),
// its error, whether its deadline passed, and whether a member cut an
// answer short for it.
func judge(status int, err error, expired, wasCut bool) outcome {
	switch {
	case err == nil && status == http.StatusOK && !expired:
		return served
	case expired && wasCut:
		return cut
	case expired:
		return late
	case errors.Is(err, outlast.ErrPoolSpent), errors.Is(err, errCooling), errors.Is(err, errNoDeployments):
		return refused
	case status == http.StatusTooManyRequests:
		return rejected
	}
	if se, ok := errors.AsType[*outlast.StatusError](err); ok && se.StatusCode == http.StatusTooManyRequests {
		return rejected
	}
	return failed
}
