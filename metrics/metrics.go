package metrics

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/internal/apierr"
	"github.com/outlast-llm/outlast/record"
)

// otherLabel stands for every label value outside a label's bounded set:
// an upstream New was not told of, a status outside 100–599, a named slot
// past maxSlotLabel.
const otherLabel = "other"

// Histogram buckets, in seconds. An LLM API's first byte comes in tens of
// milliseconds for a cached stream and in minutes for a long completion
// that is not streamed; a llama.cpp slot is held for a whole generation,
// so gate waits span the same range.
var (
	latencyBuckets  = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120, 300}
	gateWaitBuckets = []float64{0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 25, 60, 120, 300}
	// An admission wait lasts as long as an outage, or a server's delay.
	admissionWaitBuckets = []float64{0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
)

// precreatedCodes are the statuses exported at zero for each upstream: the
// success, and those the gateway sends itself when an upstream fails it
// (the caller left, unreachable, busy, out of time).
var precreatedCodes = []int{200, 499, 502, 503, 504}

// Metrics counts what a gateway does, for Prometheus. Make one with New;
// the zero value is not usable. It is safe for concurrent use.
type Metrics struct {
	reg     *prometheus.Registry
	handler http.Handler

	requests  *prometheus.CounterVec
	attempts  *prometheus.CounterVec
	retries   *prometheus.CounterVec
	retryWait *prometheus.CounterVec
	busy      *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	gateWait  *prometheus.HistogramVec
	admWait   *prometheus.HistogramVec
	probes    *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
	conts     *prometheus.CounterVec
	hedges    *prometheus.CounterVec

	// byName holds the series of each upstream New was told of. It is
	// written only by New, so lookups need no lock.
	byName map[string]*series
	// labels are the configured upstreams' labels, in New's order.
	labels []string

	otherOnce sync.Once // makes other on the first unknown upstream
	other     *series

	loads    atomic.Pointer[func() []record.Load]
	dropped  atomic.Pointer[func() uint64]
	failed   atomic.Pointer[func() uint64]
	degraded atomic.Pointer[func() bool]
}

// series are one upstream's children of the vectors, resolved once so that
// observing costs no label hashing and no allocation.
type series struct {
	label     string
	attempts  []prometheus.Counter // by outlast.Class
	retries   []prometheus.Counter // by outlast.Class; nil at ClassNone: a success is never a reason
	retryWait prometheus.Counter
	busy      prometheus.Counter
	latency   prometheus.Observer
	gateWait  prometheus.Observer
	admWait   prometheus.Observer
	probes    prometheus.Counter
	codes     codes
}

// New returns Metrics for a gateway whose upstreams have the given names
// (gateway.Upstream.Name, or the URL's host when it is empty), with every
// series known in advance at zero. Observations of any other upstream are
// counted as upstream="other"; nil upstreams count everything so.
func New(upstreams []string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), byName: map[string]*series{}}
	m.register()
	for _, name := range upstreams {
		if _, ok := m.byName[name]; ok {
			continue
		}
		label := labelValue(name)
		m.byName[name] = m.newSeries(label)
		m.labels = append(m.labels, label)
	}
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

