package sse

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// streamSeeds are stream pieces for the scanner's tests and fuzzers: the
// providers' own shapes, and the line endings and field forms that
// WHATWG's grammar allows.
var streamSeeds = []string{
	"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n",
	"data: {\"error\":{\"type\":\"server_error\",\"code\":null}}\r\n\r\n",
	"event: message_start\ndata: {}\n\n",
	"data: [DONE]\n\n",
	"event: error\n\n",
	":comment\ndata\ndata:\n\n",
	"data: a\ndata:b\ndata:  c\n\nevent: error\n\n",
	"id: 1\nretry: 10\nevent: error\nevent: ping\ndata: x\n\n",
	"data: partial",
	"\n\nevent: error\n\n",
	"event: error\rdata: {}\r\r",
	"data: x\n\r\n",
	"\ufeffevent: error\ndata: {}\n\n",
	"\ufeff\ufeffdata: x\n\n",
	": ping\n\nevent: error\ndata: {}\n\n",
	"event: error\nid: 1\n\ndata: {}\r",
	"id: a\x00b\ndata: x\n\n",
	"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0}\n\n",
}

// refBlock is a block as refSplit reads it.
type refBlock struct {
	raw, name, data string
	hasData         bool
}

// refSplit reads a whole stream as WHATWG HTML's "Interpreting an event
// stream" does, a character at a time and without the code under test: a
// leading byte order mark is dropped; a line ends at CRLF, LF or CR; a
// line starting with ':' is a comment; a field's value loses one leading
// space; "event" sets the name, "data" adds a line, and other fields are
// ignored. A block ends at a blank line after a line that is not blank;
// the blocks and the rest are the stream.
func refSplit(s string) (blocks []refBlock, rest string) {
	start, i := 0, 0
	if strings.HasPrefix(s, "\ufeff") {
		i = len("\ufeff")
	}
	var b refBlock
	var data []string
	seen := false
	for i < len(s) {
		j := i
		for j < len(s) && s[j] != '\r' && s[j] != '\n' {
			j++
		}
		if j == len(s) {
			break // a line with no end yet
		}
		line := s[i:j]
		next := j + 1
		if s[j] == '\r' && next < len(s) && s[next] == '\n' {
			next++
		}
		if line == "" {
			if seen {
				b.raw, b.data = s[start:j+1], strings.Join(data, "\n")
				blocks = append(blocks, b)
				// The LF of a CRLF that ends the block is the next block's.
				start, b, data, seen = j+1, refBlock{}, nil, false
			}
			i = next
			continue
		}
		seen = true
		i = next
		if line[0] == ':' {
			continue
		}
		name, value := line, ""
		if k := strings.IndexByte(line, ':'); k >= 0 {
			name, value = line[:k], strings.TrimPrefix(line[k+1:], " ")
		}
		switch name {
		case "event":
			b.name = value
		case "data":
			data = append(data, value)
			b.hasData = true
		}
	}
	return blocks, s[start:]
}

// scanPieces scans b cut into pieces at cuts (offsets, in order), each
// read into one buffer that the next piece overwrites, as a read buffer
// is, and returns its blocks, each with its bytes, and the rest.
func scanPieces(b []byte, cuts []int) (blocks []refBlock, rest string) {
	var s Scanner
	var pending []byte
	buf := make([]byte, len(b))
	prev := 0
	for _, c := range append(cuts, len(b)) {
		for i := range buf {
			buf[i] = 'x' // what the last piece lent must not be read again
		}
		p := buf[:copy(buf, b[prev:c])]
		prev = c
		for len(p) > 0 {
			n, ended := s.Scan(p)
			pending = append(pending, p[:n]...)
			p = p[n:]
			if ended {
				ev := s.Event()
				blocks = append(blocks, refBlock{raw: string(pending), name: string(ev.Name), data: string(ev.Data), hasData: ev.HasData})
				pending = pending[:0]
			}
		}
	}
	return blocks, string(pending)
}

