package main

import (
	"bytes"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/bench/internal/bubble"
)

// shortConfig is a run small enough for a test: three levels of 40
// simulated seconds, one of them past capacity, so that every policy
// meets the limits.
func shortConfig() config {
	c := defaultConfig()
	c.LevelDuration = 40 * time.Second
	c.Levels = []int{70, 160, 70}
	return c
}

// TestMembersEnforceLimits runs every policy and replays each member's
// own log of admissions against its limits: over any span from one
// admission to a later one, a member admitted no more requests, and no
// more tokens, than its bucket held at the start (the whole limit) plus
// what it refilled over the span. It also checks that every request is
// accounted for and that the policies met the limits at all.
func TestMembersEnforceLimits(t *testing.T) {
	c := shortConfig()
	w := newWorkload(c)
	runs := runAll(bubble.For(t), c, w, policies())
	for _, r := range runs {
		rejected, attempts := 0, 0
		for _, res := range r.Results {
			rejected += res.Rejects
			attempts += res.Attempts
		}
		admitted, memberRejected := 0, 0
		for _, m := range r.Members {
			spec := specOf(t, m.Name)
			checkBucket(t, r.Policy.Name, m, "requests", float64(spec.RPM), func(admission) float64 { return 1 })
			checkBucket(t, r.Policy.Name, m, "tokens", float64(spec.TPM), func(a admission) float64 { return float64(a.Cost) })
			if m.MinLevel[0] < 0 || m.MinLevel[1] < 0 {
				t.Errorf("%s: member %s's buckets went down to %v", r.Policy.Name, m.Name, m.MinLevel)
			}
			admitted += m.Admitted
			memberRejected += m.Rejected
		}
		if rejected != memberRejected {
			t.Errorf("%s: the requests' records count %d 429s, the members %d", r.Policy.Name, rejected, memberRejected)
		}
		if attempts != admitted+memberRejected {
			t.Errorf("%s: %d attempts, but the members admitted %d and rejected %d", r.Policy.Name, attempts, admitted, memberRejected)
		}
		if len(r.Results) != len(w.Requests) {
			t.Errorf("%s: %d results for %d requests", r.Policy.Name, len(r.Results), len(w.Requests))
		}
		if r.Policy.Name == "round-robin" && memberRejected == 0 {
			t.Errorf("%s: no 429 at 160 %% of capacity: the limits were never met", r.Policy.Name)
		}
	}
	rep := newReport(c, w, runs)
	var b strings.Builder
	rep.markdown(&b)
	for _, want := range []string{"| **whole run** | " + outlastName + " |", "| **over 100 %** | " + outlastName + " |", "| end of step 2 (160 %) |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report has no %q:\n%s", want, b.String())
		}
	}
}

// specOf returns the spec of the member named name.
func specOf(t *testing.T, name string) memberSpec {
	t.Helper()
	i := slices.IndexFunc(memberSpecs, func(s memberSpec) bool { return s.Name == name })
	if i < 0 {
		t.Fatalf("no member %q", name)
	}
	return memberSpecs[i]
}

// checkBucket fails t if, over some span between two of m's admissions,
// the cost admitted exceeds limit plus the refill over the span, at
// limit a minute.
func checkBucket(t *testing.T, policy string, m memberStats, what string, limit float64, cost func(admission) float64) {
	t.Helper()
	adm := m.Admissions
	for i := range adm {
		sum := 0.0
		for j := i; j < len(adm); j++ {
			sum += cost(adm[j])
			span := adm[j].At.Sub(adm[i].At).Seconds()
			if allowed := limit + limit/60*span; sum > allowed+1e-6 {
				t.Errorf("%s: member %s admitted %.0f %s in the %.3f s from %v: more than the %.1f its limit allows", policy, m.Name, sum, what, span, adm[i].At, allowed)
				return
			}
		}
	}
}

