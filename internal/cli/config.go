package cli

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/journal"
)

// serve's defaults, which --help shows.
const (
	defaultListen           = "127.0.0.1:8700"
	defaultWaits            = "15s,45s,120s,240s" // seed 000
	defaultReserve          = outlast.DefaultReserve
	defaultQueue            = gateway.DefaultQueue
	defaultFirstByteTimeout = 5 * time.Minute
	defaultIdleTimeout      = 2 * time.Minute
	defaultMaxBody          = gateway.DefaultMaxBody
	defaultGrace            = gateway.DefaultGrace
)

// serveConfig is what serve runs: the gateway, where it listens and how
// long it drains.
type serveConfig struct {
	listen         string
	grace          time.Duration
	gateway        gateway.Config
	journal        string        // a journal.Open spec: sqlite:PATH, postgres://…, or off
	journalHeaders bool          // keep request headers in the journal
	journalWriter  string        // writerProcess or writerInline
	keep           time.Duration // how long the journal keeps a request; 0 for ever
}

// serveFlags are serve's flags as parsed, before they are checked.
type serveFlags struct {
	config, listen, upstream, waits string
	journal, keep, redact           string
	journalWriter                   string
	journalHeaders                  bool
	slots, queue, maxAttempts       int
	reserve, firstByte, idle, grace time.Duration
	maxBody                         int64

	set map[string]bool // the flags given on the command line, by name
}

// usageError is a wrong flag, config file or URL. It reads as its message
// alone and wraps ErrUsage, so main prints one line and exits 2.
type usageError struct{ err error }

func (e *usageError) Error() string   { return "serve: " + e.err.Error() }
func (e *usageError) Unwrap() []error { return []error{ErrUsage, e.err} }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// load checks the flags and reads the config file they name into the
// config to serve. A flag given on the command line wins over the file,
// for every upstream; a key the file leaves out takes the flag's default.
func (f *serveFlags) load() (*serveConfig, error) {
	base, err := f.base()
	if err != nil {
		return nil, err
	}
	cfg := &serveConfig{listen: f.listen, grace: f.grace, journal: f.journal, journalHeaders: f.journalHeaders, journalWriter: f.journalWriter, gateway: gateway.Config{MaxBody: f.maxBody, Redact: splitList(f.redact)}}
	if f.journalWriter != writerProcess && f.journalWriter != writerInline {
		return nil, usagef("--journal-writer %q: want %s or %s", f.journalWriter, writerProcess, writerInline)
	}
	if cfg.keep, err = journal.ParseKeep(f.keep); err != nil {
		return nil, usagef("--journal-keep %q: %v", f.keep, err)
	}
	var file fileConfig
	if f.config != "" {
		if file, err = readConfig(f.config); err != nil {
			return nil, err
		}
		if err := file.apply(cfg, f); err != nil {
			return nil, err
		}
	}
	if cfg.gateway.Upstreams, err = f.upstreams(file, base); err != nil {
		return nil, err
	}
	return cfg, nil
}

// upstreams returns the file's upstreams with the flags given on the
// command line applied, or the one that --upstream names.
func (f *serveFlags) upstreams(file fileConfig, base gateway.Upstream) ([]gateway.Upstream, error) {
	switch {
	case f.upstream != "" && len(file.Upstreams) > 0:
		return nil, usagef("give --upstream or upstreams in --config, not both")
	case f.upstream != "":
		u, err := upstreamURL(f.upstream)
		if err != nil {
			return nil, usagef("--upstream: %v", err)
		}
		base.URL, base.Name = u, u.Host
		return []gateway.Upstream{base}, nil
	case len(file.Upstreams) == 0:
		return nil, usagef("give --upstream URL or a --config file with upstreams")
	}
	ups := make([]gateway.Upstream, len(file.Upstreams))
	for i, fu := range file.Upstreams {
		u, err := fu.upstream(fmt.Sprintf("upstreams[%d]", i), base)
		if err != nil {
			return nil, usagef("%s: %v", f.config, err)
		}
		f.override(&u, base)
		ups[i] = u
	}
	return ups, nil
}

