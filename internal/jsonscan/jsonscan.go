// Package jsonscan walks a JSON text without decoding it: what the
// gateway reads of a request body, and what the commit point reads of a
// stream's events, on every request, where encoding/json would scan the
// text twice and allocate for each field. A Scanner is not a validator
// unless it is Strict: the upstream, or the client, judges the text.
package jsonscan

// A Scanner walks B from I. Its zero value walks nothing; set B.
//
// A Strict scanner also holds what it walks to JSON's grammar, as
// encoding/json.Valid does: strings without control characters and with
// only JSON's escapes, numbers, literals, and every nested value it
// skips. A walk of a Strict scanner that succeeds, followed by End, has
// crossed a valid JSON text, and its reader need not ask json.Valid
// first. A walk that fails may still have been valid: a Strict scanner
// follows at most MaxDepth levels of nesting inside a value it skips, as
// encoding/json follows 10,000, and fails beyond them, for the caller
// to hand the text to encoding/json. Like json.Valid, it does not check
// that strings are UTF-8.
type Scanner struct {
	B      []byte
	I      int
	Strict bool
}

// MaxDepth is how deep a Strict scanner follows nesting inside a value
// it skips.
const MaxDepth = 64

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

// End skips white space and reports whether the scanner is then at the
// end of B: after a walk of the text's value, that nothing follows it.
func (s *Scanner) End() bool {
	s.Space()
	return s.I == len(s.B)
}

// skipString skips a string, escapes included.
func (s *Scanner) skipString() bool {
	if s.peek() != '"' {
		return false
	}
	stops := &stringStops
	if s.Strict {
		stops = &strictStringStops
	}
	b, i := s.B, s.I+1
	for {
		for i < len(b) && !stops[b[i]] {
			i++ // the bulk of a string: bytes it holds as they are
		}
		if i == len(b) {
			s.I = i
			return false
		}
		switch b[i] {
		case '"':
			s.I = i + 1
			return true
		case '\\':
			s.I = i + 1
			if s.Strict && !s.escape() {
				return false
			}
			i = s.I + 1
			if !s.Strict {
				i = min(i, len(b)) // a backslash at the end escapes nothing
			}
		default:
			s.I = i
			return false // a control character, which JSON escapes
		}
	}
}

// stringStops are the bytes a string's walk stops at: its end and its
// escapes; strictStringStops adds the control characters, which JSON
// escapes.
var stringStops, strictStringStops = func() (lenient, strict [256]bool) {
	lenient['"'], lenient['\\'] = true, true
	strict = lenient
	for c := range 0x20 {
		strict[c] = true
	}
	return lenient, strict
}()