// register makes the collectors and registers them. MustRegister's panic
// can only be a bug here: the names and labels are constants.
func (m *Metrics) register() {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, []string{"upstream"})
	}
	m.requests = counter("outlast_requests_total", "Requests through the gateway, by the status sent to the caller (499: the caller left first).", "upstream", "code")
	m.attempts = counter("outlast_attempts_total", "Attempts sent upstream, by how they ended.", "upstream", "outcome")
	m.retries = counter("outlast_retries_total", "Attempts followed by a retry, by the failure that caused it.", "upstream", "reason")
	m.retryWait = counter("outlast_retry_wait_seconds_total", "Time waited before retries, summed.", "upstream")
	m.busy = counter("outlast_busy_total", "Requests refused because the gate's queue was full.", "upstream")
	m.latency = histogram("outlast_upstream_latency_seconds", "Time from sending an attempt to its first byte, or to its failure.", latencyBuckets)
	m.gateWait = histogram("outlast_gate_wait_seconds", "Time a gated attempt waited at the gate.", gateWaitBuckets)
	m.admWait = histogram("outlast_admission_wait_seconds", "Time an attempt waited for its upstream to come back, before the gate.", admissionWaitBuckets)
	m.probes = counter("outlast_probes_total", "Attempts sent as the one probe of an upstream that was down.", "upstream")
	m.fallbacks = counter("outlast_fallbacks_total", "Moves of a request from an upstream to its fallback (a request may move more than once), by why: down (it is down), spent (retryable failures, no retry left), silent (no headers or first byte in time), busy (its queue full), context-length (a 400: the request exceeds the model's context) hedge (a hedge sent there answered first) or rate-limited (a pool's member answered 429).", "from", "to", "reason")
	m.conts = counter("outlast_continuations_total", "Continuations of streams that broke after their first byte (serve --continuation prefill or resume), by the upstream whose stream broke and how they ended: continued, resumed, replayed (sent again as it was, its answer past the answer so far), refused (a 4xx to the prefill or the resumption), failed (no stream to carry on with), restarted (the continuation began the answer over), diverged (the replay's text was another) or unsupported (not safe to continue: a tool call, reasoning, n > 1, …).", "upstream", "outcome")
	m.hedges = counter("outlast_hedges_total", "Streams hedged (sent to the first fallback too, having sent no content after the hedge delay), by the upstream that was hedged and which side answered: won (the fallback's) or lost (the upstream's own).", "upstream", "outcome")
	dropped := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "outlast_journal_dropped_total",
		Help: "Records the journal dropped because its queue was full.",
	}, m.journalDropped)
	failed := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "outlast_journal_failed_total",
		Help: "Records the journal gave up because its store refused them three times (a database gone, a disk full), or because shutdown's flush ran out of time.",
	}, m.journalFailed)
	degraded := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outlast_gate_degraded",
		Help: "1 while the gates and admission state shared through Redis cannot be reached and this gateway's own stand in, else 0.",
	}, m.gateDegraded)
	m.reg.MustRegister(m.requests, m.attempts, m.retries, m.retryWait, m.busy,
		m.latency, m.gateWait, m.admWait, m.probes, m.fallbacks, m.conts, m.hedges, dropped, failed, degraded, queueDepth{m}, admissionState{m}, memberHeadroom{m})
}

func (m *Metrics) newSeries(label string) *series {
	s := &series{
		label:     label,
		retryWait: m.retryWait.WithLabelValues(label),
		busy:      m.busy.WithLabelValues(label),
		latency:   m.latency.WithLabelValues(label),
		gateWait:  m.gateWait.WithLabelValues(label),
		admWait:   m.admWait.WithLabelValues(label),
		probes:    m.probes.WithLabelValues(label),
		codes:     codes{vec: m.requests, label: label},
	}
	classes := outlast.Classes()
	s.attempts = make([]prometheus.Counter, len(classes))
	s.retries = make([]prometheus.Counter, len(classes))
	for _, c := range classes {
		s.attempts[c] = m.attempts.WithLabelValues(label, outcome(c))
		if c != outlast.ClassNone {
			s.retries[c] = m.retries.WithLabelValues(label, outcome(c))
		}
	}
	for _, c := range precreatedCodes {
		s.codes.get(c)
	}
	for _, o := range continuationOutcomes {
		m.conts.WithLabelValues(label, o)
	}
	m.hedges.WithLabelValues(label, "won")
	m.hedges.WithLabelValues(label, "lost")
	return s
}

