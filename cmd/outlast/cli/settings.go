package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/internal/parse"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/server"
)

// A setting is one setting of outlast serve: its flag, its key in the
// config file, its default, its help, how its text is read and checked,
// and where its value goes. The flags, the config file's keys, the
// precedence between them and --help are all made from the table below,
// so that a setting is declared once.
type setting struct {
	flag  string // the flag's name, without dashes
	key   string // the config file's key: at the top level, or in each upstream's entry
	scope scope
	def   string // the default, as the flag would take it; "" for none
	arg   string // what the flag takes, in --help: "DURATION", "N"
	help  string // what it does; --help adds the default and the key
	// list says the file may give the value as a YAML list, which is
	// joined with commas, as the flag takes it.
	list bool
	// mapping says the file may give the value as a YAML mapping, which
	// is joined as the flag takes it: from=to pairs, comma-separated.
	mapping bool
	// bool says the flag takes no value: --journal-headers alone is true.
	bool bool
	// secret says the value is never shown: not in --help, nor in an
	// error.
	secret bool
	// example is a value other than the default, for the test that a
	// value reaches the same place by flag and by file.
	example string
	// needs names, by flag, a setting this one is given with: the test
	// gives that one its example too.
	needs string
	// set reads text and puts its value where it goes. Its errors say
	// what is wrong with the value, and what to type instead; the caller
	// names the flag or key.
	set func(t target, text string) error
}

// scope says where a setting lives.
type scope int

const (
	global   scope = iota // the whole gateway: a top-level key
	upstream              // each upstream: a key of its entry; the flag sets it for all
	identity              // one upstream's own: a key of its entry; the flag only with --upstream
	member                // a pool member's: a key of its entry under members (memberKeys), no flag
)

// target is where a setting's value goes: the server's config, for a
// global setting, or one upstream, for the others.
type target struct {
	cfg *serveConfig
	up  *gateway.Upstream
}

