package main

import (
	"encoding/json"
	"math"
	"slices"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/stats"
)

// recoveryWindow is how long after the recovery the herd is looked for.
const recoveryWindow = 30 * time.Second

// measures are one run's figures. Rates are fractions; latencies seconds.
type measures struct {
	Success       float64 // requests that got a whole answer
	OutageSuccess float64 // the same, of requests that arrived during the outage
	Attempts      float64 // attempts the providers saw, per request: the primary and the fallback
	Rejected      float64 // 429s and 503s per request, at either provider
	Late          float64 // attempts a provider, primary or fallback, finished after their client gave up, per request
	P50, P99      float64 // latency of successes
	P99Fail       float64 // time to fail, NaN without failures
	P99FailIdle   float64 // time from a failed request's last attempt to its failure
	Peak          float64 // most attempts at the primary in one second of the recovery window, ÷ C
	After429      float64 // the primary's 429s in the recovery window per request in flight in it
	Resent        float64 // attempts sent after one of the same request was committed
	Hung          float64 // attempts that got no answer, per request

	// With --fallback only (zero without):
	PrimaryAttempts  float64 // attempts the primary saw, per request
	FallbackAttempts float64 // attempts the fallback saw, per request
	FallbackServed   float64 // requests whose answer came from the fallback, of all requests
	FallbackPeak     float64 // most attempts in service at the fallback at once, ÷ its K/2
	Fallback429      float64 // the fallback's 429s per request
}

// measure computes a run's figures.
func measure(sc *scenario, r simRun) measures {
	var m measures
	n := float64(len(r.Requests))
	var ok, failed []float64
	inOutage, okInOutage := 0, 0
	for _, q := range r.Requests {
		d := (q.End - q.Arrival).Seconds()
		if q.OK {
			ok = append(ok, d)
		} else {
			failed = append(failed, d)
		}
		if q.Arrival >= sc.OutageStart && q.Arrival < sc.OutageEnd() {
			inOutage++
			if q.OK {
				okInOutage++
			}
		}
	}
	m.Success = float64(len(ok)) / n
	m.OutageSuccess = ratio(okInOutage, inOutage)
	m.P50, m.P99 = percentile(ok, 0.50), percentile(ok, 0.99)
	m.P99Fail = percentile(failed, 0.99)
	m.countAttempts(sc, r, n)
	m.P99FailIdle = failIdle(r)
	return m
}

// countAttempts fills in the figures that come from the attempts.
func (m *measures) countAttempts(sc *scenario, r simRun, n float64) {
	recovery := sc.OutageEnd()
	bins := make([]int, int(recoveryWindow/time.Second))
	throttledAfter := 0
	var rejected, late, hungN int
	var fallbackN, fallback429, fallbackServed int
	for _, a := range r.Attempts {
		switch a.Outcome {
		case throttled, unavailable:
			rejected++
		case hung:
			hungN++
		}
		if a.Late {
			late++
		}
		if a.Upstream == fallback {
			fallbackN++
			if a.Outcome == throttled {
				fallback429++
			}
			if a.Outcome == served && a.Committed {
				fallbackServed++
			}
			continue // the recovery's peak and 429s are the primary's
		}
		if a.Start >= recovery && a.Start < recovery+recoveryWindow {
			bins[(a.Start-recovery)/time.Second]++
			if a.Outcome == throttled {
				throttledAfter++
			}
		}
	}
	m.Attempts = float64(len(r.Attempts)) / n
	m.Rejected = float64(rejected) / n
	m.Late = float64(late) / n
	m.Hung = float64(hungN) / n
	m.Peak = float64(slices.Max(bins)) / sc.Capacity()
	inFlight := 0
	for _, q := range r.Requests {
		if q.Arrival < recovery+recoveryWindow && q.End >= recovery {
			inFlight++
		}
	}
	m.After429 = ratio(throttledAfter, inFlight)
	m.Resent = float64(resent(r))
	if k := sc.FallbackSlots(); k > 0 {
		m.FallbackAttempts = float64(fallbackN) / n
		m.PrimaryAttempts = float64(len(r.Attempts)-fallbackN) / n // as counted, not a difference of rounded ratios
		m.Fallback429 = float64(fallback429) / n
		m.FallbackServed = float64(fallbackServed) / n
		m.FallbackPeak = float64(maxInFlight(r, fallback)) / float64(k)
	}
}

