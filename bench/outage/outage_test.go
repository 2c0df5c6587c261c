package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/bubble"
)

// The tests run the reduced form by default, for CI under -race: 2 seeds,
// the default scenario and one sweep per shape they need. Run the full form
// with `go test -run . ./outage/ -outage.seeds 10`.
var testSeeds = flag.Int("outage.seeds", 2, "seeds per test")

func seeds() []uint64 {
	s := make([]uint64, *testSeeds)
	for i := range s {
		s[i] = uint64(i + 1)
	}
	return s
}

// selectPolicies returns the policies whose names match the filter: a
// comma-separated list of names or prefixes.
func selectPolicies(filter string) []policy { return selectFrom(policies(), filter) }

// runPolicies runs pols under sc with the test's seeds.
func runPolicies(t *testing.T, sc scenario, pols []policy) map[string][]simRun {
	t.Helper()
	return runAll(bubble.For(t), &sc, pols, false, seeds(), runtime.GOMAXPROCS(0), nil)
}

func TestOracle(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		deadline time.Duration
		success  float64 // the figure
		tol      float64
	}{
		// The limit: every request fits in its deadline once the
		// provider is back, so all succeed.
		{"deadline 60s", 60 * time.Second, 1, 0},
		// Requests that arrive in the first part of the outage cannot
		// finish by their deadline and are dropped: 91.7% in the issue.
		{"deadline 20s", 20 * time.Second, 0.917, 0.015},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sc := defaultScenario()
			sc.Deadline = c.deadline
			for _, seed := range seeds() {
				r := simulateOracle(&sc, seed)
				m := measure(&sc, r)
				if math.Abs(m.Success-c.success) > c.tol {
					t.Errorf("seed %d: success %.4f, want %.3f ± %.3f", seed, m.Success, c.success, c.tol)
				}
				if m.Attempts > 1 || (c.tol == 0 && m.Attempts != 1) {
					t.Errorf("seed %d: %.4f attempts per request, want 1.00 (at most 1)", seed, m.Attempts)
				}
				if got := maxInFlight(r, primary); got > sc.Slots {
					t.Errorf("seed %d: %d attempts in flight at once, want at most K = %d", seed, got, sc.Slots)
				}
				// K attempts start at the recovery; the few that finish in
				// under a second (0.3% of them at σ 0.25) free a slot for
				// another start within the same second.
				if peak, limit := m.Peak*sc.Capacity(), 1.05*float64(sc.Slots); peak > limit {
					t.Errorf("seed %d: peak %.0f attempts/s after the recovery, want at most K + 5%% = %.0f", seed, peak, limit)
				}
			}
		})
	}
}

// TestInvariants runs every policy in the default scenario and checks what
// must hold whatever the policy: the provider saw at least one attempt per
// success, and served it; no request was sent again after its answer began
// to arrive; no more than K attempts were ever in service.
func TestInvariants(t *testing.T) {
	t.Parallel()
	sc := defaultScenario()
	runs := runPolicies(t, sc, policies())
	for name, rs := range runs {
		for _, r := range rs {
			answered := map[int32]bool{}
			for _, a := range r.Attempts {
				if a.Outcome == served && a.Committed {
					answered[a.Req] = true
				}
			}
			ok := 0
			for i, q := range r.Requests {
				if q.OK {
					ok++
					if !answered[int32(i)] {
						t.Errorf("%s seed %d: request %d succeeded with no served attempt", name, r.Seed, i)
					}
				}
			}
			if len(r.Attempts) < ok {
				t.Errorf("%s seed %d: %d attempts, %d successes; want attempts ≥ successes", name, r.Seed, len(r.Attempts), ok)
			}
			if n := resent(r); n != 0 {
				t.Errorf("%s seed %d: %d attempts sent after a commit, want 0", name, r.Seed, n)
			}
			if got := maxInFlight(r, primary); got > sc.Slots {
				t.Errorf("%s seed %d: %d in service at once, want at most K = %d", name, r.Seed, got, sc.Slots)
			}
		}
	}
}

