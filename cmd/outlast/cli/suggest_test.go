package cli

import "testing"

// editDistance counts a slip of the fingers as the user sees it: each
// letter left out, added, replaced, or swapped with the next is one edit.
func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		// Nothing to edit.
		{"waits", "waits", 0},
		// From or to nothing: one insertion a letter.
		{"", "serve", 5},
		{"mock", "", 4},
		// One letter left out, the commonest slip: "--wait".
		{"wait", "waits", 1},
		// One letter too many.
		{"serves", "serve", 1},
		// One letter replaced.
		{"slits", "slots", 1},
		// Two letters swapped count once, as one slip: Levenshtein
		// alone would count two.
		{"wiats", "waits", 1},
		{"sevre", "serve", 1},
		// A swap and a replacement.
		{"wiatz", "waits", 2},
		// The optimal string alignment form edits no letter twice, so
		// "ca" to "abc" is 3, where unrestricted Damerau–Levenshtein
		// says 2.
		{"ca", "abc", 3},
		// Unrelated names are far apart.
		{"follow", "listen", 6},
		// Letters, not bytes: "é" is one letter.
		{"résumé", "resume", 2},
	} {
		t.Run(tc.a+"→"+tc.b, func(t *testing.T) {
			t.Parallel()
			if got := editDistance(tc.a, tc.b); got != tc.want {
				t.Errorf("editDistance(%q, %q): got %d, want %d", tc.a, tc.b, got, tc.want)
			}
			if got := editDistance(tc.b, tc.a); got != tc.want {
				t.Errorf("editDistance(%q, %q): got %d, want %d, as the other way round", tc.b, tc.a, got, tc.want)
			}
		})
	}
}

// closest names what was meant when one name is near, and nothing when
// a guess would mislead.
func TestClosest(t *testing.T) {
	t.Parallel()
	timeouts := []string{"first-byte-timeout", "idle-timeout", "max-timeout"}
	for _, tc := range []struct {
		name   string
		in     string
		known  []string
		want   string
		wantOK bool
	}{
		// A letter left out.
		{"near", "wait", []string{"queue", "waits", "window"}, "waits", true},
		// Two edits away is still near.
		{"two edits", "sreve", []string{"demo", "serve"}, "serve", true},
		// Three edits away is not.
		{"three edits", "svx", []string{"demo", "serve"}, "", false},
		// The nearest wins over one also near.
		{"nearest", "slot", []string{"sort", "slots"}, "slots", true},
		// At the same distance, the first known wins, so that the
		// suggestion does not change from run to run.
		{"tie", "mack", []string{"mock", "muck"}, "mock", true},
		// Case is a slip too: YAML keys are case-sensitive.
		{"case", "Fallbacks", []string{"fallbacks"}, "fallbacks", true},
		// A short name is near only with fewer edits than it has
		// letters: "x" is one edit from any one-letter name.
		{"one letter", "x", []string{"h", "v"}, "", false},
		{"two letters", "js", []string{"id"}, "", false},
		// A name cut short, too far for edits, is found in the one name
		// it begins.
		{"prefix", "journ", []string{"journal", "redis"}, "journal", true},
		// A name with more words than the known one contains it.
		{"contains a known name", "max-attempts-count", []string{"max-attempts", "queue"}, "max-attempts", true},
		// A part found in several names says none of them.
		{"ambiguous part", "timeout", timeouts, "", false},
		// Two letters are in too many names to mean one.
		{"short part", "ti", []string{"first-byte-timeout"}, "", false},
		// Nothing known.
		{"none known", "serve", nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := closest(tc.in, tc.known)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("closest(%q, %q): got %q, %v; want %q, %v", tc.in, tc.known, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// closestOf says which list the name it picks is in, and prefers the
// first list only when the others are no nearer.
func TestClosestOf(t *testing.T) {
	t.Parallel()
	top := []string{"upstreams", "listen", "read_header_timeout", "body_timeout", "keepalive_timeout"}
	up := []string{"slots", "timeout", "max_timeout"}
	for _, tc := range []struct {
		name     string
		in       string
		want     string
		wantList int
		wantOK   bool
	}{
		// Near a name of the first list, as closest has it.
		{"first list", "listn", "listen", 0, true},
		// A name of another list, exactly: nearer than any of the first.
		{"exact in another", "timeout", "timeout", 1, true},
		// Near a name of another list, and of none of the first.
		{"near in another", "timout", "timeout", 1, true},
		// Nearer another list's name than the first's.
		{"nearer in another", "max_timeout", "max_timeout", 1, true},
		// A part found in several names of the first list says none,
		// though one name of another list contains it too.
		{"ambiguous in the first", "_timeo", "", 0, false},
		// A part found in one name of another list, and none of the
		// first, is that name.
		{"part in another", "max_tim", "max_timeout", 1, true},
		// Near none.
		{"none", "colour", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, list, ok := closestOf(tc.in, top, up)
			if got != tc.want || list != tc.wantList || ok != tc.wantOK {
				t.Errorf("closestOf(%q): got %q, %d, %v; want %q, %d, %v", tc.in, got, list, ok, tc.want, tc.wantList, tc.wantOK)
			}
		})
	}
}