// settings is the table. Its order is --help's.
var settings = []setting{
	{flag: "listen", key: "listen", scope: global, def: server.DefaultListen, arg: "ADDRESS", example: ":9000",
		help: "the host:port to serve on; :8700 takes other hosts too",
		set: func(t target, s string) error {
			if err := checkListen(s); err != nil {
				return err
			}
			t.cfg.Listen = s
			return nil
		}},
	{flag: "token", key: "token", scope: global, arg: "TOKEN", secret: true, example: "s3cret-token",
		help: "a token every request must present in the Outlast-Token header, /outlast/ included; needed to listen beyond loopback. Default: $OUTLAST_TOKEN",
		set: func(t target, s string) error {
			if strings.ContainsFunc(s, func(r rune) bool { return r < 0x21 || r == 0x7f }) {
				return errors.New("a token is printable characters, without spaces")
			}
			t.cfg.Gateway.Token = s
			return nil
		}},
	{flag: "insecure-no-auth", key: "insecure_no_auth", scope: global, def: "false", bool: true, example: "true",
		help: "listen beyond loopback with no token: anyone who can connect may send requests and read the record",
		set: func(t target, s string) (err error) {
			t.cfg.InsecureNoAuth, err = parseBool(s)
			return err
		}},
	{flag: "upstream", key: "url", scope: identity, arg: "URL", example: "http://example.test:9/v1",
		help: "the upstream to forward every path to, instead of a config file's upstreams; with a path, it is joined to each request's",
		set: func(t target, s string) (err error) {
			t.up.URL, err = upstreamURL(s)
			return err
		}},
	{flag: "name", key: "name", scope: identity, arg: "NAME", example: "llm",
		help: "the upstream's name in the record, metrics and health, each upstream's its own (two routes to one host need names)",
		set:  func(t target, s string) error { t.up.Name = s; return nil }},
	{flag: "prefix", key: "prefix", scope: identity, def: "/", arg: "PATH", example: "/llama",
		help: "the path prefix of the requests that go to the upstream, removed before forwarding",
		set: func(t target, s string) error {
			if !strings.HasPrefix(s, "/") {
				return fmt.Errorf("want a path that starts with /, such as %q", "/"+s)
			}
			t.up.Prefix = s
			return nil
		}},
	{flag: "slots", key: "slots", scope: upstream, def: "0", arg: "N", example: "2",
		help: "requests in flight to an upstream; the rest wait in arrival order. A request may name one of the slots 0 to N-1 (Outlast-Slot, or llama.cpp's id_slot) and waits for it alone, within the bound. 0 means no bound, and no slots",
		set:  count(func(t target, n int) { t.up.Slots = n })},
	{flag: "fallbacks", key: "fallbacks", scope: identity, arg: "NAMES", list: true, example: "azure",
		help: "the upstreams, by name, that a request for this one moves to, in order, when this one cannot serve it within its deadline less its reserve (down with its next chance too late, its attempts spent on retryable failures, or its queue full), before its first byte only; each must speak the same API",
		set: func(t target, s string) error {
			t.up.Fallbacks = splitList(s)
			return nil
		}},
	{flag: "prefer", key: "prefer", scope: identity, def: "available", arg: "WHICH", example: "primary",
		help: "when a request leaves this upstream for its fallbacks: available, as soon as it is down (unless the request can be its probe) or after 3 failed attempts of its own; or primary, only when waiting for its next chance would not fit the request's deadline less its reserve, so that a costlier fallback serves as little as it can",
		set: func(t target, s string) error {
			switch s {
			case "primary":
				t.up.Prefer = outlast.PreferPrimary
			case "available":
				t.up.Prefer = outlast.PreferAvailable
			default:
				return errors.New("want primary or available")
			}
			return nil
		}},
	{flag: "models", key: "models", scope: identity, arg: "FROM=TO,…", mapping: true, example: "gpt-4o=my-gpt-4o",
		help: "rename the body's model for this upstream, such as a model to an Azure deployment's name; a model not named is sent as it is",
		set: func(t target, s string) error {
			m := map[string]string{}
			for _, pair := range splitList(s) {
				from, to, ok := strings.Cut(pair, "=")
				if !ok || from == "" || to == "" {
					return fmt.Errorf("%q: want FROM=TO, such as gpt-4o=my-gpt-4o", pair)
				}
				if _, twice := m[from]; twice {
					return fmt.Errorf("%q is renamed twice: give each model once", from)
				}
				m[from] = to
			}
			t.up.Models = m
			return nil
		}},
	{flag: "auth", key: "auth", scope: identity, arg: "SOURCE", secret: true, example: "env:OUTLAST_TEST_AUTH",
		help: "a credential the gateway holds for this upstream, sent instead of the caller's: env:NAME reads the variable NAME, file:PATH the file's first line. It never reaches a log, the record, metrics, health or an error",
		set: func(t target, s string) error {
			secret, err := readSecret(s)
			if err != nil {
				return err
			}
			t.up.Auth = gateway.NewCredential("Authorization", secret)
			return nil
		}},
	{flag: "auth-header", key: "auth_header", scope: identity, arg: "HEADER", example: "api-key", needs: "auth",
		help: `the header the held credential goes in, with --auth: x-api-key for Anthropic, api-key for Azure OpenAI; when not given, Authorization, as "Bearer" and the credential`,
		set: func(t target, s string) error {
			if t.up.Auth == nil {
				return errors.New("give auth too: the credential that goes in it")
			}
			if s == "" || strings.ContainsAny(s, " :\r\n") {
				return fmt.Errorf("%q: want a header name, such as api-key", s)
			}
			t.up.Auth = t.up.Auth.WithHeader(s)
			return nil
		}},
	{flag: "admission", key: "admission", scope: upstream, def: "true", bool: true, example: "false",
		help: "while an upstream is down, send one probe at a time and hold the other requests in arrival order, or answer 503 upstream-down at once to those whose deadline less reserve comes before the next chance; then release them under a limit that grows to --slots (64 without)",
		set: func(t target, s string) error {
			on, err := parseBool(s)
			t.up.Admission = nil
			if on {
				t.up.Admission = &outlast.Admission{}
			}
			return err
		}},
	{flag: "retry-budget", key: "retry_budget", scope: upstream, def: "0", arg: "RATIO", example: "0.1",
		help: "with admission, throttle retries as gRPC does: a bucket of 10 tokens loses one per failed attempt and gains RATIO per success, and a retry goes only while more than half are left, else 503 upstream-down. 0 means off; 0.1 holds retries to about a tenth of successes",
		set: func(t target, s string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || !(f >= 0 && f <= 10) {
				return errors.New("want a ratio from 0 to 10, such as 0.1")
			}
			if f > 0 && t.up.Admission == nil {
				return errors.New("a retry budget needs admission: drop --admission=false")
			}
			if t.up.Admission != nil {
				t.up.Admission.RetryBudget = f
			}
			return nil
		}},
	{flag: "queue", key: "queue", scope: upstream, def: strconv.Itoa(gateway.DefaultQueue), arg: "N", example: "0",
		help: "requests that may wait for a slot; more are refused at once with 503. 0 means none may wait",
		set:  count(func(t target, n int) { t.up.Queue = parse.ZeroIsNone(n) })},
	{flag: "timeout", key: "timeout", scope: upstream, def: "9m", arg: "DURATION", example: "2m",
		help: "the deadline of a request that brings none: no Outlast-Timeout or Outlast-Deadline, and no SDK timeout (X-Stainless-Timeout, which the Anthropic SDKs send). Under the SDKs' own 10 minutes, so that an SDK reads the gateway's answer rather than giving up first. A deadline bounds the attempts and waits up to the answer's first byte, not the answer's length. 0 means none",
		set:  duration(func(t target, d time.Duration) { t.up.Timeout = d })},
	{flag: "waits", key: "waits", scope: upstream, def: "1s,2s,4s,8s,16s,32s,60s", arg: "LIST", list: true, example: "1s,2s",
		help: "the waits before retry 1, 2, …; the last repeats while a request's deadline allows. Short first, since a blip is over in a second, and growing to a minute for an outage",
		set: func(t target, s string) error {
			w, err := parse.Waits(s)
			t.up.Policy.Waits = w
			return err
		}},
	{flag: "reserve", key: "reserve", scope: upstream, def: "auto", arg: "DURATION", example: "5s",
		help: "the time a request's deadline must still have after a wait for the retry to be made; a request's Outlast-Reserve replaces it. auto: a quarter of the request's deadline, at most 60s, so that a 20s deadline still gets retries. 0 means none",
		set: func(t target, s string) error {
			t.up.Policy.Reserve, t.up.ReserveShare = 0, 0
			if strings.TrimSpace(s) == "auto" {
				t.up.ReserveShare = 0.25 // of the deadline, under the policy's 60 s
				return nil
			}
			d, err := parse.Duration(s)
			switch {
			case err != nil:
				return fmt.Errorf("%w, or auto", err)
			case d < 0:
				return errors.New("is negative: want 0 or more, such as 30s, or auto")
			}
			t.up.Policy.Reserve = parse.ZeroIsNone(d)
			return nil
		}},
	{flag: "max-attempts", key: "max_attempts", scope: upstream, def: "0", arg: "N", example: "3",
		help: "caps a request's attempts, the first included. 0 means no cap",
		set:  count(func(t target, n int) { t.up.Policy.MaxAttempts = n })},
	{flag: "max-timeout", key: "max_timeout", scope: upstream, def: "10m", arg: "DURATION", example: "30m",
		help: "caps every deadline: a request's Outlast-Timeout or Outlast-Deadline, an SDK's timeout and --timeout. 0 means no cap",
		set:  duration(func(t target, d time.Duration) { t.up.MaxTimeout = d })},
	{flag: "window", key: "window", scope: upstream, def: "0", arg: "DURATION", example: "10m",
		help: "caps the time from a request's first attempt to the end of its last wait. 0 means no cap",
		set:  duration(func(t target, d time.Duration) { t.up.Policy.Window = d })},
	{flag: "jitter-spread", key: "jitter_spread", scope: upstream, def: "0.25", arg: "FRACTION", example: "0.1",
		help: "moves each wait up to this fraction either way, from 0 to 1, so that clients that failed together come back apart. 0 means none",
		set: func(t target, s string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || !(f >= 0 && f <= 1) {
				return errors.New("want a fraction from 0 to 1, such as 0.25")
			}
			t.up.Policy.Jitter.Spread = f
			return nil
		}},
	{flag: "retry-after", key: "retry_after", scope: upstream, def: "at-least", arg: "MODE", example: "exact",
		help: "what a server's Retry-After does: at-least makes it a floor for the wait, exact makes it the wait, ignore ignores it",
		set: func(t target, s string) error {
			for _, m := range []outlast.RetryAfterMode{outlast.RetryAfterAtLeast, outlast.RetryAfterExact, outlast.RetryAfterIgnore} {
				if s == m.String() {
					t.up.Policy.RetryAfter = m
					return nil
				}
			}
			return errors.New("want at-least, exact or ignore")
		}},
	{flag: "max-retry-after", key: "max_retry_after", scope: upstream, def: "5m", arg: "DURATION", example: "1m",
		help: "caps a server's delay (Retry-After, retry-after-ms or x-ms-retry-after-ms, a rate limit's reset): a longer one is taken as this, the upstream is probed after it, and the record and the log say it was cut. 0 means no cap",
		set: duration(func(t target, d time.Duration) {
			t.up.MaxRetryAfter = d
			if d == 0 {
				t.up.MaxRetryAfter = -1 // no cap; the library's zero is its default
			}
		})},
	{flag: "first-byte-timeout", key: "first_byte_timeout", scope: upstream, def: "5m", arg: "DURATION", example: "10m",
		help: "bounds an attempt's wait for its answer's first byte, a whole non-stream answer as a rule (a stream's: its first event that carries the answer, past message_start, a role chunk or response.created); a slower attempt is retried. 0 means no bound",
		set:  duration(func(t target, d time.Duration) { t.up.FirstByteTimeout = d })},
	{flag: "stream-header-timeout", key: "stream_header_timeout", scope: upstream, def: "30s", arg: "DURATION", example: "10s",
		help: "bounds a streaming attempt's wait for the upstream's response headers, which a server sends when it takes the request: a silent upstream is retried after this, while a model that thinks before its first token still has --first-byte-timeout. 0 means no bound of its own",
		set:  duration(func(t target, d time.Duration) { t.up.StreamHeaderTimeout = d })},
	{flag: "hedge", key: "hedge", scope: upstream, def: "true", bool: true, example: "false",
		help: "with --fallbacks, when a stream has sent none of its answer after a delay (learned per model: the 95th percentile of recent times to first content, at least 1s; 10s until 32 are known), send it to the first fallback too: the first to send content wins, the other is cancelled; at most about one stream in twenty is hedged",
		set: func(t target, s string) (err error) {
			t.up.Hedge, err = parseBool(s)
			return err
		}},
	{flag: "continuation", key: "continuation", scope: upstream, def: "auto", arg: "HOW", example: "prefill",
		help: "what becomes of a stream that breaks after its first byte reached the caller: off ends it with an error event; prefill sends the request again with the answer so far as its final assistant message and carries the caller's stream on with the new text (Anthropic, and OpenAI-compatible servers that continue one, such as vLLM and llama.cpp; not OpenAI's own API, which is refused), or, to a model that refuses a prefill, sends it again as it was and carries on only if its answer starts with the answer so far; the prompt is billed again. auto is prefill, but off for OpenAI's own API and Azure OpenAI. resume, for OpenAI's Responses API, creates each streamed response in background (stored by the provider, so not for zero-data-retention accounts) and streams the rest of a broken one after its last event, the same bytes, with no second generation",
		set: func(t target, s string) (err error) {
			if t.up.Continuation, err = gateway.ParseContinuation(s); err != nil {
				return errors.New("want auto, off, prefill or resume")
			}
			return nil
		}},
	{flag: "idle-timeout", key: "idle_timeout", scope: upstream, def: "20s", arg: "DURATION", example: "1m",
		help: "bounds the silence within a response being forwarded, either way: a stream that falls silent mid-answer is ended with an error event, and a caller that takes none of an answer for as long is gone. 0 means no bound",
		set:  duration(func(t target, d time.Duration) { t.up.IdleTimeout = d })},
	{flag: "status-paths", key: "status_paths", scope: upstream, def: strings.Join(gateway.DefaultStatusPaths, ","), arg: "PATHS", list: true, example: "/healthz",
		help: `an upstream's health and status endpoints, comma-separated: a GET or HEAD for one (or a path below it) is forwarded once, outside the gate, and not recorded, so that a host polling it sees the server's own answer at once. "" for none`,
		set: func(t target, s string) error {
			paths := splitList(s)
			for _, p := range paths {
				if !strings.HasPrefix(p, "/") {
					return fmt.Errorf("path %q: want a path that starts with /, such as %q", p, "/"+p)
				}
			}
			t.up.StatusPaths = append([]string{}, paths...) // empty, not nil: none
			return nil
		}},
	{flag: "max-body", key: "max_body", scope: global, def: strconv.Itoa(gateway.DefaultMaxBody), arg: "BYTES", example: "1024",
		help: "the largest request body; a larger one gets 413 (32 MiB). Also the longest answer held whole before its first byte goes: a longer one goes as it comes",
		set:  byteCount("33554432", func(t target, n int64) { t.cfg.Gateway.MaxBody = n })},
	{flag: "hold-budget", key: "hold_budget", scope: global, def: strconv.Itoa(gateway.DefaultHoldBudget), arg: "BYTES", example: "1048576",
		help: "the bytes of answers held in memory at once, all requests together (64 MiB): an answer that is not a stream is read whole, up to --max-body, before its first byte goes, so that a body cut short is retried; one that does not fit goes as it comes, and its record says it was not held",
		set:  byteCount("67108864", func(t target, n int64) { t.cfg.Gateway.HoldBudget = n })},
	{flag: "grace", key: "grace", scope: global, def: "30s", arg: "DURATION", example: "5s",
		help: "how long requests in flight may finish after SIGINT or SIGTERM; then each ends with a final error",
		set:  positive(func(t target, d time.Duration) { t.cfg.HTTP.Grace = d })},
	{flag: "read-header-timeout", key: "read_header_timeout", scope: global, def: "10s", arg: "DURATION", example: "3s",
		help: "bounds the time a caller takes to send a request's line and headers",
		set:  positive(func(t target, d time.Duration) { t.cfg.HTTP.ReadHeaderTimeout = d })},
	{flag: "body-timeout", key: "body_timeout", scope: global, def: "30s", arg: "DURATION", example: "5s",
		help: "bounds the silence between two reads of a request's body, and from the request's start to the body's first bytes; a slower body gets 408 and its connection is closed",
		set:  positive(func(t target, d time.Duration) { t.cfg.Gateway.BodyTimeout = d })},
	{flag: "keepalive-timeout", key: "keepalive_timeout", scope: global, def: "2m", arg: "DURATION", example: "30s",
		help: "how long an idle connection waits for its next request before it is closed",
		set:  positive(func(t target, d time.Duration) { t.cfg.HTTP.KeepAliveTimeout = d })},
	{flag: "max-header-bytes", key: "max_header_bytes", scope: global, def: strconv.Itoa(gateway.DefaultMaxHeaderBytes), arg: "BYTES", example: "8192",
		help: "the largest request line and headers, in bytes; a larger one gets 431",
		set: func(t target, s string) error {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1024 {
				return errors.New("want a whole number of bytes, 1024 or more, such as 65536")
			}
			t.cfg.HTTP.MaxHeaderBytes = n
			return nil
		}},
	{flag: "max-conns", key: "max_conns", scope: global, def: strconv.Itoa(gateway.DefaultMaxConns), arg: "N", example: "100",
		help: "the connections open at once; one more gets 503 and is closed. 0 means no bound",
		set:  count(func(t target, n int) { t.cfg.HTTP.MaxConns = parse.ZeroIsNone(n) })},
	{flag: "log-level", key: "log_level", scope: global, def: "info", arg: "LEVEL", example: "warn",
		help: "the least level of the log's lines: debug, info (a line per request), warn (retries, fallbacks, upstreams going down) or error",
		set: func(t target, s string) error {
			var l slog.Level
			if err := l.UnmarshalText([]byte(s)); err != nil || strings.ContainsAny(s, "+-") {
				return errors.New("want debug, info, warn or error")
			}
			t.cfg.logLevel = l
			return nil
		}},
	{flag: "journal", key: "journal", scope: global, def: journal.DefaultSpec, arg: "SPEC", example: "off",
		help: "where the record is kept: sqlite:PATH, a postgres:// URL for several replicas, or off",
		set: func(t target, s string) error {
			if err := journal.CheckSpec(s); err != nil {
				// The caller quotes the value already.
				msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("journal: spec %q: ", s))
				return errors.New(strings.TrimPrefix(msg, "journal: "))
			}
			t.cfg.Journal = s
			return nil
		}},
	{flag: "redis", key: "redis", scope: global, arg: "URL", secret: true, example: "redis://127.0.0.1:6379/0",
		help: "share the upstreams' gates and admission state with every gateway that uses this Redis, so that replicas keep one bound and one view of each upstream; while it cannot be reached, each uses its own, with the same limits, and says so (log, health, outlast_gate_degraded). Empty: this process's own",
		set: func(t target, s string) error {
			if s == "" {
				t.cfg.Redis = ""
				return nil
			}
			if _, err := redis.ParseURL(s); err != nil {
				return errors.New("want a URL such as redis://127.0.0.1:6379/0, or rediss:// for TLS")
			}
			t.cfg.Redis = s
			return nil
		}},
	{flag: "journal-writer", key: "journal_writer", scope: global, def: server.WriterProcess, arg: "WHO", example: server.WriterInline,
		help: "who writes a SQLite journal: process, a child process at the lowest CPU priority, so that its writes never take a core from the requests; or inline, this process",
		set: func(t target, s string) error {
			if s != server.WriterProcess && s != server.WriterInline {
				return fmt.Errorf("want %s or %s", server.WriterProcess, server.WriterInline)
			}
			t.cfg.JournalWriter = s
			return nil
		}},
	{flag: "journal-keep", key: "journal_keep", scope: global, def: "7d", arg: "DURATION", example: "12h",
		help: "how long the journal keeps a request. 0 keeps it for ever",
		set:  duration(func(t target, d time.Duration) { t.cfg.JournalKeep = d })},
	{flag: "journal-headers", key: "journal_headers", scope: global, def: "false", bool: true, example: "true",
		help: "keep each request's headers in the journal, credentials and --redact left out (they cost more than the rest of the record)",
		set: func(t target, s string) (err error) {
			t.cfg.JournalHeaders, err = parseBool(s)
			return err
		}},
	{flag: "redact", key: "redact", scope: global, arg: "HEADERS", list: true, example: "X-Org-Token,X-Trace",
		help: "request headers, comma-separated, that the record must not keep, besides the credentials it never keeps",
		set: func(t target, s string) error {
			t.cfg.Gateway.Redact = splitList(s)
			return nil
		}},
}