// TestScanner splits streams as WHATWG reads them, into blocks whose
// bytes are the stream's, however the stream is cut into pieces.
func TestScanner(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, in string
		want     []refBlock
		rest     string
	}{
		// Anthropic's events, as it sends them.
		{"named", "event: ping\ndata: {\"type\":\"ping\"}\n\n", []refBlock{{raw: "event: ping\ndata: {\"type\":\"ping\"}\n\n", name: "ping", data: `{"type":"ping"}`, hasData: true}}, ""},
		// Data lines join with LF; one leading space is dropped.
		{"data lines", "data: a\ndata:b\ndata:  c\n\n", []refBlock{{raw: "data: a\ndata:b\ndata:  c\n\n", data: "a\nb\n c", hasData: true}}, ""},
		// A comment block dispatches nothing, and is a block of its own.
		{"comment", ": ping\n\ndata: x\n\n", []refBlock{{raw: ": ping\n\n"}, {raw: "data: x\n\n", data: "x", hasData: true}}, ""},
		// WHATWG: a line may end at a lone CR.
		{"CR only", "event: error\rdata: {}\r\r", []refBlock{{raw: "event: error\rdata: {}\r\r", name: "error", data: "{}", hasData: true}}, ""},
		// A blank line ended by CRLF after one ended by LF ends the block;
		// the LF of its CRLF is the next block's.
		{"LF then CRLF", "data: x\n\r\ndata: y\r\n\r\n", []refBlock{{raw: "data: x\n\r", data: "x", hasData: true}, {raw: "\ndata: y\r\n\r", data: "y", hasData: true}}, "\n"},
		// One byte order mark is dropped; a second is part of the name.
		{"byte order mark", "\ufeffdata: x\n\n", []refBlock{{raw: "\ufeffdata: x\n\n", data: "x", hasData: true}}, ""},
		{"two byte order marks", "\ufeff\ufeffdata: x\n\n", []refBlock{{raw: "\ufeff\ufeffdata: x\n\n"}}, ""},
		// Fields other than event and data are ignored; a field without a
		// colon has an empty value.
		{"id and bare data", "id: a\x00\nid: 7\ndata\n\n", []refBlock{{raw: "id: a\x00\nid: 7\ndata\n\n", hasData: true}}, ""},
		// Blank lines before a block are the block's.
		{"leading blanks", "\n\r\ndata: x\n\n", []refBlock{{raw: "\n\r\ndata: x\n\n", data: "x", hasData: true}}, ""},
		// A block without its blank line is the rest.
		{"unended", "data: x\n\ndata: y\n", []refBlock{{raw: "data: x\n\n", data: "x", hasData: true}}, "data: y\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := []byte(c.in)
			for _, cuts := range [][]int{nil, everyByte(len(b)), everyLine(b)} {
				got, rest := scanPieces(b, cuts)
				if fmt.Sprint(got) != fmt.Sprint(c.want) || rest != c.rest {
					t.Errorf("cut at %v: got %+v, rest %q; want %+v, rest %q", cuts, got, rest, c.want, c.rest)
				}
			}
		})
	}
}

// everyLine cuts after each line ending: a line whole in one piece, its
// block going on in the next.
func everyLine(b []byte) []int {
	var cuts []int
	for i, c := range b[:max(len(b)-1, 0)] {
		if c == '\n' || c == '\r' {
			cuts = append(cuts, i+1)
		}
	}
	return cuts
}

func everyByte(n int) []int {
	cuts := make([]int, 0, n)
	for i := 1; i < n; i++ {
		cuts = append(cuts, i)
	}
	return cuts
}

// A line longer than MaxLine is kept cut there; the stream's bytes still
// pass whole.
func TestScannerLongLine(t *testing.T) {
	t.Parallel()
	in := "data: " + strings.Repeat("x", MaxLine+10) + "\n\n"
	var s Scanner
	n := 0
	for n < len(in) {
		m, ended := s.Scan([]byte(in[n:min(n+4096, len(in))]))
		n += m
		if ended {
			break
		}
	}
	ev := s.Event()
	if want := strings.Repeat("x", MaxLine-len("data: ")); n != len(in) || string(ev.Data) != want {
		t.Errorf("read %d of %d bytes, %d bytes of data; want all, and the line's first MaxLine bytes' value, %d", n, len(in), len(ev.Data), len(want))
	}
}

// FuzzScanner reads any bytes, cut anywhere, and checks the Scanner
// against refSplit, WHATWG's grammar written independently; that its
// blocks and rest are the stream, byte for byte; and that what Append
// writes of its events scans back to the same events.
func FuzzScanner(f *testing.F) {
	for _, s := range streamSeeds {
		f.Add([]byte(s), []byte{3, 1, 7})
	}
	f.Fuzz(func(t *testing.T, b []byte, cutBytes []byte) {
		var cuts []int
		at := 0
		for _, c := range cutBytes {
			at += int(c)
			if at >= len(b) {
				break
			}
			if at > 0 && (len(cuts) == 0 || cuts[len(cuts)-1] < at) {
				cuts = append(cuts, at)
			}
		}
		want, wantRest := refSplit(string(b))
		got, rest := scanPieces(b, cuts)
		if fmt.Sprint(got) != fmt.Sprint(want) || rest != wantRest {
			t.Fatalf("%q cut at %v:\n got %+v, rest %q\nwant %+v, rest %q", b, cuts, got, rest, want, wantRest)
		}
		var joined strings.Builder
		for _, bl := range got {
			joined.WriteString(bl.raw)
		}
		if joined.String()+rest != string(b) {
			t.Fatalf("%q: the blocks and the rest are %q", b, joined.String()+rest)
		}
		// Re-parse: Append's stream of the events gives the same events.
		blocks, _ := Split(b)
		// A stream with an event, or a name, holds a field HasField sees.
		for _, bl := range blocks {
			if (bl.HasData || len(bl.Name) > 0) && !HasField(b) {
				t.Fatalf("%q: event %+v, but HasField is false", b, bl.Event)
			}
		}
		var out []byte
		var events []Block
		for _, bl := range blocks {
			if bl.HasData {
				events = append(events, bl)
				out = Append(out, &bl.Event)
			}
		}
		again, left := Split(out)
		if len(left) != 0 || len(again) != len(events) {
			t.Fatalf("%q: Append wrote %q, which scans to %d blocks and %q, want %d events", b, out, len(again), left, len(events))
		}
		for i := range again {
			a, e := again[i], events[i]
			if !bytes.Equal(a.Name, e.Name) || !bytes.Equal(a.Data, e.Data) || !a.HasData {
				t.Fatalf("%q: event %d %+v was written %q and scanned back as %+v", b, i, e.Event, a.Raw, a.Event)
			}
		}
	})
}
