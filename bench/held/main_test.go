package main

import (
	"encoding/json"
	"testing"
)

// TestStatusField reads sizes from a /proc status file's text, and
// nothing from a field it lacks or cannot read.
func TestStatusField(t *testing.T) {
	text := []byte("Name:\toutlast\nVmHWM:\t   40960 kB\nVmRSS:\t   26112 kB\nVmSwap:\tbogus kB\n")
	for _, c := range []struct {
		name string
		want int64
	}{
		{"VmRSS", 26112 << 10},
		{"VmHWM", 40960 << 10},
		{"VmSwap", 0}, // not a number
		{"VmData", 0}, // not there
	} {
		if got := statusField(text, c.name); got != c.want {
			t.Errorf("statusField(%s) = %d, want %d", c.name, got, c.want)
		}
	}
}

// TestAnswerOf checks that an answer is JSON of the size asked for.
func TestAnswerOf(t *testing.T) {
	for _, n := range []int{200, 30_000} {
		b := answerOf(n)
		if len(b) != n || !json.Valid(b) {
			t.Errorf("answerOf(%d): got %d bytes, valid JSON %v; want %d bytes of JSON", n, len(b), json.Valid(b), n)
		}
	}
}
