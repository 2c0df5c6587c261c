package mockllm

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outlast-llm/outlast/internal/parse"
)

// A Script is the list of faults a Server applies to model requests, one
// step after another in the order the requests arrive. The last step
// repeats forever. The zero value has no steps: every request succeeds.
//
// A Script is built by ParseScript; its String form parses back to an
// equal Script. A Script is a value and is safe for concurrent use.
type Script struct {
	steps []step
}

// fault is what a step does to the requests it applies to.
type fault uint8

const (
	faultOK fault = iota
	faultStatus
	faultOverloaded
	faultOverloadedStream
	faultLoading
	faultRefuse
	faultReset
	faultCloseAfterHeaders
	faultStall
	faultStallAfter
	faultResetAfter
	faultMalformedAfter
	faultErrorAfter
	faultNoDone
	faultSlowHeaders
)

// faultNames are the names the grammar knows, in an order where no name
// comes before a longer name that starts with it ("stall-after" before
// "stall"), so that the first prefix that matches is the longest.
var faultNames = []struct {
	name string
	f    fault
}{
	{"overloaded-stream", faultOverloadedStream},
	{"overloaded", faultOverloaded},
	{"close-after-headers", faultCloseAfterHeaders},
	{"stall-after", faultStallAfter},
	{"stall", faultStall},
	{"reset-after", faultResetAfter},
	{"reset", faultReset},
	{"malformed-after", faultMalformedAfter},
	{"error-after", faultErrorAfter},
	{"no-done", faultNoDone},
	{"slow-headers", faultSlowHeaders},
	{"loading", faultLoading},
	{"refuse", faultRefuse},
	{"ok", faultOK},
}

func (f fault) String() string {
	for _, n := range faultNames {
		if n.f == f {
			return n.name
		}
	}
	return "status"
}

// argKind is the kind of argument a fault takes after "=" or ":".
type argKind uint8

const (
	argNone argKind = iota
	argCount
	argDuration
)

func (f fault) arg() argKind {
	switch f {
	case faultStallAfter, faultResetAfter, faultMalformedAfter, faultErrorAfter:
		return argCount
	case faultRefuse, faultSlowHeaders:
		return argDuration
	}
	return argNone
}

// step is one parsed step. Its fields follow the grammar, so that String
// writes back what was parsed; an absent number is -1 or 0 as noted.
type step struct {
	fault  fault
	status int           // faultStatus: 200 to 599
	n      int           // stall-after, reset-after, malformed-after, error-after: content chunks first
	d      time.Duration // refuse: how long; slow-headers: the wait
	delay  time.Duration // delay=: the wait before answering

	firstToken    time.Duration // first-token-delay=: the silence after the headers
	resume        time.Duration // resume=: stall-after's pause, 0 for none (silent for ever)
	refusePrefill bool          // refuse-prefill: 400 to a request with an assistant prefill
	ignorePrefill bool          // ignore-prefill: a prefill answered from the start, not continued

	retryAfter     int // retry-after=, in seconds; -1 if absent
	retryAfterDate int // retry-after-date=, in seconds from now; -1 if absent
	retryAfterMs   int // retry-after-ms=; -1 if absent

	headers []header
	body    string
	hasBody bool

	count  int           // xN; 0 if not written (one request)
	window time.Duration // "for D"; 0 if not written
}

type header struct{ name, value string }

// label is how Stats names the step's outcome.
func (st *step) label() string {
	switch st.fault {
	case faultStatus:
		return strconv.Itoa(st.status)
	case faultRefuse:
		return "refused"
	}
	return st.fault.String()
}

// timed reports whether the step lasts for a time rather than for a
// number of requests.
func (st *step) timed() (time.Duration, bool) {
	if st.fault == faultRefuse {
		return st.d, true
	}
	return st.window, st.window > 0
}

// maxInt bounds every number in a script, so that seconds and chunk
// counts cannot overflow when turned into durations.
const maxInt = 1<<31 - 1

// A ScriptError is a script that does not parse. It names the step, by
// number and position, and what is wrong with it.
type ScriptError struct {
	// Step is the step's number, from 1.
	Step int

	// Line is the line the step starts on, from 1.
	Line int

	// Column is the column the step starts at on its line, in
	// characters, from 1.
	Column int

	// Text is the step's text, up to the next comma or newline, cut
	// short with "…" if it is longer than 40 bytes.
	Text string

	// Err is what is wrong with the step.
	Err error
}

