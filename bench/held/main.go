// Held measures the memory that outlast serve takes for answers that are
// not streams, which it holds whole before their first byte goes, within
// its --hold-budget. An upstream
// in this process answers each request with --size bytes of JSON, its
// length declared (or, with --chunked, not); outlast serve --journal off
// runs in front of it as a child process, with its defaults but for
// --hold-budget if given; --requests callers send a request each at
// once, and check that each answer reaches them whole, its length and
// its SHA-256. Meanwhile the gateway's resident memory (VmRSS, from
// /proc) is read every --every, and its peak (VmHWM) at the end.
//
// It builds the outlast binary first (go build, from this module), and
// prints a markdown table of one row: the budget, the gateway's memory
// before the requests and at its peak, the answers whole, and whether
// the peak stayed within the budget and 64 MiB of the memory before.
// With --check, it exits 1 if not, or if an answer was not whole.
//
// Usage:
//
//	cd bench && go run ./held [flags]
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/cmdline"
	"github.com/outlast-llm/outlast/bench/internal/proc"
	"github.com/outlast-llm/outlast/gateway"
)

func main() {
	cmdline.Main("held", run)
}

// config is a run's settings.
type config struct {
	requests int
	size     int
	chunked  bool
	budget   int64 // --hold-budget; 0 for serve's default
	every    time.Duration
	check    bool
}

// slack is what the gateway's memory may grow by beyond its budget:
// the answers that go as they come, the connections, and the garbage
// not yet collected.
const slack = 64 << 20

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("held", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.IntVar(&c.requests, "requests", 20, "callers that send a request each, at once")
	fs.IntVar(&c.size, "size", 30_000_000, "the bytes of each answer")
	fs.BoolVar(&c.chunked, "chunked", false, "send the answers chunked, their length unknown until their end")
	fs.Int64Var(&c.budget, "hold-budget", 0, "the gateway's --hold-budget, in bytes; 0 for its default")
	fs.DurationVar(&c.every, "every", 5*time.Millisecond, "how often the gateway's resident memory is read")
	fs.BoolVar(&c.check, "check", false, "exit 1 unless every answer was whole and the gateway's peak stayed within the budget and 64 MiB of its memory before")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return cmdline.UsageError{Err: err}
	}
	if c.requests < 1 || c.size < 2 || c.budget < 0 || c.every <= 0 {
		return cmdline.UsageError{Err: errors.New("want --requests of 1 or more, --size of 2 or more, --hold-budget of 0 or more and --every above 0")}
	}
	dir, bin, err := proc.BuildOutlastTemp(ctx, "outlast-held", stderr)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	r, err := once(ctx, bin, dir, c, stderr)
	if err != nil {
		return err
	}
	budget, shown := c.budget, strconv.FormatInt(c.budget, 10)
	if budget == 0 {
		budget, shown = gateway.DefaultHoldBudget, "default"
	}
	within := r.peak-r.baseline <= budget+slack
	length := "declared"
	if c.chunked {
		length = "chunked"
	}
	fmt.Fprintf(stdout, "`%s` (%d requests at once, answers of %d bytes, %s)\n\n", cmdline.CommandLine("held", args), c.requests, c.size, length)
	fmt.Fprintln(stdout, "| --hold-budget | baseline RSS | peak RSS | peak − baseline | answers whole | peak ≤ baseline + budget + 64 MiB |")
	fmt.Fprintln(stdout, "| --- | --: | --: | --: | --: | --- |")
	fmt.Fprintf(stdout, "| %s (%s) | %s | %s | %s | %d of %d | %s |\n", mib(budget), shown, mib(r.baseline), mib(r.peak), mib(r.peak-r.baseline),
		r.whole, c.requests, yes(within))
	if c.check && (!within || r.whole < c.requests) {
		return fmt.Errorf("want every answer whole and a peak within %s of the memory before: got %d of %d whole, and %s more", mib(budget+slack), r.whole, c.requests, mib(r.peak-r.baseline))
	}
	return nil
}

// result is a run's outcome: the gateway's memory before the requests
// and at its peak, in bytes, and the answers that reached their callers
// whole.
type result struct {
	baseline, peak int64
	whole          int
}

