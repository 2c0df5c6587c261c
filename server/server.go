// Package server assembles outlast's gateway as outlast serve runs it: the
// gateway with its journal (and the journal's writer process), the
// record's API, metrics, the live timeline page and traces, each wired to
// the others. outlast serve, outlast demo and the load benchmark all build
// their gateway with [New], so that what is demonstrated and measured is
// what runs.
//
// A program that uses a SQLite journal written by a child process (the
// default, where the operating system lets the child's priority be
// lowered) calls [RunJournalWriter] first in main.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/metrics"
	"github.com/outlast-llm/outlast/record"
	"github.com/outlast-llm/outlast/server/internal/journalproc"
	"github.com/outlast-llm/outlast/timeline"
	"github.com/outlast-llm/outlast/tracing"
)

// Who writes a SQLite journal, for Config.JournalWriter.
const (
	// WriterProcess writes it from a child process at the lowest CPU
	// priority, so that its writes never take a core from the requests.
	WriterProcess = "process"
	// WriterInline writes it from the gateway's own process.
	WriterInline = "inline"
)

// DefaultListen is the address Config.Listen's zero value means.
const DefaultListen = "127.0.0.1:8700"

// Config is what New assembles. Its zero value, with Gateway.Upstreams
// set, is a gateway on DefaultListen with a SQLite journal in the working
// directory (journal.DefaultSpec) kept for ever, metrics and the timeline
// page, and no traces.
type Config struct {
	// Gateway configures the proxy. Its Observer, JournalStats and
	// Endpoints are New's to fill in; set Observer below to add one. Its
	// Logger, slog.Default() if nil, also gets the journal's lines.
	Gateway gateway.Config

	// Listen is the address ListenAndServe listens on. Empty means
	// DefaultListen, on loopback. Any other host needs Gateway.Token, or
	// InsecureNoAuth.
	Listen string

	// InsecureNoAuth lets Listen be an address other hosts reach with no
	// Gateway.Token: anyone who can connect may then send requests, on
	// the callers' keys, and read the record.
	InsecureNoAuth bool

	// HTTP says how Serve holds connections: its timeouts, its caps and
	// the shutdown's grace.
	HTTP gateway.ServerConfig

	// Journal is where the record is kept, as journal.Open takes it:
	// "sqlite:PATH", a postgres:// URL, or "off". Empty means
	// journal.DefaultSpec.
	Journal string

	// JournalWriter says who writes a SQLite journal on disk: WriterProcess
	// or WriterInline. Empty means WriterProcess where the writer's
	// priority can be lowered, else WriterInline. PostgreSQL, and SQLite
	// in memory, are always written inline.
	JournalWriter string

	// Redis, if not empty, is a redis:// URL: each upstream's gates and
	// its Admission's state are kept there, shared with every gateway
	// that uses the same Redis, so that replicas in front of one
	// upstream keep one bound and one view of it (package redisgate).
	// While Redis cannot be reached each gateway uses its own, with the
	// same limits, and says so in its log, its health and
	// outlast_gate_degraded. Empty means this process's own.
	Redis string

	// JournalHeaders keeps each request's headers in the journal, without
	// credentials and Gateway.Redact.
	JournalHeaders bool

	// JournalKeep is how long the journal keeps a request. Zero keeps it
	// for ever.
	JournalKeep time.Duration

	// JournalFlush is how often the journal's writer writes what it holds.
	// Zero means journal.DefaultFlushInterval.
	JournalFlush time.Duration

	// Tracer makes a trace of each request, as tracing.FromEnv sets one
	// up from the standard OTEL_* environment. Nil means none. The
	// Server's Close shuts it down.
	Tracer *tracing.Tracer

	// Observer is told of every request after the record's own observers:
	// the journal, the metrics, the page and the traces.
	Observer record.Observer
}

// A ConfigError is an error in a Config: a setting that is wrong, as
// opposed to a journal that could not be opened. Its text names the
// setting.
type ConfigError struct {
	// Err says what is wrong.
	Err error
}

// Error returns the text of e.Err.
func (e *ConfigError) Error() string { return e.Err.Error() }

// Unwrap returns e.Err.
func (e *ConfigError) Unwrap() error { return e.Err }

// A Server is the assembled gateway. Its fields are for reading: they are
// New's to set. A Server is safe for concurrent use.
type Server struct {
	// Gateway is the proxy, which Server's ServeHTTP serves.
	Gateway *gateway.Gateway
	// Store is the journal, or nil with it off.
	Store journal.Store
	// Writer writes the record to Store, or is nil with it off.
	Writer *journal.Writer
	// Metrics counts what the gateway does, for /outlast/metrics.
	Metrics *metrics.Metrics
	// Feed keeps the recent requests for the timeline page.
	Feed *timeline.Feed
	// Tracer makes the traces, or is nil when they are off.
	Tracer *tracing.Tracer

	cfg    Config
	keeper *journal.Keeper
	shared *shared // nil without Config.Redis
}

