package stats_test

import (
	"testing"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/stats"
)

func TestPercentile(t *testing.T) {
	if got := stats.Percentile([]time.Duration(nil), 0.5); got != 0 {
		t.Errorf("empty: got %v, want 0", got)
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, c := range []struct {
		xs   []int
		p    float64
		want int
	}{
		{hundred, 0.50, 50}, {hundred, 0.99, 99}, {hundred, 1, 100}, {hundred, 0, 1},
		{hundred[:10], 0.99, 10}, {hundred[:10], 0.5, 5}, {hundred[:1], 0.5, 1},
		{hundred[:3], 0.5, 2}, {hundred[:2], 0.5, 1},
	} {
		if got := stats.Percentile(c.xs, c.p); got != c.want {
			t.Errorf("%d values, p %v: got %d, want %d", len(c.xs), c.p, got, c.want)
		}
	}
	if got := stats.Percentile([]float64{0.25, 0.5}, 0.99); got != 0.5 {
		t.Errorf("floats: got %v, want 0.5", got)
	}
	if got := stats.Percentile([]float64{}, 0.99); got != 0 {
		t.Errorf("no floats: got %v, want 0", got)
	}
}

func TestMicros(t *testing.T) {
	if got := stats.Micros(1500 * time.Nanosecond); got != 1.5 {
		t.Errorf("got %v, want 1.5", got)
	}
}

func TestMaxOverlap(t *testing.T) {
	type span [2]int64
	for _, c := range []struct {
		spans []span
		want  int
	}{
		{nil, 0},
		{[]span{{0, 1}}, 1},
		{[]span{{0, 2}, {1, 3}, {2, 4}}, 2},    // the first ends as the third starts
		{[]span{{0, 1}, {1, 2}, {2, 3}}, 1},    // hand-offs, not two holders
		{[]span{{0, 1}, {2, 3}, {4, 5}}, 1},    // apart: the gaps hold nothing
		{[]span{{0, 30}, {5, 10}, {8, 20}}, 3}, // nested: the outer span holds throughout
		{[]span{{0, 10}, {1, 9}, {2, 8}, {9, 12}}, 3},
		{[]span{{5, 5}, {5, 5}}, 0}, // empty spans hold nothing
	} {
		if got := stats.MaxOverlap(c.spans); got != c.want {
			t.Errorf("%v: got %d, want %d", c.spans, got, c.want)
		}
	}
	if got := stats.MaxOverlap([][2]time.Duration{{0, time.Second}, {time.Millisecond, 2 * time.Second}}); got != 2 {
		t.Errorf("durations: got %d, want 2", got)
	}
}
