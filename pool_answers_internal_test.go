package outlast

import (
	"testing"
	"time"
)

// The expectation is the quickest answer plus, for each token of the
// bound, the time beyond it that all but one answer in twenty took; it
// holds nothing until 16 answers, and forgets the oldest past 64.
func TestAnswerTimesExpect(t *testing.T) {
	var a answerTimes
	// Answers of 300 ms plus 10 ms a token generated, each generating
	// its whole bound: small ones of 100 tokens, large of 1,000.
	answer := func(bound int) time.Duration { return 300*time.Millisecond + time.Duration(bound)*10*time.Millisecond }
	for i := range answerMinSamples - 1 {
		a.add(100+900*(i%2), answer(100+900*(i%2)))
		if d := a.expect(1000); d != 0 {
			t.Fatalf("after %d answers, expect = %v, want 0 until %d", i+1, d, answerMinSamples)
		}
	}
	a.add(1000, answer(1000))
	// base 1.3 s (the small ones); a large one took 9 s more for 1,000
	// tokens: 9 ms a token.
	for _, c := range []struct {
		bound int
		want  time.Duration
	}{{1000, 10300 * time.Millisecond}, {100, 2200 * time.Millisecond}, {0, 1309 * time.Millisecond}} {
		if d := a.expect(c.bound); d.Round(time.Millisecond) != c.want {
			t.Errorf("expect(%d) = %v, want %v", c.bound, d, c.want)
		}
	}
	// One slow answer in twenty is not expected; the answers it is one
	// of are.
	a = answerTimes{}
	for i := range 40 {
		d := time.Second
		if i%20 == 0 {
			d = time.Minute
		}
		a.add(100, d)
	}
	if d := a.expect(100); d != time.Second {
		t.Errorf("with 2 slow answers in 40, expect = %v, want 1 s", d)
	}
	a.add(100, time.Minute)
	if d := a.expect(100); d != time.Minute {
		t.Errorf("with 3 slow answers in 41, expect = %v, want 1 min", d)
	}
	// 64 newer answers forget the slow ones.
	for range answerSamples {
		a.add(100, 2*time.Second)
	}
	if d := a.expect(100); d != 2*time.Second {
		t.Errorf("after 64 answers of 2 s, expect = %v, want 2 s", d)
	}
}