// count returns a setting's set for a count of 0 or more.
func count(put func(target, int)) func(target, string) error {
	return func(t target, s string) error {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		switch {
		case err != nil:
			return errors.New("want a whole number, such as 4")
		case n < 0:
			return errors.New("is negative: want 0 or more")
		}
		put(t, n)
		return nil
	}
}

// byteCount returns a setting's set for a number of bytes, 1 or more;
// such is one, for its error.
func byteCount(such string, put func(target, int64)) func(target, string) error {
	return func(t target, s string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n < 1 {
			return errors.New("want a whole number of bytes, 1 or more, such as " + such)
		}
		put(t, n)
		return nil
	}
}

// positive returns a setting's set for a duration of more than 0.
func positive(put func(target, time.Duration)) func(target, string) error {
	return func(t target, s string) error {
		d, err := parse.Duration(s)
		switch {
		case err != nil:
			return err
		case d <= 0:
			return errors.New("want a positive duration, such as 30s")
		}
		put(t, d)
		return nil
	}
}

// parseBool reads a flag's or key's true or false.
func parseBool(s string) (bool, error) {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, errors.New("want true or false")
	}
	return b, nil
}

// duration returns a setting's set for a duration of 0 or more.
func duration(put func(target, time.Duration)) func(target, string) error {
	return func(t target, s string) error {
		d, err := parse.Duration(s)
		switch {
		case err != nil:
			return err
		case d < 0:
			return errors.New("is negative: want 0 or more, such as 30s")
		}
		put(t, d)
		return nil
	}
}

