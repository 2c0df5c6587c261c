// Package proc holds what the bench programs that run outlast as a
// child process (realtime, failover) share: building the binary, a free
// loopback address for it, and waiting until it answers.
package proc

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"time"
)

// BuildOutlast builds the outlast command of the module this program is
// built with into dir, with go build, and returns the binary's path. The
// compiler's messages go to stderr.
func BuildOutlast(ctx context.Context, dir string, stderr io.Writer) (string, error) {
	bin := filepath.Join(dir, "outlast")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/outlast-llm/outlast/cmd/outlast")
	build.Stderr = stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building outlast: %w", err)
	}
	return bin, nil
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// readyFor bounds Ready's wait, and readyTry one of its tries: a child
// that accepted the connection but hangs is tried again, not waited on
// for the whole of readyFor.
const (
	readyFor   = 30 * time.Second
	readyTry   = 2 * time.Second
	readyEvery = 50 * time.Millisecond
)

// Ready waits until a GET of url gets an answer, whatever its status, for
// at most 30 s. A child process's readiness has no event to wait on but
// its answer.
func Ready(ctx context.Context, url string) error {
	deadline := time.Now().Add(readyFor)
	for time.Now().Before(deadline) {
		if answered(ctx, url) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(readyEvery):
		}
	}
	return fmt.Errorf("%s did not answer within %v", url, readyFor)
}

// answered reports whether a GET of url got an answer within readyTry.
func answered(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, readyTry)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}
