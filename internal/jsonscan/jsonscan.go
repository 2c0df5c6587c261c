// Package jsonscan walks a JSON text without decoding it: what the
// gateway reads of a request body, and what the commit point reads of a
// stream's events, on every request, where encoding/json would scan the
// text twice and allocate for each field. It is not a validator: the
// upstream, or the client, judges the text.
package jsonscan

// A Scanner walks B from I. Its zero value walks nothing; set B.
type Scanner struct {
	B []byte
	I int
}

// peek returns the byte at the scanner's place, or 0 at the end.
func (s *Scanner) peek() byte {
	if s.I < len(s.B) {
		return s.B[s.I]
	}
	return 0
}

// Space skips white space.
func (s *Scanner) Space() {
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ' ', '\t', '\n', '\r':
			s.I++
		default:
			return
		}
	}
}

// next skips space and then c, and reports whether c was there.
func (s *Scanner) next(c byte) bool {
	s.Space()
	if s.peek() != c {
		return false
	}
	s.I++
	return true
}

// str reads a string and returns its raw contents, escapes and all: keys
// are read this way, and the keys outlast looks for have no escapes. The
// contents are not copied.
func (s *Scanner) str() ([]byte, bool) {
	s.Space()
	start := s.I
	if !s.skipString() {
		return nil, false
	}
	return s.B[start+1 : s.I-1], true
}

// skipString skips a string, escapes included.
func (s *Scanner) skipString() bool {
	if s.peek() != '"' {
		return false
	}
	for s.I++; s.I < len(s.B); s.I++ {
		switch s.B[s.I] {
		case '\\':
			s.I++
		case '"':
			s.I++
			return true
		}
	}
	return false
}

// skipValue skips one value: a string, or anything up to the end of its
// nesting, counting brackets outside strings.
func (s *Scanner) skipValue() bool {
	switch s.peek() {
	case '"':
		return s.skipString()
	case '{', '[':
		return s.skipNested()
	}
	start := s.I
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return s.I > start
		}
		s.I++
	}
	return false
}

// skipNested skips an object or array.
func (s *Scanner) skipNested() bool {
	depth := 0
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case '"':
			if !s.skipString() {
				return false
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				s.I++
				return true
			}
		}
		s.I++
	}
	return false
}

// Members walks the object at the scanner's place, calling member with
// each key's raw contents, escapes and all, and the value's bytes, which
// it has skipped; both are parts of B. While member runs, the scanner's
// I is just past the value: the value is B[I-len(value):I]. It reports
// whether the object was whole; member's values read before the trouble
// stand. The last of a repeated key is seen last.
func (s *Scanner) Members(member func(key, value []byte)) bool {
	if !s.next('{') {
		return false
	}
	if s.Space(); s.peek() == '}' {
		s.I++
		return true
	}
	for {
		key, ok := s.str()
		if !ok || !s.next(':') {
			return false
		}
		s.Space()
		start := s.I
		if !s.skipValue() {
			return false
		}
		member(key, s.B[start:s.I])
		switch s.Space(); s.peek() {
		case ',':
			s.I++
			s.Space()
		case '}':
			s.I++
			return true
		default:
			return false
		}
	}
}

// Elements walks the array at the scanner's place, calling element with
// each element's bytes. It reports whether the array was whole.
func (s *Scanner) Elements(element func(value []byte)) bool {
	if !s.next('[') {
		return false
	}
	if s.Space(); s.peek() == ']' {
		s.I++
		return true
	}
	for {
		s.Space()
		start := s.I
		if !s.skipValue() {
			return false
		}
		element(s.B[start:s.I])
		switch s.Space(); s.peek() {
		case ',':
			s.I++
		case ']':
			s.I++
			return true
		default:
			return false
		}
	}
}