// seriesOf returns the series of the upstream with the given name.
func (m *Metrics) seriesOf(upstream string) *series {
	if s, ok := m.byName[upstream]; ok {
		return s
	}
	// Made on first use, so that a gateway whose names all match never
	// shows an "other" upstream.
	m.otherOnce.Do(func() { m.other = m.newSeries(otherLabel) })
	return m.other
}

// upstreamLabel returns the label of the upstream with the given name.
func (m *Metrics) upstreamLabel(name string) string {
	if s, ok := m.byName[name]; ok {
		return s.label
	}
	return otherLabel
}

// labelValue makes name a valid label value: client_golang panics on
// invalid UTF-8.
func labelValue(name string) string {
	return strings.ToValidUTF8(name, "\uFFFD")
}

// outcome is the outcome label of an attempt of class c, and the reason
// label of the retry after it: the class's name, or "ok" for none.
func outcome(c outlast.Class) string {
	if c == outlast.ClassNone {
		return "ok"
	}
	return c.String()
}

// Observer returns the record.Observer that feeds m. Its funcs may be
// called concurrently.
func (m *Metrics) Observer() record.Observer {
	return record.Observer{AttemptEnd: m.attemptEnd, Done: m.done}
}

// attemptEnd counts an attempt by its class, and its retry if one follows.
func (m *Metrics) attemptEnd(r *record.Request, a record.Attempt) {
	s := m.seriesOf(cmp.Or(a.Upstream, r.Upstream)) // a fallback's attempts are its own
	o := a.Class
	if int(o) >= len(s.attempts) {
		o = outlast.ClassOther // not one of the constants: a hand-made record
	}
	s.attempts[o].Inc()
	if !a.Start.IsZero() && !a.End.Before(a.Start) {
		s.latency.Observe(a.End.Sub(a.Start).Seconds())
	}
	// An attempt went through a gate if it held a named key or waited at
	// all: the gateway's upstreams all have one (a bound, or named slots
	// only), while a Transport without a Gate leaves both zero.
	if a.Key != "" || a.GateWait > 0 {
		s.gateWait.Observe(a.GateWait.Seconds())
	}
	if a.AdmissionWait > 0 || a.Probe {
		s.admWait.Observe(a.AdmissionWait.Seconds())
	}
	if a.Probe {
		s.probes.Inc()
	}
	if a.RetryIn > 0 {
		if o == outlast.ClassNone {
			o = outlast.ClassOther // unreachable today: a success ends the request
		}
		s.retries[o].Inc()
		s.retryWait.Add(a.RetryIn.Seconds())
	}
}

// done counts a request by the status sent to its caller.
func (m *Metrics) done(r *record.Request) {
	s := m.seriesOf(r.Upstream)
	s.codes.get(r.Status).Inc()
	if r.Error == apierr.Busy {
		// The refusal is the upstream's whose queue was full: a fallback
		// the request moved to, not always the one it came to.
		m.seriesOf(r.Answered()).busy.Inc()
	}
	// Every move, from the record's list: the attempts tell only of the
	// moves to an upstream that then made one.
	for _, mv := range r.Moves {
		m.fallbacks.WithLabelValues(m.upstreamLabel(mv.From), m.upstreamLabel(mv.To), fallbackReason(mv.Reason)).Inc()
	}
	if slices.ContainsFunc(r.Attempts, func(a record.Attempt) bool { return a.Fallback == record.ReasonHedge }) {
		o := "lost"
		if slices.ContainsFunc(r.Moves, func(mv record.Move) bool { return mv.Reason == record.ReasonHedge }) {
			o = "won"
		}
		m.hedges.WithLabelValues(m.upstreamLabel(r.Upstream), o).Inc()
	}
	for _, c := range r.Continuations {
		o := c.Outcome
		if !slices.Contains(continuationOutcomes, o) {
			o = "other" // a newer outlast's, or a hand-made record's
		}
		m.conts.WithLabelValues(m.upstreamLabel(c.Upstream), o).Inc()
	}
}

