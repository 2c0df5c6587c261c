package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/outlast-llm/outlast/internal/parse"
	"github.com/outlast-llm/outlast/mockllm"
)

// runMock serves a fault-injecting LLM provider until ctx is done.
func runMock(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	srv, listen, done, err := mockServer(args, stderr)
	if done {
		return err
	}
	if err := srv.Start(listen); err != nil {
		return fmt.Errorf("mock: %w", err)
	}
	defer srv.Close()
	desc := srv.Script.String()
	if srv.Script.Len() == 0 {
		desc = "none (every request succeeds)"
	}
	fmt.Fprintf(stdout, "outlast mock: listening on %s, script: %s\n", srv.URL, desc)
	<-ctx.Done()
	return nil
}

const mockUsage = `Usage: outlast mock [flags]

Serves a fake LLM provider that fails as a script says: OpenAI's
POST /v1/chat/completions and POST /v1/responses (with "background": true,
GET /v1/responses/ID?stream=true&starting_after=N streams it again, and
POST /v1/responses/ID/cancel cancels it), Anthropic's POST /v1/messages,
llama.cpp's POST /completion, GET /health and GET /slots, and
GET /mock/stats with the requests it saw. Each request takes the script's next step; the last step
repeats. A window ("for D") runs from when its step becomes current; the
first step becomes current when the mock starts, or with
--from-first-request at the first model request. For example:

  outlast mock --script '502x3,429:retry-after=1,ok'
  outlast mock --script 'refuse:5s,503 for 30s,ok'
  outlast mock --from-first-request --script '429:retry-after=1 for 5s,ok'
  outlast mock --chunks 60 --script 'stall-after=20:resume=30s,ok:first-token-delay=20s'

Faults: ok, a status (503, 500:body=...:header=Name=value), overloaded,
overloaded-stream, loading, refuse:D, reset, close-after-headers, stall,
stall-after=N, reset-after=N, malformed-after=N (N chunks, one event cut
short, then the rest), error-after=N (N chunks, then the API's error
event, as a provider sends one mid-answer), no-done (the stream without
[DONE] or message_stop), slow-headers=D. Parameters: retry-after=S,
retry-after-date=S, retry-after-ms=MS, header=NAME=VALUE, body=VALUE,
delay=D, first-token-delay=D (headers at once, the first event D later),
resume=D (stall-after's silence ends after D), refuse-prefill (400 to a
request whose last message is the assistant's). Repeat a step with xN,
or for a time with "for D". D is a duration as serve takes one: 500ms,
30s, 2m, 7d, or a bare number of seconds (20 is 20s). A chat request
whose last message is the assistant's is a prefill: the answer continues
the text after it. The package documentation of mockllm gives the whole
grammar.

Flags:`

// mockFlags are the mock command's flags, as given.
type mockFlags struct {
	listen, script          string
	slots, capacity, chunks int
	chunkDelay              time.Duration
	fromFirst, quiet        bool
	slotsSet                bool // --slots was given
	limits                  mockllm.Limits
}