// base checks the flags and returns the upstream they describe, less its
// URL: what every upstream starts from.
func (f *serveFlags) base() (gateway.Upstream, error) {
	if err := f.check(); err != nil {
		return gateway.Upstream{}, err
	}
	waits, err := parseWaits(f.waits)
	if err != nil {
		return gateway.Upstream{}, usagef("--waits %q: %v", f.waits, err)
	}
	return gateway.Upstream{
		Prefix:           "/",
		Slots:            f.slots,
		Queue:            queueOf(f.queue),
		Policy:           &outlast.Policy{Waits: waits, Reserve: reserveOf(f.reserve), MaxAttempts: f.maxAttempts},
		FirstByteTimeout: f.firstByte,
		IdleTimeout:      f.idle,
	}, nil
}

// check refuses the numeric flags that are out of range.
func (f *serveFlags) check() error {
	for _, c := range []struct {
		name string
		bad  bool
		val  any
	}{
		{"slots", f.slots < 0, f.slots},
		{"queue", f.queue < 0, f.queue},
		{"max-attempts", f.maxAttempts < 0, f.maxAttempts},
		{"reserve", f.reserve < 0, f.reserve},
		{"first-byte-timeout", f.firstByte < 0, f.firstByte},
		{"idle-timeout", f.idle < 0, f.idle},
	} {
		if c.bad {
			return usagef("--%s %v is negative", c.name, c.val)
		}
	}
	switch {
	case f.maxBody < 1:
		return usagef("--max-body %d: want 1 byte or more", f.maxBody)
	case f.grace <= 0:
		return usagef("--grace %v: want a positive duration", f.grace)
	}
	return nil
}

// override sets on u the settings whose flags the command line gave,
// taking them from base, the upstream the flags describe.
func (f *serveFlags) override(u *gateway.Upstream, base gateway.Upstream) {
	p, bp := u.Policy, base.Policy
	for name := range f.set {
		switch name {
		case "slots":
			u.Slots = base.Slots
		case "queue":
			u.Queue = base.Queue
		case "waits":
			p.Waits = bp.Waits
		case "reserve":
			p.Reserve = bp.Reserve
		case "max-attempts":
			p.MaxAttempts = bp.MaxAttempts
		case "first-byte-timeout":
			u.FirstByteTimeout = base.FirstByteTimeout
		case "idle-timeout":
			u.IdleTimeout = base.IdleTimeout
		}
	}
}

// queueOf maps the CLI's queue, where 0 means that nobody waits, to the
// gateway's, where 0 means its default and a negative value nobody.
func queueOf(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// reserveOf maps the CLI's reserve, where 0 means none, to the Policy's,
// where 0 means DefaultReserve and a negative value none.
func reserveOf(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// parseWaits is gateway.ParseWaits, which the Outlast-Waits header also
// uses, refusing an empty list by name rather than as an empty duration.
func parseWaits(s string) ([]time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty: give at least one wait, such as 15s,45s")
	}
	return gateway.ParseWaits(s)
}

// upstreamURL parses an upstream's URL, which must be absolute http or
// https with a host. Its errors redact the URL's password.
func upstreamURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the url.Error repeats s
		}
		return nil, fmt.Errorf("%q is not a URL: %v", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not an absolute http(s) URL", u.Redacted())
	}
	return u, nil
}

// fileConfig is the YAML config file (testdata/outlast.example.yaml shows
// every key). A key left out takes the flag's value.
type fileConfig struct {
	Listen      string         `yaml:"listen"`
	Journal     string         `yaml:"journal"`
	JournalKeep string         `yaml:"journal_keep"`
	Redact      []string       `yaml:"redact"`
	MaxBody     *int64         `yaml:"max_body"`
	Grace       string         `yaml:"grace"`
	Upstreams   []fileUpstream `yaml:"upstreams"`
}

