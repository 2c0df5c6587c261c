// Realtime runs an outage in real time, with real processes: outlast
// serve over loopback in front of outlast mock, a provider of --capacity
// completions at once (429 past it) that answers 503 for --outage from
// its first request, then recovers. --callers callers send requests
// through the gateway for --duration, each at a steady pace, first with
// the gateway's admission on and then off, and the mock says what it saw:
// the attempts per request, its 429s past capacity, and its peak of
// completions at once at recovery.
//
// It builds the outlast binary first (go build, from this module), and
// prints a markdown table, one row per mode and seed; a seed shifts the
// callers' start offsets.
//
// Usage:
//
//	cd bench && go run ./realtime [flags]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/cmdline"
	"github.com/outlast-llm/outlast/bench/internal/proc"
)

func main() {
	cmdline.Main("realtime", run)
}

// usageError is a bad command line: main exits 2 for it.
type usageError = cmdline.UsageError

// config is a run's settings.
type config struct {
	callers  int
	duration time.Duration
	outage   time.Duration
	capacity int
	every    time.Duration
	seeds    int
	check    bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("realtime", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.IntVar(&c.callers, "callers", 200, "concurrent callers")
	fs.DurationVar(&c.duration, "duration", 40*time.Second, "how long the callers send")
	fs.DurationVar(&c.outage, "outage", 20*time.Second, "how long the mock answers 503, from its first request")
	fs.IntVar(&c.capacity, "capacity", 80, "the mock's completions at once; one more gets 429")
	fs.DurationVar(&c.every, "every", 2*time.Second, "each caller's pace: one request this often, or as soon as the last ends if later")
	fs.IntVar(&c.seeds, "seeds", 2, "runs of each mode, with different start offsets")
	fs.BoolVar(&c.check, "check", false, "exit 1 unless, with admission on, every run got 99 % of its requests through at 1.25 attempts per request or fewer at the mock")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{Err: err}
	}
	if c.callers < 1 || c.duration <= c.outage || c.capacity < 1 || c.every <= 0 || c.seeds < 1 {
		return usageError{Err: errors.New("want --callers, --capacity and --seeds of 1 or more, --every above 0, and --duration longer than --outage")}
	}
	dir, bin, err := proc.BuildOutlastTemp(ctx, "outlast-realtime", stderr)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(stdout, "`%s` (%d callers, one request each %v, for %v; the mock: 503 for %v from its first request, then up, %d completions at once, 429 past them)\n\n",
		cmdline.CommandLine("realtime", args), c.callers, c.every, c.duration, c.outage, c.capacity)
	fmt.Fprintln(stdout, "| admission | seed | requests | success % | attempts/req at the mock | 429s past capacity | peak completions at once ÷ capacity | p99 s |")
	fmt.Fprintln(stdout, "| --- | --: | --: | --: | --: | --: | --: | --: |")
	var failed []string
	for _, on := range []bool{true, false} {
		for seed := range c.seeds {
			r, err := once(ctx, bin, c, on, uint64(seed+1))
			if err != nil {
				return err
			}
			success, attempts := float64(r.ok)/float64(r.requests), float64(r.stats.Total)/float64(r.requests)
			// The table's percentage, rounded once as it always was:
			// 100*success, rounded twice, prints otherwise at some ties
			// (23 of 80: 28.75 against 28.749999999999996).
			percent := 100 * float64(r.ok) / float64(r.requests)
			if on && (success < 0.99 || attempts > 1.25) {
				failed = append(failed, fmt.Sprintf("seed %d: %.1f %% through at %.2f attempts per request", seed+1, 100*success, attempts))
			}
			mode := "off"
			if on {
				mode = "on"
			}
			fmt.Fprintf(stdout, "| %s | %d | %d | %.1f | %.2f | %d | %.2f | %.1f |\n", mode, seed+1, r.requests,
				percent, attempts, r.stats.Paths["/v1/chat/completions"]["over-capacity"], float64(r.stats.Peak)/float64(c.capacity), r.p99.Seconds())
		}
	}
	if c.check && len(failed) > 0 {
		return fmt.Errorf("with admission on, want 99 %% through at 1.25 attempts per request at most: %s", strings.Join(failed, "; "))
	}
	return nil
}

// result is one run's outcome.
type result struct {
	requests, ok int
	p99          time.Duration
	stats        mockStats
}

// mockStats is GET /mock/stats.
type mockStats struct {
	Total int                       `json:"total"`
	Peak  int                       `json:"peak"`
	Paths map[string]map[string]int `json:"paths"`
}

// once runs the mock and the gateway, drives the callers, and reads the
// mock's stats.
func once(ctx context.Context, bin string, c config, admission bool, seed uint64) (result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mock, err := proc.Start(ctx, exec.CommandContext(ctx, bin, "mock", "--listen", "127.0.0.1:0", "--quiet", "--from-first-request",
		"--script", fmt.Sprintf("503 for %v,ok", c.outage), "--capacity", strconv.Itoa(c.capacity),
		"--slots", "0", "--chunks", "4", "--chunk-delay", "50ms"), io.Discard, "listening on")
	if err != nil {
		return result{}, err
	}
	defer func() { cancel(); mock.Wait() }()
	mockAddr := mock.Addr
	serve, err := proc.Start(ctx, exec.CommandContext(ctx, bin, "serve", "--listen", "127.0.0.1:0", "--upstream", "http://"+mockAddr,
		"--journal", "off", "--waits", "1s,2s,4s", "--reserve", "5s", "--max-conns", strconv.Itoa(c.callers+64),
		"--admission="+strconv.FormatBool(admission)), io.Discard, "serving on")
	if err != nil {
		return result{}, err
	}
	defer func() { cancel(); serve.Wait() }()
	gwAddr := serve.Addr
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.callers}}
	rng := rand.New(rand.NewPCG(seed, 0))
	var ok atomic.Int64
	var mu sync.Mutex
	var took []time.Duration // one per request sent
	end := time.Now().Add(c.duration)
	var wg sync.WaitGroup
	for range c.callers {
		offset := time.Duration(rng.Int64N(int64(c.every)))
		wg.Go(func() {
			next := time.Now().Add(offset)
			for {
				time.Sleep(time.Until(next))
				if time.Now().After(end) || ctx.Err() != nil {
					return
				}
				start := time.Now()
				good := send(ctx, client, "http://"+gwAddr+"/v1/chat/completions")
				d := time.Since(start)
				if good {
					ok.Add(1)
				}
				mu.Lock()
				took = append(took, d)
				mu.Unlock()
				next = next.Add(c.every)
				if n := time.Now(); next.Before(n) {
					next = n
				}
			}
		})
	}
	wg.Wait()
	r := result{requests: len(took), ok: int(ok.Load()), p99: percentile(took, 0.99)}
	if r.requests == 0 {
		return r, errors.New("no request was sent")
	}
	resp, err := http.Get("http://" + mockAddr + "/mock/stats")
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	return r, json.NewDecoder(resp.Body).Decode(&r.stats)
}

// send makes one request with a 60 s deadline, as Outlast-Timeout, and
// reports whether it got a whole 200.
func send(ctx context.Context, c *http.Client, url string) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Outlast-Timeout", "60s")
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err == nil && resp.StatusCode == 200
}

// percentile returns the p-th percentile of ds, or 0 for none. It takes
// the element at index int(p·n), not the nearest rank ⌈p·n⌉ of
// stats.Percentile, which the other programs use: one element higher
// where p·n is whole, as at n = 100 and p = 0.99. It stays so, to keep
// this program's figures as they were.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}
