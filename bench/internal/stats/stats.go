// Package stats holds the figures the bench programs (load, outage,
// redisgate, soak) compute alike: a nearest-rank percentile, durations in
// µs, and the most intervals that overlap at once.
package stats

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Percentile returns the nearest-rank p-th percentile (p in [0, 1]) of
// sorted: the element at rank ⌈p·n⌉, counted from 1 and kept within
// 1..n. It returns the zero value if sorted is empty.
func Percentile[T any](sorted []T, p float64) T {
	if len(sorted) == 0 {
		var zero T
		return zero
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Micros returns d in µs.
func Micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// MaxOverlap returns the most of spans, each a start and an end, that
// overlap at any one instant. A span that ends at the instant another
// starts does not overlap it: at a tie, ends count before starts.
func MaxOverlap[S ~[]E, E ~[2]T, T cmp.Ordered](spans S) int {
	type event struct {
		at    T
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
