package outlast_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
)

// TestNewCallID checks the call IDs: UUIDv7s in canonical form, whose
// time is the clock's, unique, and in the order they were made.
func TestNewCallID(t *testing.T) {
	before := time.Now().UnixMilli()
	const n = 10000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = outlast.NewCallID()
	}
	after := time.Now().UnixMilli()
	seen := make(map[string]bool, n)
	for i, id := range ids {
		if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
			t.Fatalf("ID %q is not a UUID's canonical form", id)
		}
		if id[14] != '7' || !strings.ContainsRune("89ab", rune(id[19])) {
			t.Fatalf("ID %q: version %c and variant %c, want 7 and one of 8, 9, a, b", id, id[14], id[19])
		}
		ms, err := strconv.ParseInt(strings.ReplaceAll(id[:13], "-", ""), 16, 64)
		// Past 4,096 IDs in a millisecond the time runs ahead of the
		// clock, to keep them in order.
		if err != nil || ms < before || ms > after+n/4096+1 {
			t.Fatalf("ID %q: time %d ms, want between %d and %d", id, ms, before, after)
		}
		if seen[id] {
			t.Fatalf("ID %q made twice", id)
		}
		seen[id] = true
		if i > 0 && id[:23] <= ids[i-1][:23] {
			t.Fatalf("ID %q made after %q sorts before it", id, ids[i-1])
		}
	}
}
