package outlast_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast"
)

// A host's eight cases for retrying model requests in a run, through the
// Transport in virtual time: each failure is its own attempt with the wait
// that follows, bounded by the list or the deadline's reserve, only the
// outermost layer retries, and Retry-After is a floor.

// Case 1: a provider that fails twice and then answers gives three attempts;
// the failures carry RetryIn 10 ms and 30 ms, and the answer carries none.
func TestSeed000FailsTwiceThenAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{status: 502}, step{status: 503}, step{status: 200, body: "ok"})
		var rec recorder
		tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(10, 30)}, Hooks: rec.hooks(), Logger: discardLogger()}
		start := time.Now()
		code, body, err := get(t, context.Background(), tr)
		if err != nil || code != 200 || body != "ok" {
			t.Fatalf("got %d %q %v, want 200 \"ok\" nil", code, body, err)
		}
		if got := len(fake.attempts()); got != 3 {
			t.Fatalf("got %d attempts, want 3", got)
		}
		if got, want := rec.retryIns(), ms(10, 30, 0); !equalDurations(got, want) {
			t.Errorf("got RetryIn %v, want %v", got, want)
		}
		if got, want := time.Since(start), 40*time.Millisecond; got != want {
			t.Errorf("took %v of virtual time, want %v", got, want)
		}
		ids := map[string]bool{}
		for _, a := range rec.ends {
			ids[a.CallID] = true
		}
		if len(ids) != 3 {
			t.Errorf("got %d distinct call IDs, want 3", len(ids))
		}
	})
}

// Case 2: without a policy, nothing is retried.
func TestSeed000NoPolicyNoRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{status: 503}, step{status: 200})
		code, _, err := get(t, context.Background(), &outlast.Transport{Base: fake})
		if err != nil || code != 503 {
			t.Fatalf("got %d %v, want 503 nil", code, err)
		}
		if got := len(fake.attempts()); got != 1 {
			t.Errorf("got %d attempts, want 1", got)
		}
		if h := fake.attempts()[0].attempt; h != "" {
			t.Errorf("got %s %q without a policy, want none", outlast.AttemptHeader, h)
		}
	})
}

// Case 3: a 400 is not retryable and is returned as it came.
func TestSeed000BadRequestNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{status: 400, body: `{"error":"bad"}`})
		tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(10)}, Logger: discardLogger()}
		code, body, err := get(t, context.Background(), tr)
		if err != nil || code != 400 || body != `{"error":"bad"}` {
			t.Fatalf("got %d %q %v, want the 400 unchanged", code, body, err)
		}
		if got := len(fake.attempts()); got != 1 {
			t.Errorf("got %d attempts, want 1", got)
		}
	})
}

// Case 4: without a deadline, the list of waits is the bound.
func TestSeed000NoDeadlineListIsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{status: 503})
		var rec recorder
		tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(10, 20, 30)}, Hooks: rec.hooks(), Logger: discardLogger()}
		code, _, err := get(t, context.Background(), tr)
		if err != nil || code != 503 {
			t.Fatalf("got %d %v, want the last 503", code, err)
		}
		if got := len(fake.attempts()); got != 4 {
			t.Errorf("got %d attempts, want 4 (1 + len(Waits))", got)
		}
		if got, want := rec.retryIns(), ms(10, 20, 30, 0); !equalDurations(got, want) {
			t.Errorf("got RetryIn %v, want %v", got, want)
		}
	})
}

