package main

import (
	"strings"
	"sync"
	"time"

	"github.com/outlast-llm/outlast/mockllm"
)

// An upstream is a mock provider run in this process, which notes when
// each model request reaches it.
type upstream struct {
	srv *mockllm.Server

	mu   sync.Mutex  // guards seen
	seen []time.Time // when each model request arrived, in order
}

// startUpstream starts a mock that follows script, with the suite's
// chunks.
func startUpstream(script string) (*upstream, error) {
	sc, err := mockllm.ParseScript(script)
	if err != nil {
		return nil, err
	}
	u := &upstream{}
	u.srv = &mockllm.Server{Script: sc, Chunks: chunks, Logf: u.logf}
	if err := u.srv.Start(""); err != nil {
		return nil, err
	}
	return u, nil
}

// logf is the mock's Logf: it is told of each model request as it takes
// its step, with the format "mockllm: %s %s: step …", and of errors,
// which are not requests.
func (u *upstream) logf(format string, _ ...any) {
	if !strings.HasPrefix(format, "mockllm: %s %s: step ") {
		return
	}
	now := time.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	u.seen = append(u.seen, now)
}

// arrivals returns when each model request reached the mock.
func (u *upstream) arrivals() []time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]time.Time(nil), u.seen...)
}

func (u *upstream) close() { u.srv.Close() }
