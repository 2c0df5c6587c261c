package gateway

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/parse"
	"github.com/outlast-llm/outlast/record"
)

// fuzzNow is the arrival time of the fuzzed requests.
var fuzzNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// fuzzBases are the operators' policies the fuzzed headers are held to,
// each valid, as New requires: none, the default, a zero wait, a cap, and
// the fields no header may touch (window, jitter, Retry-After mode, a
// predicate).
var fuzzBases = []*outlast.Policy{
	nil,
	{Waits: []time.Duration{15 * time.Second, 45 * time.Second, 120 * time.Second, 240 * time.Second}},
	{Waits: []time.Duration{0}},
	{Waits: []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second}, Reserve: 10 * time.Second, MaxAttempts: 3},
	{Waits: []time.Duration{time.Second, 100 * time.Second}, Reserve: -1, Window: 10 * time.Minute,
		Jitter: outlast.Jitter{Spread: 0.25}, RetryAfter: outlast.RetryAfterExact},
	{Waits: []time.Duration{time.Hour}, Reserve: -1, MaxAttempts: 1, Jitter: outlast.Jitter{Full: true},
		Retryable: func(error) bool { return true }},
}

// fuzzUpstream returns the upstream that cfg picks: a base policy (bits
// 0-2), a number of slots (bits 3-4), a --max-timeout (bits 5-6), a
// default deadline of 9 minutes (bit 7) and a reserve share of a quarter
// (bit 8).
func fuzzUpstream(cfg uint16) *Upstream {
	return &Upstream{
		Policy:       fuzzBases[int(cfg&7)%len(fuzzBases)],
		Slots:        int(cfg>>3) & 3,
		MaxTimeout:   []time.Duration{0, 10 * time.Minute, time.Second}[int(cfg>>5&3)%3],
		Timeout:      time.Duration(cfg>>7&1) * 9 * time.Minute,
		ReserveShare: float64(cfg>>8&1) / 4,
	}
}

// parseOptions returns the options that parse reads.
func parseOptions(h http.Header, u *Upstream, now time.Time) (options, error) {
	var o options
	err := o.parse(h, u, now)
	return o, err
}

// fuzzHeaders are the request's Outlast-* headers, and the SDK's timeout,
// in a fixed order, the fuzzer's arguments' order.
var fuzzHeaders = []string{
	HeaderTimeout, HeaderDeadline, HeaderRetry, HeaderWaits, HeaderReserve,
	HeaderMaxAttempts, HeaderRun, HeaderSlot, HeaderProgress, headerSDKTimeout,
}

