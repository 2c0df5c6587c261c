package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/server"
)

// waits is the gateway's retry policy: short, so that a minute holds many
// retries, and six of them, so that a request fails for good only when
// seven attempts in a row do (0.2⁷, about one in 80,000).
var waits = []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	40 * time.Millisecond, 80 * time.Millisecond, 160 * time.Millisecond}

// phase is one number of slots: the fake upstream, the gateway in front of
// it as outlast serve assembles it, its journal, and the callers.
type phase struct {
	cfg         config
	slots       int
	maxAttempts int

	clock  atomic.Int64 // the counter that orders the hooks and the sends
	pauses atomic.Int64 // odd while a probe holds the upstream

	dir    string
	up     *upstream
	upSrv  *loopback
	srv    *server.Server
	front  *front
	client *http.Client
	led    *ledger
	probes *probes
}

func newPhase(ctx context.Context, c config, slots int) (_ *phase, err error) {
	ph := &phase{cfg: c, slots: slots, maxAttempts: len(waits) + 1, probes: &probes{wake: make(chan struct{}, 1)}}
	defer func() {
		if err != nil {
			ph.close()
		}
	}()
	if ph.dir, err = os.MkdirTemp("", "outlast-soak-"); err != nil {
		return nil, err
	}
	ph.up = newUpstream(c, slots)
	if ph.upSrv, err = serveLoopback(ph.up); err != nil {
		return nil, fmt.Errorf("the upstream: %w", err)
	}
	upURL, _ := url.Parse(ph.upSrv.url)
	ph.led = newLedger(&ph.clock, slots, c.Queue)
	ph.srv, err = server.New(ctx, server.Config{
		HTTP: gateway.ServerConfig{MaxConns: c.maxConns()},
		Gateway: gateway.Config{
			Upstreams: []gateway.Upstream{{
				Name:             "soak",
				URL:              upURL,
				Policy:           &outlast.Policy{Waits: waits},
				Slots:            slots,
				Queue:            c.Queue,
				FirstByteTimeout: 5 * time.Minute, // serve's defaults: they never fire here
				IdleTimeout:      2 * time.Minute,
			}},
			Logger: slog.New(slog.DiscardHandler),
		},
		Journal:       "sqlite:" + filepath.Join(ph.dir, "journal.db"),
		JournalWriter: server.WriterInline,
		Observer:      ph.led.observer(),
	})
	if err != nil {
		return nil, err
	}
	if ph.front, err = serveGateway(ph.srv); err != nil {
		return nil, fmt.Errorf("the gateway: %w", err)
	}
	// One connection per caller, kept between its requests: 2,000 callers
	// hold 2,000 connections, and open no more.
	ph.client = &http.Client{
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
			MaxIdleConns:        c.Callers,
			MaxIdleConnsPerHost: c.Callers,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
		Timeout: c.Timeout,
	}
	return ph, nil
}

// queued returns how many wait for a slot now.
func (ph *phase) queued() int { return ph.srv.Gateway.Loads()[0].Queued }

// A result is what a phase's load produced, for the checks and the
// report.
type result struct {
	took     time.Duration
	outcomes []outcome
	seen     seenState
	rows     map[string][]journalRow // by tag
	stuck    []string                // waits for an event that did not end
	dropped  uint64                  // records the journal's writer refused or gave up
}

// A journalRow is a request as the journal kept it.
type journalRow struct {
	id       string
	status   int
	attempts int
}