// New assembles the gateway that cfg describes and opens its journal. Its
// errors name what failed; a *ConfigError is a wrong setting. Call Close
// when done with the Server, to flush and close the journal.
func New(ctx context.Context, cfg Config) (_ *Server, err error) {
	s := &Server{cfg: cfg, Tracer: cfg.Tracer}
	if err := checkListen(cfg); err != nil {
		s.Close(context.Background())
		return nil, &ConfigError{err}
	}
	defer func() {
		if err != nil {
			s.Close(context.Background())
		}
	}()
	logger := cfg.Gateway.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if err := s.openJournal(ctx, logger); err != nil {
		return nil, err
	}
	if cfg.Redis != "" {
		if s.shared, err = openShared(cfg.Redis, &s.cfg.Gateway, logger); err != nil {
			return nil, &ConfigError{err}
		}
	}
	if s.Gateway, err = s.newGateway(logger); err != nil {
		return nil, &ConfigError{err}
	}
	s.seedFeed(ctx, logger)
	return s, nil
}

// seedRequests is how many of the journal's newest requests the page
// shows from the start: as many as it draws.
const seedRequests = 200

// seedFeed gives the page's feed the journal's newest requests, so that a
// gateway started again on its journal shows them at once. A journal that
// cannot be read costs only that, and a warning.
func (s *Server) seedFeed(ctx context.Context, logger *slog.Logger) {
	if s.Store == nil {
		return
	}
	page, err := s.Store.List(ctx, journal.Query{Limit: seedRequests})
	if err != nil {
		logger.Warn("outlast: the page starts without the journal's requests", "err", err)
		return
	}
	slices.Reverse(page.Requests) // oldest first, as they came
	s.Feed.Seed(page.Requests)
}

// openJournal opens the journal that the config names, with its writer
// and keeper.
func (s *Server) openJournal(ctx context.Context, logger *slog.Logger) error {
	spec := s.cfg.Journal
	if spec == "" {
		spec = journal.DefaultSpec
	}
	if err := journal.CheckSpec(spec); err != nil {
		return &ConfigError{err}
	}
	store, err := journal.Open(ctx, spec)
	if err != nil || store == nil {
		return err
	}
	s.Store = store
	if s.writesInChild(spec) {
		w, err := journalproc.Start(ctx, spec, store)
		if err != nil {
			return fmt.Errorf("journal writer process: %w (the inline writer writes in this process)", err)
		}
		s.Store = w
	}
	s.Writer = journal.NewWriter(s.Store, journal.WriterConfig{Logger: logger, FlushInterval: s.cfg.JournalFlush})
	if s.cfg.JournalKeep > 0 {
		s.keeper = &journal.Keeper{Store: s.Store, Keep: s.cfg.JournalKeep, Logger: logger}
	}
	return nil
}

// writesInChild says whether the journal spec names is written by a child
// process: a SQLite file, unless the config or the operating system says
// otherwise. PostgreSQL spends its writes' CPU on its own server, and
// SQLite in memory is out of any other process's reach.
func (s *Server) writesInChild(spec string) bool {
	switch {
	case !strings.HasPrefix(spec, "sqlite:"), spec == "sqlite::memory:":
		return false
	case s.cfg.JournalWriter == WriterInline:
		return false
	}
	return journalproc.CanLowerPriority
}

// newGateway makes the gateway, with the record's observers and
// endpoints.
func (s *Server) newGateway(logger *slog.Logger) (*gateway.Gateway, error) {
	gc := s.cfg.Gateway
	gc.Logger = logger
	names := make([]string, len(gc.Upstreams))
	for i, u := range gc.Upstreams {
		names[i] = u.Name
		if u.Name == "" && u.URL != nil {
			names[i] = u.URL.Host // the gateway's own default
		}
		for _, m := range u.Members {
			name := m.Name
			if name == "" && m.URL != nil {
				name = m.URL.Host
			}
			names = append(names, name)
		}
	}
	s.Metrics = metrics.New(names)
	s.Feed = timeline.New(0, 0)
	obs := []record.Observer{s.Metrics.Observer(), s.Feed.Observer(), s.Tracer.Observer()}
	endpoints := map[string]http.Handler{"metrics": s.Metrics.Handler()}
	for k, h := range s.Feed.Endpoints() {
		endpoints[k] = h
	}
	for k, h := range (&journal.API{Store: s.Store}).Endpoints() {
		endpoints[k] = h
	}
	if w := s.Writer; w != nil {
		obs = append(obs, journal.Observer(w, journal.ObserverConfig{Headers: s.cfg.JournalHeaders}))
		s.Metrics.SetJournalDropped(w.Dropped)
		s.Metrics.SetJournalFailed(w.Failed)
		gc.JournalStats = func() (uint64, uint64) { return w.Dropped(), w.Failed() }
	}
	gc.Observer = record.Observers(append(obs, s.cfg.Observer)...)
	gc.Endpoints = endpoints
	g, err := gateway.New(gc)
	if err != nil {
		return nil, err
	}
	s.Metrics.SetLoads(g.Loads)
	s.Feed.SetLoads(g.Loads)
	if sh := s.shared; sh != nil {
		s.Metrics.SetGateDegraded(sh.mon.Degraded)
	}
	return g, nil
}

