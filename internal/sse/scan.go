package sse

import "bytes"

// MaxLine is the longest line a Scanner keeps whole: a longer line's
// value is cut there. What the Scanner holds between pieces is bounded
// by it.
const MaxLine = 1 << 20

// A Scanner reads an event stream in the pieces it arrives in, as WHATWG
// HTML's "Interpreting an event stream" does: a line ends at CRLF, LF or
// CR, alone or mixed, even where a CRLF is split between two pieces; one
// byte order mark at the stream's start is dropped; a line that starts
// with a colon is a comment; a field's value loses one leading space.
//
// It splits the stream into blocks, each ending with the blank line that
// follows a line that is not blank. A block with a data field is an
// event, which a client dispatches; a block of comments, or of fields
// without data, dispatches nothing. Blank lines before a block's first
// line are part of it. The blocks and what is left after the last one
// are the stream, byte for byte, however it was split.
//
// It is the one reader of event streams in outlast: the Transport's
// commit point, the gateway's relay and the tests use it.
//
// The zero value is a Scanner at the start of a stream. A Scanner is not
// safe for concurrent use.
type Scanner struct {
	line    []byte // a line begun in an earlier piece, not yet ended
	cr      bool   // the last line ended at a CR: an LF first in the next piece is the rest of a CRLF
	started bool   // the stream's first line has been read, its byte order mark dropped
	seen    bool   // the block has a line that is not blank
	ended   bool   // the block in ev has ended: the next Scan starts another
	ev      Event

	// ev's fields share the piece being scanned, as far as lent says,
	// and are copied into name and data only when they must outlive it:
	// a block with one data line, the usual event, is read without a
	// copy.
	lent       lent
	name, data []byte
}

// lent says which of an Event's fields share the piece being scanned.
type lent uint8

const (
	lentName lent = 1 << iota
	lentData
)

// An Event is one block of an event stream, as a Scanner read it.
type Event struct {
	// Name is the value of the block's last event field; empty if it
	// had none (a client names such an event "message").
	Name []byte
	// Data is the values of the block's data fields, joined by LF.
	Data []byte
	// HasData says the block had a data field, even an empty one: a
	// client dispatches it as an event. A block without one (comments,
	// a keep-alive) dispatches nothing.
	HasData bool
}

// utf8BOM is the byte order mark that WHATWG strips, once, from the start
// of an event stream.
var utf8BOM = []byte("\ufeff")

// Scan reads p, the stream's next bytes, up to the end of the first block
// that ends in p. It returns how many bytes of p it read, and whether a
// block ended there; that block is Event's until the next call, and its
// fields may share p's bytes, so p must not change meanwhile. When no
// block ends in p, it reads all of p, keeping what it needs of it (a
// line it has not seen the end of, the fields read so far) for the next
// call.
func (s *Scanner) Scan(p []byte) (n int, ended bool) {
	n, ended = s.scan(p)
	if !ended {
		s.keepLent()
	}
	return n, ended
}

// keepLent copies the fields that share a piece into the Scanner's own
// buffers, for a block that goes on past the piece.
func (s *Scanner) keepLent() {
	if s.lent&lentName != 0 {
		s.name = append(s.name[:0], s.ev.Name...)
		s.ev.Name = s.name
	}
	if s.lent&lentData != 0 {
		s.data = append(s.data[:0], s.ev.Data...)
		s.ev.Data = s.data
	}
	s.lent = 0
}

func (s *Scanner) scan(p []byte) (n int, ended bool) {
	if s.ended {
		s.reset()
	}
	for n < len(p) {
		if s.cr {
			// An LF right after a CR is the same line ending, even when
			// the CR came in an earlier piece.
			s.cr = false
			if p[n] == '\n' {
				n++
				continue
			}
		}
		i := lineEnd(p[n:])
		if i < 0 {
			s.keep(p[n:])
			return len(p), false
		}
		l, shared := p[n:n+i], true
		if len(s.line) > 0 {
			s.keep(l)
			l, shared = s.line, false
		}
		s.cr = p[n+i] == '\r'
		n += i + 1
		s.take(l, shared)
		s.line = s.line[:0]
		if s.ended {
			return n, true
		}
	}
	return n, false
}

