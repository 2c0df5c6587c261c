package redisgate_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/redisgate"
)

// newShare returns a PoolShare on a client of its own, as another
// process's would be, with prefix.
func newShare(t *testing.T, prefix string) *redisgate.PoolShare {
	t.Helper()
	s := redisgate.NewPoolShare(newClient(t, redisOptions(t)), redisgate.PoolShareOptions{Prefix: prefix})
	t.Cleanup(func() { s.Close() })
	return s
}

// requests is a Headroom of requests alone: remaining of limit, whole in
// reset.
func requests(limit, remaining int64, reset time.Duration) outlast.Headroom {
	unknown := outlast.Quota{Limit: -1, Remaining: -1}
	return outlast.Headroom{Requests: outlast.Quota{Limit: limit, Remaining: remaining, Reset: time.Now().Add(reset)},
		Tokens: unknown, InputTokens: unknown, OutputTokens: unknown}
}

// takeAll takes attempts at member until the share refuses one, and
// returns how many it took and the wait of the refusal.
func takeAll(t *testing.T, s *redisgate.PoolShare, member string, most int) (int, time.Duration) {
	t.Helper()
	for n := 0; n < most; n++ {
		_, wait, err := s.Take(context.Background(), member, 10)
		if err != nil {
			t.Fatal(err)
		}
		if wait > 0 {
			return n, wait
		}
	}
	return most, 0
}

// A member's ledger, counted by one process's answer, holds for another
// process: what is left is taken once, and the refusal says when there is
// room, at the limit a minute.
func TestPoolShareCountsOnce(t *testing.T) {
	prefix := testPrefix()
	a, b := newShare(t, prefix), newShare(t, prefix)
	// Unknown limits: every take goes.
	id, wait, err := a.Take(context.Background(), "key", 10)
	if err != nil || wait != 0 || id == "" {
		t.Fatalf("first take: id %q, wait %v, err %v", id, wait, err)
	}
	// Its answer says 3 of 60 requests a minute are left.
	if err := a.Count(context.Background(), "key", id, requests(60, 3, 57*time.Second)); err != nil {
		t.Fatal(err)
	}
	// The other process takes them, then is refused for about a second.
	n, wait := takeAll(t, b, "key", 10)
	if n != 3 {
		t.Errorf("b took %d, want the 3 left", n)
	}
	if wait <= 0 || wait > time.Second {
		t.Errorf("refused with wait %v, want under a second: 60 a minute refill one a second", wait)
	}
	if n, _ := takeAll(t, a, "key", 10); n != 0 {
		t.Errorf("a took %d more, want none", n)
	}
}