// TestCommitted checks that nothing committed is sent again: in the
// headers shape every admitted attempt during the outage gets its 200
// headers and then a broken body, and outlast must make exactly one
// attempt for each such request. The peers' figures are logged.
func TestCommitted(t *testing.T) {
	t.Parallel()
	sc := defaultScenario()
	sc.Shape = "headers"
	runs := runPolicies(t, sc, policies())
	for name, rs := range runs {
		total := 0
		for _, r := range rs {
			total += resent(r)
			if policyGroup(name) != "outlast" {
				continue
			}
			perReq := map[int32]int{}
			breaks := map[int32]bool{}
			for _, a := range r.Attempts {
				perReq[a.Req]++
				if a.Outcome == broken && a.Committed {
					breaks[a.Req] = true
				}
			}
			if len(breaks) == 0 {
				t.Fatalf("%s seed %d: no broken body was committed; the shape is not exercised", name, r.Seed)
			}
			for req := range breaks {
				if perReq[req] != 1 {
					t.Errorf("%s seed %d: request %d got %d attempts after a broken body, want exactly 1", name, r.Seed, req, perReq[req])
				}
			}
		}
		if total > 0 {
			t.Logf("%s: %d attempts re-sent after a commit over %d seeds", name, total, len(rs))
		}
	}
}

func policyGroup(name string) string {
	for _, p := range policies() {
		if p.Name == name {
			return p.Group
		}
	}
	return ""
}

// TestLayers checks the outermost-only rule end to end: outlast in two
// layers that both retry (Do around the SDK over the Transport) makes the
// same provider attempts as outlast in one, request by request.
func TestLayers(t *testing.T) {
	t.Parallel()
	pols := selectPolicies("outlast")[:1] // unjittered, so that the runs can match exactly
	one := defaultScenario()
	two := defaultScenario()
	two.Shape = "layers"
	r1 := runPolicies(t, one, pols)[pols[0].Name]
	r2 := runPolicies(t, two, pols)[pols[0].Name]
	for i := range r1 {
		a1, a2 := attemptsPerRequest(r1[i]), attemptsPerRequest(r2[i])
		if len(r1[i].Attempts) != len(r2[i].Attempts) {
			t.Errorf("seed %d: one layer made %d attempts, two layers %d; want equal", r1[i].Seed, len(r1[i].Attempts), len(r2[i].Attempts))
		}
		for req, n := range a1 {
			if a2[req] != n {
				t.Errorf("seed %d: request %d: one layer %d attempts, two layers %d", r1[i].Seed, req, n, a2[req])
				break
			}
		}
		if m1, m2 := measure(&one, r1[i]), measure(&two, r2[i]); m1.Success != m2.Success {
			t.Errorf("seed %d: success %.4f with one layer, %.4f with two", r1[i].Seed, m1.Success, m2.Success)
		}
	}
}

func attemptsPerRequest(r simRun) map[int32]int {
	n := map[int32]int{}
	for _, a := range r.Attempts {
		n[a.Req]++
	}
	return n
}

// A --policies filter splits at commas, not at the ", " inside names.
func TestSelectPolicies(t *testing.T) {
	var got []string
	for _, p := range selectPolicies("outlast, admission,oracle") {
		got = append(got, p.Name)
	}
	want := []string{"outlast, admission", "outlast, admission + budget"}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("selectPolicies(\"outlast, admission,oracle\") = %q, want %q (the oracle runs apart)", got, want)
	}
	// The fallback rows are there with --fallback only, after the others.
	sc := defaultScenario()
	if n, all := len(policies()), len(available(&sc)); all != n {
		t.Errorf("default scenario: %d rows, want policies()' %d", all, n)
	}
	sc.Fallback = true
	fb := selectFrom(available(&sc), "outlast, fallback")
	if len(fb) != 3 {
		t.Fatalf("--fallback: \"outlast, fallback\" selects %d rows, want 3 starting with outlast, fallback", len(fb))
	}
	if fb[0].Name != "outlast, fallback" {
		t.Errorf("--fallback: \"outlast, fallback\" selects %d rows starting with %q, want 3 starting with outlast, fallback", len(fb), fb[0].Name)
	}
}

