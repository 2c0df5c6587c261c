package main

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// closedAfter is a body that fails any read past its first n bytes, as the
// HTTP/1 server's body does once the server has drained and closed it.
type closedAfter struct {
	r    io.Reader
	n    int
	read int
}

var errClosed = errors.New("http: invalid Read on closed Body")

func (c *closedAfter) Read(p []byte) (int, error) {
	if c.read >= c.n {
		return 0, errClosed
	}
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}

func (c *closedAfter) Close() error { return nil }

// TestSizedBodyStopsAtLength checks the bare proxy's request body: the
// transport's read past the declared length must see io.EOF, not the
// server's closed body, or it tears down the upstream connection mid-stream.
func TestSizedBodyStopsAtLength(t *testing.T) {
	const body = `{"model":"m"}`
	b := &sizedBody{rc: &closedAfter{r: strings.NewReader(body), n: len(body)}, left: int64(len(body))}
	got, err := io.ReadAll(io.LimitReader(b, int64(len(body))))
	if err != nil || string(got) != body {
		t.Fatalf("reading the declared length: got %q, %v; want %q, nil", got, err, body)
	}
	// What http.Transport does next: copy whatever is left, to find none.
	n, err := io.Copy(io.Discard, b)
	if n != 0 || err != nil {
		t.Fatalf("reading past the declared length: got %d bytes, %v; want 0, nil", n, err)
	}
}

// TestSizedBodyShort checks that a body shorter than declared is an error,
// not a quiet end.
func TestSizedBodyShort(t *testing.T) {
	b := &sizedBody{rc: io.NopCloser(strings.NewReader("abc")), left: 5}
	if _, err := io.ReadAll(b); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v; want io.ErrUnexpectedEOF", err)
	}
}