// escape reports whether the scanner is at the rest of one of JSON's
// escapes, just past its backslash, and leaves it at the escape's last
// byte.
func (s *Scanner) escape() bool {
	switch s.peek() {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return true
	case 'u':
		if len(s.B)-s.I < 5 {
			return false
		}
		for _, c := range s.B[s.I+1 : s.I+5] {
			if !isHex(c) {
				return false
			}
		}
		s.I += 4
		return true
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// skipScalar skips a number, true, false or null, held to JSON's grammar.
func (s *Scanner) skipScalar() bool {
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(s.B)-s.I >= len(lit) && string(s.B[s.I:s.I+len(lit)]) == lit {
			s.I += len(lit)
			return true
		}
	}
	// -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
	if s.peek() == '-' {
		s.I++
	}
	switch c := s.peek(); {
	case c == '0':
		s.I++
	case '1' <= c && c <= '9':
		s.digits()
	default:
		return false
	}
	if s.peek() == '.' {
		s.I++
		if !s.digits() {
			return false
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.I++
		if c := s.peek(); c == '+' || c == '-' {
			s.I++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits skips decimal digits and reports whether there was one.
func (s *Scanner) digits() bool {
	start := s.I
	for s.I < len(s.B) && '0' <= s.B[s.I] && s.B[s.I] <= '9' {
		s.I++
	}
	return s.I > start
}

// skipValue skips one value: a string, or anything up to the end of its
// nesting, counting brackets outside strings.
func (s *Scanner) skipValue() bool {
	switch s.peek() {
	case '"':
		return s.skipString()
	case '{', '[':
		if s.Strict {
			return s.skipNestedStrict()
		}
		return s.skipNested()
	}
	if s.Strict {
		return s.skipScalar()
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

// skipNestedStrict skips an object or array, held to JSON's grammar, at
// most MaxDepth deep.
func (s *Scanner) skipNestedStrict() bool {
	var open [MaxDepth]byte // the closing bracket of each container open
	n := 0
value: // at a value, or the first of a container's
	for {
		switch c := s.peek(); c {
		case '{', '[':
			if n == MaxDepth {
				return false
			}
			s.I++
			end := byte(']')
			if c == '{' {
				end = '}'
			}
			if s.Space(); s.peek() != end {
				open[n] = end
				n++
				if end == '}' && !s.key() {
					return false
				}
				s.Space()
				continue value
			}
			s.I++ // an empty container: a value done
		case '"':
			if !s.skipString() {
				return false
			}
		default:
			if !s.skipScalar() {
				return false
			}
		}
		// A value is done: the next of its container, or the container's
		// end, which is a value done in its own container.
		for {
			if n == 0 {
				return true
			}
			switch s.Space(); s.peek() {
			case ',':
				s.I++
				if open[n-1] == '}' && !s.key() {
					return false
				}
				s.Space()
				continue value
			case open[n-1]:
				s.I++
				n--
			default:
				return false
			}
		}
	}
}

// key skips white space, a member's key, and the colon after it.
func (s *Scanner) key() bool {
	s.Space()
	return s.skipString() && s.next(':')
}

// Object walks the object at the scanner's place in place: it calls
// member with each key's raw contents, escapes and all, while the scanner
// is at the member's value, white space skipped. member must leave the
// scanner just past the value, having walked it (Object, Array, Value,
// Null) or skipped it (Skip), and reports whether the walk goes on. Object
// reports whether the object was whole and member always said so. Unlike
// Members, it walks a value member reads once, not once to skip it and
// again to read it.
func (s *Scanner) Object(member func(key []byte) bool) bool {
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
		if !member(key) {
			return false
		}
		switch s.Space(); s.peek() {
		case ',':
			s.I++
		case '}':
			s.I++
			return true
		default:
			return false
		}
	}
}

// Array walks the array at the scanner's place in place, as Object walks
// an object: it calls element with the scanner at each element.
func (s *Scanner) Array(element func() bool) bool {
	if !s.next('[') {
		return false
	}
	if s.Space(); s.peek() == ']' {
		s.I++
		return true
	}
	for {
		s.Space()
		if !element() {
			return false
		}
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

// Skip skips the value at the scanner's place, and reports whether there
// was one.
func (s *Scanner) Skip() bool { return s.skipValue() }

// Value skips the value at the scanner's place and returns its bytes, a
// part of B, and whether there was one.
func (s *Scanner) Value() ([]byte, bool) {
	start := s.I
	ok := s.skipValue()
	return s.B[start:s.I], ok
}

// Null skips the value at the scanner's place if it is null, and reports
// whether it was.
func (s *Scanner) Null() bool {
	if len(s.B)-s.I >= 4 && string(s.B[s.I:s.I+4]) == "null" {
		s.I += 4
		return true
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
	return s.Object(func(key []byte) bool {
		start := s.I
		if !s.skipValue() {
			return false
		}
		member(key, s.B[start:s.I])
		return true
	})
}

// Elements walks the array at the scanner's place, calling element with
// each element's bytes. It reports whether the array was whole.
func (s *Scanner) Elements(element func(value []byte)) bool {
	return s.Array(func() bool {
		start := s.I
		if !s.skipValue() {
			return false
		}
		element(s.B[start:s.I])
		return true
	})
}
