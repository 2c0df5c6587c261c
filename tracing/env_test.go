package tracing_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/outlast-llm/outlast/tracing"
)

// otelEnv are the variables FromEnv reads; each test clears them all, so
// that the environment the tests run in cannot turn tracing on.
var otelEnv = []string{
	"OTEL_SDK_DISABLED",
	"OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL",
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_EXPORTER_OTLP_COMPRESSION",
	"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
	"OTEL_SERVICE_NAME",
	"OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_TRACES_SAMPLER",
}

// setEnv clears the OTEL_* variables, then sets env. t.Setenv forbids
// t.Parallel, so these tests run alone.
func setEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, k := range otelEnv {
		t.Setenv(k, "")
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}

func TestFromEnvOff(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
	}{
		// The default: no endpoint, no tracing.
		{"no env", nil},
		// The SDK's own switch wins over an endpoint.
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		// The spec's boolean is case-insensitive.
		{"sdk disabled, capitals", map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}},
		// A service name alone is no endpoint.
		{"service name only", map[string]string{"OTEL_SERVICE_NAME": "svc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setEnv(t, tt.env)
			tr, err := tracing.FromEnv(t.Context())
			if tr != nil || err != nil {
				t.Errorf("got %v, %v, want nil, nil", tr, err)
			}
		})
	}
}

func TestFromEnvProtocol(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantErr bool
	}{
		// The one protocol the exporter speaks.
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, false},
		// gRPC to port 4317 would fail on every export, far from the cause.
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true},
		{"http/json", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, true},
		// The traces-only setting overrides the general one.
		{"traces override", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:4318"
			setEnv(t, tt.env)
			tr, err := tracing.FromEnv(t.Context())
			if (err != nil) != tt.wantErr {
				t.Fatalf("got error %v, want error %v", err, tt.wantErr)
			}
			if err == nil {
				if tr == nil {
					t.Fatal("got nil Tracer and no error, want a Tracer")
				}
				if err := tr.Shutdown(t.Context()); err != nil {
					t.Errorf("Shutdown with nothing to export: got %v, want nil", err)
				}
			}
		})
	}
}

// export is one POST the collector received.
type export struct {
	path, contentType string
	req               *coltrace.ExportTraceServiceRequest
}

// collector is an OTLP/HTTP receiver that keeps what it is sent.
func collector(t *testing.T) (*httptest.Server, chan export) {
	t.Helper()
	got := make(chan export, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil && r.Header.Get("Content-Encoding") == "gzip" {
			var zr *gzip.Reader
			if zr, err = gzip.NewReader(bytes.NewReader(body)); err == nil {
				body, err = io.ReadAll(zr)
			}
		}
		var req coltrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil {
			t.Errorf("collector: reading the export: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- export{r.URL.Path, r.Header.Get("Content-Type"), &req}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestFromEnvExports(t *testing.T) {
	tests := []struct {
		name        string
		env         map[string]string
		wantService string
	}{
		// The base endpoint: the exporter adds /v1/traces.
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "{url}"}, "outlast"},
		// The traces endpoint is used as given.
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "{url}/v1/traces"}, "outlast"},
		// The standard service name replaces the default.
		{"service name", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "{url}", "OTEL_SERVICE_NAME": "gw-1"}, "gw-1"},
		// Compression is the exporter's to read, and still reaches the
		// collector whole.
		{"gzip", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "{url}", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}, "outlast"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, got := collector(t)
			env := map[string]string{}
			for k, v := range tt.env {
				env[k] = replaceURL(v, srv.URL)
			}
			setEnv(t, env)
			tr, err := tracing.FromEnv(t.Context())
			if err != nil || tr == nil {
				t.Fatalf("got %v, %v, want a Tracer", tr, err)
			}
			r := retried()
			tr.Observer().Done(&r)
			if err := tr.Shutdown(t.Context()); err != nil {
				t.Fatalf("got Shutdown error %v, want nil", err)
			}
			close(got)
			var names []string
			n := 0
			for e := range got {
				n++
				if e.path != "/v1/traces" || e.contentType != "application/x-protobuf" {
					t.Errorf("got POST %s (%s), want /v1/traces (application/x-protobuf)", e.path, e.contentType)
				}
				for _, rs := range e.req.GetResourceSpans() {
					if s := service(rs.GetResource().GetAttributes()); s != tt.wantService {
						t.Errorf("got service.name %q, want %q", s, tt.wantService)
					}
					for _, ss := range rs.GetScopeSpans() {
						for _, s := range ss.GetSpans() {
							names = append(names, s.GetName())
						}
					}
				}
			}
			if n == 0 {
				t.Fatal("got no export, want one after Shutdown")
			}
			slices.Sort(names)
			if want := []string{"outlast.attempt", "outlast.attempt", "outlast.request"}; !slices.Equal(names, want) {
				t.Errorf("got spans %q, want %q", names, want)
			}
		})
	}
}
