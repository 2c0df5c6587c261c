package cli

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/server"
)

const exampleConfig = "testdata/outlast.example.yaml"

// loadServe parses args as serve does, failing the test on an error.
func loadServe(t *testing.T, args ...string) serveConfig {
	t.Helper()
	cfg, done, err := serveConfigFrom(args, io.Discard)
	if err != nil || done {
		t.Fatalf("serve %q: got done %v, error %v; want a config", args, done, err)
	}
	return cfg
}

// writeConfig writes a config file named config.yaml and returns its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// line prints its operands with spaces between, as fmt.Println does.
func line(a ...any) string {
	return strings.TrimSuffix(fmt.Sprintln(a...), "\n")
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// upstreamString prints an upstream with its URL and policy, not their pointers.
func upstreamString(u gateway.Upstream) string {
	adm := "off"
	if u.Admission != nil {
		adm = fmt.Sprintf("max limit %d", u.Admission.MaxLimit)
	}
	return fmt.Sprintf("{%s %s %s slots %d queue %d policy %+v first byte %v idle %v status %q max timeout %v admission %s}",
		u.Name, u.Prefix, u.URL, u.Slots, u.Queue, *u.Policy, u.FirstByteTimeout, u.IdleTimeout, u.StatusPaths, u.MaxTimeout, adm)
}

func TestServeConfigExample(t *testing.T) {
	t.Parallel()
	cfg := loadServe(t, "--config", exampleConfig)
	want := []gateway.Upstream{{
		Name: "openai", Prefix: "/openai", URL: mustURL(t, "https://api.openai.com"),
		Policy: &outlast.Policy{
			Waits:  []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 60 * time.Second},
			Window: 10 * time.Minute, Jitter: outlast.Jitter{Spread: 0.25},
			RetryAfter: outlast.RetryAfterAtLeast,
		},
		ReserveShare: 0.25, // auto
		Slots:        0, Queue: 16, FirstByteTimeout: 5 * time.Minute, StreamHeaderTimeout: 30 * time.Second, IdleTimeout: 20 * time.Second,
		StatusPaths: gateway.DefaultStatusPaths, Timeout: 9 * time.Minute, MaxTimeout: 30 * time.Minute, MaxRetryAfter: 5 * time.Minute,
		Admission:    &outlast.Admission{}, // on by default; recovery ends at DefaultMaxLimit
		Continuation: gateway.ContinueAuto, Hedge: true,
	}, {
		Name: "llama", Prefix: "/llama", URL: mustURL(t, "http://127.0.0.1:8080"),
		Policy: &outlast.Policy{
			Waits:   []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second},
			Reserve: 10 * time.Second, Jitter: outlast.Jitter{Spread: 0.25},
		},
		Slots: 2, Queue: 8, FirstByteTimeout: 10 * time.Minute, StreamHeaderTimeout: 30 * time.Second, IdleTimeout: 20 * time.Second,
		StatusPaths: []string{"/health", "/slots", "/props"}, Timeout: 9 * time.Minute, MaxTimeout: 10 * time.Minute, MaxRetryAfter: 5 * time.Minute,
		Admission:    &outlast.Admission{MaxLimit: 2}, // recovery ends at the upstream's 2 slots
		Continuation: gateway.ContinueAuto, Hedge: true,
	}}
	got := cfg.Gateway.Upstreams
	if len(got) != len(want) {
		t.Fatalf("got %d upstreams, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("upstreams[%d]:\ngot  %s\nwant %s", i, upstreamString(got[i]), upstreamString(want[i]))
		}
	}
	if cfg.Listen != "127.0.0.1:8700" || cfg.Gateway.MaxBody != 32<<20 || cfg.Gateway.HoldBudget != 64<<20 || cfg.HTTP.Grace != 30*time.Second {
		t.Errorf("got listen %q, max body %d, hold budget %d, grace %v; want 127.0.0.1:8700, %d, %d, 30s", cfg.Listen, cfg.Gateway.MaxBody, cfg.Gateway.HoldBudget, cfg.HTTP.Grace, 32<<20, 64<<20)
	}
	if h := cfg.HTTP; h.ReadHeaderTimeout != 10*time.Second || cfg.Gateway.BodyTimeout != 30*time.Second || h.KeepAliveTimeout != 2*time.Minute || h.MaxHeaderBytes != 64<<10 || h.MaxConns != 1024 {
		t.Errorf("got read-header %v, body %v, keep-alive %v, header bytes %d, conns %d; want the defaults the file states", h.ReadHeaderTimeout, cfg.Gateway.BodyTimeout, h.KeepAliveTimeout, h.MaxHeaderBytes, h.MaxConns)
	}
	// The example must also make a gateway: prefixes and names are its to check.
	if _, err := gateway.New(cfg.Gateway); err != nil {
		t.Errorf("got %v, want the example to make a gateway", err)
	}
}

