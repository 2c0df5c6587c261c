package apierr_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/outlast-llm/outlast/internal/apierr"
)

// An error reads the same to OpenAI's SDK (error.type, error.message) and
// Anthropic's (the top-level type), and names its kind in the header and
// the type alike.
func TestWrite(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	w.Header().Set("Retry-After", "3")
	w.Header().Set("Content-Length", "99")
	apierr.Write(w, 503, "too-large", `a "quoted" message`)
	if w.Code != 503 || w.Header().Get("Outlast-Error") != "too-large" || w.Header().Get("Retry-After") != "3" || w.Header().Get("Content-Length") != "" {
		t.Errorf("got %d, headers %v; want 503, Outlast-Error too-large, Retry-After kept, no Content-Length", w.Code, w.Header())
	}
	var got struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatalf("body %q: %v", w.Body.String(), err)
	}
	if got.Type != "error" || got.Error.Type != "outlast_too_large" || got.Error.Message != `a "quoted" message` {
		t.Errorf("got %+v, want type error, error.type outlast_too_large and the message", got)
	}
}
