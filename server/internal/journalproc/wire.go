package journalproc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/record"
)

// The pipe's encoding. Each message is a frame: its length as a uvarint,
// then its kind, a byte, then its entries. Within an entry, strings and
// lists are a uvarint count then the items; integers and durations are
// varints; booleans, classes and states are a byte; times are a byte, 0
// for the zero time, else 1 followed by the seconds since 1970 (varint)
// and the nanoseconds (uvarint), read back in UTC.
//
// It is written by hand, not by encoding/gob, because the gateway's
// process pays for it, a whole batch at a time: gob took 1.7 µs and 8
// allocations a record, this 0.22 µs and none (BenchmarkEncodeBatch). The
// cost is that a field added to a record must be added here too;
// TestEveryFieldCrosses fails until it is.
const (
	kindRequests byte = 'R'
	kindStates   byte = 'S'
)

// maxFrame bounds a frame the child reads, so that a pipe out of step
// fails rather than allocating whatever a stray length says.
const maxFrame = 1 << 30

// appendMessage appends m's frame to b.
func appendMessage(b []byte, m *message) []byte {
	start := len(b)
	// Room for the length, filled in once it is known: a frame's length
	// takes at most 5 bytes under maxFrame.
	b = append(b, 0, 0, 0, 0, 0)
	if len(m.States) > 0 {
		b = append(b, kindStates)
		b = binary.AppendUvarint(b, uint64(len(m.States)))
		for i := range m.States {
			b = appendState(b, &m.States[i])
		}
	} else {
		b = append(b, kindRequests)
		b = binary.AppendUvarint(b, uint64(len(m.Requests)))
		for i := range m.Requests {
			b = appendRequest(b, &m.Requests[i])
		}
	}
	// The length is written in 5 bytes whatever its value, as a uvarint
	// padded with continuation bytes, so the body need not move.
	n := uint64(len(b) - start - 5)
	for i := range 4 {
		b[start+i] = byte(n) | 0x80
		n >>= 7
	}
	b[start+4] = byte(n)
	return b
}

func appendRequest(b []byte, r *record.Request) []byte {
	b = appendString(b, r.ID)
	b = appendString(b, r.Run)
	b = appendString(b, r.Method)
	b = appendString(b, r.Path)
	b = appendHeader(b, r.Header)
	b = appendString(b, r.Upstream)
	b = appendString(b, r.Slot)
	b = appendString(b, r.Model)
	b = appendTime(b, r.Start)
	b = appendTime(b, r.Deadline)
	b = appendString(b, r.DeadlineSource)
	b = appendTime(b, r.End)
	b = binary.AppendVarint(b, int64(r.Status))
	b = appendString(b, r.Error)
	b = appendBool(b, r.Stream)
	b = appendBool(b, r.Committed)
	b = appendBool(b, r.Held)
	b = binary.AppendVarint(b, r.Bytes)
	b = binary.AppendUvarint(b, uint64(len(r.Attempts)))
	for i := range r.Attempts {
		b = appendAttempt(b, &r.Attempts[i])
	}
	b = binary.AppendUvarint(b, uint64(len(r.Moves)))
	for _, m := range r.Moves {
		b = appendString(b, m.From)
		b = appendString(b, m.To)
		b = appendString(b, m.Reason)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Continuations)))
	for _, c := range r.Continuations {
		b = appendString(b, c.Upstream)
		b = binary.AppendVarint(b, c.After)
		b = binary.AppendVarint(b, c.Prefill)
		b = appendString(b, c.Outcome)
		b = appendString(b, c.Reason)
	}
	return b
}

