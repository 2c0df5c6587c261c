package journal_test

import (
	"fmt"
	"net/http"

	"github.com/outlast-llm/outlast/journal"
)

func ExampleParseKeep() {
	d, err := journal.ParseKeep("7d")
	fmt.Println(d, err)
	_, err = journal.ParseKeep("7s")
	fmt.Println(err)
	// Output:
	// 168h0m0s <nil>
	// journal: keep "7s": unit "s": want d, h or m
}

func ExampleSanitize() {
	fmt.Println(journal.Sanitize(`Post "https://api.example.com/v1/chat?key=sk-123": dial tcp: connection refused`))
	// Output:
	// Post "https://api.example.com/v1/chat": dial tcp: connection refused
}

func ExampleRedact() {
	h := http.Header{}
	h.Set("Authorization", "Bearer sk-123")
	h.Set("X-Tenant-Token", "t-456")
	h.Set("Content-Type", "application/json")
	fmt.Println(journal.Redact(h, []string{"X-Tenant-Token"}))
	// Output:
	// map[Content-Type:[application/json]]
}
