package cli

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/mockllm"
)

// The held key of the fallback in the mock test.
func init() { os.Setenv("OUTLAST_TEST_FALLBACK_KEY", "sk-fallback-held") }

// outlast serve, as a process of its own, in front of two outlast mocks:
// a primary that answers 503 for 30 s from its first request and a
// healthy fallback, with admission on, preferring the primary. Requests
// whose 20 s deadline less their 5 s reserve cannot outlast the outage
// move to the fallback and succeed; those whose 60 s deadline can, wait
// for the primary and succeed there.
func TestServeFallbackWithMocks(t *testing.T) {
	t.Parallel()
	primary := &mockllm.Server{FromFirstRequest: true}
	script, err := mockllm.ParseScript("503 for 30s,ok")
	if err != nil {
		t.Fatal(err)
	}
	primary.Script = script
	if err := primary.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(primary.Close)
	fallback := mockllm.NewServer("ok")
	t.Cleanup(fallback.Close)
	config := filepath.Join(t.TempDir(), "outlast.yaml")
	os.WriteFile(config, []byte(fmt.Sprintf(`journal: "off"
upstreams:
  - name: primary
    url: %s
    waits: [1s, 2s, 4s]
    reserve: 5s
    fallbacks: [fallback]
    prefer: primary
  - name: fallback
    prefix: /fallback
    url: %s
    waits: [1s, 2s, 4s]
    reserve: 5s
    models: {gpt-4o: fallback-model}
    auth: env:OUTLAST_TEST_FALLBACK_KEY
`, primary.URL, fallback.URL)), 0o600)
	p := startProcess(t, "--config", config)
	client := newClient(t)
	client.Timeout = 90 * time.Second
	type result struct {
		deadline, upstream string
		status             int
		err                error
		took               time.Duration
	}
	send := func(deadline string) result {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, p.addr+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Outlast-Timeout", deadline)
		req.Header.Set("Authorization", "Bearer the-callers-key")
		resp, err := client.Do(req)
		if err != nil {
			return result{deadline: deadline, err: err}
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return result{deadline, resp.Header.Get("Outlast-Upstream"), resp.StatusCode, nil, time.Since(start)}
	}
	// The outage begins with the first request; requests then arrive
	// over its first 10 s, the short and the long in turn.
	var wg sync.WaitGroup
	results := make(chan result, 20)
	for i := range 20 {
		deadline := "20s"
		if i%2 == 1 {
			deadline = "60s"
		}
		wg.Go(func() { results <- send(deadline) })
		time.Sleep(500 * time.Millisecond)
	}
	wg.Wait()
	close(results)
	for r := range results {
		want := map[string]string{"20s": "fallback", "60s": "primary"}[r.deadline]
		if r.err != nil || r.status != 200 || r.upstream != want {
			t.Errorf("a request with a %s deadline: %d from %q after %v (%v), want 200 from the %s", r.deadline, r.status, r.upstream, r.took.Round(time.Millisecond), r.err, want)
		}
	}
	if n := fallback.Stats().Total; n < 10 {
		t.Errorf("the fallback mock saw %d requests, want at least the 10 short ones", n)
	}
}
