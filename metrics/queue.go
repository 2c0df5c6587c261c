package metrics

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// maxSlotLabel bounds the named slots that get a series of their own.
// Slots come from the caller (Outlast-Slot, llama.cpp's id_slot), so any
// number may arrive; llama.cpp servers run far fewer than 64.
const maxSlotLabel = 64

var queueDepthDesc = prometheus.NewDesc("outlast_gate_queue_depth",
	`Requests waiting now at the gate: at the upstream's bound (slot=""), or at a named slot.`,
	[]string{"upstream", "slot"}, nil)

// queueDepth is the collector of outlast_gate_queue_depth. It reads the
// gateway's Loads at each scrape rather than tracking Queued calls, as
// a gauge kept by the observer would drift if a waiter's end went unseen.
type queueDepth struct{ m *Metrics }

// Describe sends the one Desc of the gauge.
func (q queueDepth) Describe(ch chan<- *prometheus.Desc) { ch <- queueDepthDesc }

// Collect sends the depths of every configured upstream's bound, at zero
// until SetLoads is called, and of every named slot in use.
func (q queueDepth) Collect(ch chan<- prometheus.Metric) {
	type key struct{ upstream, slot string }
	depth := map[key]float64{}
	for _, l := range q.m.labels {
		depth[key{l, ""}] = 0
	}
	if f := q.m.loads.Load(); f != nil {
		for _, u := range (*f)() {
			up := q.m.upstreamLabel(u.Upstream)
			named := 0
			for k, n := range u.Named {
				// Unknown upstreams and slots past the bound share a
				// series, so the depths add up.
				depth[key{up, slotLabel(k)}] += float64(n)
				named += n
			}
			// Queued counts the named slots' waiters too.
			depth[key{up, ""}] += float64(max(u.Queued-named, 0))
		}
	}
	for k, v := range depth {
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, v, k.upstream, k.slot)
	}
}

// slotLabel returns the label of a named slot's key in a record.Load: the key
// itself ("slot 3") for a small slot number, else "other".
func slotLabel(k string) string {
	n, ok := strings.CutPrefix(k, "slot ")
	if !ok {
		return otherLabel
	}
	i, err := strconv.Atoi(n)
	if err != nil || i < 0 || i >= maxSlotLabel || strconv.Itoa(i) != n {
		return otherLabel
	}
	return k
}