// TestOracleFallback checks the limit with a fallback provider: every
// request sent once and served, the fallback used during the outage, and
// neither provider ever holding more than its slots.
func TestOracleFallback(t *testing.T) {
	t.Parallel()
	sc := defaultScenario()
	sc.Fallback = true
	for _, seed := range seeds() {
		r := simulateOracle(&sc, seed)
		m := measure(&sc, r)
		if m.Success != 1 || m.Attempts != 1 {
			t.Errorf("seed %d: success %.4f at %.4f attempts per request, want 1 and 1", seed, m.Success, m.Attempts)
		}
		if m.FallbackServed == 0 {
			t.Errorf("seed %d: nothing served by the fallback", seed)
		}
		if got := maxInFlight(r, primary); got > sc.Slots {
			t.Errorf("seed %d: %d in service at the primary, want at most K = %d", seed, got, sc.Slots)
		}
		if got := maxInFlight(r, fallback); got > sc.FallbackSlots() {
			t.Errorf("seed %d: %d in service at the fallback, want at most K/2 = %d", seed, got, sc.FallbackSlots())
		}
	}
}

// TestFallback runs the rows that use a fallback provider, beside outlast,
// shared, in the default scenario with --fallback. It checks that each row
// runs and that the rows that should use the fallback do; that outlast,
// fallback serves every request; and, for every row, that nothing reached
// the fallback once the primary had returned a 200 for the same logical
// request (or the other way round), that each request was answered at
// most once, that the requests that succeeded are exactly those answered,
// and that neither provider held more than its slots.
func TestFallback(t *testing.T) {
	t.Parallel()
	sc := defaultScenario()
	sc.Fallback = true
	pols := append(selectPolicies("outlast, shared"), fallbackPolicies()...)
	runs := runPolicies(t, sc, pols)
	ms := map[string][]measures{}
	for name, rs := range runs {
		for _, r := range rs {
			ms[name] = append(ms[name], measure(&sc, r))
		}
	}
	mean := func(name string, f func(measures) float64) float64 {
		sum := 0.0
		for _, m := range ms[name] {
			sum += f(m)
		}
		return sum / float64(len(ms[name]))
	}
	success := func(m measures) float64 { return m.Success }
	for _, p := range pols {
		rs := runs[p.Name]
		if len(rs) != len(seeds()) {
			t.Fatalf("%s: %d runs, want %d", p.Name, len(rs), len(seeds()))
		}
		served := mean(p.Name, func(m measures) float64 { return m.FallbackServed })
		t.Logf("%s: success %.4f, %.4f attempts per request at the fallback, %.4f of requests served there",
			p.Name, mean(p.Name, success), mean(p.Name, func(m measures) float64 { return m.FallbackAttempts }), served)
		switch p.Name {
		case "outlast, shared":
			if served != 0 {
				t.Errorf("%s: %.4f of requests served by the fallback, want none: it does not know of one", p.Name, served)
			}
		case "outlast, fallback, prefer available", "LiteLLM's rule":
			if served == 0 {
				t.Errorf("%s: nothing served by the fallback", p.Name)
			}
		}
		for _, r := range rs {
			checkFallbackRun(t, &sc, p.Name, r)
		}
	}
	// outlast, shared gets every request through here, so outlast,
	// fallback, which adds an upstream, must too.
	for i, r := range runs["outlast, fallback"] {
		if m := ms["outlast, fallback"][i]; m.Success != 1 {
			t.Errorf("outlast, fallback seed %d: success %.4f, want 1: every request served", r.Seed, m.Success)
		}
	}
}

// checkFallbackRun reports fallbackViolations' findings for one run.
func checkFallbackRun(t *testing.T, sc *scenario, name string, r simRun) {
	t.Helper()
	for _, msg := range fallbackViolations(sc, r) {
		t.Errorf("%s seed %d: %s", name, r.Seed, msg)
	}
}