// FuzzParseOptions feeds any Outlast-* headers to parseOptions against
// each kind of upstream. An error is one line that names a header the
// request set, and removing that header removes that error. What is
// accepted holds to the operator's settings as tighten and parseDeadline
// document them: a valid policy, no looser than the operator's, and none
// at all without one; a deadline within --max-timeout; a slot the
// upstream has; a run the record can keep.
func FuzzParseOptions(f *testing.F) {
	// Each seed is valid but for what it tries, so that the fuzzer's
	// mutations of one header meet the others' checks passed.
	for _, seed := range []struct {
		h   map[string]string
		cfg uint16 // see fuzzUpstream: +8 is a slot, +16 two, +32 a 10m --max-timeout
	}{
		{nil, 1},
		{map[string]string{HeaderTimeout: "300s"}, 1 + 32},
		{map[string]string{HeaderTimeout: "1d", HeaderDeadline: "2026-11-29T12:05:00.5+01:00"}, 2 + 64},
		{map[string]string{HeaderDeadline: "2026-11-29T12:05:00Z"}, 3 + 32},
		{map[string]string{HeaderRetry: " OFF "}, 3},
		{map[string]string{HeaderRetry: "on", HeaderWaits: "1s,2s,3s,4s,5s"}, 1},
		{map[string]string{HeaderWaits: "0,0,0"}, 3},
		{map[string]string{HeaderWaits: "1h,1h", HeaderMaxAttempts: "100"}, 4},
		{map[string]string{HeaderReserve: "0"}, 1},
		{map[string]string{HeaderReserve: "30s"}, 3},
		{map[string]string{HeaderReserve: "1.5", HeaderMaxAttempts: " 7 "}, 5},
		{map[string]string{HeaderMaxAttempts: "0"}, 3},
		{map[string]string{HeaderMaxAttempts: "2", HeaderWaits: "1s", HeaderReserve: "2m"}, 2},
		{map[string]string{HeaderRun: "run-42"}, 0},
		{map[string]string{HeaderRun: strings.Repeat("é", 100)}, 0},
		{map[string]string{HeaderSlot: "1"}, 16},
		{map[string]string{HeaderSlot: "+0"}, 8},
		{map[string]string{HeaderSlot: "1"}, 8}, // one past the last
		{map[string]string{HeaderProgress: "SSE"}, 1},
		{map[string]string{HeaderWaits: "1s", outlast.AttemptHeader: "1"}, 1},
		// Each header wrong in its own way.
		{map[string]string{HeaderTimeout: "0", HeaderDeadline: "yesterday", HeaderRetry: "maybe"}, 1},
		{map[string]string{HeaderWaits: "-1s", HeaderReserve: "-1", HeaderMaxAttempts: "-1"}, 1},
		{map[string]string{HeaderWaits: ",", HeaderMaxAttempts: "99999999999999999999"}, 1},
		{map[string]string{HeaderRun: "a\u0085b", HeaderSlot: "-1", HeaderProgress: "none"}, 8},
		{map[string]string{HeaderRun: "\xff", HeaderSlot: "2"}, 8},
		{map[string]string{HeaderRun: "run\u202egpj"}, 0},
		// The SDK's timeout, the default deadline and the reserve's
		// share of it.
		{map[string]string{headerSDKTimeout: "600"}, 1 + 32 + 256},
		{map[string]string{headerSDKTimeout: "6", HeaderWaits: "200ms"}, 1 + 128 + 256},
		{map[string]string{headerSDKTimeout: "1e400", HeaderTimeout: "20s"}, 3 + 256},
		{map[string]string{headerSDKTimeout: "-5"}, 1 + 128},
		{map[string]string{HeaderReserve: "1420ms", HeaderTimeout: "2s"}, 1 + 256},
	} {
		var v [10]string
		for i, name := range fuzzHeaders {
			v[i] = seed.h[name]
		}
		f.Add(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], seed.h[outlast.AttemptHeader] != "", seed.cfg)
	}
	f.Fuzz(func(t *testing.T, timeout, deadline, retry, waits, reserve, maxAttempts, run, slot, progress, sdk string, attempt bool, cfg uint16) {
		values := []string{timeout, deadline, retry, waits, reserve, maxAttempts, run, slot, progress, sdk}
		h := http.Header{}
		for i, v := range values {
			if v != "" {
				h.Set(fuzzHeaders[i], v)
			}
		}
		if attempt {
			h.Set(outlast.AttemptHeader, "1")
		}
		u := fuzzUpstream(cfg)
		var baseWaits []time.Duration
		if u.Policy != nil {
			baseWaits = slices.Clone(u.Policy.Waits)
		}
		o, err := parseOptions(h, u, fuzzNow)
		if u.Policy != nil && !slices.Equal(u.Policy.Waits, baseWaits) {
			t.Fatalf("parseOptions(%q) changed the operator's waits from %v to %v", h, baseWaits, u.Policy.Waits)
		}
		if err != nil {
			checkOptionsError(t, h, u, err)
			return
		}
		checkDeadline(t, h, u, o.deadline, o.source)
		checkPolicy(t, h, u, o)
		checkRest(t, h, u, o)
	})
}

// checkOptionsError checks that err is one line naming a header h set,
// and that without that header the request gets past it.
func checkOptionsError(t *testing.T, h http.Header, u *Upstream, err error) {
	t.Helper()
	msg := err.Error()
	if strings.ContainsAny(msg, "\r\n") {
		t.Fatalf("parseOptions(%q): got %q, want one line", h, msg)
	}
	named, _, _ := strings.Cut(strings.TrimPrefix(msg, "outlast: "), " ")
	if !strings.HasPrefix(msg, "outlast: ") || !slices.Contains(fuzzHeaders, named) || h.Get(named) == "" {
		t.Fatalf("parseOptions(%q): got %q, want an error that starts by naming a header the request set", h, msg)
	}
	without := h.Clone()
	without.Del(named)
	if _, err2 := parseOptions(without, u, fuzzNow); err2 != nil && strings.HasPrefix(err2.Error(), "outlast: "+named+" ") {
		t.Fatalf("parseOptions(%q) = %q; without %s it is still %q, want the error to name its cause", h, msg, named, err2)
	}
}