// checkListen reports whether s is an address to listen on, host:port,
// saying what to type instead when it is not.
func checkListen(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if _, perr := strconv.Atoi(s); perr == nil {
			return fmt.Errorf("want host:port: type 127.0.0.1:%s, or :%s for other hosts too", s, s)
		}
		return errors.New("want host:port, such as 127.0.0.1:8700, or :8700 for other hosts too")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q: want a number from 0 to 65535, such as %q", port, net.JoinHostPort(host, "8700"))
	}
	return nil
}

// upstreamURL parses an upstream's URL, which must be absolute http or
// https with a host. Its errors say what to type instead, without
// repeating the URL, which may hold a password.
func upstreamURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if !strings.Contains(s, "://") && (err != nil || u.Scheme == "" || u.Opaque != "") {
		// A host:port parses as scheme:opaque or not at all, and a bare
		// host as a path: each was meant to be a host.
		if h, perr := url.Parse("http://" + s); perr == nil && h.Host != "" {
			return nil, fmt.Errorf("not an absolute http(s) URL: type http://%s (or https://)", h.Host+h.Path)
		}
	}
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the url.Error repeats s
		}
		return nil, fmt.Errorf("not a URL: %v", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return nil, errors.New("not an absolute http(s) URL: want one such as https://api.openai.com")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("port %s is not one: want 1 to 65535", p)
		}
	}
	return u, nil
}

// readSecret reads a credential from its source: env:NAME or file:PATH.
// Its errors name the source, never the value.
func readSecret(source string) (string, error) {
	kind, where, _ := strings.Cut(source, ":")
	switch kind {
	case "env":
		if v := trimSecret(os.Getenv(where)); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("env:%s: the variable is unset or empty", where)
	case "file":
		b, err := os.ReadFile(where)
		if err != nil {
			return "", fmt.Errorf("file:%s: %v", where, errors.Unwrap(err))
		}
		line, _, _ := strings.Cut(string(b), "\n")
		if line = trimSecret(line); line != "" {
			return line, nil
		}
		return "", fmt.Errorf("file:%s: its first line is empty", where)
	}
	return "", errors.New("want env:NAME or file:PATH")
}

// trimSecret returns v without the white space, and the byte order mark
// (an editor's on Windows), around it, which no credential holds.
func trimSecret(v string) string {
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), "\ufeff"))
}

// splitList splits a comma-separated value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
