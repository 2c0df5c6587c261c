package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/internal/journalproc"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/metrics"
	"github.com/outlast-llm/outlast/timeline"
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
15s or 2m. SIGINT or SIGTERM stops the gateway: it takes no new requests
and lets those in flight finish for up to --grace.

Flags:`

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, done, err := serveConfigFrom(args, stderr)
	if done {
		return err
	}
	rec, err := openRecord(ctx, cfg, newLogger(stderr))
	if err != nil {
		return err
	}
	defer rec.close(stderr)
	g, err := newGateway(cfg, rec, stderr)
	if err != nil {
		return err
	}
	// Listen after every check, so that a wrong flag never holds the port.
	l, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	go rec.keeper.Run(ctx)
	// Open pages keep their event streams open: end them when the drain
	// starts, or they would hold it for the whole grace period.
	stop := context.AfterFunc(ctx, rec.feed.Close)
	defer stop()
	return serve(ctx, l, g, cfg, stderr)
}

// record is the journal as serve runs it: the store, its batch writer and
// its keeper. Every field is nil or zero with --journal off.
type record struct {
	store  journal.Store
	writer *journal.Writer
	keeper *journal.Keeper
	feed   *timeline.Feed  // the live page's recent requests, kept in memory
	tracer *tracing.Tracer // nil unless OTEL_EXPORTER_OTLP_ENDPOINT is set
}

// openRecord opens the journal cfg names and starts its writer.
func openRecord(ctx context.Context, cfg *serveConfig, logger *slog.Logger) (*record, error) {
	tracer, err := tracing.FromEnv(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: serve: tracing: %v", ErrUsage, err)
	}
	store, err := journal.Open(ctx, cfg.journal)
	if err != nil {
		return nil, fmt.Errorf("serve: --journal: %w", err)
	}
	if store != nil && !inProcessWriter(cfg.journal, cfg.journalWriter) {
		w, err := journalproc.Start(ctx, cfg.journal, store)
		if err != nil {
			store.Close()
			return nil, fmt.Errorf("serve: --journal-writer %s: %w (--journal-writer inline writes in this process)", cfg.journalWriter, err)
		}
		store = w
	}
	r := &record{store: store, keeper: &journal.Keeper{Store: store, Keep: cfg.keep, Logger: logger}, feed: timeline.New(0), tracer: tracer}
	if store != nil {
		r.writer = journal.NewWriter(store, journal.WriterConfig{Logger: logger})
	} else {
		r.keeper.Keep = 0 // nothing to prune
	}
	return r, nil
}

// close flushes what the writer holds, for up to 10 s, and closes the store.
func (r *record) close(stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.tracer.Shutdown(ctx); err != nil {
		fmt.Fprintf(stderr, "outlast: serve: tracing: %v\n", err)
	}
	if r.store == nil {
		return
	}
	if err := r.writer.Close(ctx); err != nil {
		fmt.Fprintf(stderr, "outlast: serve: the journal: %v\n", err)
	}
	r.store.Close()
}

// serveConfigFrom parses args and the config file they name. done is set
// when there is nothing to serve: --help was asked for, or err says why.
func serveConfigFrom(args []string, stderr io.Writer) (cfg *serveConfig, done bool, err error) {
	var f serveFlags
	fs := f.flagSet(stderr)
	if done, err := parseFlags(fs, args, stderr); done {
		return nil, true, err
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	cfg, err = f.load()
	return cfg, err != nil, err
}

func (f *serveFlags) flagSet(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(stderr, serveUsage)
		fs.PrintDefaults()
	}
	// PrintDefaults omits a zero default, so those usages name it.
	fs.StringVar(&f.config, "config", "", "a YAML `file` of upstreams and settings (default: none)")
	fs.StringVar(&f.listen, "listen", defaultListen, "the `address` to serve on; :8700 takes other hosts too")
	fs.StringVar(&f.upstream, "upstream", "", "the `URL` to forward every path to, instead of a config file's upstreams (default: none)")
	fs.IntVar(&f.slots, "slots", 0, "requests in flight to an upstream; the rest wait in order. 0 means no bound (default 0)")
	fs.IntVar(&f.queue, "queue", defaultQueue, "requests that may wait for a slot; more are refused at once with 503. 0 means none may wait")
	fs.StringVar(&f.waits, "waits", defaultWaits, "the `list` of waits before retry 1, 2, …; the last repeats while a request's deadline allows")
	fs.DurationVar(&f.reserve, "reserve", defaultReserve, "the time a request's deadline must still have after a wait for the retry to be made; 0 means none")
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "caps a request's attempts, the first included; 0 means no cap (default 0)")
	fs.DurationVar(&f.firstByte, "first-byte-timeout", defaultFirstByteTimeout, "bounds an attempt's wait for its first byte; a slower attempt is retried. 0 means no bound")
	fs.DurationVar(&f.idle, "idle-timeout", defaultIdleTimeout, "bounds the silence within a response being forwarded; 0 means no bound")
	fs.Int64Var(&f.maxBody, "max-body", defaultMaxBody, "the largest request body, in `bytes`; a larger one gets 413 (32 MiB)")
	fs.DurationVar(&f.grace, "grace", defaultGrace, "how long requests in flight may finish after SIGINT or SIGTERM")
	fs.StringVar(&f.journal, "journal", journal.DefaultSpec, "where the record is kept: sqlite:`PATH`, a postgres:// URL for several replicas, or off")
	fs.StringVar(&f.journalWriter, "journal-writer", writerProcess, "who writes a SQLite journal: process, a child process at the lowest CPU priority, so that its writes never take a core from the requests; or inline, this process")
	fs.StringVar(&f.keep, "journal-keep", "7d", "how long the journal keeps a request, as 7d or 12h; 0 keeps it for ever")
	fs.BoolVar(&f.journalHeaders, "journal-headers", false, "keep each request's headers in the journal, credentials and --redact left out (default false: they cost more than the rest of the record)")
	fs.StringVar(&f.redact, "redact", "", "comma-separated request `headers` the record must not keep, besides the credentials it never keeps (default: none)")
	return fs
}

// newGateway builds the gateway cfg describes, with its metrics, logging
// to stderr: JSON lines, or text on a terminal. Its errors are usage
// errors: all of them name a setting.
func newGateway(cfg *serveConfig, rec *record, stderr io.Writer) (*gateway.Gateway, error) {
	cfg.gateway.Logger = newLogger(stderr)
	names := make([]string, len(cfg.gateway.Upstreams))
	for i, u := range cfg.gateway.Upstreams {
		names[i] = u.Name
	}
	m := metrics.New(names)
	obs := []gateway.Observer{cfg.gateway.Observer, m.Observer(), rec.feed.Observer(), rec.tracer.Observer()}
	if cfg.gateway.Endpoints == nil {
		cfg.gateway.Endpoints = map[string]http.Handler{}
	}
	cfg.gateway.Endpoints["metrics"] = m.Handler()
	for k, h := range rec.feed.Endpoints() {
		cfg.gateway.Endpoints[k] = h
	}
	api := &journal.API{Store: rec.store}
	for k, h := range api.Endpoints() {
		cfg.gateway.Endpoints[k] = h
	}
	if w := rec.writer; w != nil {
		obs = append(obs, journal.Observer(w, journal.ObserverConfig{Headers: cfg.journalHeaders}))
		m.SetJournalDropped(w.Dropped)
		cfg.gateway.JournalStats = func() (uint64, uint64) { return w.Dropped(), w.Failed() }
	}
	cfg.gateway.Observer = gateway.Observers(obs...)
	g, err := gateway.New(cfg.gateway)
	if err != nil {
		return nil, &usageError{err}
	}
	m.SetHealth(g.Health)
	rec.feed.SetHealth(g.Health)
	return g, nil
}

// newLogger logs JSON lines, for a log collector, unless w is a terminal.
func newLogger(w io.Writer) *slog.Logger {
	if isTerminal(w) {
		return slog.New(slog.NewTextHandler(w, nil))
	}
	return slog.New(slog.NewJSONHandler(w, nil))
}

// serve serves h on l until ctx ends, then lets the requests in flight
// finish for up to cfg.grace and returns nil.
func serve(ctx context.Context, l net.Listener, h http.Handler, cfg *serveConfig, stderr io.Writer) error {
	fmt.Fprintf(stderr, "outlast: serving on http://%s → %s; the timeline is at http://%s/outlast/\n", l.Addr(), describeUpstreams(cfg.gateway.Upstreams), l.Addr())
	if err := gateway.Serve(ctx, l, h, cfg.grace); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// describeUpstreams lists the upstreams as "name (url) at /prefix", with
// any password in a URL redacted.
func describeUpstreams(ups []gateway.Upstream) string {
	parts := make([]string, len(ups))
	for i, u := range ups {
		parts[i] = fmt.Sprintf("%s (%s)", u.Name, u.URL.Redacted())
		if u.Prefix != "/" && u.Prefix != "" {
			parts[i] += " at " + u.Prefix
		}
	}
	return strings.Join(parts, ", ")
}
