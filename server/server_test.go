package server_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/record"
	"github.com/outlast-llm/outlast/server"
	"github.com/outlast-llm/outlast/server/internal/journalproc"
)

// TestMain lets the test binary be the journal's writer process, as the
// outlast binary is.
func TestMain(m *testing.M) {
	server.RunJournalWriter()
	os.Exit(m.Run())
}

func upstreams() []gateway.Upstream {
	return []gateway.Upstream{{URL: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}}}
}

// A SQLite file is written by a child process unless the config says
// inline; nothing else is. A record added is in the journal once the
// server has closed.
func TestJournalWriterModes(t *testing.T) {
	for _, tt := range []struct {
		name, spec, mode string
		process          bool
	}{
		// The default where the priority can be lowered.
		{"file", "sqlite:" + filepath.Join(t.TempDir(), "a.db"), "", journalproc.CanLowerPriority},
		{"file inline", "sqlite:" + filepath.Join(t.TempDir(), "b.db"), server.WriterInline, false},
		// No other process could reach the database.
		{"memory", "sqlite::memory:", server.WriterProcess, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := server.New(t.Context(), server.Config{Gateway: gateway.Config{Upstreams: upstreams()}, Journal: tt.spec, JournalWriter: tt.mode})
			if err != nil {
				t.Fatal(err)
			}
			if _, isProc := s.Store.(*journalproc.Store); isProc != tt.process {
				t.Errorf("written by a process: got %v, want %v", isProc, tt.process)
			}
			start := time.Now()
			s.Writer.Add(record.Request{ID: "r1", Start: start, End: start})
			if err := s.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if tt.spec == "sqlite::memory:" {
				return
			}
			st, err := journal.OpenExisting(context.Background(), tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if _, err := st.Get(context.Background(), "r1"); err != nil {
				t.Errorf("the record after Close: %v", err)
			}
		})
	}
}

// A wrong setting is a *ConfigError, for a program to tell from a journal
// that could not be opened.
func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  server.Config
	}{
		{"no upstreams", server.Config{Journal: "off"}},
		{"journal spec", server.Config{Gateway: gateway.Config{Upstreams: upstreams()}, Journal: "mysql://x"}},
		{"negative slots", server.Config{Gateway: gateway.Config{Upstreams: []gateway.Upstream{{URL: &url.URL{Scheme: "http", Host: "h"}, Slots: -1}}}, Journal: "off"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := server.New(t.Context(), tt.cfg)
			if _, ok := errors.AsType[*server.ConfigError](err); !ok {
				t.Errorf("got %v, want a *server.ConfigError", err)
			}
		})
	}
	// Only loopback is served without a token, unless the operator says
	// otherwise in so many words.
	for _, tt := range []struct {
		listen, token string
		insecure      bool
		ok            bool
	}{
		{"", "", false, true}, // the default is loopback
		{"127.0.0.1:0", "", false, true},
		{"[::1]:0", "", false, true},
		{"localhost:0", "", false, true},
		{":8700", "", false, false},
		{"0.0.0.0:8700", "", false, false},
		{"[::]:8700", "", false, false},
		{"192.0.2.1:8700", "", false, false},
		{"example.com:8700", "", false, false},
		{":8700", "t0ken", false, true},
		{":8700", "", true, true},
		{"no-port", "", false, false},
	} {
		cfg := server.Config{Gateway: gateway.Config{Upstreams: upstreams(), Token: tt.token}, Journal: "off", Listen: tt.listen, InsecureNoAuth: tt.insecure}
		s, err := server.New(t.Context(), cfg)
		if _, bad := errors.AsType[*server.ConfigError](err); bad == tt.ok || (err == nil) != tt.ok {
			t.Errorf("listen %q, token %q, insecure %v: got %v, want ok %v", tt.listen, tt.token, tt.insecure, err, tt.ok)
		}
		if err == nil {
			s.Close(t.Context())
		} else if !tt.ok && tt.listen != "no-port" && !strings.Contains(err.Error(), "--token") {
			t.Errorf("listen %q: the error %q does not say how to give a token", tt.listen, err)
		}
	}
	// A journal that cannot be opened is not a setting's fault.
	dir := filepath.Join(t.TempDir(), "no-such-dir", "j.db")
	_, err := server.New(t.Context(), server.Config{Gateway: gateway.Config{Upstreams: upstreams()}, Journal: "sqlite:" + dir})
	if _, ok := errors.AsType[*server.ConfigError](err); ok || err == nil {
		t.Errorf("an unopenable journal: got %v, want an error that is not a *ConfigError", err)
	}
}

// A gateway started on a journal that holds requests shows them on its
// page from the start, oldest first, as they came.
func TestPageStartsWithTheJournal(t *testing.T) {
	spec := "sqlite:" + filepath.Join(t.TempDir(), "j.db")
	s, err := server.New(t.Context(), server.Config{Gateway: gateway.Config{Upstreams: upstreams()}, Journal: spec, JournalWriter: server.WriterInline})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute)
	for i, id := range []string{"r1", "r2", "r3"} {
		start := t0.Add(time.Duration(i) * time.Second)
		s.Writer.Add(record.Request{ID: id, Method: "POST", Path: "/v1/chat/completions", Status: 200, Start: start, End: start.Add(time.Second),
			Attempts: []record.Attempt{{N: 1, Status: 200, Start: start, End: start.Add(time.Second)}}})
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err = server.New(t.Context(), server.Config{Gateway: gateway.Config{Upstreams: upstreams()}, Journal: spec, JournalWriter: server.WriterInline})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	var ids []string
	for _, r := range s.Feed.Snapshot().Requests {
		ids = append(ids, r.ID)
	}
	if got := strings.Join(ids, " "); got != "r1 r2 r3" {
		t.Errorf("the page's requests: got %q, want r1 r2 r3", got)
	}
}

// stuckStore is a journal whose Close waits for release.
type stuckStore struct {
	journal.Store
	release chan struct{}
	closed  bool
}

func (s *stuckStore) Close() error {
	<-s.release
	s.closed = true
	return nil
}

// Closing the journal's store waits until the shutdown's deadline, not
// past it: a PostgreSQL behind a network that stopped answering is left
// to close as the process ends. A store that closes at once closes, even
// after the flush before it spent the time.
func TestCloseStoreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		stuck := &stuckStore{release: make(chan struct{})}
		start := time.Now()
		if err := server.CloseStore(ctx, stuck); err == nil || time.Since(start) != 10*time.Second {
			t.Errorf("a store that does not close: got %v after %v, want an error at the deadline, 10s", err, time.Since(start))
		}
		close(stuck.release)
		synctest.Wait()

		quick := &stuckStore{release: make(chan struct{})}
		close(quick.release)
		if err := server.CloseStore(ctx, quick); err != nil || !quick.closed {
			t.Errorf("a store that closes at once, past the deadline: got %v, closed %v; want it closed", err, quick.closed)
		}
	})
}