func appendAttempt(b []byte, a *record.Attempt) []byte {
	b = appendString(b, a.CallID)
	b = binary.AppendVarint(b, int64(a.N))
	b = appendString(b, a.Upstream)
	b = appendString(b, a.Fallback)
	b = appendTime(b, a.Start)
	b = appendTime(b, a.End)
	b = appendString(b, a.Key)
	b = binary.AppendVarint(b, int64(a.QueuedAhead))
	b = binary.AppendVarint(b, int64(a.GateWait))
	b = binary.AppendVarint(b, int64(a.AdmissionWait))
	b = appendBool(b, a.Probe)
	b = binary.AppendVarint(b, int64(a.Status))
	b = append(b, byte(a.Class))
	b = appendString(b, a.Error)
	b = binary.AppendVarint(b, int64(a.RetryIn))
	b = binary.AppendVarint(b, int64(a.RetryAfter))
	b = appendBool(b, a.RetryAfterCut)
	b = binary.AppendVarint(b, a.Bytes)
	b = appendBool(b, a.Continued)
	return binary.AppendVarint(b, a.PrefillBytes)
}

func appendState(b []byte, c *record.StateChange) []byte {
	b = appendString(b, c.Upstream)
	b = appendTime(b, c.At)
	return append(b, byte(c.From), byte(c.To))
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, 0)
	}
	b = append(b, 1)
	b = binary.AppendVarint(b, t.Unix())
	return binary.AppendUvarint(b, uint64(t.Nanosecond()))
}

// A header is its count of names plus one, 0 being a nil header, then
// each name and its values.
func appendHeader(b []byte, h http.Header) []byte {
	if h == nil {
		return append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(h))+1)
	for k, vs := range h {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return b
}

// readMessage reads one frame from r into m, using buf, which it returns
// grown, for the frame's bytes. It returns io.EOF if r ends before a
// frame begins, and an error that names what was wrong if the frame is
// cut short or malformed.
func readMessage(r *bufio.Reader, buf []byte, m *message) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	switch {
	case err == io.EOF:
		return buf, io.EOF
	case err != nil:
		return buf, fmt.Errorf("reading a frame's length: %w", unexpected(err))
	case n > maxFrame:
		return buf, fmt.Errorf("a frame of %d bytes, over the bound of %d", n, maxFrame)
	}
	if uint64(cap(buf)) >= n {
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return buf, fmt.Errorf("reading a frame of %d bytes: %w", n, unexpected(err))
		}
	} else {
		// Grown as the bytes come, not to what the length says: a
		// stray length costs only what the pipe holds.
		b := bytes.NewBuffer(buf[:0])
		got, err := b.ReadFrom(io.LimitReader(r, int64(n)))
		buf = b.Bytes()
		if err == nil && uint64(got) < n {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return buf, fmt.Errorf("reading a frame of %d bytes: %w", n, err)
		}
	}
	return buf, decodeMessage(buf, m)
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// decodeMessage decodes a frame's body, its kind and entries, into m.
func decodeMessage(b []byte, m *message) error {
	d := decoder{b: b}
	*m = message{}
	switch kind := d.byte(); kind {
	case kindRequests:
		m.Requests = make([]record.Request, d.count(minRequest))
		for i := range m.Requests {
			d.request(&m.Requests[i])
		}
	case kindStates:
		m.States = make([]record.StateChange, d.count(minState))
		for i := range m.States {
			c := &m.States[i]
			c.Upstream = d.string()
			c.At = d.time()
			c.From, c.To = outlast.UpstreamState(d.byte()), outlast.UpstreamState(d.byte())
		}
	default:
		if d.err == nil {
			return fmt.Errorf("a frame of unknown kind %q", kind)
		}
	}
	switch {
	case d.err != nil:
		return d.err
	case len(d.b) > 0:
		return fmt.Errorf("%d bytes left over after the frame's entries", len(d.b))
	}
	return nil
}

// decoder reads a frame's body. Its first error sticks: later reads
// return zero values.
type decoder struct {
	b   []byte
	err error
}

var errShort = errors.New("a frame cut short")

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail(errShort)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	return skip(d, n, "uvarint", v)
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	return skip(d, n, "varint", v)
}

