// Command library calls a chat completion through outlast's Transport:
// the README's library example, compiled by the tests.
package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gate"
)

func main() {
	client := &http.Client{Transport: &outlast.Transport{
		Policy: &outlast.Policy{
			Waits:   outlast.Exponential(time.Second, time.Minute, 7), // 1s, 2s, 4s … 60s; the last repeats
			Reserve: 30 * time.Second,                                 // keep this much of the deadline for the last attempt
			Jitter:  outlast.Jitter{Spread: 0.25},
		},
		Admission: &outlast.Admission{}, // while the upstream is down: one probe, the rest wait in order
		Gate:      gate.New(4, 64),      // 4 requests in flight, up to 64 waiting in order
	}}

	// The caller's deadline bounds every wait and every retry.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	base := cmp.Or(os.Getenv("OPENAI_BASE_URL"), "https://api.openai.com/v1")
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello."}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions", strings.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+os.Getenv("OPENAI_API_KEY"))
	req.Header.Set("Content-Type", "application/json")

	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err) // every retry failed, or the deadline left no room for another
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, string(answer))
}