// Error returns the error as one line, naming the step by number, text
// and position, then what is wrong.
func (e *ScriptError) Error() string {
	return fmt.Sprintf("mockllm: script step %d %q (line %d, column %d): %v", e.Step, e.Text, e.Line, e.Column, e.Err)
}

// Unwrap returns Err, so that errors.Is and errors.As see what is wrong
// with the step.
func (e *ScriptError) Unwrap() error { return e.Err }

// ParseScript parses a script: steps separated by commas or newlines,
// with "#" starting a comment that runs to the end of the line. The
// package documentation gives the grammar. An empty script has no steps.
func ParseScript(src string) (Script, error) {
	p := parser{src: src}
	var steps []step
	afterComma := false
	for {
		newline := p.skipBlank()
		if p.eof() {
			break
		}
		if p.peek() == ',' {
			if afterComma && !newline {
				return Script{}, p.errorAt(len(steps)+1, p.pos, errors.New("empty step"))
			}
			afterComma = true
			p.pos++
			continue
		}
		start := p.pos
		st, err := p.step()
		if err == nil {
			err = p.stepEnd()
		}
		if err != nil {
			return Script{}, p.errorAt(len(steps)+1, start, err)
		}
		steps = append(steps, st)
		afterComma = false
	}
	return Script{steps: steps}, nil
}

// MustParseScript is like ParseScript but panics if the script does not
// parse. It is for scripts written into tests.
func MustParseScript(src string) Script {
	s, err := ParseScript(src)
	if err != nil {
		panic(err)
	}
	return s
}

// Len returns how many steps the script has.
func (s Script) Len() int { return len(s.steps) }

// String returns the script in the grammar's canonical form, one line
// with the steps separated by commas. It parses back to an equal Script.
func (s Script) String() string {
	var b strings.Builder
	for i := range s.steps {
		if i > 0 {
			b.WriteByte(',')
		}
		s.steps[i].write(&b)
	}
	return b.String()
}

func (st *step) write(b *strings.Builder) {
	switch st.fault {
	case faultStatus:
		b.WriteString(strconv.Itoa(st.status))
	case faultRefuse:
		b.WriteString("refuse:" + st.d.String())
	case faultSlowHeaders:
		b.WriteString("slow-headers=" + st.d.String())
	case faultStallAfter, faultResetAfter, faultMalformedAfter, faultErrorAfter:
		b.WriteString(st.fault.String() + "=" + strconv.Itoa(st.n))
	default:
		b.WriteString(st.fault.String())
	}
	params := st.params()
	for _, p := range params {
		b.WriteString(":" + p)
	}
	// A space keeps a count from joining a bare value before it.
	if len(params) > 0 && st.count > 0 {
		b.WriteByte(' ')
	}
	if st.count > 0 {
		b.WriteString("x" + strconv.Itoa(st.count))
	}
	if st.window > 0 {
		b.WriteString(" for " + st.window.String())
	}
}

// params returns the step's parameters as key=value, in canonical order.
func (st *step) params() []string {
	var ps []string
	for _, n := range []struct {
		key string
		v   int
	}{{"retry-after", st.retryAfter}, {"retry-after-date", st.retryAfterDate}, {"retry-after-ms", st.retryAfterMs}} {
		if n.v >= 0 {
			ps = append(ps, n.key+"="+strconv.Itoa(n.v))
		}
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"delay", st.delay}, {"first-token-delay", st.firstToken}, {"resume", st.resume}} {
		if d.v > 0 {
			ps = append(ps, d.key+"="+d.v.String())
		}
	}
	if st.refusePrefill {
		ps = append(ps, "refuse-prefill")
	}
	if st.ignorePrefill {
		ps = append(ps, "ignore-prefill")
	}
	for _, h := range st.headers {
		ps = append(ps, "header="+quote(h.name+"="+h.value))
	}
	if st.hasBody {
		ps = append(ps, "body="+quote(st.body))
	}
	return ps
}