// ServeHTTP serves the gateway.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.Gateway.ServeHTTP(w, r)
}

// ListenAndServe listens on Config.Listen and serves until ctx ends, as
// Serve does.
func (s *Server) ListenAndServe(ctx context.Context) error {
	addr := s.cfg.Listen
	if addr == "" {
		addr = DefaultListen
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, l)
}

// Serve serves on l until ctx ends, pruning the journal meanwhile; then it
// shuts down as gateway.Serve does, within Config.HTTP.Grace, and returns
// nil. The timeline page's event streams end when the drain starts, so
// that open pages do not hold it up.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	if s.keeper != nil {
		go s.keeper.Run(ctx)
	}
	stop := context.AfterFunc(ctx, s.Feed.Close)
	defer stop()
	return gateway.Serve(ctx, l, s.Gateway, s.cfg.HTTP)
}

// checkListen refuses to serve other hosts without a token, unless told
// to.
func checkListen(cfg Config) error {
	addr := cmp.Or(cfg.Listen, DefaultListen)
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen %q: %v", addr, err)
	}
	if loopback(host) || cfg.Gateway.Token != "" || cfg.InsecureNoAuth {
		return nil
	}
	return fmt.Errorf("listen %q reaches other hosts, and the gateway has no token: give one (--token or OUTLAST_TOKEN), which callers send in %s, or --insecure-no-auth to serve anyone who connects", addr, gateway.HeaderToken)
}

// loopback reports whether host names only this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Close ends the page's event streams, flushes what the journal's writer
// holds and the traces still queued, as long as ctx allows, and closes the
// journal. A SQLite journal's final flush is written by this process, not
// by the writer process at the lowest priority, which a busy machine may
// keep from a core for longer than ctx allows: call Close once the
// requests are done.
func (s *Server) Close(ctx context.Context) error {
	if s.Feed != nil {
		s.Feed.Close()
	}
	var errs []error
	if err := s.Tracer.Shutdown(ctx); err != nil {
		errs = append(errs, err)
	}
	if p, ok := s.Store.(*journalproc.Store); ok {
		p.Inline()
	}
	if s.Writer != nil {
		if err := s.Writer.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("the journal: %w", err))
		}
	}
	if s.Store != nil {
		if err := closeStore(ctx, s.Store); err != nil {
			errs = append(errs, fmt.Errorf("the journal: %w", err))
		}
	}
	if s.shared != nil {
		s.shared.close()
	}
	return errors.Join(errs...)
}

// storeCloseGrace is what closeStore gives a store past ctx's deadline:
// one that closes at once (SQLite's) closes, whatever the flush before it
// took.
const storeCloseGrace = time.Second

// closeStore closes st, waiting for it until ctx's deadline, or
// storeCloseGrace if that is sooner. A store that takes longer (PostgreSQL
// behind a network that stopped answering, whose pool's close waits on its
// connections) is left to close as the process exits, rather than holding
// a shutdown past its time. With no deadline, it waits as long as it takes.
func closeStore(ctx context.Context, st journal.Store) error {
	d, ok := ctx.Deadline()
	if !ok {
		return st.Close()
	}
	closed := make(chan error, 1)
	go func() { closed <- st.Close() }()
	t := time.NewTimer(max(time.Until(d), storeCloseGrace))
	defer t.Stop()
	select {
	case err := <-closed:
		return err
	case <-t.C:
		return errors.New("its store did not close in time, and is left to close as the process ends")
	}
}

// RunJournalWriter returns at once, unless New started this process as a
// journal's writer: then it writes what it is sent and exits. A program
// that may run New with a SQLite journal on disk calls it first in main (a
// test binary, in TestMain).
func RunJournalWriter() { journalproc.RunIfChild() }
