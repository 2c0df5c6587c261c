package main

import (
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/record"
)

// at is a time s seconds into a run.
func at(s float64) time.Time {
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(s * float64(time.Second)))
}

// try is a recorded attempt at upstream, begun at s, of class c.
func try(upstream string, s float64, c outlast.Class) record.Attempt {
	return record.Attempt{Upstream: upstream, Start: at(s), Class: c}
}

// With one request, the attempts at the primary are those its kernel
// refused, from the record, and those that reached it, as it saw them;
// attempts the gateway never sent count nowhere.
func TestAttributeOne(t *testing.T) {
	t.Parallel()
	recs := []record.Request{{ID: "a", Upstream: "primary", Attempts: []record.Attempt{
		try("primary", 0, outlast.ClassRefused),
		try("primary", 1, outlast.ClassStatus5xx),
		try("primary", 2, outlast.ClassDown), // sent away: no attempt
		try("fallback", 3, outlast.ClassNone),
	}}}
	got, note := attribute([]result{{requestID: "a"}}, recs, []time.Time{at(1.1)}, []time.Time{at(3.1)})
	a := got[0]
	if len(a.primary) != 2 || !a.primary[0].Equal(at(0)) || !a.primary[1].Equal(at(1.1)) || a.fallback != 1 || !a.known {
		t.Errorf("got %+v, want the refusal at 0 s and the mock's arrival at 1.1 s, and one at the fallback", a)
	}
	if note != "" {
		t.Errorf("note: got %q, want none: the record and the mocks agree", note)
	}
}

// With several requests, each gets its own record's attempts: by its
// Outlast-Request-Id, or in arrival order for one that got no response;
// a record that disagrees with the mocks' counts is noted.
func TestAttributeMany(t *testing.T) {
	t.Parallel()
	recs := []record.Request{
		{ID: "a", Upstream: "primary", Attempts: []record.Attempt{try("primary", 0, outlast.ClassRefused), try("fallback", 0.1, outlast.ClassNone)}},
		{ID: "b", Upstream: "primary", Attempts: []record.Attempt{try("primary", 4, outlast.ClassRefused), try("primary", 19, outlast.ClassNone)}},
		{ID: "c", Upstream: "primary", Attempts: []record.Attempt{try("primary", 8, outlast.ClassNone)}},
	}
	results := []result{{requestID: "a"}, {}, {requestID: "c"}}
	got, note := attribute(results, recs, []time.Time{at(19)}, []time.Time{at(0.1)})
	for i, want := range []struct{ primary, fallback int }{{1, 1}, {2, 0}, {1, 0}} {
		if len(got[i].primary) != want.primary || got[i].fallback != want.fallback || !got[i].known {
			t.Errorf("request %d: got %+v, want %d at the primary and %d at the fallback", i+1, got[i], want.primary, want.fallback)
		}
	}
	if !strings.Contains(note, "the record has 2 attempts that reached the primary and 1 the fallback; they saw 1 and 1") {
		t.Errorf("note: got %q, want the record's 2 against the primary's 1", note)
	}
}

// A request the record lacks has unknown attempts, unless it is alone,
// when the mocks tell them.
func TestAttributeMissing(t *testing.T) {
	t.Parallel()
	got, note := attribute([]result{{requestID: "x"}, {requestID: "y"}}, nil, nil, nil)
	if got[0].known || got[1].known || !strings.Contains(note, "lacks 2 of the 2") {
		t.Errorf("got %+v, %q; want unknown attempts, noted", got, note)
	}
	got, _ = attribute([]result{{}}, nil, []time.Time{at(0)}, nil)
	if !got[0].known || len(got[0].primary) != 1 {
		t.Errorf("alone: got %+v, want the mock's one attempt", got[0])
	}
}