// TestWorkloadRepeats checks that a seed draws the same workload, and
// that the levels' rates are shares of the capacity.
func TestWorkloadRepeats(t *testing.T) {
	c := shortConfig()
	a, b := newWorkload(c), newWorkload(c)
	if len(a.Requests) != len(b.Requests) {
		t.Fatalf("seed %d drew %d requests, then %d", c.Seed, len(a.Requests), len(b.Requests))
	}
	for i := range a.Requests {
		x, y := a.Requests[i], b.Requests[i]
		if x.At != y.At || !bytes.Equal(x.Body, y.Body) || x.Output != y.Output || x.Level != y.Level {
			t.Fatalf("request %d differs between two draws of seed %d", i, c.Seed)
		}
	}
	for i, r := range a.Requests {
		if got := requestCost(r.Body); got != r.Cost {
			t.Fatalf("request %d: the member counts %d tokens, the workload %d", i, got, r.Cost)
		}
		if got := outlast.EstimateTokens(r.Body, outlast.DefaultOutputTokens); got != r.Cost {
			t.Fatalf("request %d: outlast estimates %d tokens, the member counts %d", i, got, r.Cost)
		}
	}
	if c.Seed++; slices.EqualFunc(newWorkload(c).Requests, a.Requests, func(x, y simRequest) bool { return x.At == y.At }) {
		t.Errorf("seeds %d and %d drew the same arrivals", c.Seed-1, c.Seed)
	}
}

// TestMemberAnswers checks a member's answers: 200s while its request
// bucket has room, then a 429 whose delay is when one request has
// refilled, with OpenAI's headers as outlast reads them.
func TestMemberAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		recs := make([]record, 4)
		for i := range recs {
			recs[i].output = 10
		}
		m := newMember(memberSpec{Name: "x", RPM: 3, TPM: 1_000_000}, recs, time.Now(), false)
		body := []byte(`{"model":"sim","max_tokens":10,"messages":[]}`)
		send := func(id int) *http.Response {
			req, err := http.NewRequest(http.MethodPost, "http://pool.sim/", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(idHeader, strconv.Itoa(id))
			resp, err := m.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp
		}
		for id := range 3 {
			if resp := send(id); resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d: status %d, want 200", id, resp.StatusCode)
			}
		}
		start := time.Now()
		resp := send(3)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("fourth request: status %d, want 429", resp.StatusCode)
		}
		// Three 200s took 3 × 400 ms (300 ms + 10 ms × 10 tokens): 1.2 s
		// refilled 0.06 of a request, and the rest takes 18.8 s more.
		d, ok := outlast.RetryAfter(resp.Header, start)
		if want := 18800 * time.Millisecond; !ok || d != want {
			t.Errorf("429's delay %v (%v), want %v", d, ok, want)
		}
		if got := resp.Header.Get("Retry-After"); got != "19" {
			t.Errorf("Retry-After %q, want 19", got)
		}
		hr := outlast.ReadHeadroom(resp.Header, start)
		if hr.Requests.Limit != 3 || hr.Requests.Remaining != 0 {
			t.Errorf("requests' headroom %+v, want limit 3 and none left", hr.Requests)
		}
		if full := hr.Requests.Reset.Sub(start); full != 58800*time.Millisecond {
			t.Errorf("requests' reset in %v, want 58.8s", full)
		}
		if s := m.stats(); s.Admitted != 3 || s.Rejected != 1 || recs[3].rejects.Load() != 1 {
			t.Errorf("member counted %d admitted and %d rejected, the request %d 429s; want 3, 1, 1", s.Admitted, s.Rejected, recs[3].rejects.Load())
		}
	})
}

// What a member's buckets held at a time is replayed from its admissions:
// each takes a request and its cost, and the buckets refill at their
// limit a minute up to the limit.
func TestLevelsAt(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	spec := memberSpec{Name: "x", RPM: 60, TPM: 6000}
	m := memberStats{Admissions: []admission{
		{At: start, Cost: 3000},
		{At: start, Cost: 3000},
		{At: start.Add(10 * time.Second), Cost: 500},
	}}
	for _, c := range []struct {
		at         time.Duration
		reqs, toks float64
	}{
		{0, 58, 0},
		{5 * time.Second, 60, 500},         // 5 s refill 5 requests, to the limit, and 500 tokens
		{10 * time.Second, 59, 1000 - 500}, // and the third admission
		{time.Minute, 60, 5500},            // requests whole again; tokens 50 s on
		{2 * time.Minute, 60, 6000},
	} {
		reqs, toks := m.levelsAt(spec, start, start.Add(c.at))
		if math.Abs(reqs-c.reqs) > 1e-9 || math.Abs(toks-c.toks) > 1e-9 {
			t.Errorf("at %v: %v requests and %v tokens, want %v and %v", c.at, reqs, toks, c.reqs, c.toks)
		}
	}
}
