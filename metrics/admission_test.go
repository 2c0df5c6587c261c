package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/metrics"
	"github.com/outlast-llm/outlast/record"
)

// An upstream with admission on exports its state as one series per
// state, 1 for the current one, with its limit and waiters; one without
// exports none.
func TestAdmissionState(t *testing.T) {
	t.Parallel()
	m := metrics.New([]string{"api", "llama"})
	m.SetLoads(func() []record.Load {
		return []record.Load{
			{Upstream: "api", Admission: true, State: outlast.Recovering, Limit: 6, Waiting: 40},
			{Upstream: "llama"},
		}
	})
	got := scrape(t, m.Handler())
	checkSeries(t, got, map[string]float64{
		`outlast_upstream_state{state="healthy",upstream="api"}`:    0,
		`outlast_upstream_state{state="down",upstream="api"}`:       0,
		`outlast_upstream_state{state="probing",upstream="api"}`:    0,
		`outlast_upstream_state{state="recovering",upstream="api"}`: 1,
		`outlast_admission_limit{upstream="api"}`:                   6,
		`outlast_admission_waiting{upstream="api"}`:                 40,
	})
	for k := range got {
		if strings.Contains(k, `upstream="llama"`) && (strings.HasPrefix(k, "outlast_upstream_state") || strings.HasPrefix(k, "outlast_admission_limit")) {
			t.Errorf("%s: want no admission series for an upstream without admission", k)
		}
	}
}

// A probe counts in outlast_probes_total, and an attempt's wait for its
// upstream in outlast_admission_wait_seconds.
func TestAdmissionWaitAndProbes(t *testing.T) {
	t.Parallel()
	m := metrics.New([]string{"api"})
	o := m.Observer()
	r := &record.Request{Upstream: "api"}
	start := time.Now()
	o.AttemptEnd(r, record.Attempt{N: 1, Start: start, End: start.Add(time.Second), Probe: true, AdmissionWait: 4 * time.Second, Class: outlast.ClassStatus5xx, Status: 503})
	o.AttemptEnd(r, record.Attempt{N: 2, Start: start, End: start.Add(time.Second), AdmissionWait: 2 * time.Second})
	o.AttemptEnd(r, record.Attempt{N: 3, Start: start, End: start.Add(time.Second)})
	checkSeries(t, scrape(t, m.Handler()), map[string]float64{
		`outlast_probes_total{upstream="api"}`:                 1,
		`outlast_admission_wait_seconds_count{upstream="api"}`: 2,
		`outlast_admission_wait_seconds_sum{upstream="api"}`:   6,
	})
}