// continuationOutcomes are the outcome labels of a continuation, each
// exported at zero for every upstream.
var continuationOutcomes = []string{record.ContinuationOK, record.ContinuationResumed, record.ContinuationReplayed, record.ContinuationRefused, record.ContinuationFailed, record.ContinuationRestarted, record.ContinuationDiverged, record.ContinuationUnsupported}

// fallbackReason is the reason label of a move: one of outlast's
// reasons, or "other" for a hand-made record.
func fallbackReason(r string) string {
	switch outlast.FallbackReason(r) {
	case outlast.FallbackDown, outlast.FallbackSpent, outlast.FallbackBusy, outlast.FallbackContextLength, outlast.FallbackSilent, record.ReasonHedge, record.ReasonRateLimited:
		return r
	}
	return "other"
}

// Handler returns the handler that serves m's metrics in Prometheus's
// exposition formats, for Config.Endpoints["metrics"].
func (m *Metrics) Handler() http.Handler { return m.handler }

// SetLoads sets the func that each scrape reads the gate queue depths
// from: the gateway's Loads method. It exists apart from New because the
// gateway is made after its Observer. Until it is set, or if f is nil,
// each configured upstream's depth is 0.
func (m *Metrics) SetLoads(f func() []record.Load) {
	if f == nil {
		m.loads.Store(nil)
		return
	}
	m.loads.Store(&f)
}

// SetJournalDropped sets the func that each scrape reads
// outlast_journal_dropped_total from, such as journal.Writer's Dropped.
// Until it is set, or if f is nil, the counter is 0.
func (m *Metrics) SetJournalDropped(f func() uint64) {
	if f == nil {
		m.dropped.Store(nil)
		return
	}
	m.dropped.Store(&f)
}

// SetJournalFailed sets the func that each scrape reads
// outlast_journal_failed_total from, such as journal.Writer's Failed.
// Until it is set, or if f is nil, the counter is 0.
func (m *Metrics) SetJournalFailed(f func() uint64) {
	if f == nil {
		m.failed.Store(nil)
		return
	}
	m.failed.Store(&f)
}

// SetGateDegraded sets the func that each scrape reads
// outlast_gate_degraded from: whether the gates and admission state shared
// through Redis are unreachable, and this process's own stand in. Until it
// is set, or if f is nil, the gauge is 0.
func (m *Metrics) SetGateDegraded(f func() bool) {
	if f == nil {
		m.degraded.Store(nil)
		return
	}
	m.degraded.Store(&f)
}

func (m *Metrics) gateDegraded() float64 {
	if f := m.degraded.Load(); f != nil && (*f)() {
		return 1
	}
	return 0
}

func (m *Metrics) journalDropped() float64 { return readCount(&m.dropped) }

func (m *Metrics) journalFailed() float64 { return readCount(&m.failed) }

// readCount reads a counter from the func p holds, or 0 without one.
func readCount(p *atomic.Pointer[func() uint64]) float64 {
	if f := p.Load(); f != nil {
		return float64((*f)())
	}
	return 0
}

// codes are one upstream's outlast_requests_total children, made on first
// use: a status is bounded, but most never occur, so they are not all
// exported at zero.
type codes struct {
	vec   *prometheus.CounterVec
	label string
	by    [500]atomic.Pointer[counter] // status 100 at 0
}

type counter struct{ prometheus.Counter }

func (c *codes) get(status int) prometheus.Counter {
	i := status - 100
	if i < 0 || i >= len(c.by) {
		return c.vec.WithLabelValues(c.label, otherLabel)
	}
	if p := c.by[i].Load(); p != nil {
		return p.Counter
	}
	// Two first uses may race; both get the vector's one child, so either
	// store is right.
	p := &counter{c.vec.WithLabelValues(c.label, strconv.Itoa(status))}
	c.by[i].Store(p)
	return p.Counter
}
