package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// target is one server the load generator drives, with a client of its
// own so that no target's connections serve another.
type target struct {
	name   string
	url    string
	client *http.Client
	req    [2][]byte // the request body, by mode: plain, stream
	want   [2][]byte // the right response body, by mode
	// drain, if set, finishes the work the target's requests left
	// behind, such as the journal's batch writes, so that it is charged
	// to this target's round rather than running into the next target's.
	drain func(context.Context) error
	sent  atomic.Int64 // requests begun, for drain
}

// finish runs t's drain, if it has one.
func (t *target) finish(ctx context.Context) error {
	if t.drain == nil {
		return nil
	}
	return t.drain(ctx)
}

func newTarget(name, url string, up *upstream, req [2][]byte, c config) *target {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Every request in flight keeps its connection for the next one: a
	// client that opened connections under load would measure dialing.
	t.MaxIdleConns = c.InFlight
	t.MaxIdleConnsPerHost = c.InFlight
	t.DisableCompression = true
	t.ForceAttemptHTTP2 = false
	return &target{
		name:   name,
		url:    url,
		client: &http.Client{Transport: t, Timeout: c.Timeout},
		req:    req,
		want:   [2][]byte{completion, up.stream},
	}
}

// errWrongBody is a 200 whose body is not the upstream's.
var errWrongBody = errors.New("load: the response body differs from the upstream's")

// respBufs holds the buffers response bodies are read into.
var respBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// sdkHeader is what the OpenAI SDK for Node (6.49.0, on Node 20) sends
// with a chat completion, as read off the wire: every target gets a real
// SDK's request. Its Connection header is one a proxy must not forward.
var sdkHeader = http.Header{
	"Connection":                  {"keep-alive"},
	"Accept":                      {"application/json"},
	"User-Agent":                  {"OpenAI/JS 6.49.0"},
	"X-Stainless-Retry-Count":     {"0"},
	"X-Stainless-Lang":            {"js"},
	"X-Stainless-Package-Version": {"6.49.0"},
	"X-Stainless-Os":              {"Linux"},
	"X-Stainless-Arch":            {"x64"},
	"X-Stainless-Runtime":         {"node"},
	"X-Stainless-Runtime-Version": {"v20.20.2"},
	"Authorization":               {"Bearer sk-test"},
	"Content-Type":                {"application/json"},
	"Accept-Language":             {"*"},
	"Sec-Fetch-Mode":              {"cors"},
	"Accept-Encoding":             {"gzip, deflate"},
}

// do sends one request and checks that the answer is a 200 with the
// upstream's body. Its latency is the time to the whole body, or for a
// stream to the first body byte: a proxy that buffered the stream would
// show here.
func (t *target) do(ctx context.Context, stream bool) (time.Duration, error) {
	mode := 0
	if stream {
		mode = 1
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(t.req[mode]))
	if err != nil {
		return 0, err
	}
	for k, v := range sdkHeader {
		req.Header[k] = v
	}
	t.sent.Add(1)
	start := time.Now()
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return 0, fmt.Errorf("load: %s answered %s", t.name, resp.Status)
	}
	bp := respBufs.Get().(*[]byte)
	defer respBufs.Put(bp)
	got, ttfb, err := readAll(resp.Body, (*bp)[:0], start)
	end := time.Since(start)
	*bp = got[:0]
	if err != nil {
		return 0, fmt.Errorf("load: reading %s's body: %w", t.name, err)
	}
	if !bytes.Equal(got, t.want[mode]) {
		return 0, fmt.Errorf("%w: %s sent %d bytes, want %d", errWrongBody, t.name, len(got), len(t.want[mode]))
	}
	if stream {
		return ttfb, nil
	}
	return end, nil
}

// readAll reads r to its end into buf, bounded at 1 MiB, and returns the
// time from start to the first byte.
func readAll(r io.Reader, buf []byte, start time.Time) ([]byte, time.Duration, error) {
	const limit = 1 << 20
	var ttfb time.Duration
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= limit {
				return buf, ttfb, errors.New("over 1 MiB")
			}
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		if n > 0 && ttfb == 0 {
			ttfb = time.Since(start)
		}
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, ttfb, nil
		}
		if err != nil {
			return buf, ttfb, err
		}
	}
}