// quote writes a string value so that the parser reads it back: bare if
// it can be, as it stands if it is a balanced JSON-like value on one line,
// and as a Go string literal otherwise.
func quote(v string) string {
	switch {
	case v == "":
	case v[0] == '{' || v[0] == '[':
		// As it stands only on one line: String's output is one line.
		if n, ok := scanBrackets(v); ok && n == len(v) && !strings.ContainsAny(v, "\r\n") {
			return v
		}
	case v[0] != '"' && !strings.ContainsAny(v, barewordEnd):
		return v
	}
	return strconv.Quote(v)
}

// barewordEnd are the bytes that end a bare value.
const barewordEnd = ",:# \t\r\n"

// parser reads a script from src, one byte at a time.
type parser struct {
	src string
	pos int
}

func (p *parser) eof() bool  { return p.pos >= len(p.src) }
func (p *parser) peek() byte { return p.src[p.pos] }

// skipBlank skips spaces, newlines and comments, and reports whether it
// crossed a newline.
func (p *parser) skipBlank() (newline bool) {
	for !p.eof() {
		switch p.peek() {
		case ' ', '\t', '\r':
		case '\n':
			newline = true
		case '#':
			p.skipComment()
			continue
		default:
			return newline
		}
		p.pos++
	}
	return newline
}

func (p *parser) skipComment() {
	if i := strings.IndexByte(p.src[p.pos:], '\n'); i >= 0 {
		p.pos += i
	} else {
		p.pos = len(p.src)
	}
}

// skipSpace skips spaces and tabs on the line, and reports whether there
// were any.
func (p *parser) skipSpace() bool {
	start := p.pos
	for !p.eof() && (p.peek() == ' ' || p.peek() == '\t' || p.peek() == '\r') {
		p.pos++
	}
	return p.pos > start
}

// stepEnd checks that a step is followed by a separator, a comment or the
// end of the script.
func (p *parser) stepEnd() error {
	p.skipSpace()
	if p.eof() || p.peek() == ',' || p.peek() == '\n' || p.peek() == '#' {
		return nil
	}
	return fmt.Errorf("unexpected %q after the step", p.rest(16))
}

// rest returns up to n bytes from the current position, for errors.
func (p *parser) rest(n int) string {
	r := p.src[p.pos:]
	if len(r) > n {
		r = r[:n] + "…"
	}
	return r
}

// errorAt wraps err as a ScriptError for the step that starts at start.
func (p *parser) errorAt(n, start int, err error) *ScriptError {
	line := 1 + strings.Count(p.src[:start], "\n")
	lineStart := strings.LastIndexByte(p.src[:start], '\n') + 1
	text := p.src[start:]
	if i := strings.IndexAny(text, ",\n"); i >= 0 {
		text = text[:i]
	}
	text = strings.TrimSpace(text)
	if len(text) > 40 {
		text = text[:40] + "…"
	}
	return &ScriptError{
		Step:   n,
		Line:   line,
		Column: utf8.RuneCountInString(p.src[lineStart:start]) + 1,
		Text:   text,
		Err:    err,
	}
}

// step parses one step: a head, parameters, and a count or a window.
func (p *parser) step() (step, error) {
	st := step{retryAfter: -1, retryAfterDate: -1, retryAfterMs: -1}
	if err := p.head(&st); err != nil {
		return st, err
	}
	hasArg := false
	if !p.eof() && p.peek() == '=' {
		p.pos++
		if err := p.arg(&st); err != nil {
			return st, err
		}
		hasArg = true
	}
	seen := map[string]bool{}
	for !p.eof() && p.peek() == ':' {
		p.pos++
		if !hasArg && !p.eof() && isDigit(p.peek()) && st.fault.arg() != argNone {
			if err := p.arg(&st); err != nil {
				return st, err
			}
			hasArg = true
			continue
		}
		if err := p.param(&st, seen); err != nil {
			return st, err
		}
	}
	if !hasArg && st.fault.arg() != argNone {
		return st, fmt.Errorf("%s needs an argument, as in %s", st.fault, argExample(st.fault))
	}
	if err := p.repeat(&st); err != nil {
		return st, err
	}
	return st, p.check(&st, seen)
}