// docs/gateway.md shows the example config as it is, line for line.
func TestGatewayDocShowsTheExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(gatewayDoc)
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(example), "\n")
	_, block, ok := strings.Cut(string(readme), "```yaml\n"+first+"\n")
	block, _, closed := strings.Cut(block, "```")
	if !ok || !closed {
		t.Fatalf("%s has no yaml block starting %q", gatewayDoc, first)
	}
	if got := first + "\n" + block; got != string(example) {
		t.Errorf("docs/gateway.md's example config differs from %s:\n%s", exampleConfig, got)
	}
}

// The auth setting's example reads its credential from here.
func init() { os.Setenv("OUTLAST_TEST_AUTH", "sk-table-test-credential") }

// Every setting is declared once, in the table: each has a flag, a key of
// the config file and a help line, and a value given by flag or by file
// reaches the same place, a place its default does not already hold.
func TestSettingsTable(t *testing.T) {
	t.Parallel()
	const up = "http://127.0.0.1:8080"
	def := loadServe(t, "--upstream", up)
	flags, keys := map[string]bool{}, map[string]bool{}
	for _, s := range settings {
		switch {
		case s.flag == "" || s.key == "" || s.help == "":
			t.Errorf("got flag %q, key %q, help %q; want all three", s.flag, s.key, s.help)
		case flags[s.flag] || keys[s.key]:
			t.Errorf("flag %q or key %q is used twice", s.flag, s.key)
		case s.example == "" || s.example == s.def:
			t.Errorf("%s: example %q: want a value other than the default %q", s.flag, s.example, s.def)
		}
		flags[s.flag], keys[s.key] = true, true
		t.Run(s.flag, func(t *testing.T) {
			t.Parallel()
			flag := []string{"--" + s.flag + "=" + s.example}
			entry := fmt.Sprintf("upstreams:\n  - url: %s\n    %s: %q\n", up, s.key, s.example)
			if s.needs != "" {
				n := settingNamed(s.needs)
				flag = append([]string{"--" + n.flag + "=" + n.example}, flag...)
				entry += fmt.Sprintf("    %s: %q\n", n.key, n.example)
			}
			var byFlag, byFile serveConfig
			switch {
			case s.key == "url":
				byFlag = loadServe(t, flag...)
				byFile = loadServe(t, "--config", writeConfig(t, fmt.Sprintf("upstreams:\n  - url: %q\n", s.example)))
			case s.scope == global:
				byFlag = loadServe(t, append([]string{"--upstream", up}, flag...)...)
				byFile = loadServe(t, "--config", writeConfig(t, fmt.Sprintf("%s: %q\n", s.key, s.example)), "--upstream", up)
			default:
				byFlag = loadServe(t, append([]string{"--upstream", up}, flag...)...)
				byFile = loadServe(t, "--config", writeConfig(t, entry))
			}
			if !reflect.DeepEqual(byFlag, byFile) {
				t.Errorf("by flag and by file, the configs differ:\nflag %+v\nfile %+v", byFlag, byFile)
			}
			if reflect.DeepEqual(byFlag, def) {
				t.Errorf("--%s=%s: got the default config; want the value to reach it", s.flag, s.example)
			}
		})
	}
}

func TestServeConfigFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  []string
		check func(c server.Config) (got, want string)
	}{{
		// A flag on the command line overrides every upstream's key,
		// including llama's slots: 2.
		name: "slots overrides every upstream",
		args: []string{"--config", exampleConfig, "--slots", "3"},
		check: func(c server.Config) (string, string) {
			return line(c.Gateway.Upstreams[0].Slots, c.Gateway.Upstreams[1].Slots), "3 3"
		},
	}, {
		// The flags that were not given leave the file's keys alone.
		name: "unset flags keep the file",
		args: []string{"--config", exampleConfig, "--idle-timeout", "1m"},
		check: func(c server.Config) (string, string) {
			u := c.Gateway.Upstreams[1]
			return line(u.Slots, u.Queue, u.Policy.Waits, u.IdleTimeout), "2 8 [2s 5s 10s] 1m0s"
		},
	}, {
		// --waits replaces both lists, and --max-attempts sets both caps.
		name: "policy flags override",
		args: []string{"--config", exampleConfig, "--waits", "1s,2s", "--max-attempts", "3"},
		check: func(c server.Config) (string, string) {
			a, b := c.Gateway.Upstreams[0].Policy, c.Gateway.Upstreams[1].Policy
			return line(a.Waits, a.MaxAttempts, b.Waits, b.MaxAttempts), "[1s 2s] 3 [1s 2s] 3"
		},
	}, {
		// Overriding one upstream's policy must not change another's: each
		// has its own copy.
		name: "policies are not shared",
		args: []string{"--config", exampleConfig, "--reserve", "5s"},
		check: func(c server.Config) (string, string) {
			a, b := c.Gateway.Upstreams[0].Policy, c.Gateway.Upstreams[1].Policy
			return line(a != b, a.Reserve, b.Reserve), "true 5s 5s"
		},
	}, {
		// The CLI's 0 means none: the gateway's and the Policy's zero would
		// mean their defaults, so serve passes -1.
		name: "zero queue and reserve mean none",
		args: []string{"--upstream", "http://example.com", "--queue", "0", "--reserve", "0"},
		check: func(c server.Config) (string, string) {
			u := c.Gateway.Upstreams[0]
			return line(u.Queue, u.Policy.Reserve), "-1 -1ns"
		},
	}, {
		// One duration syntax: a bare number is seconds, wherever a
		// duration goes, and days are whole.
		name: "durations as seconds and days",
		args: []string{"--upstream", "http://example.com", "--reserve", "10", "--grace", "10", "--waits", "5,1.5", "--journal-keep", "1d12h"},
		check: func(c server.Config) (string, string) {
			u := c.Gateway.Upstreams[0]
			return line(u.Policy.Reserve, c.HTTP.Grace, u.Policy.Waits, c.JournalKeep), "10s 10s [5s 1.5s] 36h0m0s"
		},
	}, {
		// The top-level flags override the file's listen, max_body and grace.
		name: "listen, max-body and grace override",
		args: []string{"--config", exampleConfig, "--listen", ":9000", "--max-body", "10", "--grace", "1s"},
		check: func(c server.Config) (string, string) {
			return line(c.Listen, c.Gateway.MaxBody, c.HTTP.Grace), ":9000 10 1s"
		},
	}, {
		// --upstream alone proxies every path with the defaults, and names
		// the upstream for its host.
		name: "upstream alone",
		args: []string{"--upstream", "https://user:secret@api.example.com/v1"},
		check: func(c server.Config) (string, string) {
			u := c.Gateway.Upstreams[0]
			return line(len(c.Gateway.Upstreams), u.Name, u.Prefix, u.URL.Path, u.Queue, u.Policy.Waits, u.Policy.Reserve, u.ReserveShare, u.Timeout, c.Listen, c.JournalKeep),
				"1 api.example.com / /v1 16 [1s 2s 4s 8s 16s 32s 1m0s] 0s 0.25 9m0s 127.0.0.1:8700 168h0m0s"
		},
	}, {
		// --name and --prefix go with --upstream.
		name: "upstream with name and prefix",
		args: []string{"--upstream", "http://127.0.0.1:8080", "--name", "llama", "--prefix", "/llama"},
		check: func(c server.Config) (string, string) {
			u := c.Gateway.Upstreams[0]
			return line(u.Name, u.Prefix), "llama /llama"
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, want := tt.check(loadServe(t, tt.args...).Config)
			if got != want {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
}

// A file without upstreams may give the settings for --upstream.
func TestServeConfigFileWithoutUpstreams(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "listen: 127.0.0.1:9100\ngrace: 5s\n")
	c := loadServe(t, "--config", path, "--upstream", "http://127.0.0.1:8080")
	if got := line(c.Listen, c.HTTP.Grace, len(c.Gateway.Upstreams)); got != "127.0.0.1:9100 5s 1" {
		t.Errorf("got %s, want 127.0.0.1:9100 5s 1", got)
	}
}

func TestServeConfigErrors(t *testing.T) {
	t.Parallel()
	const ok = "upstreams:\n  - url: http://127.0.0.1:8080\n"
	tests := []struct {
		name string
		yaml string // written to config.yaml and given as --config, if set
		args []string
		want string
	}{{
		// The bad part of --waits is named.
		name: "bad waits flag",
		args: []string{"--upstream", "http://x", "--waits", "15s,x"},
		want: `serve: --waits "15s,x": "x" is not a duration such as 15s, 2m, 7d or 90 (seconds)`,
	}, {
		// An empty list would fail at the first retry; refuse it at start.
		name: "empty waits flag",
		args: []string{"--upstream", "http://x", "--waits", ""},
		want: `serve: --waits "": empty`,
	}, {
		// A budget without admission would do nothing: say so.
		name: "retry budget without admission",
		args: []string{"--upstream", "http://x", "--admission=false", "--retry-budget", "0.1"},
		want: `serve: --retry-budget "0.1": a retry budget needs admission: drop --admission=false`,
	}, {
		name: "retry budget out of range",
		args: []string{"--upstream", "http://x", "--retry-budget", "-1"},
		want: `serve: --retry-budget "-1": want a ratio from 0 to 10, such as 0.1`,
	}, {
		name: "negative slots flag",
		args: []string{"--upstream", "http://x", "--slots", "-1"},
		want: `serve: --slots "-1": is negative: want 0 or more`,
	}, {
		// The gateway would pass it, and refuse every body.
		name: "zero max-body flag",
		args: []string{"--upstream", "http://x", "--max-body", "0"},
		want: `serve: --max-body "0": want a whole number of bytes, 1 or more`,
	}, {
		// A budget of nothing would hold no answer: the flag's name
		// says which setting is wrong.
		name: "zero hold-budget flag",
		args: []string{"--upstream", "http://x", "--hold-budget", "0"},
		want: `serve: --hold-budget "0": want a whole number of bytes, 1 or more, such as 67108864`,
	}, {
		name: "negative hold_budget key",
		yaml: ok + "hold_budget: -5\n",
		want: `config.yaml line 3: hold_budget "-5": want a whole number of bytes, 1 or more`,
	}, {
		name: "upstream flag not http",
		args: []string{"--upstream", "ftp://x"},
		want: `serve: --upstream "ftp://x": not an absolute http(s) URL: want one such as https://api.openai.com`,
	}, {
		// A host without a scheme parses as a path, and host:port as a
		// scheme: say what to type.
		name: "upstream flag without scheme",
		args: []string{"--upstream", "api.openai.com"},
		want: `not an absolute http(s) URL: type http://api.openai.com (or https://)`,
	}, {
		name: "upstream flag host and port",
		args: []string{"--upstream", "127.0.0.1:8701"},
		want: `serve: --upstream "127.0.0.1:8701": not an absolute http(s) URL: type http://127.0.0.1:8701 (or https://)`,
	}, {
		// A model renamed twice would keep one rename silently, and a
		// name with , or = would be split into more.
		name: "models flag twice",
		args: []string{"--upstream", "http://x", "--models", "a=x,a=y"},
		want: `serve: --models "a=x,a=y": "a" is renamed twice: give each model once`,
	}, {
		name: "models key twice",
		yaml: "upstreams:\n  - url: http://127.0.0.1:8080\n    models: {gpt-4o: east, gpt-4o: west}\n",
		want: `"gpt-4o" is renamed twice`,
	}, {
		name: "models key with a comma",
		yaml: "upstreams:\n  - url: http://127.0.0.1:8080\n    models: {gpt-4o: \"dep,claude=mini\"}\n",
		want: `a name with , or = cannot be given here`,
	}, {
		// A port past 65535, and a URL with no host name, would make
		// every request an outage.
		name: "upstream flag port too large",
		args: []string{"--upstream", "http://127.0.0.1:99999"},
		want: `serve: --upstream "http://127.0.0.1:99999": port 99999 is not one: want 1 to 65535`,
	}, {
		name: "upstream flag port alone",
		args: []string{"--upstream", "http://:8080"},
		want: `serve: --upstream "http://:8080": not an absolute http(s) URL`,
	}, {
		// The password never reaches the terminal.
		name: "upstream flag redacted",
		args: []string{"--upstream", "ftp://me:secret@x"},
		want: `serve: --upstream "ftp://x": not`,
	}, {
		// A port alone is not an address: say what to type.
		name: "listen port only",
		args: []string{"--upstream", "http://x", "--listen", "8799"},
		want: `serve: --listen "8799": want host:port: type 127.0.0.1:8799, or :8799 for other hosts too`,
	}, {
		// A journal serve cannot open is a usage error, refused at start.
		name: "journal spec",
		args: []string{"--upstream", "http://x", "--journal", "mysql://x"},
		want: `serve: --journal "mysql://x": want off, sqlite:PATH or postgres://…`,
	}, {
		name: "journal writer",
		args: []string{"--upstream", "http://x", "--journal-writer", "thread"},
		want: `serve: --journal-writer "thread": want process or inline`,
	}, {
		name: "no upstream",
		want: "serve: give --upstream URL, or a --config file with upstreams",
	}, {
		// Which would win is a guess either way, so neither does.
		name: "upstream flag and file upstreams",
		yaml: ok,
		args: []string{"--upstream", "http://x"},
		want: "serve: give --upstream or upstreams in --config, not both",
	}, {
		// A file's upstream has its own prefix: the flag would be a guess.
		name: "prefix flag without upstream",
		yaml: ok,
		args: []string{"--prefix", "/a"},
		want: "serve: --prefix goes with --upstream",
	}, {
		// Strict decoding: a typo is refused with its line, not ignored,
		// and the key it is near is named.
		name: "unknown key",
		yaml: "upstreams:\n  - url: http://x\n    prefix: /a\n    slotz: 2\n",
		want: `config.yaml line 4: upstreams[0]: unknown key "slotz" (did you mean "slots"?)`,
	}, {
		// A key of an upstream's own is among those suggested in an
		// upstream's entry.
		name: "unknown key near an upstream's own",
		yaml: ok + "    fallback: [azure]\n",
		want: `config.yaml line 3: upstreams[0]: unknown key "fallback" (did you mean "fallbacks"?)`,
	}, {
		name: "unknown top-level key",
		yaml: ok + "listn: :8700\n",
		want: `config.yaml line 3: the file: unknown key "listn" (did you mean "listen"?)`,
	}, {
		// upstreams is a top-level key too, though no setting's.
		name: "unknown key near upstreams",
		yaml: "upstream:\n  - url: http://x\n",
		want: `config.yaml line 1: the file: unknown key "upstream" (did you mean "upstreams"?)`,
	}, {
		// A key near none: a guess would mislead, so the list it might
		// be is shown.
		name: "unknown key near none",
		yaml: ok + "colour: red\n",
		want: `config.yaml line 3: the file: unknown key "colour" (want one of upstreams, listen, token,`,
	}, {
		name: "unknown upstream key near none",
		yaml: ok + "    colour: red\n",
		want: `config.yaml line 3: upstreams[0]: unknown key "colour" (want one of url, name, prefix, slots,`,
	}, {
		// An upstream's setting does not go at the top level, where it
		// would read as a default for every upstream: the error says
		// where it goes.
		name: "upstream key at the top",
		yaml: ok + "slots: 2\n",
		want: `config.yaml line 3: the file: unknown key "slots" (it is a key of an upstream, under upstreams)`,
	}, {
		// The key a new user met: a timeout is an upstream's, and near
		// none of the top level's, though a part of three of them.
		name: "upstream key at the top exactly",
		yaml: ok + "timeout: 30s\n",
		want: `config.yaml line 3: the file: unknown key "timeout" (it is a key of an upstream, under upstreams)`,
	}, {
		// Misspelt as well as misplaced: the key it is near is named, with
		// where it goes.
		name: "misspelt upstream key at the top",
		yaml: ok + "timout: 30s\n",
		want: `config.yaml line 3: the file: unknown key "timout" (did you mean "timeout", a key of an upstream, under upstreams?)`,
	}, {
		// Case is a slip too, as closest has it.
		name: "upstream key in capitals at the top",
		yaml: ok + "Max_Attempts: 3\n",
		want: `config.yaml line 3: the file: unknown key "Max_Attempts" (did you mean "max_attempts", a key of an upstream, under upstreams?)`,
	}, {
		// The other way round: a top-level setting in an upstream's entry.
		name: "top-level key in an upstream",
		yaml: ok + "    listen: :9000\n",
		want: `config.yaml line 3: upstreams[0]: unknown key "listen" (it is a top-level key)`,
	}, {
		name: "misspelt top-level key in an upstream",
		yaml: ok + "    journal_kep: 1d\n",
		want: `config.yaml line 3: upstreams[0]: unknown key "journal_kep" (did you mean "journal_keep", a top-level key?)`,
	}, {
		// A key as near one of its own level's as another level's is
		// taken for its own level's: "heds" is two edits from the top
		// level's redis and an upstream's hedge.
		name: "own level first at equal distance",
		yaml: ok + "heds: x\n",
		want: `config.yaml line 3: the file: unknown key "heds" (did you mean "redis"?)`,
	}, {
		name: "own level first at equal distance in an upstream",
		yaml: ok + "    heds: x\n",
		want: `config.yaml line 3: upstreams[0]: unknown key "heds" (did you mean "hedge"?)`,
	}, {
		name: "key twice",
		yaml: "upstreams:\n  - url: http://x\n    slots: 1\n    slots: 2\n",
		want: `config.yaml line 4: upstreams[0]: key "slots" is given twice (first on line 3)`,
	}, {
		// A key or value is quoted wherever an error shows it, so that a
		// line break in it cannot split the one line main prints.
		name: "unknown key with a line break",
		yaml: ok + "\"a\\nb\": 1\n",
		want: `config.yaml line 3: the file: unknown key "a\nb" (want one of`,
	}, {
		name: "prefix with a line break",
		yaml: ok + "    prefix: \"a\\nb\"\n",
		want: `config.yaml line 3: upstreams[0].prefix "a\nb": want a path that starts with /, such as "/a\nb"`,
	}, {
		name: "status path with a line break",
		yaml: ok + "    status_paths: [\"a\\nb\"]\n",
		want: `upstreams[0].status_paths "a\nb": path "a\nb": want a path that starts with /, such as "/a\nb"`,
	}, {
		// The example keeps the host, joined as the listener would take it.
		name: "listen host with a line break",
		yaml: ok + "listen: \"a\\nb:99999\"\n",
		want: `config.yaml line 3: listen "a\nb:99999": port "99999": want a number from 0 to 65535, such as "a\nb:8700"`,
	}, {
		name: "listen IPv6 port",
		args: []string{"--upstream", "http://x", "--listen", "[::1]:99999"},
		want: `serve: --listen "[::1]:99999": port "99999": want a number from 0 to 65535, such as "[::1]:8700"`,
	}, {
		// pgx shows the spec raw; the password stays hidden.
		name: "postgres journal with a line break",
		yaml: ok + "journal: \"postgres://u:hunter22@h/db?sslmode=\\n\"\n",
		want: `journal "postgres://h/db\n": cannot parse "postgres://u:xxxxx@h/db?sslmode=\n": failed to configure TLS (sslmode is invalid)`,
	}, {
		name: "postgres journal reason with a line break",
		args: []string{"--upstream", "http://x", "--journal", "postgres://h/db?target_session_attrs=%0A"},
		want: `serve: --journal "postgres://h/db": cannot parse "postgres://h/db?target_session_attrs=%0A": "unknown target_session_attrs value: \n"`,
	}, {
		name: "wrong type",
		yaml: "upstreams:\n  - url: http://x\n    slots: two\n",
		want: `config.yaml line 3: upstreams[0].slots "two": want a whole number`,
	}, {
		name: "syntax",
		yaml: "upstreams:\n  - url: http://x\n    prefix: : /a\n",
		want: "config.yaml line 3: mapping values are not allowed in this context",
	}, {
		name: "bad url",
		yaml: "upstreams:\n  - url: http://x\n    prefix: /a\n  - url: ftp://x\n",
		want: `config.yaml line 4: upstreams[1].url "ftp://x": not an absolute http(s) URL`,
	}, {
		name: "missing url",
		yaml: "upstreams:\n  - prefix: /a\n",
		want: "config.yaml: upstreams[0].url: missing",
	}, {
		name: "bad duration",
		yaml: ok + "    reserve: soon\n",
		want: `config.yaml line 3: upstreams[0].reserve "soon": "soon" is not a duration such as 15s, 2m, 7d or 90 (seconds)`,
	}, {
		name: "bad wait in a list",
		yaml: ok + "    waits: [15s, soon]\n",
		want: `config.yaml line 3: upstreams[0].waits "15s,soon": "soon" is not a duration`,
	}, {
		name: "empty waits list",
		yaml: ok + "    waits: []\n",
		want: `config.yaml line 3: upstreams[0].waits "": empty: give at least one wait`,
	}, {
		name: "waits a map",
		yaml: ok + "    waits: {a: 1}\n",
		want: "config.yaml line 3: upstreams[0].waits: want a value or a list of values, such as [1s,2s]",
	}, {
		name: "slots a list",
		yaml: ok + "    slots: [1, 2]\n",
		want: "config.yaml line 3: upstreams[0].slots: want one value, such as 2",
	}, {
		name: "negative slots",
		yaml: ok + "    slots: -1\n",
		want: `config.yaml line 3: upstreams[0].slots "-1": is negative`,
	}, {
		name: "negative timeout",
		yaml: ok + "    idle_timeout: -1s\n",
		want: `config.yaml line 3: upstreams[0].idle_timeout "-1s": is negative`,
	}, {
		name: "retry_after mode",
		yaml: ok + "    retry_after: soon\n",
		want: `config.yaml line 3: upstreams[0].retry_after "soon": want at-least, exact or ignore`,
	}, {
		name: "jitter out of range",
		yaml: ok + "    jitter_spread: 2\n",
		want: `config.yaml line 3: upstreams[0].jitter_spread "2": want a fraction from 0 to 1`,
	}, {
		name: "zero grace",
		yaml: ok + "grace: 0s\n",
		want: `config.yaml line 3: grace "0s": want a positive duration`,
	}, {
		name: "upstreams not a list",
		yaml: "upstreams: http://x\n",
		want: "config.yaml line 1: upstreams: want a list of upstreams",
	}, {
		// Only the first document would be read; the rest would be lost.
		name: "two documents",
		yaml: ok + "---\n" + ok,
		want: "config.yaml: holds more than one YAML document",
	}, {
		// The gateway's own checks are usage errors too.
		name: "same prefix twice",
		yaml: ok + "  - url: http://y\n",
		want: `serve: gateway: upstreams[1] (y): prefix "/" is used twice`,
	}, {
		name: "missing file",
		args: []string{"--config", "testdata/no-such.yaml"},
		want: "serve: --config: open testdata/no-such.yaml: no such file or directory",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := tt.args
			if tt.yaml != "" {
				args = append([]string{"--config", writeConfig(t, tt.yaml)}, args...)
			}
			err := setupServe(args)
			switch {
			case err == nil:
				t.Fatalf("got no error, want %q", tt.want)
			case !strings.Contains(err.Error(), tt.want):
				t.Errorf("got %q, want it to contain %q", err, tt.want)
			case strings.Contains(err.Error(), "\n"):
				t.Errorf("got %q, want one line", err)
			case !errors.Is(err, ErrUsage):
				t.Errorf("got %v, want an error wrapping ErrUsage (exit 2)", err)
			}
		})
	}
}

// setupServe runs serve's checks, up to the gateway, without listening.
func setupServe(args []string) error {
	cfg, done, err := serveConfigFrom(args, io.Discard)
	if done {
		return err
	}
	if _, err := gateway.New(cfg.Gateway); err != nil {
		return &usageError{err}
	}
	return nil
}

// docs/gateway.md's fallback example, loaded: openai falls back to azure,
// which renames the model and holds its own key.
func TestFallbackExampleConfig(t *testing.T) {
	t.Parallel()
	const file = "testdata/fallback.example.yaml"
	c := loadServe(t, "--config", file)
	ups := c.Gateway.Upstreams
	if len(ups) != 2 || !slices.Equal(ups[0].Fallbacks, []string{"azure"}) || ups[0].Prefer != outlast.PreferPrimary {
		t.Fatalf("upstreams %+v, want openai falling back to azure, preferring openai", ups)
	}
	if ups[1].Models["gpt-4o"] != "gpt-4o-prod" || ups[1].Auth == nil || ups[1].Auth.Header() != "Api-Key" {
		t.Errorf("azure: models %v, auth %v, want gpt-4o renamed and a key in api-key", ups[1].Models, ups[1].Auth)
	}
	example, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(gatewayDoc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```yaml\n"+string(example)+"```") {
		t.Errorf("docs/gateway.md has no yaml block that is %s", file)
	}
}

// The fallback example's key, from the environment as a user's would be.
func init() { os.Setenv("AZURE_OPENAI_API_KEY", "sk-example-azure-key") }

// A held credential that cannot be read is refused at start, by its
// source, never showing a value.
func TestAuthSource(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ auth, want string }{
		{"env:OUTLAST_TEST_UNSET_CREDENTIAL", "env:OUTLAST_TEST_UNSET_CREDENTIAL: the variable is unset or empty"},
		{"file:/nonexistent/key", "file:/nonexistent/key: no such file or directory"},
		{"sk-raw-key-in-config", "want env:NAME or file:PATH"},
	} {
		_, _, err := serveConfigFrom([]string{"--upstream", "http://127.0.0.1:8080", "--auth", c.auth}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--auth %s: %v, want an error saying %s", c.auth, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "sk-raw-key-in-config") {
			t.Errorf("--auth: the error shows the value: %v", err)
		}
	}
}

// A credential file saved with a byte order mark (Notepad's UTF-8), and
// the white space around it, give the key alone.
func TestAuthSourceTrimmed(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte("\ufeffsk-live-KEY \r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := readSecret("file:" + path); err != nil || v != "sk-live-KEY" {
		t.Errorf("got %q, %v; want the key alone", v, err)
	}
}