// Case 5: with a deadline, the last wait repeats, and retrying stops while
// the reserve is still left: never sleep into a retry that can't keep it.
func TestSeed000DeadlineRepeatsLastWaitAndKeepsReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{status: 503, delay: time.Second})
		var rec recorder
		p := &outlast.Policy{Waits: []time.Duration{10 * time.Second, 30 * time.Second}, Reserve: 60 * time.Second}
		tr := &outlast.Transport{Base: fake, Policy: p, Hooks: rec.hooks(), Logger: discardLogger()}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Second)
		defer cancel()
		start := time.Now()
		code, _, err := get(t, ctx, tr)
		if err != nil || code != 503 {
			t.Fatalf("got %d %v, want the last 503", code, err)
		}
		// Attempts end at 1, 12, 43, 74, 105 s; a 30 s wait after 105 s
		// would leave 65 s, after 136 s only 34 s.
		// t=1 wait 10 → t=11 attempt ends 12, wait 30 → 42, ends 43,
		// wait 30 → 73, ends 74, wait 30 → 104, ends 105: 105+30 = 135,
		// 200-135 = 65 ≥ 60 → wait → 135, ends 136: 136+30 = 166, 34 < 60.
		if got, want := rec.retryIns(), []time.Duration{10e9, 30e9, 30e9, 30e9, 30e9, 0}; !equalDurations(got, want) {
			t.Errorf("got RetryIn %v, want %v", got, want)
		}
		if got := time.Since(start); got != 136*time.Second {
			t.Errorf("returned after %v, want 136s: at once after the last failure", got)
		}
		if left := 200*time.Second - time.Since(start); left < p.Reserve {
			t.Errorf("left %v of the deadline, want at least the reserve %v", left, p.Reserve)
		}
	})
}

// Case 6: a layer under a layer makes one attempt per outer attempt: k+1
// attempts in all, not (k+1)².
func TestSeed000NestedLayersRetryOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{status: 503})
		p := &outlast.Policy{Waits: ms(10, 10, 10)}
		inner := &outlast.Transport{Base: fake, Policy: p, Logger: discardLogger()}
		outer := &outlast.Transport{Base: inner, Policy: p, Logger: discardLogger()}
		if _, _, err := get(t, context.Background(), outer); err != nil {
			t.Fatal(err)
		}
		got := fake.attempts()
		if len(got) != 4 {
			t.Fatalf("got %d attempts, want 4 = k+1", len(got))
		}
		for i, s := range got {
			if want := string(rune('1' + i)); s.attempt != want {
				t.Errorf("attempt %d carried %s %q, want %q", i+1, outlast.AttemptHeader, s.attempt, want)
			}
		}
	})
}

// Case 7: an empty list of waits is refused where the policy is made, with
// an error that names the field.
func TestSeed000EmptyWaitsRefused(t *testing.T) {
	_, err := outlast.NewTransport(nil, &outlast.Policy{})
	if !errors.Is(err, outlast.ErrInvalidPolicy) {
		t.Fatalf("NewTransport: got %v, want ErrInvalidPolicy", err)
	}
	calls := 0
	err = outlast.Do(context.Background(), &outlast.Policy{}, func(context.Context) error { calls++; return nil })
	if !errors.Is(err, outlast.ErrInvalidPolicy) || calls != 0 {
		t.Fatalf("Do: got %v after %d calls, want ErrInvalidPolicy before any", err, calls)
	}
	// Under a Transport, a bad policy reached through the context is
	// reported at the first failure, not retried with.
	fake := newFake(step{status: 503})
	ctx := outlast.WithPolicy(context.Background(), &outlast.Policy{})
	_, _, err = get(t, ctx, &outlast.Transport{Base: fake})
	if !errors.Is(err, outlast.ErrInvalidPolicy) {
		t.Fatalf("Transport: got %v, want ErrInvalidPolicy", err)
	}
}

// Case 8: a 429 with Retry-After: 1 waits 1000 ms although the policy's
// wait is shorter.
func TestSeed000RetryAfterOneSecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake(step{status: 429, header: map[string]string{"Retry-After": "1"}}, step{status: 200})
		var rec recorder
		tr := &outlast.Transport{Base: fake, Policy: &outlast.Policy{Waits: ms(10)}, Hooks: rec.hooks(), Logger: discardLogger()}
		code, _, err := get(t, context.Background(), tr)
		if err != nil || code != 200 {
			t.Fatalf("got %d %v, want 200", code, err)
		}
		a := fake.attempts()
		if got := a[1].at.Sub(a[0].at); got != time.Second {
			t.Errorf("waited %v, want 1s", got)
		}
		if got := rec.ends[0].RetryAfter; got != time.Second {
			t.Errorf("recorded RetryAfter %v, want 1s", got)
		}
	})
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

var _ http.RoundTripper = (*outlast.Transport)(nil)