func argExample(f fault) string {
	switch f {
	case faultRefuse:
		return "refuse:5s"
	case faultSlowHeaders:
		return "slow-headers=2s"
	}
	return f.String() + "=3"
}

// head parses the step's fault: a status or a name.
func (p *parser) head(st *step) error {
	if isDigit(p.peek()) {
		s := p.digits()
		n, err := strconv.Atoi(s)
		if err != nil || n < 200 || n > 599 {
			return fmt.Errorf("status %s: want 200 to 599", s)
		}
		st.fault, st.status = faultStatus, n
		return nil
	}
	for _, n := range faultNames {
		if strings.HasPrefix(p.src[p.pos:], n.name) && p.nameEnds(p.pos+len(n.name)) {
			st.fault = n.f
			p.pos += len(n.name)
			return nil
		}
	}
	word := p.src[p.pos:]
	if i := strings.IndexAny(word, barewordEnd+"="); i >= 0 {
		word = word[:i]
	}
	return fmt.Errorf("unknown fault %q", word)
}

// nameEnds reports whether a fault name may end before src[i]: at a
// delimiter, or before a count ("okx3").
func (p *parser) nameEnds(i int) bool {
	if i >= len(p.src) {
		return true
	}
	c := p.src[i]
	if c == 'x' {
		return i+1 < len(p.src) && isDigit(p.src[i+1])
	}
	return strings.IndexByte(barewordEnd+"=", c) >= 0
}

// arg parses the fault's own argument.
func (p *parser) arg(st *step) error {
	var err error
	switch st.fault.arg() {
	case argCount:
		st.n, err = p.int(st.fault.String())
	case argDuration:
		st.d, err = p.duration(st.fault.String())
		if err == nil && st.fault == faultRefuse && st.d <= 0 {
			err = errors.New("refuse: the duration must be more than 0")
		}
	default:
		err = fmt.Errorf("%s takes no argument", st.fault)
	}
	return err
}

// paramSpec is a parameter the grammar knows, with an example for
// errors; a flag takes no value.
type paramSpec struct {
	key, example string
	flag         bool
}

// params are the parameters, in the order the documentation gives them.
var params = []paramSpec{
	{"retry-after", "retry-after=2", false},
	{"retry-after-date", "retry-after-date=2", false},
	{"retry-after-ms", "retry-after-ms=1500", false},
	{"header", "header=X-Foo=bar", false},
	{"body", `body={"error":"x"}`, false},
	{"delay", "delay=200ms", false},
	{"first-token-delay", "first-token-delay=20s", false},
	{"resume", "resume=30s", false},
	{"refuse-prefill", "refuse-prefill", true},
	{"ignore-prefill", "ignore-prefill", true},
}

// errUnknownParam lists the known parameters after an unknown one's name.
func errUnknownParam(key string) error {
	keys := make([]string, len(params))
	for i, p := range params {
		keys[i] = p.key
	}
	if len(key) > 24 {
		key = key[:24] + "…"
	}
	return fmt.Errorf("unknown parameter %q; the parameters are %s", key, strings.Join(keys, ", "))
}

