package tracing

import (
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/record"
)

// The attributes' names follow OpenTelemetry's semantic conventions
// (v1.43) where one fits, and are outlast's own otherwise.
const (
	keyMethod       = attribute.Key("http.request.method")
	keyPath         = attribute.Key("url.path")
	keyStatus       = attribute.Key("http.response.status_code")
	keyBodySize     = attribute.Key("http.response.body.size")
	keyErrorType    = attribute.Key("error.type")
	keyModel        = attribute.Key("gen_ai.request.model")
	keyRequestID    = attribute.Key("outlast.request.id")
	keyRun          = attribute.Key("outlast.run")
	keyUpstream     = attribute.Key("outlast.upstream")
	keySlot         = attribute.Key("outlast.slot")
	keyError        = attribute.Key("outlast.error")
	keyAttempts     = attribute.Key("outlast.attempts")
	keyStream       = attribute.Key("outlast.stream")
	keyCommitted    = attribute.Key("outlast.committed")
	keyAttemptN     = attribute.Key("outlast.attempt.n")
	keyClass        = attribute.Key("outlast.attempt.class")
	keyCallID       = attribute.Key("outlast.call_id")
	keyGateKey      = attribute.Key("outlast.gate.key")
	keyGateAhead    = attribute.Key("outlast.gate.ahead")
	keyGateWaitMS   = attribute.Key("outlast.gate.wait_ms")
	keyAdmissionMS  = attribute.Key("outlast.admission.wait_ms")
	keyProbe        = attribute.Key("outlast.attempt.probe")
	keyRetryInMS    = attribute.Key("outlast.retry_in_ms")
	keyRetryAfterMS = attribute.Key("outlast.retry_after_ms")
)

// requestAttrs are the request span's attributes. Every value is the
// record's own; the headers are never read here.
func requestAttrs(r *record.Request) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 16)
	kv = appendString(kv, keyMethod, r.Method)
	kv = appendString(kv, keyPath, r.Path)
	kv = appendString(kv, keyRequestID, r.ID)
	kv = appendString(kv, keyRun, r.Run)
	kv = appendString(kv, keyUpstream, r.Upstream)
	kv = appendString(kv, keySlot, r.Slot)
	kv = appendString(kv, keyModel, r.Model)
	if r.Status != 0 {
		kv = append(kv, keyStatus.Int(r.Status))
	}
	kv = appendString(kv, keyError, r.Error)
	return append(kv,
		keyBodySize.Int64(r.Bytes),
		keyAttempts.Int(len(r.Attempts)),
		keyStream.Bool(r.Stream),
		keyCommitted.Bool(r.Committed),
	)
}

// setRequestStatus marks a request as failed when the gateway answered for
// it, or the caller got a server error. A 4xx the upstream sent is the
// caller's mistake, not the server span's failure (OpenTelemetry's HTTP
// span status rules).
func setRequestStatus(span trace.Span, r *record.Request) {
	switch {
	case r.Error != "":
		span.SetAttributes(keyErrorType.String(r.Error))
		span.SetStatus(codes.Error, r.Error)
	case r.Status >= 500:
		span.SetAttributes(keyErrorType.String(strconv.Itoa(r.Status)))
		span.SetStatus(codes.Error, "status "+strconv.Itoa(r.Status))
	}
}

// attemptAttrs are an attempt span's attributes. The admission's two are
// set only when they say something, as the record's JSON leaves them out:
// most attempts never meet an upstream that is down.
func attemptAttrs(r *record.Request, a *record.Attempt) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 10)
	kv = appendString(kv, keyMethod, r.Method)
	kv = append(kv, keyAttemptN.Int(a.N))
	kv = appendString(kv, keyCallID, a.CallID)
	if a.Status != 0 {
		kv = append(kv, keyStatus.Int(a.Status))
	}
	kv = appendString(kv, keyClass, a.Class.String())
	kv = appendString(kv, keyErrorType, errorType(a.Class, a.Status))
	kv = appendString(kv, keyGateKey, a.Key)
	if a.AdmissionWait > 0 {
		kv = append(kv, keyAdmissionMS.Float64(ms(a.AdmissionWait)))
	}
	if a.Probe {
		kv = append(kv, keyProbe.Bool(true))
	}
	return append(kv,
		keyGateAhead.Int(a.QueuedAhead),
		keyGateWaitMS.Float64(ms(a.GateWait)),
	)
}

// setAttemptStatus marks a failed attempt and records its error, as the
// record has it (cleaned of queries and user info), as an exception event
// at its end, with the attempt's class as its type.
func setAttemptStatus(span trace.Span, a *record.Attempt, end time.Time) {
	switch {
	case a.Class != outlast.ClassNone:
		span.AddEvent("exception",
			trace.WithTimestamp(end),
			trace.WithAttributes(
				attribute.String("exception.type", a.Class.String()),
				attribute.String("exception.message", a.Error),
			),
		)
		span.SetStatus(codes.Error, a.Error)
	case a.Status >= 400:
		// A client span fails on any 4xx or 5xx (OpenTelemetry's HTTP span
		// status rules), even one the policy returned without an error.
		span.SetStatus(codes.Error, "status "+strconv.Itoa(a.Status))
	}
}

// appendString appends k=v, unless v is empty: an empty run or slot says
// nothing a missing attribute does not.
func appendString(kv []attribute.KeyValue, k attribute.Key, v string) []attribute.KeyValue {
	if v == "" {
		return kv
	}
	return append(kv, k.String(v))
}

// ms is d in milliseconds, with its fraction.
func ms(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond)
}
