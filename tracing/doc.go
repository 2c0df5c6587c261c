// Package tracing exports what the gateway does as OpenTelemetry traces:
// one span per request, one child span per attempt, and each wait before
// a retry as an event.
//
// Tracing is optional. [FromEnv] turns it on when the standard
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set, and returns a nil *Tracer otherwise; a nil *Tracer's Observer does
// nothing, so a host wires it in without a branch:
//
//	tr, err := tracing.FromEnv(ctx)
//	if err != nil {
//		return err
//	}
//	defer tr.Shutdown(context.WithoutCancel(ctx))
//	g, err := gateway.New(gateway.Config{
//		Upstreams: ups,
//		Observer:  record.Observers(m.Observer(), tr.Observer()),
//	})
//
// A host with a TracerProvider of its own passes it to [New] instead.
//
// The spans are built when a request is done, from its record, with the
// record's own times; nothing is exported on the request's path. A caller
// that sent a W3C traceparent header gets the request span as a child of
// its own span.
//
// # Spans
//
//	outlast.request   (server)  Request.Start to Request.End
//	  http.request.method, url.path, outlast.request.id, outlast.run,
//	  outlast.upstream, outlast.slot, gen_ai.request.model,
//	  http.response.status_code, http.response.body.size, outlast.error,
//	  error.type, outlast.attempts, outlast.stream, outlast.committed
//	  event outlast.retry_wait at each retried attempt's end:
//	    outlast.attempt.n, outlast.retry_in_ms, outlast.retry_after_ms
//	outlast.attempt   (client)  Attempt.Start to Attempt.End, one per attempt
//	  http.request.method, outlast.attempt.n, outlast.call_id,
//	  http.response.status_code, outlast.attempt.class, error.type, outlast.gate.key,
//	  outlast.gate.ahead, outlast.gate.wait_ms; when the attempt waited for
//	  its upstream (see outlast.Admission), outlast.admission.wait_ms; when
//	  it was the upstream's probe, outlast.attempt.probe = true
//	  event exception, for a failure: exception.type, exception.message
//
// String attributes that would be empty are left out. Durations are
// milliseconds, as floats, since gate waits are often below one.
//
// The request span's status is Error when the caller got a status of 500
// or more, or a response the gateway made itself (outlast.error names its
// kind: busy, deadline, unreachable, client-closed, …); its error.type is
// that kind, else the status code. An attempt span's status is Error when
// the attempt failed. Its outlast.attempt.class is the attempt's
// outlast.Class, as the record carries it and the journal and metrics show
// it; its error.type is the same but for a failed status, which is named
// by its code, as OpenTelemetry's HTTP conventions ask, and for the class
// other, which is _OTHER.
//
// # Secrets
//
// No header value, body or credential becomes an attribute. Error
// messages are the record's, which the gateway has already cleaned: every
// query (from '?' to the end of the word) and every URL's user info is
// cut, since transport errors quote the URL they failed on and some APIs
// take a key in the query.
package tracing
