package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outlast-llm/outlast"
)

var (
	memberRemainingDesc = prometheus.NewDesc("outlast_pool_member_remaining",
		"What is left of a pool member's rate limit (limit: requests or tokens) as its pool counts it now: its latest answer's headers, refilled since, less what was sent since; only limits its answers have stated.",
		[]string{"upstream", "limit"}, nil)
	memberLimitDesc = prometheus.NewDesc("outlast_pool_member_limit",
		"A pool member's rate limit (limit: requests or tokens) a window, as its answers' headers state it.",
		[]string{"upstream", "limit"}, nil)
)

// memberHeadroom exports each pool member's headroom, read at scrape time
// from the loads SetLoads gives.
type memberHeadroom struct{ m *Metrics }

// Describe sends the Descs of the gauges.
func (h memberHeadroom) Describe(ch chan<- *prometheus.Desc) {
	ch <- memberRemainingDesc
	ch <- memberLimitDesc
}

// Collect sends the known limits of every pool member. A member not
// configured counts as "other", whose first load wins.
func (h memberHeadroom) Collect(ch chan<- prometheus.Metric) {
	f := h.m.loads.Load()
	if f == nil {
		return
	}
	seen := map[string]bool{}
	for _, u := range (*f)() {
		up := h.m.upstreamLabel(u.Upstream)
		if u.Pool == "" || seen[up] {
			continue
		}
		seen[up] = true
		for _, q := range []struct {
			name  string
			quota outlast.Quota
		}{{"requests", u.Requests}, {"tokens", u.Tokens}} {
			if !q.quota.Known() {
				continue
			}
			ch <- prometheus.MustNewConstMetric(memberRemainingDesc, prometheus.GaugeValue, float64(q.quota.Remaining), up, q.name)
			if q.quota.Limit >= 0 {
				ch <- prometheus.MustNewConstMetric(memberLimitDesc, prometheus.GaugeValue, float64(q.quota.Limit), up, q.name)
			}
		}
	}
}
