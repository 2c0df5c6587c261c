package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/outlast-llm/outlast/redisgate"
)

// childFlag, as the first argument, makes the program a child of its own,
// whose role is the flag's value. It is not among the flags --help lists.
const childFlag = "--child"

// The children's roles.
const (
	roleContend = "contend" // contenders on one key, as in the in-process run
	roleHandoff = "handoff" // the waiter of the hand-offs across processes
)

// isChild reports whether args make the program a child.
func isChild(args []string) bool {
	return len(args) > 0 && strings.HasPrefix(args[0], childFlag+"=")
}

// childConfig is a child's settings. The Redis URL goes through the
// environment, as $OUTLAST_TEST_REDIS, since an argument would show any
// password in it to ps.
type childConfig struct {
	Role       string
	Prefix     string
	Key        string
	CounterKey string
	Capacity   int
	MaxQueue   int
	Workers    int
	Hold       time.Duration
	Duration   time.Duration
}

// args returns the command line that makes a child of cc.
func (cc childConfig) args() []string {
	return []string{
		childFlag + "=" + cc.Role, "--prefix", cc.Prefix, "--key", cc.Key, "--counter", cc.CounterKey,
		"--capacity", fmt.Sprint(cc.Capacity), "--max-queue", fmt.Sprint(cc.MaxQueue), "--workers", fmt.Sprint(cc.Workers),
		"--hold", cc.Hold.String(), "--duration", cc.Duration.String(),
	}
}

func parseChild(args []string, stderr io.Writer) (childConfig, error) {
	var cc childConfig
	fs := flag.NewFlagSet("redisgate child", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cc.Role, "child", "", "the role: "+roleContend+" or "+roleHandoff)
	fs.StringVar(&cc.Prefix, "prefix", "", "the gate's Prefix")
	fs.StringVar(&cc.Key, "key", "", "the gate key")
	fs.StringVar(&cc.CounterKey, "counter", "", "the Redis key of the holders' counter")
	fs.IntVar(&cc.Capacity, "capacity", 1, "the gate's Capacity")
	fs.IntVar(&cc.MaxQueue, "max-queue", 0, "the gate's MaxQueue")
	fs.IntVar(&cc.Workers, "workers", 1, "contending goroutines")
	fs.DurationVar(&cc.Hold, "hold", 0, "each hold's work")
	fs.DurationVar(&cc.Duration, "duration", 0, "how long to contend")
	if err := fs.Parse(args); err != nil {
		return cc, usageError{Err: err}
	}
	if cc.Role != roleContend && cc.Role != roleHandoff || cc.Prefix == "" || cc.Key == "" {
		return cc, usageError{Err: fmt.Errorf("%s=%q: want a role of %s or %s, a --prefix and a --key", childFlag, cc.Role, roleContend, roleHandoff)}
	}
	return cc, nil
}

// runChild is the program as a child: it connects, says "ready" on
// stdout, and plays its role under the parent's lines on stdin.
func runChild(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cc, err := parseChild(args, stderr)
	if err != nil {
		return err
	}
	opts, err := parseRedisURL(defaultRedisURL())
	if err != nil {
		return err
	}
	// A connection for each worker and a few for the lease renewals, so
	// that no Acquire waits for the pool.
	client, err := dial(ctx, opts, cc.Workers+4)
	if err != nil {
		return err
	}
	defer client.Close()
	g := redisgate.New(client, redisgate.Options{Capacity: cc.Capacity, MaxQueue: cc.MaxQueue, Prefix: cc.Prefix})
	defer g.Close()
	in := bufio.NewScanner(os.Stdin)
	fmt.Fprintln(stdout, "ready")
	if cc.Role == roleHandoff {
		return waitForHandoffs(ctx, g, cc.Key, in, stdout)
	}
	if !in.Scan() || in.Text() != "go" {
		return errors.New("the parent went away before saying go")
	}
	c := &contenders{gate: g, key: cc.Key, workers: cc.Workers, hold: cc.Hold, duration: cc.Duration,
		counter: client, counterKey: cc.CounterKey}
	return json.NewEncoder(stdout).Encode(c.run(ctx))
}

// child is a child process, seen from the parent: lines to its stdin,
// lines or JSON from its stdout.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// startChild starts a child of cc and waits for it to be ready. The child
// is killed when ctx ends.
func (b *bench) startChild(ctx context.Context, cc childConfig) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, cc.args()...)
	cmd.Env = append(os.Environ(), envRedis+"="+b.cfg.RedisURL)
	cmd.Stderr = b.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting a child: %w", err)
	}
	ch := &child{cmd: cmd, in: in, out: bufio.NewReader(out)}
	if line, err := ch.readLine(); err != nil || line != "ready" {
		return nil, fmt.Errorf("child %d not ready: got %q, %w", cmd.Process.Pid, line, errors.Join(err, ch.wait()))
	}
	return ch, nil
}

// send writes line to the child's stdin.
func (ch *child) send(line string) error {
	_, err := io.WriteString(ch.in, line+"\n")
	return err
}

// readLine reads one line from the child's stdout.
func (ch *child) readLine() (string, error) {
	line, err := ch.out.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

// wait closes the child's stdin, which ends a child between its roles'
// steps, and waits for it to exit.
func (ch *child) wait() error {
	ch.in.Close()
	if err := ch.cmd.Wait(); err != nil {
		return fmt.Errorf("child %d: %w", ch.cmd.Process.Pid, err)
	}
	return nil
}

// syncWriter serializes the writes of the children's stderr copiers, one
// goroutine per child, to one writer.
type syncWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
