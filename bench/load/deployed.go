package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/proc"
	"github.com/outlast-llm/outlast/cmd/outlast/cli"
)

// With --deployed, every target runs as users run it: the fake upstream
// and the bare proxy each in a process of its own (this program, started
// again in a child role), and each gateway as the outlast binary,
// `outlast serve` with its flags, built from this module; each from a
// copy of its executable (see start). The load generator is the only
// thing left in this process. A hand-off between
// goroutines that costs little inside one busy process costs a wake-up
// across idle ones; only this mode shows it.

// childRole is the environment variable that starts this program as one
// of the deployed targets: "upstream" or "proxy".
const childRole = "OUTLAST_LOAD_CHILD"

// listening is what a child prints, with its address, once it listens.
const listening = "load child listening on"

// runChild runs the program as the child role its environment names, and
// exits; without one, it returns at once.
func runChild() {
	role := os.Getenv(childRole)
	if role == "" {
		return
	}
	if err := serveChild(role, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "load %s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveChild serves role on a loopback port it prints, until SIGTERM.
func serveChild(role string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet(role, flag.ContinueOnError)
	chunks := fs.Int("chunks", 5, "events in a streamed response")
	upstreamURL := fs.String("upstream", "", "the proxy's upstream")
	idle := fs.Int("upstream-idle", 64, "the proxy's MaxIdleConnsPerHost")
	pool := fs.Bool("proxy-pool", true, "give the proxy a BufferPool")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var h http.Handler
	switch role {
	case "upstream":
		h = newUpstream(*chunks)
	case "proxy":
		up, err := url.Parse(*upstreamURL)
		if err != nil || up.Host == "" {
			return fmt.Errorf("--upstream %q: want an http:// URL", *upstreamURL)
		}
		// The same collector settings as outlast serve's: the harder
		// baseline.
		defer cli.TuneGC()()
		h = newProxy(up, *idle, *pool)
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	s, err := serveLoopback(h)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s\n", listening, s.url)
	<-ctx.Done()
	return s.close()
}

// deployed is what --deployed adds to a stack: the built binary, the
// folder the children run in, and the children themselves.
type deployed struct {
	dir      string
	bin      string // outlast
	children []*proc.Child
	logs     []*os.File
}

func newDeployed(ctx context.Context, stderr io.Writer) (*deployed, error) {
	dir, bin, err := proc.BuildOutlastTemp(ctx, "outlast-load-", stderr)
	if err != nil {
		return nil, err
	}
	return &deployed{dir: dir, bin: bin}, nil
}

// start starts exe with args (and env, added to this process's
// environment) as name, in a folder of its own under d's, from a copy of
// exe made there, its output kept in a log file there, and returns its
// URL once it listens.
//
// Each target runs from a file of its own, as on a machine of its own: two
// processes of one file share the pages of its code, so a target of the
// same file as the load generator or the upstream (the bare proxy is this
// program too), or as another target, would find its code already cached
// by their requests, which no deployment does.
func (d *deployed) start(ctx context.Context, name, exe string, args, env []string, marker string) (*url.URL, error) {
	dir := filepath.Join(d.dir, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	own := filepath.Join(dir, filepath.Base(exe))
	if err := copyFile(own, exe); err != nil {
		return nil, fmt.Errorf("%s: copying its executable: %w", name, err)
	}
	cmd := exec.Command(own, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		return nil, err
	}
	c, err := proc.Start(ctx, cmd, out, marker)
	if err != nil {
		out.Close()
		log, _ := os.ReadFile(out.Name())
		return nil, fmt.Errorf("%s: %w; its output: %s", name, err, tail(log))
	}
	d.children = append(d.children, c)
	d.logs = append(d.logs, out)
	return &url.URL{Scheme: "http", Host: c.Addr}, nil
}

// copyFile copies the executable src to a new file dst.
func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// child starts this program again in role, with args.
func (d *deployed) child(ctx context.Context, role string, args ...string) (*url.URL, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return d.start(ctx, role, self, args, []string{childRole + "=" + role}, listening)
}

// serve starts outlast serve with args, on a loopback port, in a folder
// of its own: its default journal, sqlite:outlast.db, is written there.
func (d *deployed) serve(ctx context.Context, name string, args ...string) (*url.URL, error) {
	return d.start(ctx, name, d.bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...), nil, "serving on")
}

// close stops every child, as an operator would, and removes the folder.
func (d *deployed) close() error {
	var errs []error
	for i, c := range d.children {
		c.Stop(10 * time.Second)
		if err := c.Wait(); err != nil {
			log, _ := os.ReadFile(d.logs[i].Name())
			errs = append(errs, fmt.Errorf("a child exited with %v; its output: %s", err, tail(log)))
		}
		d.logs[i].Close()
	}
	errs = append(errs, os.RemoveAll(d.dir))
	return errors.Join(errs...)
}

// cpu returns the CPU time every child has used so far, their own
// children's included (the journal's writer), in all and each, in the
// order they started (the targets' order), and whether Linux's /proc
// could tell it.
func (d *deployed) cpu() (total time.Duration, each []time.Duration, ok bool) {
	each = make([]time.Duration, len(d.children))
	for i, c := range d.children {
		t, ok := treeCPU(c.PID())
		if !ok {
			return 0, nil, false
		}
		each[i] = t
		total += t
	}
	return total, each, true
}

// treeCPU returns the CPU time process pid and its live descendants have
// used, from /proc: the nanoseconds each of its threads has run
// (schedstat), where /proc/PID/stat would count 10 ms ticks, too coarse
// for a round of a few hundred requests. A Go program's threads, once
// started, do not exit, so none of its time is lost.
func treeCPU(pid int) (time.Duration, bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, false
	}
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(dir + t.Name() + "/schedstat")
		if err != nil {
			continue // a thread that has just exited
		}
		f := bytes.Fields(b)
		if len(f) == 0 {
			return 0, false
		}
		ns, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, false
		}
		total += time.Duration(ns)
	}
	kids, err := os.ReadFile(dir + strconv.Itoa(pid) + "/children")
	if err != nil {
		return total, true // no descendants to tell
	}
	sc := bufio.NewScanner(bytes.NewReader(kids))
	sc.Split(bufio.ScanWords)
	for sc.Scan() {
		if kid, err := strconv.Atoi(sc.Text()); err == nil {
			if t, ok := treeCPU(kid); ok {
				total += t
			}
		}
	}
	return total, true
}

// tail returns the end of a child's output, for an error.
func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
