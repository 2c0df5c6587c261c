package cli

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/gateway"
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
// the plain lines.
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

// TestRequestLineText checks that the gateway's request line, handed to
// serve's log as its fields, is written as slog's handler writes its
// Record, in order with the lines around it.
func TestRequestLineText(t *testing.T) {
	var out lockedBuffer
	logger, flush := newLogger(&out, slog.LevelInfo)
	h, ok := logger.Handler().(gateway.RequestLineHandler)
	if !ok {
		t.Fatalf("serve's log handler %T is not a gateway.RequestLineHandler: the request line would cost each request a Record", logger.Handler())
	}
	line := gateway.RequestLine{
		End: time.Date(2026, 12, 5, 22, 30, 1, 123456789, time.UTC), ID: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Run: "r\"1",
		Method: "POST", Path: "/v1/chat/completions", Upstream: "api", Status: 502, Attempts: 3, Took: 1500 * time.Millisecond, Error: "upstream_error",
	}
	logger.Info("before", "n", 1)
	if err := h.HandleRequestLine(context.Background(), line); err != nil {
		t.Fatal(err)
	}
	logger.Info("after", "f", 1.5)
	flush()
	lines := strings.SplitAfter(out.String(), "\n")
	if len(lines) != 4 || lines[3] != "" {
		t.Fatalf("the log:\n%s\nwant three lines", out.String())
	}
	if !strings.Contains(lines[0], `"msg":"before"`) || !strings.Contains(lines[2], `"msg":"after"`) {
		t.Errorf("the log:\n%s\nwant the request line between before and after", out.String())
	}
	if got, want := lines[1], referenceLine(t, line.Record()); got != want {
		t.Errorf("the request line:\n%s\nslog's handler writes\n%s", got, want)
	}
	if size, ok := plainLine(line.Record()); !ok || requestLineSize(&line) != size {
		t.Errorf("requestLineSize: %d, want plainLine's %d (%v): the log's bound counts it", requestLineSize(&line), size, ok)
	}
	// A logger made With attributes writes them too: through slog's
	// handler.
	var out2 lockedBuffer
	logger2, flush2 := newLogger(&out2, slog.LevelInfo)
	logger2.With("who", "me").Handler().(gateway.RequestLineHandler).HandleRequestLine(context.Background(), line)
	flush2()
	if got := out2.String(); !strings.Contains(got, `"who":"me"`) || !strings.Contains(got, `"took":"1.5s"`) {
		t.Errorf("through a logger With who=me the request line is %s; want who and took as text", got)
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
// serve's logger, handed the line's fields, with the line's Record
// through slog's JSON handler, durations converted, which is what serve
// used before. The writes, made by another goroutine, are left out: the
// lines are flushed every 64, with the timer stopped.
func BenchmarkRequestLine(b *testing.B) {
	line := gateway.RequestLine{
		End: time.Now(), ID: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Method: "POST", Path: "/v1/chat/completions",
		Upstream: "default", Status: 200, Attempts: 1, Took: 1234567 * time.Nanosecond,
	}
	lw := newLogWriter(discard{})
	defer lw.Flush()
	ctx, slogs := context.Background(), jsonLog{Handler: slog.NewJSONHandler(lw, nil), w: lw, derived: true}
	serve := jsonLog{Handler: slog.NewJSONHandler(lw, nil), w: lw}
	for _, h := range []struct {
		name   string
		handle func()
	}{
		{"slog", func() { slogs.Handle(ctx, line.Record()) }},
		{"serve", func() { serve.HandleRequestLine(ctx, line) }},
	} {
		b.Run("handler="+h.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				h.handle()
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
