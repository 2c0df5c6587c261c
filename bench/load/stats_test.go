package main

import (
	"math"
	"testing"
)

func TestMannWhitney(t *testing.T) {
	tests := []struct {
		name string
		x, y []float64
		want float64 // worked by hand from the formula
	}{
		// U = 0: mean 12.5, variance 25·11/12, z = 12/4.787.
		{"apart", []float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10}, 0.012185},
		{"same", []float64{1, 2, 3}, []float64{1, 2, 3}, 1},
		// U = 6: mean 8, variance 12, z = 1.5/3.464.
		{"interleaved", []float64{1, 3, 5, 7}, []float64{2, 4, 6, 8}, 0.665006},
		{"all tied", []float64{4, 4}, []float64{4, 4, 4}, 1},
		{"empty", nil, []float64{1}, 1},
	}
	for _, tt := range tests {
		got := mannWhitney(tt.x, tt.y)
		if math.Abs(got-tt.want) > 1e-5 {
			t.Errorf("%s: got p = %.6f, want %.6f", tt.name, got, tt.want)
		}
		if back := mannWhitney(tt.y, tt.x); math.Abs(back-got) > 1e-12 {
			t.Errorf("%s: not symmetric: %.6f one way, %.6f the other", tt.name, got, back)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		v    []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tt.v); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.v, got, tt.want)
		}
	}
}
