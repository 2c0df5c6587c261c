package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/journal"
)

// serveArgsEnv, set to serve's arguments as JSON, makes the test binary
// outlast serve, as main runs it: the restart test stops it with real
// signals.
const serveArgsEnv = "OUTLAST_TEST_SERVE_ARGS"

// runServeIfAsked runs serve as main does, and exits, if the test binary
// was started to.
func runServeIfAsked() {
	v := os.Getenv(serveArgsEnv)
	if v == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(v), &args); err != nil {
		panic(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, append([]string{"serve"}, args...), os.Stdout, os.Stderr)
	stop()
	if err != nil {
		os.Stderr.WriteString("outlast: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}

// process is outlast serve run as a process of its own.
type process struct {
	cmd  *exec.Cmd
	addr string
	log  *lockedBuffer
	done chan error
}

func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	b, _ := json.Marshal(append([]string{"--listen", "127.0.0.1:0"}, args...))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveArgsEnv+"="+string(b))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, log: &lockedBuffer{}, done: make(chan error, 1)}
	lines := bufio.NewScanner(stderr)
	if !lines.Scan() {
		t.Fatalf("serve stopped before it served: %v", cmd.Wait())
	}
	p.addr, _, _ = strings.Cut(strings.TrimPrefix(lines.Text(), "outlast: serving on "), " ")
	if !strings.HasPrefix(p.addr, "http://127.0.0.1:") {
		t.Fatalf("serve's first line %q does not say where it serves", lines.Text())
	}
	go func() {
		for lines.Scan() {
			p.log.Write([]byte(lines.Text() + "\n"))
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("serve's stderr:\n%s", p.log.String())
		}
	})
	return p
}

// stop sends sig and waits for the process to end, failing the test after
// 30 s; it returns how the process ended.
func (p *process) stop(t *testing.T, sig os.Signal) error {
	t.Helper()
	p.cmd.Process.Signal(sig)
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not end within 30s of %v", sig)
		return nil
	}
}

// send makes n requests through p, and returns their IDs.
func (p *process) send(t *testing.T, client *http.Client, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		resp, err := client.Post(p.addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("got %d, want 200", resp.StatusCode)
		}
		ids[i] = resp.Header.Get("Outlast-Request-Id")
	}
	return ids
}

// A restart on the same SQLite file opens the journal cleanly and loses
// nothing that was flushed before: after SIGTERM, nothing at all; after
// SIGKILL, at most the requests of the last flush interval, each whole or
// not at all.
func TestRestartKeepsTheJournal(t *testing.T) {
	t.Parallel()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(upstream.Close)
	spec := "sqlite:" + filepath.Join(t.TempDir(), "journal.db")
	args := []string{"--upstream", upstream.URL, "--journal", spec}
	client := newClient(t)
	ctx := t.Context()

	// has reports which of ids the journal holds, each with its attempt.
	has := func(ids []string) (held, missing []string) {
		t.Helper()
		s, err := journal.OpenExisting(ctx, spec)
		if err != nil {
			t.Fatalf("opening the journal: %v", err)
		}
		defer s.Close()
		for _, id := range ids {
			rec, err := s.Get(ctx, id)
			switch {
			case errors.Is(err, journal.ErrNotFound):
				missing = append(missing, id)
			case err != nil:
				t.Fatalf("request %s: %v", id, err)
			case len(rec.Attempts) != 1 || rec.Status != 200:
				t.Errorf("request %s is kept with %d attempts and status %d, want it whole: 1 and 200", id, len(rec.Attempts), rec.Status)
			default:
				held = append(held, id)
			}
		}
		return held, missing
	}

	// SIGTERM: serve writes everything before it exits.
	p := startProcess(t, args...)
	first := p.send(t, client, 20)
	if err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("serve ended with %v after SIGTERM, want exit 0", err)
	}
	if _, missing := has(first); len(missing) > 0 {
		t.Errorf("after SIGTERM, the journal lacks %d of %d requests", len(missing), len(first))
	}

	// SIGKILL: what was flushed stays; what was not, at most a flush
	// interval's worth, is lost whole.
	p = startProcess(t, args...)
	flushed := p.send(t, client, 20)
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, missing := has(flushed); len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the journal did not hold the requests within 20s")
		}
		time.Sleep(100 * time.Millisecond) // polls the journal, which flushes each second
	}
	unflushed := p.send(t, client, 20)
	if err := p.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("serve exited cleanly after SIGKILL")
	}
	if _, missing := has(append(first, flushed...)); len(missing) > 0 {
		t.Errorf("after SIGKILL, the journal lacks %d flushed requests", len(missing))
	}
	held, missing := has(unflushed)
	t.Logf("after SIGKILL: %d of the last %d requests kept, %d lost", len(held), len(unflushed), len(missing))

	// The journal opens cleanly for the next serve, which adds to it.
	p = startProcess(t, args...)
	last := p.send(t, client, 1)
	if err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("serve ended with %v after SIGTERM, want exit 0", err)
	}
	if _, missing := has(append(append(first, flushed...), last...)); len(missing) > 0 {
		t.Errorf("after a restart on the killed journal, it lacks %d requests", len(missing))
	}
}