// fileUpstream is one upstream in the config file. Durations are strings,
// parsed here so that an error can name the key.
type fileUpstream struct {
	Name             string   `yaml:"name"`
	Prefix           string   `yaml:"prefix"`
	URL              string   `yaml:"url"`
	Slots            *int     `yaml:"slots"`
	Queue            *int     `yaml:"queue"`
	Waits            *waits   `yaml:"waits"`
	Reserve          string   `yaml:"reserve"`
	MaxAttempts      *int     `yaml:"max_attempts"`
	Window           string   `yaml:"window"`
	JitterSpread     *float64 `yaml:"jitter_spread"`
	RetryAfter       string   `yaml:"retry_after"`
	FirstByteTimeout string   `yaml:"first_byte_timeout"`
	IdleTimeout      string   `yaml:"idle_timeout"`
}

// waits is the waits key: a list of durations, or one comma-separated
// string as --waits takes.
type waits string

// UnmarshalYAML implements yaml.Unmarshaler.
func (w *waits) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*w = waits(n.Value)
		return nil
	case yaml.SequenceNode:
		var list []string
		if err := n.Decode(&list); err != nil {
			return err
		}
		*w = waits(strings.Join(list, ","))
		return nil
	}
	return fmt.Errorf("line %d: waits: want a list of durations such as [15s, 45s]", n.Line)
}

// readConfig reads and strictly decodes a config file: an unknown key is
// refused with its line, so a typo does not silently leave a default.
func readConfig(path string) (fileConfig, error) {
	var fc fileConfig
	data, err := os.ReadFile(path)
	if err != nil {
		return fc, usagef("--config: %v", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) { // io.EOF: an empty file
		return fc, yamlError(path, err)
	}
	if err := dec.Decode(new(fileConfig)); !errors.Is(err, io.EOF) {
		return fc, usagef("%s: holds more than one YAML document", path)
	}
	return fc, nil
}

// yamlError turns a decoding error into one line naming the file and line:
// the decoder's own lists every error on a line of its own.
func yamlError(path string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
		if i := strings.Index(msg, " in type "); i >= 0 {
			msg = msg[:i] // the Go type means nothing to the file's author
		}
		if n := len(te.Errors) - 1; n > 0 {
			msg += fmt.Sprintf(" (and %d more)", n)
		}
	}
	msg = strings.ReplaceAll(msg, "\n", " ")
	if strings.HasPrefix(msg, "line ") {
		return usagef("%s %s", path, msg)
	}
	return usagef("%s: %s", path, msg)
}

// apply sets cfg's listen address, body limit and grace from the file,
// where the command line did not.
func (fc fileConfig) apply(cfg *serveConfig, f *serveFlags) error {
	if fc.Listen != "" && !f.set["listen"] {
		cfg.listen = fc.Listen
	}
	if fc.Journal != "" && !f.set["journal"] {
		cfg.journal = fc.Journal
	}
	if fc.JournalKeep != "" && !f.set["journal-keep"] {
		d, err := journal.ParseKeep(fc.JournalKeep)
		if err != nil {
			return usagef("%s: journal_keep %q: %v", f.config, fc.JournalKeep, err)
		}
		cfg.keep = d
	}
	if len(fc.Redact) > 0 && !f.set["redact"] {
		cfg.gateway.Redact = fc.Redact
	}
	if fc.MaxBody != nil && !f.set["max-body"] {
		if *fc.MaxBody < 1 {
			return usagef("%s: max_body %d: want 1 byte or more", f.config, *fc.MaxBody)
		}
		cfg.gateway.MaxBody = *fc.MaxBody
	}
	if fc.Grace != "" && !f.set["grace"] {
		d, err := parseDuration(fc.Grace)
		switch {
		case err != nil:
			return usagef("%s: grace: %v", f.config, err)
		case d <= 0:
			return usagef("%s: grace %q: want a positive duration", f.config, fc.Grace)
		}
		cfg.grace = d
	}
	return nil
}