// load runs the callers for d, with the probes spread over it, waits for
// every request's record, and reads the journal back.
func (ph *phase) load(ctx context.Context, d time.Duration, progress io.Writer) (*result, error) {
	r := &result{}
	stop := make(chan struct{})
	results := make([][]outcome, ph.cfg.Callers)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range results {
		wg.Go(func() { results[i] = ph.caller(i, stop) })
	}
	for i := range ph.cfg.Probes {
		at := start.Add(d * time.Duration(i+1) / time.Duration(ph.cfg.Probes+1))
		if err := sleepUntil(ctx, at); err != nil {
			break
		}
		progressf(progress, "%d slots: probe %d of %d", ph.slots, i+1, ph.cfg.Probes)
		if err := ph.probe(ctx); err != nil {
			r.stuck = append(r.stuck, fmt.Sprintf("probe %d: %v", i+1, err))
		}
	}
	sleepUntil(ctx, start.Add(d))
	progressf(progress, "%d slots: stopping the callers", ph.slots)
	close(stop)
	wg.Wait()
	r.took = time.Since(start)
	for _, o := range results {
		r.outcomes = append(r.outcomes, o...)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The gateway tells its observers after the answer is written: the
	// last records may come after the last caller is done. An answer
	// without Outlast-Request-Id has none to wait for; answers says so.
	var recorded int64
	for _, o := range r.outcomes {
		if o.id != "" {
			recorded++
		}
	}
	if err := ph.await(ctx, ph.led.doneWake, "record of every answer", func() bool { return ph.led.doneCount.Load() >= recorded }); err != nil {
		r.stuck = append(r.stuck, err.Error())
	}
	ph.up.stop()
	r.seen = ph.up.seenState()
	var err error
	r.rows, err = ph.readJournal(ctx)
	r.dropped = ph.srv.Writer.Dropped() + ph.srv.Writer.Failed()
	return r, err
}

// readJournal flushes the journal's writer and reads back every request.
func (ph *phase) readJournal(ctx context.Context) (map[string][]journalRow, error) {
	if err := ph.srv.Writer.Flush(ctx); err != nil {
		return nil, fmt.Errorf("flushing the journal: %w", err)
	}
	rows := map[string][]journalRow{}
	var end time.Time
	var id string
	for {
		page, err := ph.srv.Store.Ended(ctx, end, id, journal.MaxLimit)
		if err != nil {
			return nil, fmt.Errorf("reading the journal back: %w", err)
		}
		for _, rec := range page {
			rows[rec.Run] = append(rows[rec.Run], journalRow{id: rec.ID, status: rec.Status, attempts: len(rec.Attempts)})
		}
		if len(page) < journal.MaxLimit {
			return rows, nil
		}
		end, id = page[len(page)-1].End, page[len(page)-1].ID
	}
}

// close stops everything the phase started, in the order that lets each
// part finish: the callers' connections, the gateway (which flushes and
// closes the journal), the upstream, and the journal's folder.
func (ph *phase) close() error {
	var errs []error
	if ph.client != nil {
		ph.client.CloseIdleConnections()
	}
	if ph.front != nil {
		errs = append(errs, ph.front.close())
	}
	if ph.srv != nil {
		errs = append(errs, ph.srv.Close(context.Background()))
	}
	if ph.up != nil {
		ph.up.stop()
	}
	if ph.upSrv != nil {
		errs = append(errs, ph.upSrv.close())
	}
	if ph.dir != "" {
		errs = append(errs, os.RemoveAll(ph.dir))
	}
	return errors.Join(errs...)
}

// front is the gateway served on loopback as outlast serve serves it
// (server.Server.Serve), with its connection caps and timeouts.
type front struct {
	url  string
	stop context.CancelFunc
	errc chan error
}

func serveGateway(srv *server.Server) (*front, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening on loopback: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	f := &front{url: "http://" + l.Addr().String(), stop: stop, errc: make(chan error, 1)}
	go func() { f.errc <- srv.Serve(ctx, l) }()
	return f, nil
}

// close shuts the gateway down as SIGTERM does serve: every request has
// ended by then, so the drain is at once.
func (f *front) close() error {
	f.stop()
	return <-f.errc
}

// loopback is one handler on its own loopback listener and http.Server.
type loopback struct {
	srv  *http.Server
	url  string
	errc chan error
}

func serveLoopback(h http.Handler) (*loopback, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening on loopback: %w", err)
	}
	s := &loopback{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: time.Minute,
			ErrorLog:          log.New(io.Discard, "", 0),
		},
		url:  "http://" + l.Addr().String(),
		errc: make(chan error, 1),
	}
	go func() { s.errc <- s.srv.Serve(l) }()
	return s, nil
}

// close stops the server at once: every request has ended by then.
func (s *loopback) close() error {
	s.srv.Close()
	if err := <-s.errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// progressf writes a progress line to w, a terminal, if not nil.
func progressf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, "soak: "+format+"\n", args...)
	}
}
