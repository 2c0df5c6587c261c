package outlast

import (
	"context"
	"io"
	"math"
	"net/http"
	"slices"
	"sync/atomic"
	"time"
)

// How a Pool learns the time its answers take, to keep a request from
// waiting for room past the time it still needs for its answer.
const (
	// answerSamples is how many of the latest answers read to their end
	// the expectation is drawn from.
	answerSamples = 64
	// answerMinSamples is how many answers the Pool needs before it
	// expects anything: until then, the reserve alone bounds a wait.
	answerMinSamples = 16
	// answerQuantile is the share of the answers that the expectation
	// covers: an answer of the size expected takes longer only one time
	// in twenty.
	answerQuantile = 0.95
	// maxExpect caps an expectation, in seconds, well within a Duration.
	maxExpect = 1e9
)

// answerTimes is what a Pool has seen of its answers' times: the latest
// answerSamples answers read to their end, each as the bound of its
// tokens that its request set (max_tokens, or DefaultOutputTokens) and
// the seconds from its sending to its end. It expects an answer to take
// base + rate × bound: base the quickest answer seen, and rate the
// answerQuantile of the answers' seconds beyond base for each token of
// their bound. Its methods are called with poolShared.mu held.
type answerTimes struct {
	bounds, secs [answerSamples]float64
	n, next      int
	base, rate   float64                // the expectation, once n ≥ answerMinSamples
	rates        [answerSamples]float64 // room to sort the rates in
}

// add counts an answer of a bound of tokens that took d.
func (a *answerTimes) add(bound int, d time.Duration) {
	a.bounds[a.next], a.secs[a.next] = float64(max(bound, 1)), d.Seconds()
	a.next = (a.next + 1) % answerSamples
	a.n = min(a.n+1, answerSamples)
	if a.n < answerMinSamples {
		return
	}
	a.base = slices.Min(a.secs[:a.n])
	rates := a.rates[:a.n]
	for i := range rates {
		rates[i] = (a.secs[i] - a.base) / a.bounds[i]
	}
	slices.Sort(rates)
	a.rate = rates[int(math.Ceil(answerQuantile*float64(a.n)))-1]
}

// expect returns the time an answer of a bound of tokens is expected to
// take, 0 while the Pool has seen too few.
func (a *answerTimes) expect(bound int) time.Duration {
	if a.n < answerMinSamples {
		return 0
	}
	s := a.base + a.rate*float64(max(bound, 1))
	return time.Duration(min(s, maxExpect) * float64(time.Second))
}

// waitBound returns the latest a request may wait for room, whose answer
// has a bound of tokens (see estimateParts): bound, its deadline less its
// reserve, or its deadline less the time the Pool expects its answer to
// take, if that is earlier.
func (p *Pool) waitBound(ctx context.Context, bound time.Time, answer int) time.Time {
	deadline, ok := ctx.Deadline()
	if !ok {
		return bound
	}
	p.sh.mu.Lock()
	d := p.sh.answers.expect(answer)
	p.sh.mu.Unlock()
	if b := deadline.Add(-d); d > 0 && (bound.IsZero() || b.Before(bound)) {
		return b
	}
	return bound
}

// timeAnswer returns resp with its body wrapped to count, once it is read
// to its end, the time since start that an answer of a bound of tokens
// took. An answer that is not a success, or is closed before its
// end, counts nothing.
func (p *Pool) timeAnswer(resp *http.Response, bound int, start time.Time) *http.Response {
	if resp == nil || resp.StatusCode < 200 || resp.StatusCode > 299 || resp.Body == nil || resp.Body == http.NoBody {
		return resp
	}
	resp.Body = &timedBody{ReadCloser: resp.Body, p: p, bound: bound, start: start}
	return resp
}

// timedBody is an answer's body that counts its time when read to its
// end.
type timedBody struct {
	io.ReadCloser
	p     *Pool
	bound int
	start time.Time
	done  atomic.Bool
}

func (b *timedBody) Read(q []byte) (int, error) {
	n, err := b.ReadCloser.Read(q)
	if err == io.EOF && b.done.CompareAndSwap(false, true) {
		d := time.Since(b.start)
		b.p.sh.mu.Lock()
		b.p.sh.answers.add(b.bound, d)
		b.p.sh.mu.Unlock()
	}
	return n, err
}
