package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outlast-llm/outlast"
)

var (
	upstreamStateDesc = prometheus.NewDesc("outlast_upstream_state",
		"1 for the upstream's admission state (healthy, down, probing, recovering), 0 for the others; only upstreams with admission on.",
		[]string{"upstream", "state"}, nil)
	admissionLimitDesc = prometheus.NewDesc("outlast_admission_limit",
		"The admission's limit of requests in flight while the upstream recovers; 0 when it has none.",
		[]string{"upstream"}, nil)
	admissionWaitingDesc = prometheus.NewDesc("outlast_admission_waiting",
		"Requests waiting for the upstream to come back, before the gate.",
		[]string{"upstream"}, nil)
)

// states are the values of outlast_upstream_state's state label.
var states = []outlast.UpstreamState{outlast.Healthy, outlast.Down, outlast.Probing, outlast.Recovering}

// admissionState exports each upstream's admission state, read at scrape
// time from the loads SetLoads gives, so that it is never stale.
type admissionState struct{ m *Metrics }

// Describe sends the Descs of the gauges.
func (a admissionState) Describe(ch chan<- *prometheus.Desc) {
	ch <- upstreamStateDesc
	ch <- admissionLimitDesc
	ch <- admissionWaitingDesc
}

// Collect sends the state of every upstream that has admission on. An
// upstream not configured counts as "other", whose first load wins.
func (a admissionState) Collect(ch chan<- prometheus.Metric) {
	f := a.m.loads.Load()
	if f == nil {
		return
	}
	seen := map[string]bool{}
	for _, u := range (*f)() {
		up := a.m.upstreamLabel(u.Upstream)
		if !u.Admission || seen[up] {
			continue
		}
		seen[up] = true
		for _, s := range states {
			v := 0.0
			if s == u.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(upstreamStateDesc, prometheus.GaugeValue, v, up, s.String())
		}
		ch <- prometheus.MustNewConstMetric(admissionLimitDesc, prometheus.GaugeValue, float64(u.Limit), up)
		ch <- prometheus.MustNewConstMetric(admissionWaitingDesc, prometheus.GaugeValue, float64(u.Waiting), up)
	}
}
