// Package proc holds what the bench programs that run outlast as a
// child process (realtime, failover, held) share: building the binary,
// and starting it on a port it picks itself. The child says where it listens
// once it does, so it answers from then on.
package proc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
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

// BuildOutlastTemp makes a temporary folder whose name starts with
// prefix and builds outlast into it (see BuildOutlast), returning both.
// The caller removes the folder; on an error nothing is left.
func BuildOutlastTemp(ctx context.Context, prefix string, stderr io.Writer) (dir, bin string, err error) {
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		return "", "", err
	}
	if bin, err = BuildOutlast(ctx, dir, stderr); err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	return dir, bin, nil
}

// A Child is a process started by Start.
type Child struct {
	Addr string // where it listens, as it said

	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	err  error         // cmd.Wait's, once done is closed
}

// Start starts cmd, its output copied to out, and returns it once it
// says where it listens: the host:port after "http://" on the first
// line of its output that contains marker. The child binds port 0
// itself, so that no other process can take its port between a check
// and its bind, as one could with a port found free beforehand. Start
// waits at most 30 s, and returns an error if the child exits first.
func Start(ctx context.Context, cmd *exec.Cmd, out io.Writer, marker string) (*Child, error) {
	w := &watch{out: out, marker: []byte(marker), found: make(chan string, 1)}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Child{cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	t := time.NewTimer(readyFor)
	defer t.Stop()
	select {
	case c.Addr = <-w.found:
		return c, nil
	case <-c.done:
		select {
		case c.Addr = <-w.found: // said, and then exited
			return c, nil
		default:
		}
		return nil, fmt.Errorf("%s exited before it said where it listens: %v", cmd.Path, c.err)
	case <-t.C:
		c.Stop(0)
		return nil, fmt.Errorf("%s did not say where it listens within %v", cmd.Path, readyFor)
	case <-ctx.Done():
		c.Stop(0)
		return nil, ctx.Err()
	}
}

// PID returns the child's process ID, for reading its state in /proc.
func (c *Child) PID() int {
	return c.cmd.Process.Pid
}

// Wait waits for the child to exit and returns what exec.Cmd.Wait did.
func (c *Child) Wait() error {
	<-c.done
	return c.err
}

// Stop stops the child as an operator would, with SIGTERM, and kills it
// if it has not exited within grace.
func (c *Child) Stop(grace time.Duration) {
	c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.cmd.Process.Kill()
		<-c.done
	}
}

// A watch copies a child's output to out and sends the address on the
// first line that contains marker to found.
type watch struct {
	out    io.Writer
	marker []byte
	found  chan string
	line   []byte // the line so far, until the address is found
	sent   bool
}

func (w *watch) Write(p []byte) (int, error) {
	if !w.sent {
		w.line = append(w.line, p...)
		for !w.sent {
			i := bytes.IndexByte(w.line, '\n')
			if i < 0 {
				break
			}
			if addr, ok := addrIn(w.line[:i], w.marker); ok {
				w.found <- addr
				w.sent = true
			}
			w.line = w.line[i+1:]
		}
	}
	return w.out.Write(p)
}

// addrIn returns the host:port after "http://" in line, if line contains
// marker.
func addrIn(line, marker []byte) (string, bool) {
	if !bytes.Contains(line, marker) {
		return "", false
	}
	_, rest, ok := bytes.Cut(line, []byte("http://"))
	if !ok {
		return "", false
	}
	if i := bytes.IndexAny(rest, " /,"); i >= 0 {
		rest = rest[:i]
	}
	if _, _, err := net.SplitHostPort(string(rest)); err != nil {
		return "", false
	}
	return string(rest), true
}

// readyFor bounds Start's wait for the child to say where it listens.
const readyFor = 30 * time.Second
