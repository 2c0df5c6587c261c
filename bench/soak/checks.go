package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/outlast-llm/outlast/bench/internal/stats"
)

// A check is one thing the soak asserts of a phase, and how it went.
type check struct {
	Name   string `json:"name"`
	Slots  int    `json:"slots"`
	Passed bool   `json:"passed"`
	Detail string `json:"detail"` // the figures if it passed, the reason if not
}

// OK reports whether the check passed.
func (c check) OK() bool { return c.Passed }

// Line is the check as one line: its slots, its name and its detail.
func (c check) Line() string {
	verdict := ""
	if !c.Passed {
		verdict = " failed"
	}
	return fmt.Sprintf("%d slot%s, %s%s: %s", c.Slots, plural(c.Slots), c.Name, verdict, c.Detail)
}

// judged is a phase's checks and the figures of its report.
type judged struct {
	checks []check
	fig    figures
}

// judgeRun runs every check of a phase but the resources', which are
// judged after the phase is closed, and works out its figures.
func (ph *phase) judgeRun(r *result) judged {
	var j judged
	add := func(name string, failures []string, detail string) {
		c := check{Name: name, Slots: ph.slots, Passed: len(failures) == 0, Detail: detail}
		if !c.Passed {
			c.Detail = failures[0]
			if len(failures) > 1 {
				c.Detail += fmt.Sprintf(" (and %d more)", len(failures)-1)
			}
		}
		j.checks = append(j.checks, c)
	}
	add("liveness", r.stuck, "no wait for an event got stuck")
	add("capacity", ph.capacity(r), fmt.Sprintf("at most %d in flight at the upstream (peak %d), each attempt the request its caller sent", ph.slots, r.seen.peak))
	answers, counts := ph.answers(r)
	add("answers", answers, fmt.Sprintf("each of %d requests got one whole answer: %s", len(r.outcomes), counts))
	attempts, total := ph.attempts(r)
	add("attempts", attempts, fmt.Sprintf("%d attempts at the upstream, in the journal and in Outlast-Attempts, request by request", total))
	fifo, placed, ranked := ph.fifo(r)
	add("fifo", fifo, fmt.Sprintf("no attempt granted before one that had joined the queue before it was sent (%d attempts placed, %d of them ranked one by one)", placed, ranked))
	p := ph.probes
	add("busy", ph.busy(r), fmt.Sprintf("%d refusals in %d probes came with the queue full; none queued past %d", p.total, p.run, ph.cfg.Queue))
	j.fig = ph.figures(r)
	return j
}

// capacity: the upstream never held more attempts than the slots, and
// saw each attempt once, with its caller's body and without the
// gateway's own headers.
func (ph *phase) capacity(r *result) []string {
	var out []string
	if r.seen.peak > ph.slots {
		out = append(out, fmt.Sprintf("%d attempts in flight at the upstream at once, with %d slots", r.seen.peak, ph.slots))
	}
	return append(out, r.seen.bad...)
}

// answers: every request got one well-formed, complete answer, with an
// ID of its own that the record was told of once.
func (ph *phase) answers(r *result) (failures []string, counts string) {
	n := map[string]int{}
	ids := map[string]string{}
	for _, o := range r.outcomes {
		if o.bad != "" {
			failures = append(failures, fmt.Sprintf("request %s: %s", o.tag, o.bad))
			continue
		}
		n[o.kind]++
		if prev, dup := ids[o.id]; dup {
			failures = append(failures, fmt.Sprintf("requests %s and %s got the same %s %s", prev, o.tag, "Outlast-Request-Id", o.id))
		}
		ids[o.id] = o.tag
		f := ph.led.requests[o.id]
		switch {
		case f == nil:
			failures = append(failures, fmt.Sprintf("request %s (%s): no record reached the observer", o.tag, o.id))
		case f.tag != o.tag:
			failures = append(failures, fmt.Sprintf("request %s (%s): the record is of %s", o.tag, o.id, f.tag))
		}
	}
	if extra := len(ph.led.requests) - len(r.outcomes); extra > 0 {
		failures = append(failures, fmt.Sprintf("%d more records than requests", extra))
	}
	failures = append(failures, ph.led.twice...)
	counts = fmt.Sprintf("%d completions, %d busy, %d upstream failures and %d unreachable after the last attempt",
		n[kindOK], n[kindBusy], n[kindUpstream], n[kindUnreachable])
	return failures, counts
}

// attempts: the attempts the upstream saw are those the journal kept,
// which are those the Outlast-Attempts headers count, request by request.
func (ph *phase) attempts(r *result) (failures []string, total int) {
	upstream := map[string]int{}
	for _, a := range r.seen.arrivals {
		upstream[a.tag]++
	}
	var headers, journaled int
	for _, o := range r.outcomes {
		if o.attempts < 0 {
			continue // not an answer: answers says so
		}
		headers += o.attempts
		rows := r.rows[o.tag]
		switch {
		case len(rows) != 1:
			failures = append(failures, fmt.Sprintf("request %s: %d journal rows, want 1", o.tag, len(rows)))
		case rows[0].id != o.id:
			failures = append(failures, fmt.Sprintf("request %s: the journal's row is %s, the answer's %s", o.tag, rows[0].id, o.id))
		case rows[0].status != o.status:
			failures = append(failures, fmt.Sprintf("request %s: the journal says %d, the answer was %d", o.tag, rows[0].status, o.status))
		case rows[0].attempts != o.attempts || upstream[o.tag] != o.attempts:
			failures = append(failures, fmt.Sprintf("request %s: %d attempts at the upstream, %d in the journal, %s: %d",
				o.tag, upstream[o.tag], rows[0].attempts, "Outlast-Attempts", o.attempts))
		}
	}
	for _, rows := range r.rows {
		for _, row := range rows {
			journaled += row.attempts
		}
	}
	if len(r.seen.arrivals) != journaled || journaled != headers {
		failures = append(failures, fmt.Sprintf("%d attempts at the upstream, %d in the journal, %d in Outlast-Attempts",
			len(r.seen.arrivals), journaled, headers))
	}
	if r.dropped > 0 {
		failures = append(failures, fmt.Sprintf("the journal's writer dropped or gave up %d records", r.dropped))
	}
	return failures, len(r.seen.arrivals)
}

