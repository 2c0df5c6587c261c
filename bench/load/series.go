package main

import (
	"errors"
	"slices"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/stats"
)

// series is what one target did in one phase, over one or more rounds.
type series struct {
	lats     []time.Duration // of the requests that succeeded, round after round
	rounds   []int           // the end of each round in lats
	errs     int             // requests that failed or got a wrong answer
	dropped  int             // open-loop sends refused by the in-flight bound or the time bound
	late     int             // open-loop sends later than config.Late behind schedule
	wall     time.Duration   // open loop: first send to last answer, summed over slices
	firstErr error
	cost     cost // over the rounds in which the requests ran
}

func (s *series) add(d time.Duration, err error) {
	switch {
	case errors.Is(err, errDropped):
		s.dropped++
	case err != nil:
		s.errs++
		if s.firstErr == nil {
			s.firstErr = err
		}
	default:
		s.lats = append(s.lats, d)
	}
}

// seriesMark is where a series stood before a round.
type seriesMark struct {
	lats, errs, dropped, late int
	wall                      time.Duration
	firstErr                  error
}

func (s *series) mark() seriesMark {
	return seriesMark{len(s.lats), s.errs, s.dropped, s.late, s.wall, s.firstErr}
}

// reset forgets the round since m.
func (s *series) reset(m seriesMark) {
	s.lats = s.lats[:m.lats]
	s.errs, s.dropped, s.late, s.wall, s.firstErr = m.errs, m.dropped, m.late, m.wall, m.firstErr
}

// endRound marks the end of a round's latencies.
func (s *series) endRound() { s.rounds = append(s.rounds, len(s.lats)) }

// total is how many requests were scheduled.
func (s *series) total() int { return len(s.lats) + s.errs + s.dropped }

// percentile returns the nearest-rank p-th percentile (0 < p <= 1) of all
// the successful latencies, or 0 if there were none. (It took the rank as
// int(p·n + 0.999999) before stats.Percentile's ⌈p·n⌉; for the 0.5 and
// 0.99 the report asks for, the two agree for every n up to 10⁷.)
func (s *series) percentile(p float64) time.Duration {
	return stats.Percentile(slices.Sorted(slices.Values(s.lats)), p)
}

// roundPercentile returns the median over the rounds of each round's p-th
// percentile. A round that another process on the machine disturbed moves
// it little, where it can decide a pooled p99 alone.
func (s *series) roundPercentile(p float64) time.Duration {
	per := s.roundPercentiles(p)
	if len(per) == 0 {
		return s.percentile(p)
	}
	slices.Sort(per)
	if n := len(per); n%2 == 0 {
		return (per[n/2-1] + per[n/2]) / 2
	}
	return per[len(per)/2]
}

// roundPercentiles returns each round's p-th percentile, of the rounds
// that have latencies.
func (s *series) roundPercentiles(p float64) []time.Duration {
	var per []time.Duration
	start := 0
	for _, end := range s.rounds {
		if end > start {
			per = append(per, stats.Percentile(slices.Sorted(slices.Values(s.lats[start:end])), p))
		}
		start = end
	}
	return per
}