// lineEnd returns the index of the first CR or LF in p, or -1: two
// searches for one byte each, which the runtime makes fast, rather than
// IndexAny's loop over every byte, since this runs over every byte that a
// relay forwards.
func lineEnd(p []byte) int {
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		i = len(p)
	}
	if j := bytes.IndexByte(p[:i], '\r'); j >= 0 {
		return j
	}
	if i == len(p) {
		return -1
	}
	return i
}

// Event returns the block that the last Scan ended, or the one being
// read. It is valid until the next call to Scan.
func (s *Scanner) Event() *Event { return &s.ev }

// reset starts a new block.
func (s *Scanner) reset() {
	s.ended, s.seen, s.lent = false, false, 0
	s.ev = Event{}
}

// keep adds b to the line being read, up to MaxLine.
func (s *Scanner) keep(b []byte) {
	if room := MaxLine - len(s.line); len(b) > room {
		b = b[:max(room, 0)]
	}
	s.line = append(s.line, b...)
}

// take reads one line, without its line ending: a part of the piece
// being scanned if shared, else the Scanner's own line.
func (s *Scanner) take(l []byte, shared bool) {
	if !s.started {
		s.started = true
		l = bytes.TrimPrefix(l, utf8BOM)
	}
	if len(l) == 0 {
		// A blank line ends the block it follows; before any line it
		// ends nothing, and is the next block's.
		s.ended = s.seen
		return
	}
	s.seen = true
	if l[0] == ':' {
		return // a comment
	}
	name, value, found := bytes.Cut(l, []byte(":"))
	if found {
		value = bytes.TrimPrefix(value, []byte(" "))
	}
	switch string(name) {
	case "event":
		s.ev.Name = s.set(&s.name, lentName, value, shared)
	case "data":
		if !s.ev.HasData {
			s.ev.Data, s.ev.HasData = s.set(&s.data, lentData, value, shared), true
			return
		}
		// A second line: the data is joined in the Scanner's own buffer.
		if s.lent&lentData != 0 {
			s.data = append(s.data[:0], s.ev.Data...)
			s.lent &^= lentData
		}
		s.data = append(append(s.data, '\n'), value...)
		s.ev.Data = s.data
	}
}

// set returns a field's value: value itself if it is shared, noted in
// lent, else a copy in own.
func (s *Scanner) set(own *[]byte, l lent, value []byte, shared bool) []byte {
	if shared {
		s.lent |= l
		return value
	}
	s.lent &^= l
	*own = append((*own)[:0], value...)
	return *own
}

// A Block is one block of a stream that Split read, with its bytes.
type Block struct {
	Event
	Raw []byte // the block's bytes in the stream, its blank line included
}

// Split reads b, a whole stream or its start, into its blocks, and
// returns them with what is left after the last: a block not yet ended.
// Each block's fields are its own copies; Raw is a part of b.
func Split(b []byte) (blocks []Block, rest []byte) {
	var s Scanner
	for len(b) > 0 {
		n, ended := s.Scan(b)
		if !ended {
			break
		}
		ev := s.Event()
		blocks = append(blocks, Block{Raw: b[:n:n], Event: Event{
			Name: bytes.Clone(ev.Name), Data: bytes.Clone(ev.Data), HasData: ev.HasData,
		}})
		b = b[n:]
	}
	return blocks, b
}

// Append appends ev to b as an event stream writes it: its name, a data
// line for each line of its data, and the blank line that dispatches it.
// Scanning what it appends gives back ev's name and data. An Event
// without data is written as a comment block, which dispatches nothing.
func Append(b []byte, ev *Event) []byte {
	if !ev.HasData {
		return append(b, ":\n\n"...)
	}
	if len(ev.Name) > 0 {
		b = append(append(append(b, "event: "...), ev.Name...), '\n')
	}
	data := ev.Data
	for {
		line, rest, more := bytes.Cut(data, []byte("\n"))
		b = append(append(append(b, "data: "...), line...), '\n')
		if !more {
			break
		}
		data = rest
	}
	return append(b, '\n')
}
