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
func appendLine(buf []byte, r slog.Record) []byte {
	buf = append(buf, '{')
	if !r.Time.IsZero() {
		buf = append(buf, `"time":"`...)
		buf = r.Time.Round(0).AppendFormat(buf, time.RFC3339Nano)
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

// appendJSONString appends s quoted as slog's JSON handler quotes it:
// encoding/json's escapes without its HTML ones, invalid UTF-8 as
// U+FFFD, and U+2028 and U+2029 escaped.
func appendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
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