// checkDeadline checks that the deadline is the earlier of the two
// headers', or without them the SDK's timeout less its margin, or the
// upstream's Timeout, held to its MaxTimeout, and that its source says
// which.
func checkDeadline(t *testing.T, h http.Header, u *Upstream, got time.Time, source string) {
	t.Helper()
	var candidates []time.Time
	wantSource := record.DeadlineOutlast
	if v := h.Get(HeaderTimeout); v != "" {
		d, err := parse.Duration(v)
		if errors.Is(err, parse.ErrTooLong) && !strings.HasPrefix(strings.TrimSpace(v), "-") {
			d, err = maxSDKTimeout, nil // past a Duration: cut as any long one
		}
		if err != nil || d <= 0 {
			t.Fatalf("parseOptions accepted %s %q, which is not a positive duration (%v)", HeaderTimeout, v, err)
		}
		candidates = append(candidates, fuzzNow.Add(d))
	}
	if v := h.Get(HeaderDeadline); v != "" {
		d, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(v))
		if err != nil {
			t.Fatalf("parseOptions accepted %s %q, which is not RFC 3339 (%v)", HeaderDeadline, v, err)
		}
		candidates = append(candidates, d)
	}
	if len(candidates) == 0 {
		f, err := strconv.ParseFloat(strings.TrimSpace(h.Get(headerSDKTimeout)), 64)
		switch {
		case err == nil && f > 0:
			d := time.Duration(min(f, 1e9) * float64(time.Second))
			candidates, wantSource = append(candidates, fuzzNow.Add(d-min(d/10, 5*time.Second))), record.DeadlineSDK
		case u.Timeout > 0:
			candidates, wantSource = append(candidates, fuzzNow.Add(u.Timeout)), record.DeadlineDefault
		}
	}
	if len(candidates) == 0 {
		if !got.IsZero() || source != "" {
			t.Fatalf("parseOptions(%q): got deadline %v from %q, want none without a deadline header, an SDK's timeout or a default", h, got, source)
		}
		return
	}
	want := slices.MinFunc(candidates, time.Time.Compare)
	if limit := fuzzNow.Add(u.MaxTimeout); u.MaxTimeout > 0 && want.After(limit) {
		want = limit
	}
	if !got.Equal(want) || source != wantSource {
		t.Fatalf("parseOptions(%q) with MaxTimeout %v, Timeout %v: got deadline %v from %q, want %v from %q", h, u.MaxTimeout, u.Timeout, got, source, want, wantSource)
	}
}