// maxInFlight is the most attempts in service at once at one provider.
func maxInFlight(r simRun, upstream uint8) int {
	var spans [][2]time.Duration
	for _, a := range r.Attempts {
		if a.Admitted && a.Upstream == upstream {
			spans = append(spans, [2]time.Duration{a.Start, a.End})
		}
	}
	return stats.MaxOverlap(spans) // ends before starts at the same instant
}

// resent counts attempts that started after an attempt of the same request
// had been committed: sent again after its answer had begun to arrive.
func resent(r simRun) int {
	committed := map[int32]time.Duration{}
	for _, a := range r.Attempts {
		if a.Committed {
			if t, ok := committed[a.Req]; !ok || a.End < t {
				committed[a.Req] = a.End
			}
		}
	}
	n := 0
	for _, a := range r.Attempts {
		if t, ok := committed[a.Req]; ok && a.Start >= t && !(a.Committed && a.End == t) {
			n++
		}
	}
	return n
}

// failIdle is the p99, over failed requests, of the time from the end of
// their last attempt to their failure: how long a request that was going
// to fail waited for nothing.
func failIdle(r simRun) float64 {
	last := make([]time.Duration, len(r.Requests))
	seen := make([]bool, len(r.Requests))
	for _, a := range r.Attempts {
		end := a.End
		if a.Late {
			end = r.Requests[a.Req].End // the client stopped waiting when it failed
		}
		if !seen[a.Req] || end > last[a.Req] {
			last[a.Req], seen[a.Req] = end, true
		}
	}
	var idle []float64
	for i, q := range r.Requests {
		if q.OK {
			continue
		}
		from := q.Arrival
		if seen[i] {
			from = min(max(last[i], q.Arrival), q.End)
		}
		idle = append(idle, (q.End - from).Seconds())
	}
	return percentile(idle, 0.99)
}

// series returns attempts and admitted attempts per second at the primary,
// by start time, from 0 to end.
func series(r simRun, end time.Duration) (all, admitted []float64) {
	n := int(end / time.Second)
	all, admitted = make([]float64, n), make([]float64, n)
	for _, a := range r.Attempts {
		if a.Upstream != primary {
			continue
		}
		i := int(a.Start / time.Second)
		if i < 0 || i >= n {
			continue
		}
		all[i]++
		if a.Admitted {
			admitted[i]++
		}
	}
	return all, admitted
}

func ratio(a, b int) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// percentile returns the nearest-rank q-quantile of xs, or NaN for none.
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return stats.Percentile(slices.Sorted(slices.Values(xs)), q)
}

// A stat is a figure's mean over the seeds with the half-width of its 95%
// confidence interval (Student's t). Seeds where the figure is undefined,
// such as a time to fail with no failure, are left out; N says how many
// counted.
type stat struct {
	Mean float64 `json:"mean"`
	CI95 float64 `json:"ci95"`
	N    int     `json:"n"`
}

// MarshalJSON writes an undefined figure as null, which JSON can carry and
// NaN cannot.
func (s stat) MarshalJSON() ([]byte, error) {
	if math.IsNaN(s.Mean) {
		return []byte(`{"mean":null,"ci95":null,"n":0}`), nil
	}
	type plain stat
	return json.Marshal(plain(s))
}

func summarize(xs []float64) stat {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return stat{Mean: math.NaN(), CI95: math.NaN()}
	}
	mean := 0.0
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	if len(v) == 1 {
		return stat{Mean: mean, N: 1}
	}
	ss := 0.0
	for _, x := range v {
		ss += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(ss / float64(len(v)-1))
	return stat{Mean: mean, CI95: tQuantile(len(v)-1) * sd / math.Sqrt(float64(len(v))), N: len(v)}
}

// tQuantile is Student's t 0.975 quantile for df degrees of freedom.
func tQuantile(df int) float64 {
	table := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262,
		2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086}
	if df >= 1 && df <= len(table) {
		return table[df-1]
	}
	return 1.96
}
