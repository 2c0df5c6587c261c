package cli

import (
	"log/slog"
	"strconv"
	"time"
	"unicode/utf8"
)

// plainLine reports whether appendLine can write r: a record whose
// attributes are all named strings, integers, booleans and durations,
// as the gateway's request line is. Others go to slog's JSON handler.
// If it can, size is the line's length before escapes, as the log's
// buffer counts it while the record waits.
func plainLine(r slog.Record) (size int, ok bool) {
	const quoted = 6 // a key's quotes, colon and comma; a value's quotes
	size = len(`{"time":"2006-01-02T15:04:05.999999999Z07:00","level":"ERROR","msg":""}`) + len(r.Message) + 1
	ok = true
	r.Attrs(func(a slog.Attr) bool {
		size += len(a.Key) + quoted
		switch a.Value.Kind() {
		case slog.KindString:
			size += len(a.Value.String())
		case slog.KindInt64, slog.KindUint64, slog.KindBool, slog.KindDuration:
			size += 24 // the longest: a duration's text, an int64's digits and sign
		default:
			ok = false
		}
		ok = ok && a.Key != ""
		return ok
	})
	return size, ok
}

// appendLine appends r as jsonLog's slog.JSONHandler writes it, durations
// as text, for a record plainLine accepts: the same bytes, made without
// the handler's per-line state, buffer and interface calls. The request
// line is written once a request, so this is on every request's path.
// The time's second comes from c, which keeps the last one's text.
func appendLine(buf []byte, r slog.Record, c *stampCache) []byte {
	buf = append(buf, '{')
	if !r.Time.IsZero() {
		buf = append(buf, `"time":"`...)
		buf = c.append(buf, r.Time)
		buf = append(buf, `",`...)
	}
	buf = append(buf, `"level":`...)
	buf = appendJSONString(buf, r.Level.String())
	buf = append(buf, `,"msg":`...)
	buf = appendJSONString(buf, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		buf = append(buf, ',')
		buf = appendJSONString(buf, a.Key)
		buf = append(buf, ':')
		switch v := a.Value; v.Kind() {
		case slog.KindString:
			buf = appendJSONString(buf, v.String())
		case slog.KindInt64:
			buf = strconv.AppendInt(buf, v.Int64(), 10)
		case slog.KindUint64:
			buf = strconv.AppendUint(buf, v.Uint64(), 10)
		case slog.KindBool:
			buf = strconv.AppendBool(buf, v.Bool())
		case slog.KindDuration:
			buf = appendJSONString(buf, v.Duration().String())
		}
		return true
	})
	return append(buf, "}\n"...)
}

// A stampCache writes times in RFC 3339 with nanoseconds, as slog's
// JSON handler does, keeping the text of the last second and its zone:
// the lines written in one batch mostly share them, and the rest costs a
// tenth of time.Time.AppendFormat. The zero stampCache is ready to use.
type stampCache struct {
	sec  int64          // the Unix second whose text is kept
	loc  *time.Location // and its location
	text []byte         // its date and time, "2006-01-02T15:04:05", or nil
	zone []byte         // its zone, "Z" or "-07:00"
}

// append appends t as time.RFC3339Nano formats it.
func (c *stampCache) append(buf []byte, t time.Time) []byte {
	if sec, loc := t.Unix(), t.Location(); c.text == nil || sec != c.sec || loc != c.loc {
		s := t.Truncate(time.Second).AppendFormat(c.text[:0], time.RFC3339)
		if len(s) < len("2006-01-02T15:04:05Z") || s[10] != 'T' {
			// A year before 0 or after 9999: not kept.
			c.text = nil
			return t.Round(0).AppendFormat(buf, time.RFC3339Nano)
		}
		c.sec, c.loc, c.text = sec, loc, s[:19]
		c.zone = append(c.zone[:0], s[19:]...)
	}
	buf = append(buf, c.text...)
	if ns := t.Nanosecond(); ns != 0 {
		// Nine digits, without their trailing zeros.
		var d [10]byte
		d[0] = '.'
		for i := 9; i > 0; i-- {
			d[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := 10
		for d[n-1] == '0' {
			n--
		}
		buf = append(buf, d[:n]...)
	}
	return append(buf, c.zone...)
}

// mayEscape reports whether one of the eight bytes in v may need an
// escape in a JSON string: a byte below a space, a quote, a backslash or
// a byte of a multi-byte character. Such a byte sets its high bit in
// the word or in one of the differences below, and no other byte does
// unless a borrow from a lower byte that is one of them reaches it: the
// answer is true for every word that holds one, and for no other.
func mayEscape(v uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	below := v - 0x20*ones              // a byte below 0x20 borrows
	quote := (v ^ '"'*ones) - ones      // a quote becomes 0, then borrows
	backslash := (v ^ '\\'*ones) - ones // likewise a backslash
	return (v|below|quote|backslash)&highs != 0
}

// plainByte tells the bytes that stand for themselves in a JSON string:
// ASCII from the space on, but the quote and the backslash.
var plainByte = func() (t [256]bool) {
	for b := ' '; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// appendJSONString appends s quoted as slog's JSON handler quotes it:
// encoding/json's escapes without its HTML ones, invalid UTF-8 as
// U+FFFD, and U+2028 and U+2029 escaped.
func appendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	start, i := 0, 0
	// Most text needs no escape: pass it eight bytes at a time, then
	// byte by byte from the first word that may hold one.
	for ; i+8 <= len(s); i += 8 {
		w := s[i : i+8] // one bounds check; the compiler makes one load of the eight
		v := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		if mayEscape(v) {
			break
		}
	}
	for i < len(s) {
		b := s[i]
		if plainByte[b] {
			i++
			continue
		}
		if b < utf8.RuneSelf {
			buf = append(buf, s[start:i]...)
			switch b {
			case '"', '\\':
				buf = append(buf, '\\', b)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\', 'u', '2', '0', '2', hex[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}