// upstream returns the upstream the file describes at path, starting
// from base. Its errors name the key.
func (fu fileUpstream) upstream(path string, base gateway.Upstream) (gateway.Upstream, error) {
	u := base
	p := *base.Policy
	u.Policy = &p
	d := &keys{path: path}
	u.URL = d.url(fu.URL)
	if u.URL != nil {
		u.Name = cmp.Or(fu.Name, u.URL.Host)
	}
	u.Prefix = cmp.Or(fu.Prefix, "/")
	d.count("slots", fu.Slots, &u.Slots)
	if d.count("queue", fu.Queue, &u.Queue) {
		u.Queue = queueOf(u.Queue)
	}
	d.duration("first_byte_timeout", fu.FirstByteTimeout, &u.FirstByteTimeout)
	d.duration("idle_timeout", fu.IdleTimeout, &u.IdleTimeout)
	fu.policy(d, &p)
	return u, d.err
}

// policy sets the retry policy's keys on p, which starts as the flags'.
func (fu fileUpstream) policy(d *keys, p *outlast.Policy) {
	d.waits(fu.Waits, &p.Waits)
	if d.duration("reserve", fu.Reserve, &p.Reserve) {
		p.Reserve = reserveOf(p.Reserve)
	}
	d.count("max_attempts", fu.MaxAttempts, &p.MaxAttempts)
	d.duration("window", fu.Window, &p.Window)
	if fu.JitterSpread != nil {
		p.Jitter.Spread = *fu.JitterSpread // Validate checks the range
	}
	d.retryAfter(fu.RetryAfter, &p.RetryAfter)
	if d.err == nil {
		if err := p.Validate(); err != nil {
			d.err = fmt.Errorf("%s: %w", d.path, err)
		}
	}
}

// keys converts one upstream's keys, keeping the first error, which names
// the key by its path, as "upstreams[1].slots".
type keys struct {
	path string
	err  error
}

func (k *keys) fail(key, format string, args ...any) {
	if k.err == nil {
		k.err = fmt.Errorf("%s.%s%s", k.path, key, fmt.Sprintf(format, args...))
	}
}

func (k *keys) url(s string) *url.URL {
	if s == "" {
		k.fail("url", ": missing: give the upstream's absolute http(s) URL")
		return nil
	}
	u, err := upstreamURL(s)
	if err != nil {
		k.fail("url", ": %v", err)
	}
	return u
}

// count sets *dst to *v, a count of 0 or more, if the key is present, and
// reports whether it was set.
func (k *keys) count(key string, v *int, dst *int) bool {
	switch {
	case v == nil:
		return false
	case *v < 0:
		k.fail(key, " %d is negative", *v)
		return false
	}
	*dst = *v
	return true
}

// duration sets *dst to s, a duration of 0 or more, if the key is present,
// and reports whether it was set.
func (k *keys) duration(key, s string, dst *time.Duration) bool {
	if s == "" {
		return false
	}
	d, err := parseDuration(s)
	switch {
	case err != nil:
		k.fail(key, ": %v", err)
		return false
	case d < 0:
		k.fail(key, " %q is negative", s)
		return false
	}
	*dst = d
	return true
}

func (k *keys) waits(w *waits, dst *[]time.Duration) {
	if w == nil {
		return
	}
	list, err := parseWaits(string(*w))
	if err != nil {
		k.fail("waits", " %q: %v", string(*w), err)
		return
	}
	*dst = list
}

func (k *keys) retryAfter(s string, dst *outlast.RetryAfterMode) {
	for _, m := range []outlast.RetryAfterMode{outlast.RetryAfterAtLeast, outlast.RetryAfterExact, outlast.RetryAfterIgnore} {
		if s == m.String() {
			*dst = m
			return
		}
	}
	if s != "" {
		k.fail("retry_after", " %q: want at-least, exact or ignore", s)
	}
}

// parseDuration parses one duration of the config file, which needs a
// unit as the duration flags do.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 15s or 2m", s)
	}
	return d, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
