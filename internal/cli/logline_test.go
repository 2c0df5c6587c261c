package cli

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"
)

// referenceLine is what slog's JSON handler writes for r, durations
// converted as jsonLog converts them: what appendLine must write.
func referenceLine(t testing.TB, r slog.Record) string {
	var buf bytes.Buffer
	h := slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.Level(-100)})
	var as []slog.Attr
	r.Attrs(func(a slog.Attr) bool {
		as = append(as, durationText(a))
		return true
	})
	r2 := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r2.AddAttrs(as...)
	if err := h.Handle(context.Background(), r2); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// FuzzLogLine checks that serve's own encoding of a plain line gives the
// bytes slog's JSON handler gives, for any text, numbers and time. Each
// input writes two lines with one stampCache, the second step
// nanoseconds after the first, in UTC or in a zone east of it: in the
// same second or another, and in the same zone or another.
func FuzzLogLine(f *testing.F) {
	f.Add("outlast: request", "id", "01HX\"\\\n\t\x01<&>", int64(200), uint64(3), true, int64(1500*time.Millisecond), 0, int64(1764790000123456789), int64(1000), false)
	f.Add("m\u2028\u2029", "k\xff", "\xed\xa0\x80 ok \u00e9", int64(-1), uint64(0), false, int64(-5), 6, int64(0), int64(0), true)
	f.Add("", "a b", "", int64(0), uint64(1<<63), false, int64(0), -4, int64(-62135596800000000), int64(1e9), false)
	f.Add("a long message, eight bytes at a time", "path", "/v1/chat/completions\x7f/é", int64(0), uint64(0), false, int64(0), 0, int64(1764790000999999999), int64(1), true)
	east := time.FixedZone("east", 5*3600+30*60)
	f.Fuzz(func(t *testing.T, msg, key, s string, i int64, u uint64, b bool, d int64, level int, nanos, step int64, zoned bool) {
		if key == "" {
			return // plainLine refuses an unnamed attribute
		}
		var c stampCache
		for n, at := range []int64{nanos, nanos + step} {
			tm := time.Unix(0, at).UTC()
			if zoned && n == 1 {
				tm = tm.In(east)
			}
			if at == 0 {
				tm = time.Time{}
			}
			if y := tm.Year(); y < 0 || y >= 10000 {
				return // slog writes an error for such a year; a clock does not give one
			}
			r := slog.NewRecord(tm, slog.Level(level), msg, 0)
			r.AddAttrs(slog.String(key, s), slog.Int64("i", i), slog.Uint64("u", u), slog.Bool("b", b),
				slog.Duration("d", time.Duration(d)), slog.String("s2", msg), slog.Int("n", level))
			if _, ok := plainLine(r); !ok {
				t.Fatalf("plainLine refused %v", r)
			}
			if got, want := string(appendLine(nil, r, &c)), referenceLine(t, r); got != want {
				t.Fatalf("appendLine wrote\n%s\nslog's handler writes\n%s", got, want)
			}
		}
	})
}

// TestMayEscape checks the eight-byte test against the byte-by-byte rule
// for every byte value at every place in a word of letters, and beside a
// byte that needs an escape, whose borrow must not hide it.
func TestMayEscape(t *testing.T) {
	needs := func(b byte) bool { return b < 0x20 || b == '"' || b == '\\' || b >= 0x80 }
	word := func(bs [8]byte) uint64 {
		var v uint64
		for i := 7; i >= 0; i-- {
			v = v<<8 | uint64(bs[i])
		}
		return v
	}
	for at := range 8 {
		for c := range 256 {
			bs := [8]byte{'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'}
			bs[at] = byte(c)
			if got, want := mayEscape(word(bs)), needs(byte(c)); got != want {
				t.Fatalf("mayEscape(%q) = %v, want %v", bs[:], got, want)
			}
			for _, other := range []byte{0, 0x1f, '"', '\\', 0x80, 0xff} {
				bs2 := bs
				bs2[(at+1)%8] = other
				if !mayEscape(word(bs2)) {
					t.Fatalf("mayEscape(%q) = false, want true", bs2[:])
				}
			}
		}
	}
}

// TestLogLineFallback checks that a line appendLine cannot write, and
// every line of a logger made With attributes or a group, still comes
// out as slog's handler writes it, durations as text, and in order with
// the plain lines, which wait as records.
func TestLogLineFallback(t *testing.T) {
	var out lockedBuffer
	logger, flush := newLogger(&out, slog.LevelInfo)
	logger.Info("any", "err", context.Canceled, "f", 1.5, "took", time.Second)
	logger.Info("plain", "took", time.Second)
	logger.With("who", "me").Info("with", "took", time.Second)
	logger.WithGroup("g").Info("group", "took", time.Second)
	flush()
	want := `{"level":"INFO","msg":"any","err":"context canceled","f":1.5,"took":"1s"}
{"level":"INFO","msg":"plain","took":"1s"}
{"level":"INFO","msg":"with","who":"me","took":"1s"}
{"level":"INFO","msg":"group","g":{"took":"1s"}}
`
	if got := stripTimes(out.String()); got != want {
		t.Errorf("the log:\n%s\nwant\n%s", got, want)
	}
	if _, ok := plainLine(slog.NewRecord(time.Time{}, 0, "m", 0)); !ok {
		t.Error("plainLine refused a record without attributes")
	}
}

// stripTimes removes the "time" fields of JSON lines.
func stripTimes(s string) string {
	var out bytes.Buffer
	for _, line := range bytes.SplitAfter([]byte(s), []byte("\n")) {
		if i := bytes.Index(line, []byte(`"time":"`)); i >= 0 {
			j := bytes.Index(line[i+8:], []byte(`",`))
			line = append(line[:i:i], line[i+8+j+2:]...)
		}
		out.Write(line)
	}
	return out.String()
}

// BenchmarkRequestLine compares what a request pays for its line through
// serve's logger with the same line through slog's JSON handler,
// durations converted, which is what serve used before. The writes, made
// by another goroutine, are left out: the lines are flushed every 64,
// with the timer stopped.
func BenchmarkRequestLine(b *testing.B) {
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "outlast: request", 0)
	r.AddAttrs(slog.String("id", "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"), slog.String("run", ""),
		slog.String("method", "POST"), slog.String("path", "/v1/chat/completions"),
		slog.String("upstream", "default"), slog.Int("status", 200), slog.Int("attempts", 1),
		slog.Duration("took", 1234567*time.Nanosecond), slog.String("error", ""))
	lw := newLogWriter(discard{})
	defer lw.Flush()
	for _, h := range []struct {
		name string
		h    slog.Handler
	}{
		{"slog", jsonLog{Handler: slog.NewJSONHandler(lw, nil), w: lw, derived: true}},
		{"serve", jsonLog{Handler: slog.NewJSONHandler(lw, nil), w: lw}},
	} {
		b.Run("handler="+h.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				h.h.Handle(context.Background(), r)
				if n++; n%64 == 0 {
					b.StopTimer()
					lw.Flush()
					b.StartTimer()
				}
			}
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
