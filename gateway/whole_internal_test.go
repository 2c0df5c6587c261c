package gateway

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
)

// TestHeldBodyFill checks the read of an answer into a heldBody: one of
// its declared size, one cut short of it, one longer than it said, one
// past the limit, one of unknown size, and one the budget runs out for.
// Whatever was read, the body gives it back whole, followed by its rest,
// and the budget is free again at its end.
func TestHeldBodyFill(t *testing.T) {
	long := strings.Repeat("0123456789", 20000) // 200,000 bytes: several chunks
	for _, c := range []struct {
		name         string
		body         string
		size, limit  int64
		budget       int64
		wantSize     int64 // the bytes held
		wantEnded    bool
		wantErr      bool
		wantReserved int64 // of the budget, once filled
	}{
		{"declared", "hello", 5, 100, 100, 5, true, false, 5},
		{"empty", "", 0, 100, 100, 0, true, false, 0},
		// Its end comes before the declared length: a failure.
		{"cut short", "hel", 5, 100, 100, 3, true, true, 5},
		// A Transport that reads past the length gets the rest read as
		// one of unknown length would be, within the limit.
		{"longer than declared", "hello world", 5, 100, 100, 11, true, false, 5 + 95},
		// Past the limit, it stops: the rest goes as it comes.
		{"past the limit", "hello world", -1, 8, 100, 9, false, false, 9},
		{"unknown size", "hello", -1, 1 << 20, 1 << 20, 5, true, false, 4 << 10},
		// A chunked body cut short: net/http's read fails with
		// io.ErrUnexpectedEOF, which is not its end.
		{"unknown size cut short", "hel", -1, 1 << 20, 1 << 20, 3, true, true, 4 << 10},
		{"unknown size, long", long, -1, 1 << 20, 1 << 20, 200000, true, false, 4<<10 + 4<<10 + 8<<10 + 16<<10 + 32<<10 + 3*64<<10},
		// The budget has room for the chunks of 4, 4, 8, 16 and 32 KiB,
		// and not the next.
		{"unknown size over the budget", long, -1, 1 << 20, 100 << 10, 64 << 10, false, false, 64 << 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &holdBudget{max: c.budget}
			h := &heldBody{budget: b}
			if c.size >= 0 && !h.reserve(c.size) {
				t.Fatalf("reserve(%d) of a budget of %d: want room", c.size, c.budget)
			}
			var r io.Reader = strings.NewReader(c.body)
			if c.wantErr {
				r = io.MultiReader(r, iotest.ErrReader(io.ErrUnexpectedEOF))
			}
			ended, err := h.fill(r, c.size, c.limit)
			if h.size != c.wantSize || ended != c.wantEnded || (err != nil) != c.wantErr {
				t.Errorf("fill: got %d bytes, ended %v, error %v; want %d, ended %v, error %v", h.size, ended, err, c.wantSize, c.wantEnded, c.wantErr)
			}
			if got := b.used.Load(); got != c.wantReserved {
				t.Errorf("got %d bytes reserved once filled, want %d", got, c.wantReserved)
			}
			if !ended {
				h.rest = io.NopCloser(r)
			}
			got, err := io.ReadAll(h)
			if err != nil && !c.wantErr || string(got) != c.body {
				t.Errorf("read back %d bytes, %v; want the %d sent", len(got), err, len(c.body))
			}
			if got := b.used.Load(); got != 0 {
				t.Errorf("got %d bytes reserved at the body's end, before its Close; want 0", got)
			}
		})
	}
}

// filled returns a heldBody of body, read whole under a budget of its
// own, with the budget.
func filled(t *testing.T, body string) (*heldBody, *holdBudget) {
	t.Helper()
	b := &holdBudget{max: 1 << 20}
	h := &heldBody{budget: b}
	if ended, err := h.fill(strings.NewReader(body), -1, 1<<20); !ended || err != nil {
		t.Fatalf("fill: ended %v, %v; want the whole body", ended, err)
	}
	return h, b
}

// TestHeldBodyGivesBack checks that a heldBody gives its reservation back
// once, however it ends: read to its end, closed before, during or after
// that, closed twice, or written out whole.
func TestHeldBodyGivesBack(t *testing.T) {
	body := strings.Repeat("x", 100000)
	t.Run("closed unread", func(t *testing.T) {
		h, b := filled(t, body)
		if b.used.Load() == 0 {
			t.Fatal("nothing reserved for a body held")
		}
		h.Close()
		h.Close()
		if got := b.used.Load(); got != 0 {
			t.Errorf("got %d bytes reserved after two Closes, want 0", got)
		}
		if _, err := h.Read(make([]byte, 10)); !errors.Is(err, errClosedBody) {
			t.Errorf("a read after Close: got %v, want errClosedBody", err)
		}
	})
	t.Run("closed half read", func(t *testing.T) {
		h, b := filled(t, body)
		io.CopyN(io.Discard, h, 50000)
		if got := b.used.Load(); got == 0 {
			t.Error("got nothing reserved half-way, want what is left")
		}
		h.Close()
		if got := b.used.Load(); got != 0 {
			t.Errorf("got %d bytes reserved after Close, want 0", got)
		}
	})
	t.Run("written out", func(t *testing.T) {
		h, b := filled(t, body)
		var out bytes.Buffer
		if n, err := h.WriteTo(&out); n != int64(len(body)) || err != nil || out.String() != body {
			t.Errorf("WriteTo: got %d bytes, %v; want the %d held", n, err, len(body))
		}
		if got := b.used.Load(); got != 0 {
			t.Errorf("got %d bytes reserved once written, before Close; want 0", got)
		}
		h.Close()
		if got := b.used.Load(); got != 0 {
			t.Errorf("got %d bytes reserved after Close, want 0", got)
		}
	})
}

// TestHoldBudgetTake checks that takes racing for a budget never pass
// it, and that the budget is whole again once each is given back.
func TestHoldBudgetTake(t *testing.T) {
	b := &holdBudget{max: 1000}
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := int64(0)
	for range 50 {
		wg.Go(func() {
			for range 100 {
				if b.take(70) {
					mu.Lock()
					peak = max(peak, b.used.Load())
					mu.Unlock()
					b.give(70)
				}
			}
		})
	}
	wg.Wait()
	if peak > 1000 || b.used.Load() != 0 {
		t.Errorf("got a peak of %d and %d left, want at most 1000 and 0", peak, b.used.Load())
	}
}
