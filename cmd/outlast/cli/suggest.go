package cli

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// closest returns the name among known that name was most likely meant
// to be, for a "did you mean" in an error: the nearest by edit distance,
// if it is at most 2 edits away and fewer edits than name has letters, or
// else the one name that contains name or that name contains. ok is false
// when none is close, or when two contain it and neither is near: a
// guess between them would mislead more than the list of names does.
func closest(name string, known []string) (best string, ok bool) {
	best, _, ok = closestOf(name, known)
	return best, ok
}

// closestOf is closest over several lists of names, such as the keys of
// each level of a config file, and returns which list the name it picks
// is in. The nearest by edit distance wins, the earlier list at equal
// distance, so that a name near one of the first list's is taken for it
// unless it is nearer another's. Failing that, the first list with a name
// that contains name, or that name contains, decides, as closest does
// with one list.
func closestOf(name string, lists ...[]string) (best string, list int, ok bool) {
	lower := strings.ToLower(name)
	bestDist := min(2, utf8.RuneCountInString(lower)-1) + 1
	for i, known := range lists {
		for _, k := range known {
			if d := editDistance(lower, strings.ToLower(k)); d < bestDist {
				best, list, bestDist = k, i, d
			}
		}
	}
	if best != "" {
		return best, list, true
	}
	for i, known := range lists {
		var found []string
		for _, k := range known {
			if contains(strings.ToLower(k), lower) || contains(lower, strings.ToLower(k)) {
				found = append(found, k)
			}
		}
		switch len(found) {
		case 0:
		case 1:
			return found[0], i, true
		default:
			// Two in the first list that has any: a guess, even one
			// from a later list, would mislead.
			return "", 0, false
		}
	}
	return "", 0, false
}

// contains reports whether s contains sub, of 3 letters or more: "x" or
// "id" is in too many names to say which was meant.
func contains(s, sub string) bool {
	return utf8.RuneCountInString(sub) >= 3 && strings.Contains(s, sub)
}

// didYouMean returns " (did you mean X?)", with X the name of known
// closest to name written as show writes it, or "" when none is close.
func didYouMean(name string, known []string, show func(string) string) string {
	if k, ok := closest(name, known); ok {
		return fmt.Sprintf(" (did you mean %s?)", show(k))
	}
	return ""
}

// editDistance is the Damerau–Levenshtein distance between a and b, in
// its optimal string alignment form: how many letters must be inserted,
// deleted, replaced, or swapped with the next one, to turn a into b, no
// letter being edited twice. A swap counts once because "--wiats" is one
// slip of the fingers, not two.
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	// d[i][j] is the distance between x[:i] and y[:j].
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}