// fallbackViolations checks one run of a fallback row: no attempt at
// either provider started once another attempt of the same request had
// returned its 200 headers; each request answered at most once; a request
// succeeded if and only if it was answered; no provider over its slots.
func fallbackViolations(sc *scenario, r simRun) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	type answer struct {
		at       time.Duration
		upstream uint8
		n        int
	}
	answered := map[int32]*answer{}
	for _, a := range r.Attempts {
		if !a.Committed {
			continue
		}
		if q := answered[a.Req]; q != nil {
			q.n++
			q.at = min(q.at, a.End)
			continue
		}
		answered[a.Req] = &answer{a.End, a.Upstream, 1}
	}
	for _, a := range r.Attempts {
		if q := answered[a.Req]; q != nil && a.Start >= q.at && !(a.Committed && a.End == q.at) {
			bad("request %d sent to upstream %d at %v, after upstream %d returned its 200 at %v", a.Req, a.Upstream, a.Start, q.upstream, q.at)
		}
	}
	ok := 0
	for i, q := range r.Requests {
		a := answered[int32(i)]
		if a != nil && a.n > 1 {
			bad("request %d answered %d times, want at most once", i, a.n)
		}
		if q.OK != (a != nil) {
			bad("request %d: succeeded %v, answered %v", i, q.OK, a != nil)
		}
		if q.OK {
			ok++
		}
	}
	if ok != len(answered) {
		bad("%d successes, %d requests answered; want equal", ok, len(answered))
	}
	if got := maxInFlight(r, primary); got > sc.Slots {
		bad("%d in service at the primary, want at most K = %d", got, sc.Slots)
	}
	if got := maxInFlight(r, fallback); got > sc.FallbackSlots() {
		bad("%d in service at the fallback, want at most K/2 = %d", got, sc.FallbackSlots())
	}
	return out
}

// fallbackViolations finds a request sent to the fallback after the
// primary returned its 200, and one answered twice.
func TestFallbackViolations(t *testing.T) {
	t.Parallel()
	sc := defaultScenario()
	sc.Fallback = true
	s := time.Second
	r := simRun{
		Requests: []requestRecord{{Arrival: 0, End: 3 * s, OK: true}, {Arrival: 0, End: 6 * s, OK: true}},
		Attempts: []attemptRecord{
			// Request 0: a 503 at the primary, then served at the fallback.
			{Req: 0, Upstream: primary, Start: 0, End: s / 20, Outcome: unavailable},
			{Req: 0, Upstream: fallback, Start: s, End: 3 * s, Outcome: served, Admitted: true, Committed: true},
			// Request 1: served at the primary, then sent to the fallback.
			{Req: 1, Upstream: primary, Start: 0, End: 2 * s, Outcome: served, Admitted: true, Committed: true},
			{Req: 1, Upstream: fallback, Start: 3 * s, End: 5 * s, Outcome: served, Admitted: true, Committed: true},
		},
	}
	got := fallbackViolations(&sc, r)
	if len(got) != 2 {
		t.Fatalf("got %d violations %q, want 2: request 1 sent after its 200, and answered twice", len(got), got)
	}
	r.Attempts = r.Attempts[:3]
	if got := fallbackViolations(&sc, r); len(got) != 0 {
		t.Errorf("a clean run: got violations %q", got)
	}
}