// newMockFlags defines the mock command's flags on fs.
func newMockFlags(fs *flag.FlagSet) *mockFlags {
	f := &mockFlags{}
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8701", "the `ADDRESS` to serve on")
	f.slots = 1
	fs.Func("slots", "`N` requests served at once, like llama.cpp's --parallel; 0 for no limit; by default 1, or no limit with --capacity, which makes it a provider rather than a llama.cpp server", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return errors.New("want a whole number, 0 for no limit")
		}
		f.slots, f.slotsSet = n, true
		return nil
	})
	fs.Lookup("slots").DefValue = "1"
	fs.IntVar(&f.capacity, "capacity", 0, "completions generated at once, as a provider's capacity: one more gets 429 with no Retry-After; 0 for no limit")
	fs.StringVar(&f.script, "script", "", "the faults: a script `SPEC`, or a FILE with one step a line; none: every request succeeds")
	fs.IntVar(&f.chunks, "chunks", 9, "content chunks in each response")
	fs.Func("chunk-delay", "the wait before each content chunk, a `DURATION` such as 50ms (bare numbers are seconds, as serve reads them)", func(s string) error {
		d, err := parse.Duration(s)
		if err == nil && d < 0 {
			err = errors.New("is negative: want 0 or more, such as 50ms")
		}
		f.chunkDelay = d
		return err
	})
	fs.IntVar(&f.limits.Requests, "limit-requests", 0, "each API key's requests per --limit-window, as a provider's rate limit: past it, 429 with Retry-After; every answer carries the API's rate-limit headers; 0 for no limit")
	fs.IntVar(&f.limits.Tokens, "limit-tokens", 0, "each API key's tokens per --limit-window, counted up front as the input's words plus max_tokens; 0 for no limit")
	fs.Func("limit-window", "the `DURATION` the limits refill in, continuously: 1m as most providers count, or less, as Azure's windows", func(s string) error {
		d, err := parse.Duration(s)
		if err == nil && d <= 0 {
			err = errors.New("want a positive duration, such as 10s")
		}
		f.limits.Window = d
		return err
	})
	fs.Lookup("limit-window").DefValue = "1m" // Limits' zero Window
	fs.BoolVar(&f.fromFirst, "from-first-request", false, "start the script's windows at the first model request instead of when the mock starts, as they do by default, so that a host slow to start misses none; a first refuse:D step starts with the mock regardless")
	fs.BoolVar(&f.quiet, "quiet", false, "do not log each request to stderr")
	return f
}

// mockServer parses the mock command's flags into a Server, not yet
// started, and the address to start it on; it is apart from runMock so
// that a test can see what each flag sets without serving. done is true
// when there is nothing to serve: after --help, or with err.
func mockServer(args []string, stderr io.Writer) (srv *mockllm.Server, listen string, done bool, err error) {
	f, done, err := parseCommand("mock", mockUsage, newMockFlags, args, stderr)
	if done {
		return nil, "", true, err
	}
	if !f.slotsSet && f.capacity > 0 {
		f.slots = 0 // a provider of --capacity at once, each answered as it comes
	}
	if f.chunks == 0 {
		return nil, "", true, fmt.Errorf("%w: mock: --chunks 0: want 1 or more content chunks", ErrUsage)
	}
	if f.slots < 0 || f.capacity < 0 || f.chunks < 0 || f.chunkDelay < 0 || f.limits.Requests < 0 || f.limits.Tokens < 0 {
		return nil, "", true, fmt.Errorf("%w: mock: --slots, --capacity, --chunks, --chunk-delay, --limit-requests and --limit-tokens cannot be negative", ErrUsage)
	}
	if err := checkListen(f.listen); err != nil {
		return nil, "", true, fmt.Errorf("%w: mock: --listen %q: %v", ErrUsage, f.listen, err)
	}
	sc, err := readScript(f.script)
	if err != nil {
		return nil, "", true, err
	}
	srv = &mockllm.Server{Script: sc, Slots: f.slots, Capacity: f.capacity, Chunks: f.chunks, ChunkDelay: f.chunkDelay, FromFirstRequest: f.fromFirst, Limits: f.limits}
	if !f.quiet {
		srv.Logf = lineLogger(stderr)
	}
	return srv, f.listen, false, nil
}

// readScript parses --script: the contents of the file it names, if it
// names one, or else the value itself.
func readScript(v string) (mockllm.Script, error) {
	src, flag := v, "--script"
	if fi, err := os.Stat(v); v != "" && err == nil && fi.Mode().IsRegular() {
		b, err := os.ReadFile(v)
		if err != nil {
			return mockllm.Script{}, fmt.Errorf("mock: --script: %w", err)
		}
		src, flag = string(b), "--script "+v
	}
	sc, err := mockllm.ParseScript(src)
	if err != nil {
		return mockllm.Script{}, fmt.Errorf("%w: mock: %s: %v", ErrUsage, flag, err)
	}
	return sc, nil
}

// lineLogger returns a Logf that writes whole lines to w, stamped, one at
// a time.
func lineLogger(w io.Writer) func(format string, args ...any) {
	var mu sync.Mutex // guards w
	return func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%s %s\n", time.Now().Format("15:04:05.000"), line)
	}
}
