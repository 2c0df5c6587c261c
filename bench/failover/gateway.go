package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/proc"
	"github.com/outlast-llm/outlast/record"
)

// serveConfig is the config file a scenario's gateway gets: the two
// upstreams, their prefixes, the primary's fallback and the fallback's
// model, and a journal. Everything else is outlast serve's default.
const serveConfig = `journal: sqlite:%s
upstreams:
  - name: primary
    prefix: /
    url: %s
    fallbacks: [fallback]
  - name: fallback
    prefix: /fallback
    url: %s
    models: {gpt-4o: %s}
`

// stopWait bounds how long a gateway may take to stop after SIGTERM
// before it is killed: every request is over by then.
const stopWait = 10 * time.Second

// A gateway is one outlast serve process.
type gateway struct {
	url   string
	child *proc.Child
	log   string   // its stdout and stderr
	out   *os.File // log, open while the child runs
}

// startGateway writes the config for the two upstreams into dir, starts
// bin serve with it and flags on a port it picks, and returns it once it
// listens.
func startGateway(ctx context.Context, bin, dir, primary, fallback string, flags []string) (*gateway, error) {
	cfg := filepath.Join(dir, "outlast.yaml")
	text := fmt.Sprintf(serveConfig, filepath.Join(dir, "journal.db"), primary, fallback, fallbackName)
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		return nil, err
	}
	g := &gateway{log: filepath.Join(dir, "serve.log")}
	out, err := os.Create(g.log)
	if err != nil {
		return nil, err
	}
	g.out = out
	args := append([]string{"serve", "--config", cfg, "--listen", "127.0.0.1:0"}, flags...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	g.child, err = proc.Start(ctx, cmd, out, "serving on")
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("outlast serve %v: %w; its log: %s", args, err, g.tail())
	}
	g.url = "http://" + g.child.Addr
	return g, nil
}

// stop stops the gateway as an operator would, with SIGTERM, and kills it
// if it has not stopped within stopWait.
func (g *gateway) stop() {
	g.child.Stop(stopWait)
	g.out.Close() // the child's output is copied to it until it exits
}

// tail returns the end of the gateway's log, for an error.
func (g *gateway) tail() string {
	b, _ := os.ReadFile(g.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// The record of n requests reaches the journal a batch after each ends;
// records polls for it every recordEvery, for at most recordWait.
const (
	recordWait  = 15 * time.Second
	recordEvery = 200 * time.Millisecond
)

// records returns the gateway's record of its requests, oldest first,
// once it holds n that have ended, or what it holds after recordWait.
func (g *gateway) records(ctx context.Context, n int) ([]record.Request, error) {
	deadline := time.Now().Add(recordWait)
	for {
		recs, err := g.list(ctx)
		if err == nil && complete(recs, n) || time.Now().After(deadline) {
			return recs, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(recordEvery):
		}
	}
}

// complete reports whether recs are n requests that have all ended.
func complete(recs []record.Request, n int) bool {
	if len(recs) < n {
		return false
	}
	for _, r := range recs {
		if r.End.IsZero() {
			return false
		}
	}
	return true
}

// list reads GET /outlast/requests, newest first, and returns the
// requests oldest first.
func (g *gateway) list(ctx context.Context) ([]record.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.url+"/outlast/requests?limit=100", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /outlast/requests: %s", resp.Status)
	}
	var page struct {
		Requests []record.Request `json:"requests"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return nil, fmt.Errorf("GET /outlast/requests: %w", err)
	}
	slices.Reverse(page.Requests)
	return page.Requests, nil
}