// checkPolicy checks the request's policy against the operator's, field
// by field, as tighten documents it.
func checkPolicy(t *testing.T, h http.Header, u *Upstream, o options) {
	t.Helper()
	base, p := u.Policy, o.policy
	off := strings.EqualFold(strings.TrimSpace(h.Get(HeaderRetry)), "off")
	asked := h.Get(HeaderWaits) != "" || h.Get(HeaderReserve) != "" || h.Get(HeaderMaxAttempts) != ""
	switch {
	case o.outer || off || base == nil:
		if p != nil {
			t.Fatalf("parseOptions(%q) with policy %+v: got policy %+v, want none (an outer layer, retries off, or no operator's policy to tighten)", h, base, *p)
		}
		return
	case !asked && p == base:
		if share := shareOf(u, o); share >= 0 && share < base.ReserveInForce() {
			t.Fatalf("parseOptions(%q): got the operator's policy, reserve %v, want a reserve held to %v of the deadline: %v", h, base.Reserve, u.ReserveShare, share)
		}
		return
	case p == nil || p == base:
		t.Fatalf("parseOptions(%q): got policy %p, want a copy of the operator's %p", h, p, base)
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("parseOptions(%q) accepted the headers but gave an invalid policy: %v", h, err)
	}
	if p.Window != base.Window || p.Jitter != base.Jitter || p.RetryAfter != base.RetryAfter ||
		reflect.ValueOf(p.Retryable).Pointer() != reflect.ValueOf(base.Retryable).Pointer() {
		t.Fatalf("parseOptions(%q): got %+v, want the window, jitter, Retry-After mode and predicate of %+v", h, *p, *base)
	}
	// Waits: as many as the operator's, retry k's at least the operator's
	// retry k's and the request's (past a list's end, its last repeats);
	// without a deadline, a shorter list caps the retries.
	wantWaits, capFromWaits := base.Waits, 0
	if v := h.Get(HeaderWaits); v != "" {
		w, err := parse.Waits(v)
		if err != nil {
			t.Fatalf("parseOptions accepted %s %q (%v)", HeaderWaits, v, err)
		}
		wantWaits = nil
		for k, d := range base.Waits {
			wantWaits = append(wantWaits, max(d, w[min(k, len(w)-1)]))
		}
		if o.deadline.IsZero() && len(w) < len(base.Waits) {
			capFromWaits = len(w) + 1
		}
	}
	if !slices.Equal(p.Waits, wantWaits) {
		t.Fatalf("parseOptions(%q) under waits %v: got waits %v, want %v", h, base.Waits, p.Waits, wantWaits)
	}
	// Reserve: the request's own, or without one the operator's in
	// force, held to the share of the deadline.
	wantReserve := base.ReserveInForce()
	if v := h.Get(HeaderReserve); v != "" {
		d, err := parse.Duration(v)
		if err != nil {
			t.Fatalf("parseOptions accepted %s %q (%v)", HeaderReserve, v, err)
		}
		wantReserve = d
	} else if share := shareOf(u, o); share >= 0 {
		wantReserve = min(wantReserve, share)
	}
	if got := p.ReserveInForce(); got != wantReserve {
		t.Fatalf("parseOptions(%q) under reserve %v: got reserve %v in force, want %v", h, base.Reserve, got, wantReserve)
	}
	// MaxAttempts: the smaller cap of the request's and the operator's,
	// where 0 is no cap.
	wantMax := base.MaxAttempts
	if n, err := strconv.Atoi(strings.TrimSpace(h.Get(HeaderMaxAttempts))); err == nil && n > 0 && (wantMax == 0 || n < wantMax) {
		wantMax = n
	}
	if capFromWaits > 0 && (wantMax == 0 || capFromWaits < wantMax) {
		wantMax = capFromWaits
	}
	if p.MaxAttempts != wantMax {
		t.Fatalf("parseOptions(%q) under cap %d: got cap %d, want %d", h, base.MaxAttempts, p.MaxAttempts, wantMax)
	}
}

// shareOf returns the reserve's share of o's deadline under u, or -1
// when none applies: no share, or no deadline.
func shareOf(u *Upstream, o options) time.Duration {
	if u.ReserveShare <= 0 || o.deadline.IsZero() {
		return -1
	}
	return max(time.Duration(u.ReserveShare*float64(o.deadline.Sub(fuzzNow))), 0)
}

// checkRest checks the run, the slot, progress and the outer mark.
func checkRest(t *testing.T, h http.Header, u *Upstream, o options) {
	t.Helper()
	if run := h.Get(HeaderRun); o.run != strings.TrimSpace(run) || len(o.run) > maxRunLen ||
		!utf8.ValidString(o.run) || strings.ContainsFunc(o.run, unkept) {
		t.Fatalf("parseOptions(%s %q): got run %q, want it trimmed, valid UTF-8, no control or bidirectional formatting characters, %d bytes at most", HeaderRun, run, o.run, maxRunLen)
	}
	if v := h.Get(HeaderSlot); v == "" {
		if o.slot != "" {
			t.Fatalf("parseOptions(%q): got slot %q, want none", h, o.slot)
		}
	} else {
		n, err := strconv.Atoi(o.slot)
		asked, _ := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || strconv.Itoa(n) != o.slot || n != asked || n < 0 || n >= u.Slots {
			t.Fatalf("parseOptions(%s %q) with %d slots: got slot %q, want %d in 0 to %d, written plainly", HeaderSlot, v, u.Slots, o.slot, asked, u.Slots-1)
		}
	}
	if want := strings.EqualFold(strings.TrimSpace(h.Get(HeaderProgress)), "sse"); o.progress != want {
		t.Fatalf("parseOptions(%s %q): got progress %v, want %v", HeaderProgress, h.Get(HeaderProgress), o.progress, want)
	}
	if want := h.Get(outlast.AttemptHeader) != ""; o.outer != want {
		t.Fatalf("parseOptions(%q): got outer %v, want %v", h, o.outer, want)
	}
}

// ceilingAttempts bounds the attempts simulated per request: a zero wait
// under a deadline retries for ever in no time.
const ceilingAttempts = 64