// once starts the upstream and the gateway, reads the gateway's memory
// at rest, sends the requests while it reads it on, and stops both.
// What went wrong with an answer goes to stderr, with the gateway's log.
func once(ctx context.Context, bin, dir string, c config, stderr io.Writer) (result, error) {
	answer := answerOf(c.size)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return result{}, err
	}
	up := &http.Server{Handler: upstream(answer, c.chunked)}
	go up.Serve(l)
	defer up.Close()

	args := []string{"serve", "--listen", "127.0.0.1:0", "--upstream", "http://" + l.Addr().String(), "--journal", "off"}
	if c.budget > 0 {
		args = append(args, "--hold-budget", strconv.FormatInt(c.budget, 10))
	}
	logPath := filepath.Join(dir, "serve.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return result{}, err
	}
	defer logFile.Close()
	serve, err := proc.Start(ctx, exec.CommandContext(ctx, bin, args...), logFile, "serving on")
	if err != nil {
		return result{}, fmt.Errorf("outlast %s: %w; its log: %s", strings.Join(args, " "), err, tail(logPath))
	}
	defer serve.Stop(10 * time.Second)
	pid := serve.PID()

	// At rest: the median of what is read for a quarter of a second.
	rest := newSampler(pid, c.every)
	time.Sleep(250 * time.Millisecond)
	baseline := median(rest.stop())
	if baseline <= 0 {
		return result{}, fmt.Errorf("could not read the gateway's VmRSS in /proc/%d/status: held needs Linux", pid)
	}
	// The kernel's peak from now on, as well as the reads': a spike
	// between two reads is not missed.
	resetPeak(pid)
	during := newSampler(pid, c.every)
	whole := send(ctx, "http://"+serve.Addr, c.requests, int64(len(answer)), sha256.Sum256(answer))
	peak := slices.Max(append(during.stop(), status(pid, "VmHWM")))
	if whole < c.requests {
		fmt.Fprintf(stderr, "held: %d of %d answers were not whole; the gateway's log ends: %s\n", c.requests-whole, c.requests, tail(logPath))
	}
	return result{baseline: baseline, peak: peak, whole: whole}, nil
}

// answerOf returns a chat completion of n bytes of JSON, or of n bytes
// at least for the smallest n.
func answerOf(n int) []byte {
	const head, end = `{"object":"chat.completion","choices":[{"message":{"role":"assistant","content":"`, `"}}]}`
	b := make([]byte, max(n, len(head)+len(end)))
	copy(b, head)
	for i := len(head); i < len(b)-len(end); i++ {
		b[i] = 'a' + byte(i%26)
	}
	copy(b[len(b)-len(end):], end)
	return b
}

// upstream answers every request with answer: its length declared, or
// chunked, flushed 64 KiB at a time.
func upstream(answer []byte, chunked bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if !chunked {
			w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
			w.Write(answer)
			return
		}
		for b := answer; len(b) > 0; {
			n := min(len(b), 64<<10)
			if _, err := w.Write(b[:n]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			b = b[n:]
		}
	})
}

// send sends n requests to the gateway at url at once, and returns how
// many answers came whole: a 200 of size bytes whose SHA-256 is sum.
func send(ctx context.Context, url string, n int, size int64, sum [sha256.Size]byte) int {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, DisableCompression: true}}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	whole := 0
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions",
				strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
			if err != nil {
				return
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			h := sha256.New()
			got, err := io.Copy(h, resp.Body)
			if err == nil && resp.StatusCode == http.StatusOK && got == size && bytes.Equal(h.Sum(nil), sum[:]) {
				mu.Lock()
				whole++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return whole
}

// A sampler reads a process's VmRSS every so often, until stop.
type sampler struct {
	done    chan struct{}
	wg      sync.WaitGroup
	samples []int64 // the reads, in bytes; the sampler's goroutine's until stop
}

func newSampler(pid int, every time.Duration) *sampler {
	s := &sampler{done: make(chan struct{})}
	s.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if v := status(pid, "VmRSS"); v > 0 {
				s.samples = append(s.samples, v)
			}
			select {
			case <-s.done:
				return
			case <-t.C:
			}
		}
	})
	return s
}

// stop ends the reads and returns them, one at least.
func (s *sampler) stop() []int64 {
	close(s.done)
	s.wg.Wait()
	if len(s.samples) == 0 {
		return []int64{0}
	}
	return s.samples
}

// status returns the field name of /proc/pid/status, a size in kB, in
// bytes; 0 if it cannot be read.
func status(pid int, name string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	return statusField(b, name)
}

// statusField returns the field name of a /proc status file's text b, a
// size such as "VmRSS:	  26112 kB", in bytes; 0 if b has none.
func statusField(b []byte, name string) int64 {
	for line := range bytes.Lines(b) {
		v, ok := bytes.CutPrefix(line, []byte(name+":"))
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// resetPeak starts pid's VmHWM afresh from its VmRSS (proc(5),
// clear_refs: 5). If it cannot, VmHWM keeps the peak since its start,
// which comes before the requests' at any rate.
func resetPeak(pid int) {
	os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// median returns the middle of vs, which it sorts.
func median(vs []int64) int64 {
	slices.Sort(vs)
	return vs[len(vs)/2]
}

// mib returns n bytes in MiB, to a tenth.
func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// tail returns the last 2 KiB of the file at path, for an error.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2<<10 {
		b = b[len(b)-2<<10:]
	}
	return strings.TrimSpace(string(b))
}
