package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/internal/redact"
	"github.com/outlast-llm/outlast/server"
	"github.com/outlast-llm/outlast/tracing"
)

const serveUsage = `Usage: outlast serve [--config FILE] [--listen ADDR] [--upstream URL] [flags]

Runs the gateway: an HTTP proxy that forwards LLM API requests to an
upstream with retries, a slot gate and a record, for hosts in any language.
Point a host's base URL at http://ADDR, or at http://ADDR/PREFIX for a
config file's upstream. With --upstream alone, every path goes to it.

A config file (YAML) names several upstreams, each with a path prefix;
a key it leaves out takes the flag's default, and a flag given on the
command line overrides the file for every upstream. Durations are such as
15s, 2m, 7d or 90 (seconds). SIGINT or SIGTERM stops the gateway: it takes
no new requests and lets those in flight finish for up to --grace.

Flags, each with its key in the config file:`

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, done, err := serveConfigFrom(args, stderr)
	if done {
		return err
	}
	var flushLog func()
	cfg.Gateway.Logger, flushLog = newLogger(stderr, cfg.logLevel)
	defer flushLog()
	if cfg.Tracer, err = tracing.FromEnv(ctx); err != nil {
		return &usageError{err}
	}
	// Listen before the server is made, which opens the journal: a port
	// in use leaves no journal behind. A server that cannot be made
	// closes the listener at once, so no wrong setting holds the port.
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	srv, err := server.New(ctx, cfg.Config)
	if err != nil {
		l.Close()
		if _, ok := errors.AsType[*server.ConfigError](err); ok {
			return &usageError{err}
		}
		return fmt.Errorf("serve: %w", err)
	}
	defer closeServer(srv, stderr)
	defer TuneGC()()
	fmt.Fprintf(stderr, "outlast: serving on http://%s → %s; the timeline is at http://%s/outlast/\n", l.Addr(), describeUpstreams(cfg.Gateway.Upstreams), l.Addr())
	said := make(chan struct{})
	saying := context.AfterFunc(ctx, func() {
		cfg.Gateway.Logger.Warn("outlast: stopping: the requests in flight have --grace to finish; another interrupt ends them at once",
			"grace", cmp.Or(cfg.HTTP.Grace, gateway.DefaultGrace))
		close(said)
	})
	err = srv.Serve(ctx, l)
	if !saying() {
		<-said // in the log before it is flushed
	}
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// ServeConfig returns the configuration outlast serve runs with for
// args, with serve's logger writing to logw, as serve writes to its
// stderr, and the func that writes the lines the logger holds. It is for
// a benchmark that measures the gateway as a user runs it, in its own
// process.
func ServeConfig(args []string, logw io.Writer) (_ server.Config, flushLog func(), err error) {
	cfg, done, err := serveConfigFrom(args, io.Discard)
	if done && err == nil {
		err = errors.New("serve: nothing to serve (--help)")
	}
	cfg.Gateway.Logger, flushLog = newLogger(logw, cfg.logLevel)
	return cfg.Config, flushLog, err
}

// closeServer flushes the journal and the traces, for up to 10 s, and
// closes the journal.
func closeServer(srv *server.Server, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Close(ctx); err != nil {
		fmt.Fprintf(stderr, "outlast: serve: %v\n", err)
	}
}

// serveConfigFrom parses args and the config file they name. done is set
// when there is nothing to serve: --help was asked for, or err says why.
func serveConfigFrom(args []string, stderr io.Writer) (cfg serveConfig, done bool, err error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f := newServeFlags(fs)
	fs.Usage = func() { serveHelp(stderr, fs) }
	if done, err := parseFlags(fs, args, stderr); done {
		return cfg, true, err
	}
	cfg, err = f.load()
	return cfg, err != nil, err
}

// serveHelp prints serve's usage, --config, and every setting in the
// table's order, made from the table: its flag, what it takes, its help,
// its default and its key in the file.
func serveHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, serveUsage)
	printFlag(w, fs.Lookup("config"))
	for _, s := range settings {
		arg := s.arg
		if s.bool {
			arg = ""
		}
		writeFlag(w, s.flag, arg, s.help, s.shownDefault()+"; in the file: "+s.key+s.scope.where())
	}
}

// shownDefault is the default as --help and docs/gateway.md show it.
func (s setting) shownDefault() string {
	switch {
	case s.flag == "name":
		return "the URL's host"
	case s.def == "":
		return "none"
	}
	return s.def
}

// where says, after a key, where in the file it goes.
func (sc scope) where() string {
	switch sc {
	case upstream:
		return ", per upstream"
	case identity:
		return ", each upstream's own"
	}
	return ""
}

// newLogger logs lines of level or more: JSON lines, for a log
// collector, unless w is a terminal. Durations are written as Go writes
// them ("1.5s"), in text and JSON alike, not as a count of nanoseconds.
// Lines to anything but a terminal are buffered (see logWriter) but for
// warnings and errors; flush writes what waits.
func newLogger(w io.Writer, level slog.Level) (logger *slog.Logger, flush func()) {
	opts := &slog.HandlerOptions{Level: level}
	if isTerminal(w) {
		return slog.New(slog.NewTextHandler(w, opts)), func() {}
	}
	lw := newLogWriter(w)
	return slog.New(jsonLog{Handler: slog.NewJSONHandler(lw, opts), w: lw}), lw.Flush
}

// describeUpstreams lists the upstreams as "name (url) at /prefix", each
// URL without its query or user info.
func describeUpstreams(ups []gateway.Upstream) string {
	parts := make([]string, len(ups))
	for i, u := range ups {
		if len(u.Members) > 0 {
			names := make([]string, len(u.Members))
			for j, m := range u.Members {
				names[j] = cmp.Or(m.Name, redact.URL(m.URL))
			}
			parts[i] = fmt.Sprintf("%s (a pool of %s)", u.Name, strings.Join(names, ", "))
		} else {
			parts[i] = fmt.Sprintf("%s (%s)", u.Name, redact.URL(u.URL))
		}
		if u.Prefix != "/" && u.Prefix != "" {
			parts[i] += " at " + u.Prefix
		}
	}
	return strings.Join(parts, ", ")
}
