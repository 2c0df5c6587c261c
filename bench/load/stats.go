package main

import (
	"cmp"
	"math"
	"slices"
)

// mannWhitney returns the two-sided p-value of the Mann–Whitney U test of
// x and y: the chance of samples at least this far apart if both came from
// one distribution. It is the test benchstat uses to say two benchmarks
// differ. It uses the normal approximation, with the corrections for ties
// and for continuity, which is close to the exact test from about eight
// samples a side. With an empty sample, or all values equal, it returns 1.
func mannWhitney(x, y []float64) float64 {
	n1, n2 := len(x), len(y)
	if n1 == 0 || n2 == 0 {
		return 1
	}
	type obs struct {
		v     float64
		fromX bool
	}
	all := make([]obs, 0, n1+n2)
	for _, v := range x {
		all = append(all, obs{v, true})
	}
	for _, v := range y {
		all = append(all, obs{v, false})
	}
	slices.SortFunc(all, func(a, b obs) int { return cmp.Compare(a.v, b.v) })
	// Tied values share the mean of their ranks.
	var rx, ties float64
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		rank := float64(i+j+1) / 2 // ranks i+1..j
		for _, o := range all[i:j] {
			if o.fromX {
				rx += rank
			}
		}
		t := float64(j - i)
		ties += t*t*t - t
		i = j
	}
	n := float64(n1 + n2)
	u := rx - float64(n1*(n1+1))/2
	mean := float64(n1*n2) / 2
	variance := float64(n1*n2) / 12 * ((n + 1) - ties/(n*(n-1)))
	if variance <= 0 {
		return 1
	}
	z := max(math.Abs(u-mean)-0.5, 0) / math.Sqrt(variance)
	return math.Erfc(z / math.Sqrt2)
}

// median returns the median of v, or 0 if it is empty.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
