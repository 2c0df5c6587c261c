package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
)

// openAIHeaders are the headers the openai npm package, version 6.49.0,
// sends with chat.completions.create({stream: true, …}) on Node v20.20.2
// (Linux, x64), as a capture server saw them, the key replaced by a
// placeholder. It sends no X-Stainless-Timeout unless a request sets a
// timeout of its own. Host and Content-Length are the transport's, which
// Go's sets.
var openAIHeaders = [][2]string{
	{"Connection", "keep-alive"},
	{"Accept", "application/json"},
	{"User-Agent", "OpenAI/JS 6.49.0"},
	{"X-Stainless-Retry-Count", "0"},
	{"X-Stainless-Lang", "js"},
	{"X-Stainless-Package-Version", "6.49.0"},
	{"X-Stainless-OS", "Linux"},
	{"X-Stainless-Arch", "x64"},
	{"X-Stainless-Runtime", "node"},
	{"X-Stainless-Runtime-Version", "v20.20.2"},
	{"Authorization", "Bearer sk-PLACEHOLDER"},
	{"Content-Type", "application/json"},
	{"Accept-Language", "*"},
	{"Sec-Fetch-Mode", "cors"},
	{"Accept-Encoding", "gzip, deflate"},
}

// anthropicHeaders are what the @anthropic-ai/sdk npm package, version
// 1.16.0, sends with messages.create({stream: true, …}) in the same
// capture, for the record: unlike openai's, it sends its timeout, 600 s,
// in X-Stainless-Timeout, and its apiKey as a bearer token. The suite
// does not send them.
var anthropicHeaders = [][2]string{
	{"Connection", "keep-alive"},
	{"Accept", "application/json"},
	{"User-Agent", "Anthropic/JS 1.16.0"},
	{"X-Stainless-Retry-Count", "0"},
	{"X-Stainless-Timeout", "600"},
	{"X-Stainless-Lang", "js"},
	{"X-Stainless-Package-Version", "1.16.0"},
	{"X-Stainless-OS", "Linux"},
	{"X-Stainless-Arch", "x64"},
	{"X-Stainless-Runtime", "node"},
	{"X-Stainless-Runtime-Version", "v20.20.2"},
	{"Anthropic-Version", "2026-10-21"},
	{"Authorization", "Bearer sk-ant-PLACEHOLDER"},
	{"Content-Type", "application/json"},
	{"Accept-Language", "*"},
	{"Sec-Fetch-Mode", "cors"},
	{"Accept-Encoding", "gzip, deflate"},
}

// maxErrorBody bounds the error body a result keeps.
const maxErrorBody = 64 << 10

// A result is what one request's caller got, as a client that reads the
// stream the way the openai package does sees it.
type result struct {
	elapsed   time.Duration // from the request's start to its end: the answer's last byte, or the error
	status    int           // the response's status; 0 if none came
	kind      string        // the gateway's Outlast-Error, or the kind its error event names
	body      string        // a response's body when its status is not 200
	requestID string        // the gateway's Outlast-Request-Id

	text       string // the content of the chunks, joined
	chunks     int    // content chunks with text
	finish     string // the last finish_reason
	done       bool   // data: [DONE] came
	model      string // the model the chunks named, the last one
	usage      bool   // a chunk carried usage
	malformed  int    // events whose data was not JSON, skipped
	errorEvent bool   // an event: error, or a chunk with an "error" object: the SDK throws
	errorText  string // the error event's data, the first one
	cut        bool   // the connection failed: no response, or a body that broke off
	overBudget bool   // the budget ran out first
	err        string // the connection's error, if cut
}

// newClient returns the suite's client: one connection pool, as one SDK
// instance has, and no retries of its own.
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
}

// send makes one streamed chat completion to url with body, within
// limit from now, and reads it to the end.
func send(ctx context.Context, c *http.Client, url, body string, limit time.Duration) (r result) {
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, start.Add(limit))
	defer cancel()
	defer func() { r.elapsed = time.Since(start) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		r.cut, r.err = true, err.Error()
		return r
	}
	// Without GetBody, net/http cannot send the request again on a fresh
	// connection when a kept-alive one was closed under it: the client
	// makes no retry, even one the server never saw.
	req.GetBody = nil
	for _, h := range openAIHeaders {
		req.Header.Set(h[0], h[1])
	}
	resp, err := c.Do(req)
	if err != nil {
		r.failed(ctx, err)
		return r
	}
	defer resp.Body.Close()
	r.status = resp.StatusCode
	r.kind = resp.Header.Get("Outlast-Error")
	r.requestID = resp.Header.Get("Outlast-Request-Id")
	if resp.StatusCode != http.StatusOK {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		r.body = string(b)
		if err != nil {
			r.failed(ctx, err)
		}
		return r
	}
	if err := r.read(resp.Body); err != nil {
		r.failed(ctx, err)
	}
	return r
}

// failed notes the error that ended the request: the budget, or a
// connection that failed.
func (r *result) failed(ctx context.Context, err error) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		r.overBudget = true
		return
	}
	r.cut, r.err = true, err.Error()
}

// read reads an event stream to its end, and returns the error that
// ended it, nil at a clean end.
func (r *result) read(body io.Reader) error {
	br := bufio.NewReader(body)
	var name string
	var data []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && line == "" {
				return nil
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if len(data) > 0 {
				r.event(name, strings.Join(data, "\n"))
			}
			name, data = "", nil
		case strings.HasPrefix(line, ":"):
			// A comment, such as the gateway's progress.
		case strings.HasPrefix(line, "event:"):
			name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}

// chunk is what the client reads of a chat.completion.chunk.
type chunk struct {
	Model   string `json:"model"`
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *json.RawMessage `json:"usage"`
	Error *struct {
		Type string `json:"type"`
	} `json:"error"`
}

// event takes one event as the openai package does: an error event or
// an error object throws; [DONE] ends the stream; anything else is a
// chunk. An event whose data is not JSON, which the package would throw
// on too, is counted and skipped, so that the suite sees what follows.
func (r *result) event(name, data string) {
	if data == "[DONE]" {
		r.done = true
		return
	}
	var c chunk
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		r.malformed++
		if name == "error" {
			r.errorEvent = true
		}
		return
	}
	if name == "error" || c.Error != nil {
		r.errorEvent = true
		if r.errorText == "" {
			r.errorText = data
		}
		if c.Error != nil && r.kind == "" {
			// The gateway's own error types are "outlast_" and the kind.
			r.kind = strings.ReplaceAll(strings.TrimPrefix(c.Error.Type, "outlast_"), "_", "-")
		}
		return
	}
	if c.Model != "" {
		r.model = c.Model
	}
	if c.Usage != nil && string(*c.Usage) != "null" {
		r.usage = true
	}
	for _, ch := range c.Choices {
		if ch.Delta.Content != "" {
			r.text += ch.Delta.Content
			r.chunks++
		}
		if ch.FinishReason != "" {
			r.finish = ch.FinishReason
		}
	}
}