// An answer to an attempt taken before the one whose answer counted
// last counts nothing; the attempts taken after an answered one, or just
// before it, are still counted against what its headers say.
func TestPoolShareOlderAnswerCountsNothing(t *testing.T) {
	s := newShare(t, testPrefix())
	ctx := context.Background()
	var ids []string
	for i := range 3 {
		if i == 2 {
			time.Sleep(300 * time.Millisecond) // past the reorder window
		}
		id, _, err := s.Take(ctx, "key", 10)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// The second's answer: 8 of 1,000 left. The first, just before it,
	// may have reached the key after it; the third was taken after it.
	if err := s.Count(ctx, "key", ids[1], requests(1000, 8, time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The first's, older, says 500: left out.
	if err := s.Count(ctx, "key", ids[0], requests(1000, 500, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if n, _ := takeAll(t, s, "key", 20); n != 6 {
		t.Errorf("took %d, want 6: 8 left less the first and third attempts", n)
	}
}

// keyLimited is a provider key of limit requests a minute, counted up
// front, with OpenAI's headers; past the limit, 429.
type keyLimited struct {
	limit float64
	mu    sync.Mutex
	left  float64
	at    time.Time
	sent  int
	hits  int
}

func (k *keyLimited) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	k.mu.Lock()
	now := time.Now()
	if k.at.IsZero() {
		k.left, k.at = k.limit, now
	}
	k.left = min(k.limit, k.left+now.Sub(k.at).Minutes()*k.limit)
	k.at = now
	k.sent++
	status := http.StatusOK
	if k.left < 1 {
		status = http.StatusTooManyRequests
		k.hits++
	} else {
		k.left--
	}
	h := http.Header{}
	h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(int(k.limit)))
	h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(int(k.left)))
	h.Set("X-Ratelimit-Reset-Requests", time.Duration(math.Ceil((k.limit-k.left)/k.limit*float64(time.Minute))).String())
	k.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
}

// Two pools in front of one limited key, sharing their ledgers through
// Redis, send it no more than its limit together: past it, requests are
// refused by the pools, and the key answers no 429.
func TestPoolShareTwoPoolsOneKey(t *testing.T) {
	prefix := testPrefix()
	key := &keyLimited{limit: 10}
	var pools []*outlast.Pool
	for range 2 {
		pools = append(pools, &outlast.Pool{
			Members: []*outlast.Transport{{Name: "key", Base: key}},
			Share:   newShare(t, prefix),
		})
	}
	send := func(p *outlast.Pool, deadline time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://key.test/v1/chat/completions", strings.NewReader(`{"max_tokens":10}`))
		resp, err := p.RoundTrip(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
	// Each pool learns the key's limits from an answer.
	for _, p := range pools {
		if err := send(p, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// Then 12 at once, 6 through each, with 2 s to spare: 8 are left.
	var wg sync.WaitGroup
	var mu sync.Mutex
	served, spent := 0, 0
	for i := range 12 {
		wg.Go(func() {
			err := send(pools[i%2], 2*time.Second)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				served++
			case errors.Is(err, outlast.ErrPoolSpent):
				spent++
			default:
				t.Errorf("request %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	key.mu.Lock()
	defer key.mu.Unlock()
	if key.hits != 0 {
		t.Errorf("the key answered %d 429s, want none: the pools spent its limit once", key.hits)
	}
	// An attempt sent just before another and answered after it was sent
	// is counted against its answer as well: the count errs by one on the
	// safe side.
	if served < 7 || served > 8 || served+spent != 12 {
		t.Errorf("served %d and refused %d, want 7 or 8 of the 8 left served and the rest refused", served, spent)
	}
}

// Two attempts taken close together may reach the member in the other
// order: j is taken before k, the member serves k first, then j, and j's
// answer is counted first. k's, counted last, does not count j, which the
// share still counts against it.
func TestPoolShareAnswersOutOfOrder(t *testing.T) {
	s := newShare(t, testPrefix())
	ctx := context.Background()
	id0, _, _ := s.Take(ctx, "key", 10)
	if err := s.Count(ctx, "key", id0, requests(10, 4, 36*time.Second)); err != nil {
		t.Fatal(err)
	}
	j, _, _ := s.Take(ctx, "key", 10)
	time.Sleep(5 * time.Millisecond)
	k, _, _ := s.Take(ctx, "key", 10)
	// The member had 4: it serves k (3 left), then j (2 left).
	if err := s.Count(ctx, "key", j, requests(10, 2, 48*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.Count(ctx, "key", k, requests(10, 3, 42*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, _ := takeAll(t, s, "key", 20); n != 2 {
		t.Errorf("took %d more, the member has 2 left", n)
	}
}

// A member whose answers state only what is left, as Azure may, is
// counted by it for a window, not refused until the keys expire.
func TestPoolShareRemainingAlone(t *testing.T) {
	s := newShare(t, testPrefix())
	ctx := context.Background()
	id, _, _ := s.Take(ctx, "key", 10)
	unknown := outlast.Quota{Limit: -1, Remaining: -1}
	h := outlast.Headroom{Requests: unknown, Tokens: outlast.Quota{Limit: -1, Remaining: 500}, InputTokens: unknown, OutputTokens: unknown}
	if err := s.Count(ctx, "key", id, h); err != nil {
		t.Fatal(err)
	}
	_, wait, err := s.Take(ctx, "key", 1000)
	if err != nil || wait <= 50*time.Second || wait > time.Minute {
		t.Errorf("a request of 1,000 tokens waits %v (%v), want about the window, a minute", wait, err)
	}
}