// param parses one parameter: key=value, or a flag's key alone. The key
// runs to "=" or a delimiter, so that a misspelt one is named whole.
func (p *parser) param(st *step, seen map[string]bool) error {
	start := p.pos
	for !p.eof() && p.peek() != '=' && strings.IndexByte(barewordEnd, p.peek()) < 0 {
		p.pos++
	}
	key := p.src[start:p.pos]
	if key == "" {
		return fmt.Errorf("want a parameter after \":\", as in retry-after=1, got %q", p.rest(16))
	}
	if isDigit(key[0]) {
		// A value where a parameter goes: step took any argument already.
		if st.fault.arg() == argNone {
			return fmt.Errorf("%s takes no argument", st.fault)
		}
		return fmt.Errorf("%s's argument is given twice", st.fault)
	}
	i := slices.IndexFunc(params, func(k paramSpec) bool { return k.key == key })
	if i < 0 {
		return errUnknownParam(key)
	}
	hasValue := !p.eof() && p.peek() == '='
	switch known := params[i]; {
	case known.flag && hasValue:
		return fmt.Errorf("%s takes no value: write %s alone", key, key)
	case !known.flag && !hasValue:
		return fmt.Errorf("%s needs a value, as in %s", key, known.example)
	case hasValue:
		p.pos++
	}
	if seen[key] && key != "header" {
		return fmt.Errorf("parameter %s is given twice", key)
	}
	seen[key] = true
	var err error
	switch key {
	case "retry-after":
		st.retryAfter, err = p.int(key)
	case "retry-after-date":
		st.retryAfterDate, err = p.int(key)
	case "retry-after-ms":
		st.retryAfterMs, err = p.int(key)
	case "delay":
		st.delay, err = p.duration(key)
	case "first-token-delay":
		st.firstToken, err = p.duration(key)
	case "resume":
		st.resume, err = p.duration(key)
		if err == nil && st.resume <= 0 {
			// resume=0 would print as no resume, which stalls for ever.
			err = errors.New("resume: the pause must be more than 0")
		}
	case "refuse-prefill":
		st.refusePrefill = true
	case "ignore-prefill":
		st.ignorePrefill = true
	case "body":
		st.body, err = p.string(key)
		st.hasBody = true
	case "header":
		var h header
		h, err = p.header()
		st.headers = append(st.headers, h)
	}
	return err
}

// repeat parses an optional count ("x3") or window ("for 30s").
func (p *parser) repeat(st *step) error {
	space := p.skipSpace()
	switch {
	case p.eof():
	case p.peek() == 'x' && p.pos+1 < len(p.src) && isDigit(p.src[p.pos+1]):
		p.pos++
		n, err := p.int("x")
		if err != nil {
			return err
		}
		if n < 1 {
			return errors.New("x: the count must be at least 1")
		}
		st.count = n
	case space && strings.HasPrefix(p.src[p.pos:], "for") && p.pos+3 < len(p.src) && (p.src[p.pos+3] == ' ' || p.src[p.pos+3] == '\t'):
		p.pos += 3
		p.skipSpace()
		d, err := p.duration("for")
		if err != nil {
			return err
		}
		if d <= 0 {
			return errors.New("for: the window must be more than 0")
		}
		st.window = d
	}
	return nil
}

// check reports parameters that the step's fault cannot honour.
func (p *parser) check(st *step, seen map[string]bool) error {
	f := st.fault
	switch {
	case seen["body"] && f != faultStatus:
		return fmt.Errorf("%s takes no body; only a status does", f)
	case len(seen) > 0 && f == faultRefuse:
		return errors.New("refuse takes no parameters: nothing is sent")
	case f == faultRefuse && (st.count > 0 || st.window > 0):
		return errors.New("refuse lasts for its argument, as in refuse:5s; it takes no count or window")
	case (seen["header"] || seen["retry-after"] || seen["retry-after-date"] || seen["retry-after-ms"]) && f == faultReset:
		return errors.New("reset sends no headers")
	case seen["delay"] && f == faultSlowHeaders:
		return errors.New("slow-headers takes its wait as its argument, not delay=")
	case seen["first-token-delay"] && !f.streams():
		return fmt.Errorf("%s takes no first-token-delay; ok, stall-after, reset-after, malformed-after, error-after and no-done do", st.label())
	case seen["resume"] && f != faultStallAfter:
		return fmt.Errorf("%s takes no resume; only stall-after does", st.label())
	case st.retryAfter >= 0 && st.retryAfterDate >= 0:
		return errors.New("retry-after and retry-after-date both set Retry-After; give one")
	}
	return nil
}

