// Package metrics exports what the gateway does as Prometheus metrics, for
// /outlast/metrics.
//
// A [Metrics] is a record.Observer and an http.Handler over a registry of
// its own, so that the host's other metrics, and its Go runtime's, never
// mix with outlast's. Wire it in before the gateway, whose Config takes
// the Observer, and give it the gateway's Loads after:
//
//	m := metrics.New([]string{"openai", "llama"})
//	g, err := gateway.New(gateway.Config{
//		Upstreams: ups,
//		Observer:  m.Observer(),
//		Endpoints: map[string]http.Handler{"metrics": m.Handler()},
//	})
//	…
//	m.SetLoads(g.Loads)
//
// # Metrics
//
//	outlast_requests_total{upstream,code}           requests, by the status sent to the caller (499: the caller left before its answer began)
//	outlast_attempts_total{upstream,outcome}        attempts sent upstream, by how they ended
//	outlast_retries_total{upstream,reason}          attempts followed by a retry, by the failure that caused it
//	outlast_retry_wait_seconds_total{upstream}      the waits before those retries, summed
//	outlast_busy_total{upstream}                    requests refused because the gate's queue was full
//	outlast_upstream_latency_seconds{upstream}      histogram: each attempt's time from send to first byte (or failure)
//	outlast_gate_wait_seconds{upstream}             histogram: each gated attempt's wait at the gate
//	outlast_gate_queue_depth{upstream,slot}         gauge: requests waiting now, at the upstream's bound (slot="") or a named slot
//	outlast_admission_wait_seconds{upstream}        histogram: each attempt's wait for its upstream to come back (admission)
//	outlast_probes_total{upstream}                  attempts sent as the one probe of an upstream that was down
//	outlast_upstream_state{upstream,state}          gauge: 1 for the admission state (healthy, down, probing, recovering), 0 for the rest
//	outlast_admission_limit{upstream}               gauge: the admission's limit of requests in flight while recovering, else 0
//	outlast_admission_waiting{upstream}             gauge: requests waiting for the upstream to come back
//	outlast_pool_member_remaining{upstream,limit}   gauge: what is left of a pool member's rate limit (requests, tokens), as its pool counts it now
//	outlast_pool_member_limit{upstream,limit}       gauge: a pool member's rate limit a window, as its answers state it
//	outlast_journal_dropped_total                   records the journal dropped because its queue was full
//	outlast_journal_failed_total                    records the journal gave up because its store refused them (a database gone, a disk full)
//
// An outcome, and a retry's reason, is the attempt's outlast.Class, as the
// record carries it: rate_limited (429), overloaded (529), status_4xx,
// status_5xx, error_event, busy, stalled, closed_early, refused, reset,
// timeout, canceled, upstream_down (an Admission sent the request away) or
// other, or ok for an attempt that did not fail; a
// reason is never ok. They are the journal's error_class values, so a
// dashboard and the record name a failure alike.
//
// # Cardinality
//
// Every label value comes from a fixed set or from the configuration: the
// upstream names given to [New] (any other name counts as "other"), the
// outcomes above, a status code between 100 and 599 (else "other"), and a
// named slot "slot N" with N below 64 (else "other"). No run, path, model,
// request ID, header value or URL ever becomes a label, so secrets in them
// never reach the metrics.
//
// Every series known in advance is exported from the start, at zero, as
// Prometheus's instrumentation guidance asks: for each configured upstream,
// every outcome and reason, the codes 200, 499, 502, 503 and 504, the
// counters without other labels, both histograms, and the queue depth of
// its bound (slot="").
package metrics
