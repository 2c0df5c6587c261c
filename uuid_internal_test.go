package outlast

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestFormatUUID checks the canonical text of a UUID's bytes, 8-4-4-4-12
// hex digits, against fmt's, for bytes of every value.
func TestFormatUUID(t *testing.T) {
	for i := range 1000 {
		var u [16]byte
		for j := range u {
			u[j] = byte(rand.Uint32())
		}
		if i < 256 {
			u[i%16] = byte(i) // every byte value, at every place in turn
		}
		want := fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
		if got := formatUUID(&u); got != want {
			t.Fatalf("formatUUID(%x) = %q, want %q", u, got, want)
		}
	}
}