// skip moves past a number of n bytes that binary's Uvarint or Varint
// read, and returns it, or fails, as they report, and returns 0.
func skip[T uint64 | int64](d *decoder, n int, what string, v T) T {
	if n <= 0 {
		d.fail(errors.New("a malformed " + what))
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int {
	v := d.varint()
	if v < math.MinInt || v > math.MaxInt {
		d.fail(fmt.Errorf("an integer %d out of range", v))
		return 0
	}
	return int(v)
}

// The fewest bytes an entry takes, every field at its zero value: count
// holds a list's length to what the rest of the frame can hold.
const (
	minRequest = 21 // 9 strings, a header, 3 times, 2 numbers, 3 booleans, 3 counts
	minAttempt = 20 // 5 strings, 2 times, 9 numbers, 3 booleans, a class
	minState   = 4  // a string, a time, 2 states
	minMove    = 3  // 3 strings
	minCont    = 5  // 3 strings, 2 numbers
)

// count reads a list's length, each of whose items takes at least size
// bytes: a length the rest of the frame cannot hold is an error, not an
// allocation.
func (d *decoder) count(size int) int {
	n := d.uvarint()
	if n > uint64(len(d.b)/size) {
		d.fail(fmt.Errorf("a count of %d, more than the frame's %d bytes left hold", n, len(d.b)))
		return 0
	}
	return int(n)
}

func (d *decoder) string() string {
	n := d.count(1)
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) bool() bool {
	switch c := d.byte(); c {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail(fmt.Errorf("a boolean of %d", c))
		return false
	}
}

func (d *decoder) time() time.Time {
	if !d.bool() {
		return time.Time{}
	}
	s, ns := d.varint(), d.uvarint()
	if ns >= 1e9 {
		d.fail(fmt.Errorf("a time with %d nanoseconds", ns))
		return time.Time{}
	}
	return time.Unix(s, int64(ns)).UTC()
}

func (d *decoder) header() http.Header {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	h := make(http.Header, n-1)
	for range n - 1 {
		k := d.string()
		vs := make([]string, d.count(1))
		for i := range vs {
			vs[i] = d.string()
		}
		h[k] = vs
	}
	return h
}

func (d *decoder) request(r *record.Request) {
	r.ID = d.string()
	r.Run = d.string()
	r.Method = d.string()
	r.Path = d.string()
	r.Header = d.header()
	r.Upstream = d.string()
	r.Slot = d.string()
	r.Model = d.string()
	r.Start = d.time()
	r.Deadline = d.time()
	r.DeadlineSource = d.string()
	r.End = d.time()
	r.Status = d.int()
	r.Error = d.string()
	r.Stream = d.bool()
	r.Committed = d.bool()
	r.Held = d.bool()
	r.Bytes = d.varint()
	if n := d.count(minAttempt); n > 0 {
		r.Attempts = make([]record.Attempt, n)
		for i := range r.Attempts {
			d.attempt(&r.Attempts[i])
		}
	}
	if n := d.count(minMove); n > 0 {
		r.Moves = make([]record.Move, n)
		for i := range r.Moves {
			m := &r.Moves[i]
			m.From, m.To, m.Reason = d.string(), d.string(), d.string()
		}
	}
	if n := d.count(minCont); n > 0 {
		r.Continuations = make([]record.Continuation, n)
		for i := range r.Continuations {
			c := &r.Continuations[i]
			c.Upstream = d.string()
			c.After, c.Prefill = d.varint(), d.varint()
			c.Outcome, c.Reason = d.string(), d.string()
		}
	}
}

func (d *decoder) attempt(a *record.Attempt) {
	a.CallID = d.string()
	a.N = d.int()
	a.Upstream = d.string()
	a.Fallback = d.string()
	a.Start = d.time()
	a.End = d.time()
	a.Key = d.string()
	a.QueuedAhead = d.int()
	a.GateWait = time.Duration(d.varint())
	a.AdmissionWait = time.Duration(d.varint())
	a.Probe = d.bool()
	a.Status = d.int()
	a.Class = outlast.Class(d.byte())
	a.Error = d.string()
	a.RetryIn = time.Duration(d.varint())
	a.RetryAfter = time.Duration(d.varint())
	a.RetryAfterCut = d.bool()
	a.Bytes = d.varint()
	a.Continued = d.bool()
	a.PrefillBytes = d.varint()
}
