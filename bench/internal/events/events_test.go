package events

import (
	"bytes"
	"io"
	"testing"
)

// TestReader checks that a Reader gives each event in a read of its own,
// splits one that does not fit, and leaves the shared events as they
// were for the next Reader.
func TestReader(t *testing.T) {
	evs := [][]byte{[]byte("data: a\n\n"), []byte("data: bcdef\n\n")}
	for range 2 {
		r := NewReader(evs)
		var reads []string
		p := make([]byte, 10)
		for {
			n, err := r.Read(p)
			if n > 0 {
				reads = append(reads, string(p[:n]))
			}
			if err == io.EOF {
				break
			}
		}
		want := []string{"data: a\n\n", "data: bcde", "f\n\n"}
		if len(reads) != len(want) {
			t.Fatalf("reads %q, want %q", reads, want)
		}
		for i := range want {
			if reads[i] != want[i] {
				t.Fatalf("reads %q, want %q", reads, want)
			}
		}
	}
	if !bytes.Equal(evs[1], []byte("data: bcdef\n\n")) {
		t.Fatalf("the shared events changed: %q", evs)
	}
}