// fifo: no attempt was granted its slot before one that had joined the
// key's queue before it was sent.
func (ph *phase) fifo(r *result) (failures []string, placedN, ranked int) {
	ranks := make(map[attemptKey]int64, len(r.seen.arrivals))
	counts := map[int64]int{}
	for _, a := range r.seen.arrivals {
		ranks[a.attemptKey] = a.rank
		counts[a.rank]++
	}
	var as []placed
	for k, j := range ph.led.joins {
		rank, arrived := ranks[k]
		if !arrived || j.before == 0 || j.after == 0 {
			continue // refused busy, or never sent: nothing to order
		}
		as = append(as, placed{attemptKey: k, key: j.key, before: j.before, after: j.after, rank: rank})
		if counts[rank] == 1 {
			ranked++
		}
	}
	if first, second, found := fifoBreak(as); found {
		failures = append(failures, fmt.Sprintf("attempt %d of %s was granted before attempt %d of %s, which had joined the queue for %q before it was sent",
			second.n, second.tag, first.n, first.tag, first.key))
	}
	return failures, len(as), ranked
}

// busy: every refusal judged in a quiet window came with the queue full,
// every probe judged one, and no attempt queued past the bound.
func (ph *phase) busy(r *result) []string {
	p := ph.probes
	failures := append(slices.Clone(p.bad), ph.led.overfull...)
	if p.run < ph.cfg.Probes && len(r.stuck) == 0 {
		failures = append(failures, fmt.Sprintf("%d of %d probes ran", p.run, ph.cfg.Probes))
	}
	return failures
}

// figures are a phase's numbers for the report.
type figures struct {
	Slots        int     `json:"slots"`
	Queue        int     `json:"queue"`
	Callers      int     `json:"callers"`
	Seconds      float64 `json:"seconds"`
	Requests     int     `json:"requests"`
	OK           int     `json:"completions"`
	Busy         int     `json:"busy"`
	Failed       int     `json:"failed_after_retries"` // the upstream's failure or unreachable, after the last attempt
	Attempts     int     `json:"upstream_attempts"`
	PerSecond    float64 `json:"requests_per_s"`
	OKPerSecond  float64 `json:"completions_per_s"`
	GateWaitP50  float64 `json:"gate_wait_p50_ms"`
	GateWaitP99  float64 `json:"gate_wait_p99_ms"`
	EndToEndP50  float64 `json:"end_to_end_p50_ms"`
	EndToEndP99  float64 `json:"end_to_end_p99_ms"`
	Timed        int     `json:"timed_requests"`     // the requests no probe held, which the times are of
	PeakRSS      int64   `json:"peak_rss_bytes"`     // -1: unknown
	PeakRSSPhase bool    `json:"peak_rss_per_phase"` // the peak was reset at the phase's start; else it is the process's
	PeakInFlight int     `json:"peak_in_flight"`
}

// figures works out a phase's numbers. The times are of the requests
// that no probe held: the gate wait of each of their attempts, and the
// end-to-end time of those the upstream answered (busy is answered at
// once, and would hide the others).
func (ph *phase) figures(r *result) figures {
	f := figures{Slots: ph.slots, Queue: ph.cfg.Queue, Callers: ph.cfg.Callers, Seconds: r.took.Seconds(),
		Requests: len(r.outcomes), Attempts: len(r.seen.arrivals), PeakInFlight: r.seen.peak}
	var waits, e2e []time.Duration
	for _, o := range r.outcomes {
		switch o.kind {
		case kindOK:
			f.OK++
		case kindBusy:
			f.Busy++
		case kindUpstream, kindUnreachable:
			f.Failed++
		}
		if !o.clean || o.kind == "" {
			continue
		}
		f.Timed++
		if fin := ph.led.requests[o.id]; fin != nil {
			waits = append(waits, fin.gateWaits...)
		}
		if o.kind != kindBusy {
			e2e = append(e2e, o.took)
		}
	}
	f.PerSecond = float64(f.Requests) / r.took.Seconds()
	f.OKPerSecond = float64(f.OK) / r.took.Seconds()
	f.GateWaitP50, f.GateWaitP99 = millis(percentile(waits, 0.50)), millis(percentile(waits, 0.99))
	f.EndToEndP50, f.EndToEndP99 = millis(percentile(e2e, 0.50)), millis(percentile(e2e, 0.99))
	return f
}

// percentile returns the nearest-rank q-th percentile of ds, or 0 for
// none. It sorts ds.
func percentile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	return stats.Percentile(ds, q)
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