// FuzzPolicyCeiling checks tighten's promise by running both policies:
// "whatever a client sends, the upstream sees no more attempts, and no
// sooner, than the operator's policy allows". A request that fails every
// time is retried by outlast.Do in virtual time, under the operator's
// policy and under the one parseOptions made from the request's headers,
// with the same deadline; the request's k-th attempt must come no sooner
// than the operator's k-th, and there must be no more of them.
func FuzzPolicyCeiling(f *testing.F) {
	// cfg picks the operator's policy and --max-timeout, as fuzzUpstream
	// reads it: 1 is the default waits, 3 a capped policy; +32 is 10m.
	f.Add("2s,2s,2s", "10s", "5", "30s", uint16(3))
	f.Add("15s", "", "", "10m", uint16(1+32))
	f.Add("0,0,0,0", "0", "0", "1h", uint16(2+32))
	f.Add("", "", "2", "", uint16(3))
	f.Add("1h", "2m", "1", "", uint16(1))
	f.Fuzz(func(t *testing.T, waits, reserve, maxAttempts, timeout string, cfg uint16) {
		h := http.Header{}
		for name, v := range map[string]string{HeaderWaits: waits, HeaderReserve: reserve, HeaderMaxAttempts: maxAttempts, HeaderTimeout: timeout} {
			if v != "" {
				h.Set(name, v)
			}
		}
		u := fuzzUpstream(cfg)
		if u.Policy == nil || u.Policy.Jitter != (outlast.Jitter{}) {
			return // nothing to compare, or no fixed schedule to compare
		}
		o, err := parseOptions(h, u, fuzzNow)
		if err != nil || o.policy == nil {
			return
		}
		budget, hasDeadline := o.deadline.Sub(fuzzNow), !o.deadline.IsZero()
		// The reserve is the caller's own: the operator's waits and
		// cap are the ceiling, under the request's reserve.
		ceiling := *u.Policy
		ceiling.Reserve = o.policy.Reserve
		operator := attemptTimes(t, &ceiling, budget, hasDeadline)
		request := attemptTimes(t, o.policy, budget, hasDeadline)
		if len(request) > len(operator) {
			t.Fatalf("%q under %+v with %v to the deadline: %d attempts, want %d at most, as the operator's policy makes", h, *u.Policy, budget, len(request), len(operator))
		}
		for k := range request {
			if request[k] < operator[k] {
				t.Fatalf("%q under %+v with %v to the deadline: attempt %d at %v, want %v at the soonest, as the operator's policy makes it", h, *u.Policy, budget, k+1, request[k], operator[k])
			}
		}
	})
}

// attemptTimes returns when outlast.Do makes each attempt of a request
// that always fails with a 503, under p and, with hasDeadline, a deadline
// budget after the start, up to ceilingAttempts.
func attemptTimes(t *testing.T, p *outlast.Policy, budget time.Duration, hasDeadline bool) []time.Duration {
	t.Helper()
	var times []time.Duration
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		if hasDeadline {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, budget)
			defer cancel()
		}
		start := time.Now()
		outlast.Do(ctx, p, func(context.Context) error {
			times = append(times, time.Since(start))
			if len(times) == ceilingAttempts {
				return &outlast.StatusError{StatusCode: http.StatusBadRequest} // never retried
			}
			return &outlast.StatusError{StatusCode: http.StatusServiceUnavailable}
		})
	})
	return times
}

// FuzzSDKDeadline checks that the SDK's timeout read as whole seconds,
// without strconv.ParseFloat, is the duration ParseFloat's reading
// gives, and that anything wholeSeconds declines is left to ParseFloat.
func FuzzSDKDeadline(f *testing.F) {
	for _, s := range []string{"600", "0", "000000001", "999999999", "1234567890", "1.5", " 600", "6e2", "-1", "+5", "0x10", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := wholeSeconds(v)
		if !ok {
			return
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || len(v) > 9 || strings.Trim(v, "0123456789") != "" {
			t.Fatalf("wholeSeconds(%q) = %v, took a value that is not one to nine digits (ParseFloat: %v, %v)", v, d, x, err)
		}
		if want := time.Duration(x * float64(time.Second)); d != want {
			t.Fatalf("wholeSeconds(%q) = %v, ParseFloat's reading gives %v", v, d, want)
		}
	})
}