// streams reports whether the fault sends its answer's events after the
// headers, so that a first-token-delay can come between them.
func (f fault) streams() bool {
	switch f {
	case faultOK, faultStallAfter, faultResetAfter, faultMalformedAfter, faultErrorAfter, faultNoDone:
		return true
	}
	return false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (p *parser) digits() string {
	start := p.pos
	for !p.eof() && isDigit(p.peek()) {
		p.pos++
	}
	return p.src[start:p.pos]
}

// int parses a non-negative whole number no larger than maxInt.
func (p *parser) int(key string) (int, error) {
	s := p.digits()
	if s == "" {
		return 0, fmt.Errorf("%s: want a whole number, got %q", key, p.rest(16))
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > maxInt {
		return 0, fmt.Errorf("%s: %s is too large", key, s)
	}
	return n, nil
}

// duration parses a duration as outlast serve reads one (parse.Duration):
// a Go duration such as 1.5s or 200ms, whole days first as in 1d12h, or
// a bare number of seconds such as 20 or 1.5. It cannot be negative. The
// value runs while its bytes can belong to one, so that a count may
// follow it unspaced, as in slow-headers=2x3.
func (p *parser) duration(key string) (time.Duration, error) {
	start := p.pos
	for !p.eof() {
		c := p.peek()
		switch {
		case isDigit(c) || c == '.' || strings.IndexByte("nsumhd", c) >= 0:
			p.pos++
		case strings.HasPrefix(p.src[p.pos:], "µ"), strings.HasPrefix(p.src[p.pos:], "μ"):
			p.pos += 2
		default:
			goto done
		}
	}
done:
	s := p.src[start:p.pos]
	if s == "" {
		return 0, fmt.Errorf("%s: want a duration such as 2s or 90 (seconds), got %q", key, p.rest(16))
	}
	d, err := parse.Duration(s)
	if err != nil {
		// Name the value as typed, "soon" rather than the "s" it starts
		// with, if it is short enough to show.
		word := p.src[start:]
		if i := strings.IndexAny(word, barewordEnd); i >= 0 {
			word = word[:i]
		}
		if _, werr := parse.Duration(word); werr != nil && len(word) <= 24 {
			err = werr
		}
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	return d, nil
}

// string parses a string value: a Go string literal in double quotes, a
// balanced {…} or […] (JSON, which holds commas and colons), or a bare
// run of bytes up to a comma, colon, "#" or space.
func (p *parser) string(key string) (string, error) {
	rest := p.src[p.pos:]
	switch {
	case rest == "":
		return "", nil
	case rest[0] == '"':
		n := scanQuoted(rest)
		if n < 0 {
			return "", fmt.Errorf("%s: unterminated string", key)
		}
		v, err := strconv.Unquote(rest[:n])
		if err != nil {
			return "", fmt.Errorf("%s: %s is not a valid Go string literal", key, strconv.Quote(rest[:n]))
		}
		p.pos += n
		return v, p.valueEnd(key)
	case rest[0] == '{' || rest[0] == '[':
		n, ok := scanBrackets(rest)
		if !ok {
			return "", fmt.Errorf("%s: unbalanced %c; quote the value if it is not JSON", key, rest[0])
		}
		p.pos += n
		return rest[:n], p.valueEnd(key)
	}
	n := strings.IndexAny(rest, barewordEnd)
	if n < 0 {
		n = len(rest)
	}
	p.pos += n
	return rest[:n], nil
}

// valueEnd checks that a quoted or bracketed value is followed by a
// delimiter.
func (p *parser) valueEnd(key string) error {
	if p.eof() || strings.IndexByte(barewordEnd, p.peek()) >= 0 {
		return nil
	}
	return fmt.Errorf("%s: unexpected %q after the value", key, p.rest(16))
}

// header parses NAME=VALUE.
func (p *parser) header() (header, error) {
	v, err := p.string("header")
	if err != nil {
		return header{}, err
	}
	name, value, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return header{}, fmt.Errorf("header: want NAME=VALUE, got %q", v)
	}
	for i := 0; i < len(name); i++ {
		if !isTokenByte(name[i]) {
			return header{}, fmt.Errorf("header: %q is not a valid header name", name)
		}
	}
	for i := 0; i < len(value); i++ {
		// RFC 9110 §5.5: a field value holds no control characters but tab.
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return header{}, fmt.Errorf("header: the value of %s holds a control character", name)
		}
	}
	return header{name, value}, nil
}

// isTokenByte reports whether c may appear in a header name (RFC 9110
// §5.6.2, tchar).
func isTokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// scanQuoted returns the length of the Go string literal at the start of
// s, or -1 if it does not end.
func scanQuoted(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		case '\n':
			return -1
		}
	}
	return -1
}

// scanBrackets returns the length of the balanced {…} or […] at the start
// of s, skipping brackets inside JSON strings.
func scanBrackets(s string) (int, bool) {
	depth, inString := 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		}
	}
	return 0, false
}
