package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
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
		P50:  micros(percentile(d, 0.50)),
		P99:  micros(percentile(d, 0.99)),
		Mean: micros(sum) / float64(len(d)),
		Max:  micros(d[len(d)-1]),
	}
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 1) of
// sorted, which is not empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// span is one hold on the wall clock: Unix ns from the moment Acquire
// returned to the moment release was called.
type span [2]int64

// maxOverlap returns the most spans that overlap at any one instant. A
// span that ends at the instant another starts does not overlap it: the
// one's release came after its end was read, and the other's grant before
// its start was.
func maxOverlap(spans []span) int {
	type event struct {
		at    int64
		delta int
	}
	ev := make([]event, 0, 2*len(spans))
	for _, s := range spans {
		ev = append(ev, event{s[0], +1}, event{s[1], -1})
	}
	slices.SortFunc(ev, func(a, b event) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) // ends first
	})
	n, most := 0, 0
	for _, e := range ev {
		n += e.delta
		most = max(most, n)
	}
	return most
}

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
