package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/stats"
)

// summary is a set of durations, in µs.
type summary struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_us"`
	P99  float64 `json:"p99_us"`
	Mean float64 `json:"mean_us"`
	Max  float64 `json:"max_us"`
}

// summarize returns the nearest-rank percentiles, the mean and the
// largest of d, which it sorts.
func summarize(d []time.Duration) summary {
	if len(d) == 0 {
		return summary{}
	}
	slices.Sort(d)
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	return summary{
		N:    len(d),
		P50:  stats.Micros(stats.Percentile(d, 0.50)),
		P99:  stats.Micros(stats.Percentile(d, 0.99)),
		Mean: stats.Micros(sum) / float64(len(d)),
		Max:  stats.Micros(d[len(d)-1]),
	}
}

// span is one hold on the wall clock: Unix ns from the moment Acquire
// returned to the moment release was called. Of spans, stats.MaxOverlap
// gives the most holders at once: a span that ends at the instant another
// starts does not overlap it, as the one's release came after its end was
// read, and the other's grant before its start was.
type span [2]int64

// human formats a time in µs in the unit that suits it.
func human(us float64) string {
	switch {
	case us < 1:
		return fmt.Sprintf("%.0f ns", us*1000)
	case us < 10:
		return fmt.Sprintf("%.2f µs", us)
	case us < 1000:
		return fmt.Sprintf("%.1f µs", us)
	default:
		return fmt.Sprintf("%.2f ms", us/1000)
	}
}
