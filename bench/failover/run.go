package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/record"
)

// A cell is one scenario run under one configuration: what each request
// got, its attempts, its verdict, and where the record and the mocks
// disagree.
type cell struct {
	sc       scenario
	results  []result
	attempts []attempts
	verdicts []verdict
	note     string
}

// outcome returns the cell's outcome: its requests' worst.
func (c cell) outcome() outcome { return worst(c.verdicts) }

// runCell runs sc under cfg in a directory of its own below dir: two
// mocks in this process, one outlast serve, and the requests, each sent
// at its time.
func runCell(ctx context.Context, bin, dir string, sc scenario, cfg configuration) (cell, error) {
	dir = filepath.Join(dir, fmt.Sprintf("%s-%02d", cfg.name, sc.n))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return cell{}, err
	}
	primary, err := startUpstream(sc.primary)
	if err != nil {
		return cell{}, fmt.Errorf("scenario %d: the primary's script: %w", sc.n, err)
	}
	defer primary.close()
	fallback, err := startUpstream(sc.fallback)
	if err != nil {
		return cell{}, fmt.Errorf("scenario %d: the fallback's script: %w", sc.n, err)
	}
	defer fallback.close()
	gw, err := startGateway(ctx, bin, dir, primary.srv.URL, fallback.srv.URL, cfg.flags)
	if err != nil {
		return cell{}, fmt.Errorf("scenario %d: %w", sc.n, err)
	}
	defer gw.stop()

	c := cell{sc: sc, results: make([]result, sc.count())}
	client := newClient()
	defer client.CloseIdleConnections()
	begin := time.Now()
	var wg sync.WaitGroup
	for i := range sc.count() {
		if !sleepUntil(ctx, begin.Add(time.Duration(i)*sc.every)) {
			break
		}
		wg.Go(func() {
			c.results[i] = send(ctx, client, gw.url+"/v1/chat/completions", requestBody(i), sc.limit())
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return cell{}, err
	}
	recs, err := gw.records(ctx, sc.count())
	if err != nil {
		return cell{}, fmt.Errorf("scenario %d: the record: %w; the gateway's log: %s", sc.n, err, gw.tail())
	}
	c.attempts, c.note = attribute(c.results, recs, primary.arrivals(), fallback.arrivals())
	for i, r := range c.results {
		c.verdicts = append(c.verdicts, judge(sc, i, r, c.attempts[i]))
	}
	return c, nil
}

// sleepUntil waits until t, and reports false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// attribute returns each request's attempts, and a note where the record
// and the mocks disagree.
//
// The gateway's record says which request each attempt was for, and
// holds the connections the primary's kernel refused, which no mock
// sees; a request's record is the one with its Outlast-Request-Id, or,
// for a request that got no response, the next unclaimed one in arrival
// order (the requests start seconds apart). With one request, the mocks
// say the rest themselves: the attempts at the primary are the ones it
// refused, from the record, and the ones that reached it, as it saw
// them.
func attribute(results []result, recs []record.Request, primarySeen, fallbackSeen []time.Time) ([]attempts, string) {
	matched := match(results, recs)
	out := make([]attempts, len(results))
	reachedPrimary, reachedFallback := 0, 0
	missing := 0
	for i, rec := range matched {
		var a attempts
		var refused []time.Time
		if rec != nil {
			var reached int
			a, refused, reached = fromRecord(rec)
			reachedPrimary += reached
			reachedFallback += a.fallback
		} else {
			missing++
		}
		if len(results) == 1 {
			a.primary = append(refused, primarySeen...)
			slices.SortFunc(a.primary, time.Time.Compare)
			a.fallback, a.known = len(fallbackSeen), true
		}
		out[i] = a
	}
	note := ""
	switch {
	case missing > 0:
		note = fmt.Sprintf("the record lacks %d of the %d requests", missing, len(results))
	case reachedPrimary != len(primarySeen) || reachedFallback != len(fallbackSeen):
		note = fmt.Sprintf("the record has %d attempts that reached the primary and %d the fallback; they saw %d and %d",
			reachedPrimary, reachedFallback, len(primarySeen), len(fallbackSeen))
	}
	return out, note
}

// match returns the record of each request, or nil where there is none.
func match(results []result, recs []record.Request) []*record.Request {
	out := make([]*record.Request, len(results))
	claimed := make([]bool, len(recs))
	for i, r := range results {
		for j := range recs {
			if !claimed[j] && r.requestID != "" && recs[j].ID == r.requestID {
				out[i], claimed[j] = &recs[j], true
			}
		}
	}
	next := 0
	for i := range results {
		if out[i] != nil || results[i].requestID != "" {
			continue
		}
		for next < len(recs) && claimed[next] {
			next++
		}
		if next < len(recs) {
			out[i], claimed[next] = &recs[next], true
		}
	}
	return out
}

// fromRecord returns a request's attempts as its record tells them, when
// the primary refused those it refused, and how many reached the primary.
// An attempt that the gateway sent away before sending (busy, or the
// upstream down) was made at no upstream.
func fromRecord(rec *record.Request) (a attempts, refused []time.Time, reached int) {
	a.known = true
	for _, at := range rec.Attempts {
		if at.Class == outlast.ClassBusy || at.Class == outlast.ClassDown {
			continue
		}
		up := at.Upstream
		if up == "" {
			up = rec.Upstream
		}
		switch {
		case up == "fallback":
			a.fallback++
		case at.Class == outlast.ClassRefused:
			a.primary = append(a.primary, at.Start)
			refused = append(refused, at.Start)
		default:
			a.primary = append(a.primary, at.Start)
			reached++
		}
	}
	return a, refused, reached
}