// TestFallbackLongOutage checks that outlast's Fallback with PreferPrimary
// does move requests when the primary cannot serve them in time: with an
// outage of 70 s, longer than the deadline less the reserve (50 s), the
// requests that arrive early in it cannot wait for the recovery, and
// outlast, fallback must send them to the fallback and get more through
// than outlast, shared, which has none.
func TestFallbackLongOutage(t *testing.T) {
	t.Parallel()
	sc := defaultScenario()
	sc.Fallback = true
	sc.Outage = 70 * time.Second
	pols := selectFrom(available(&sc), "outlast, shared,outlast, fallback")
	if len(pols) < 2 {
		t.Fatalf("got %d rows, want at least outlast, shared and outlast, fallback", len(pols))
	}
	pols = pols[:2]
	if pols[0].Name != "outlast, shared" || pols[1].Name != "outlast, fallback" {
		t.Fatalf("got rows %q and %q", pols[0].Name, pols[1].Name)
	}
	runs := runPolicies(t, sc, pols)
	for i, fr := range runs["outlast, fallback"] {
		sr := runs["outlast, shared"][i]
		fm, sm := measure(&sc, fr), measure(&sc, sr)
		t.Logf("seed %d: success %.4f with the fallback (%.4f served there), %.4f without", fr.Seed, fm.Success, fm.FallbackServed, sm.Success)
		if fm.FallbackServed == 0 || fm.Success <= sm.Success {
			t.Errorf("seed %d: success %.4f with the fallback (%.4f served there), %.4f without; want more with it", fr.Seed, fm.Success, fm.FallbackServed, sm.Success)
		}
		checkFallbackRun(t, &sc, "outlast, fallback", fr)
	}
}

// TestStorm checks that in the storm shape rejections cost the provider
// capacity: a client that retries at once, with no wait, until its deadline
// gets through the outage in the down shape, where its 429s are free and it
// takes every slot that frees, but not in the storm shape, where its 429s
// alone keep all K slots held long after the recovery. The scenario is the
// default scaled down fourfold in K and load and threefold in time, so
// that the storm's attempts stay few enough for -race; its utilization is
// the default's.
func TestStorm(t *testing.T) {
	t.Parallel()
	down := defaultScenario()
	down.Slots, down.Rate, down.Clients = 20, 5, 10
	down.OutageStart, down.Outage, down.Duration, down.Deadline = 10*time.Second, 10*time.Second, 60*time.Second, 20*time.Second
	storm := down
	storm.Shape = "storm"
	pols := []policy{{Name: "hammer", client: hammer}}
	rd := runPolicies(t, down, pols)["hammer"]
	rs := runPolicies(t, storm, pols)["hammer"]
	// Past the outage's end plus a deadline, every request stuck in the
	// outage has failed: a storm then is kept up by new arrivals alone.
	settled := down.OutageEnd() + down.Deadline
	for i := range rd {
		md, ms := measure(&down, rd[i]), measure(&storm, rs[i])
		ad, as := successAfter(rd[i], settled), successAfter(rs[i], settled)
		t.Logf("seed %d: success %.3f in down, %.3f in storm (%.3f and %.3f of arrivals after %v); %.0f and %.0f attempts per request",
			rd[i].Seed, md.Success, ms.Success, ad, as, settled, md.Attempts, ms.Attempts)
		// In down the provider serves at capacity from the recovery on,
		// which is enough for the backlog and the new load.
		if md.Success < 0.9 {
			t.Errorf("seed %d: success %.3f in down, want at least 0.9", rd[i].Seed, md.Success)
		}
		// In storm the rejections crowd out the admissions: two thirds of
		// the run's requests arrive after the recovery.
		if ms.Success > md.Success-0.3 {
			t.Errorf("seed %d: success %.3f in storm, %.3f in down; want storm at least 0.3 lower", rd[i].Seed, ms.Success, md.Success)
		}
		// And the storm outlives its trigger: metastable.
		if as > ad/2 {
			t.Errorf("seed %d: success of arrivals after %v %.3f in storm, %.3f in down; want storm below half of down", rd[i].Seed, settled, as, ad)
		}
	}
}

// successAfter is the success rate of the requests that arrived at or
// after t.
func successAfter(r simRun, t time.Duration) float64 {
	n, ok := 0, 0
	for _, q := range r.Requests {
		if q.Arrival >= t {
			n++
			if q.OK {
				ok++
			}
		}
	}
	return ratio(ok, n)
}

// hammer is a client that retries at once, with no wait, until its
// request's deadline: a retry storm in one loop.
func hammer(_ build, rt http.RoundTripper) caller {
	return func(ctx context.Context) error {
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"chat/completions", http.NoBody)
			if err != nil {
				return err
			}
			resp, err := rt.RoundTrip(req)
			if err != nil {
				return err // the deadline
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
}
