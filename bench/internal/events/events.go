// Package events gives the benchmarks' in-memory upstreams a stream's
// body that reads as a network delivers the events of an upstream that
// flushes each.
package events

import "io"

// A Reader reads its events one a Read, or less when p is shorter than
// the rest of one. It never writes to the events, which many Readers may
// share.
type Reader struct {
	events [][]byte
	off    int // read of events[0]
}

// NewReader returns a Reader of events.
func NewReader(events [][]byte) *Reader { return &Reader{events: events} }

func (r *Reader) Read(p []byte) (int, error) {
	if len(r.events) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.events[0][r.off:])
	if r.off += n; r.off == len(r.events[0]) {
		r.events, r.off = r.events[1:], 0
	}
	return n, nil
}

// Close does nothing: a Reader holds nothing to give back.
func (r *Reader) Close() error { return nil }
