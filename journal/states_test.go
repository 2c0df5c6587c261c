package journal_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/record"
)

// TestStates is the suite of the upstreams' state changes, run against
// SQLite and (with OUTLAST_TEST_POSTGRES) PostgreSQL.
func TestStates(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, c := range stateCases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.run(t, b)
			})
		}
	})
}

var stateCases = []struct {
	name string
	run  func(t *testing.T, b backend)
}{
	// Changes come back as written and in order, across batches and
	// within one millisecond, where only the order of writing orders them.
	{"round trip in order", testStatesInOrder},
	// Upstream and Since select; Limit keeps the newest, still oldest
	// first.
	{"query", testStatesQuery},
	// Limit: zero means DefaultLimit, more than MaxLimit means MaxLimit,
	// negative is an error.
	{"limit bounds", testStatesLimit},
	// A change the store cannot keep fails its batch before anything is
	// written.
	{"invalid", testStatesInvalid},
	// A state this version does not know, from a newer replica, reads as
	// unknown rather than failing the read.
	{"unknown state", testStatesUnknown},
	// Prune deletes the changes from before its cut, more than a chunk of
	// them, and nothing else.
	{"prune", testStatesPrune},
}

func writeStates(t *testing.T, s journal.Store, cs ...record.StateChange) {
	t.Helper()
	if err := s.WriteStates(context.Background(), cs); err != nil {
		t.Fatalf("WriteStates: %v", err)
	}
}

func states(t *testing.T, s journal.Store, q journal.StateQuery) []record.StateChange {
	t.Helper()
	got, err := s.States(context.Background(), q)
	if err != nil {
		t.Fatalf("States(%+v): %v", q, err)
	}
	return got
}

// outage is one upstream's states through an outage, from t0, with the
// probe's abandon and the next probe in one millisecond.
func outage(upstream string) []record.StateChange {
	return []record.StateChange{
		change(upstream, t0, outlast.Healthy, outlast.Down),
		change(upstream, t0.Add(time.Second+100*time.Microsecond), outlast.Down, outlast.Probing),
		change(upstream, t0.Add(time.Second+400*time.Microsecond), outlast.Probing, outlast.Down),
		change(upstream, t0.Add(time.Second+700*time.Microsecond), outlast.Down, outlast.Probing),
		change(upstream, t0.Add(3*time.Second), outlast.Probing, outlast.Recovering),
		change(upstream, t0.Add(4*time.Second), outlast.Recovering, outlast.Healthy),
	}
}

func testStatesInOrder(t *testing.T, b backend) {
	s := open(t, b.fresh(t))
	cs := outage("openai")
	// Two batches; the upstream's name as dirty as the store must clean.
	dirty := outage("open\x00ai\xff")
	writeStates(t, s, cs[:3]...)
	writeStates(t, s, cs[3:]...)
	var want []record.StateChange
	for _, c := range cs {
		want = append(want, storedChange(c))
	}
	if got := states(t, s, journal.StateQuery{}); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	writeStates(t, s, dirty[0])
	got := states(t, s, journal.StateQuery{Upstream: "openai\uFFFD"})
	if len(got) != 1 || got[0].To != outlast.Down {
		t.Errorf("the dirty name: got %v, want its one change, cleaned", got)
	}
	// Nothing selected is empty, not nil: the API's list is never null.
	if got := states(t, s, journal.StateQuery{Upstream: "none"}); got == nil || len(got) != 0 {
		t.Errorf("no changes: got %#v, want an empty list", got)
	}
}

func testStatesQuery(t *testing.T, b backend) {
	s := open(t, b.fresh(t))
	a, o := outage("anthropic"), outage("openai")
	writeStates(t, s, append(a, o...)...)
	tests := []struct {
		name string
		q    journal.StateQuery
		want []record.StateChange
	}{
		// Every upstream's, by time; at one time, in the order written.
		{"all", journal.StateQuery{}, []record.StateChange{a[0], o[0], a[1], o[1], a[2], a[3], o[2], o[3], a[4], o[4], a[5], o[5]}},
		// One upstream's.
		{"upstream", journal.StateQuery{Upstream: "openai"}, o},
		// Since is inclusive of a change at that very millisecond.
		{"since", journal.StateQuery{Upstream: "openai", Since: t0.Add(3 * time.Second)}, o[4:]},
		// The newest of those selected, oldest first.
		{"limit", journal.StateQuery{Upstream: "anthropic", Limit: 2}, a[4:]},
		// A limit that cuts a millisecond keeps its later change.
		{"limit within a millisecond", journal.StateQuery{Upstream: "openai", Limit: 3}, o[3:]},
		// Limit and since together: the newest within the window.
		{"since and limit", journal.StateQuery{Upstream: "anthropic", Since: t0.Add(time.Second), Limit: 3}, a[3:]},
	}
	for _, c := range tests {
		var want []record.StateChange
		for _, x := range c.want {
			want = append(want, storedChange(x))
		}
		if got := states(t, s, c.q); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got  %v\nwant %v", c.name, got, want)
		}
	}
}

func testStatesLimit(t *testing.T, b backend) {
	s := open(t, b.fresh(t))
	cs := make([]record.StateChange, journal.MaxLimit+1)
	for i := range cs {
		cs[i] = change("up", t0.Add(time.Duration(i)*time.Millisecond), outlast.Healthy, outlast.Down)
	}
	writeStates(t, s, cs...)
	for _, c := range []struct {
		name  string
		limit int
		want  int
	}{
		{"zero is the default", 0, journal.DefaultLimit},
		{"max", journal.MaxLimit, journal.MaxLimit},
		{"over max is max", journal.MaxLimit * 5, journal.MaxLimit},
	} {
		got := states(t, s, journal.StateQuery{Limit: c.limit})
		if len(got) != c.want || !got[len(got)-1].At.Equal(storedChange(cs[len(cs)-1]).At) {
			t.Errorf("%s: got %d changes, want the newest %d", c.name, len(got), c.want)
		}
	}
	if _, err := s.States(context.Background(), journal.StateQuery{Limit: -1}); err == nil {
		t.Errorf("limit -1: got no error, want one")
	}
}

func testStatesInvalid(t *testing.T, b backend) {
	s := open(t, b.fresh(t))
	good := change("up", t0, outlast.Healthy, outlast.Down)
	for _, c := range []struct {
		name string
		bad  record.StateChange
	}{
		// The time orders every list.
		{"no time", change("up", time.Time{}, outlast.Down, outlast.Probing)},
		// Fixed-width text times sort only within four-digit years.
		{"year 10000", change("up", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), outlast.Down, outlast.Probing)},
	} {
		err := s.WriteStates(context.Background(), []record.StateChange{good, c.bad})
		if !errors.Is(err, journal.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", c.name, err)
		}
		if got := states(t, s, journal.StateQuery{}); len(got) != 0 {
			t.Errorf("%s: the failed batch left %v", c.name, got)
		}
	}
}

func testStatesUnknown(t *testing.T, b backend) {
	spec := b.fresh(t)
	s := open(t, spec)
	writeStates(t, s, change("up", t0, outlast.Healthy, outlast.Down))
	if _, err := b.raw(t, spec).ExecContext(context.Background(), `UPDATE outlast_upstream_states SET to_state = 'draining'`); err != nil {
		t.Fatal(err)
	}
	got := states(t, s, journal.StateQuery{})
	if len(got) != 1 || got[0].From != outlast.Healthy || got[0].To != journal.UnknownState {
		t.Errorf("got %v, want healthy to %v", got, journal.UnknownState)
	}
}

func testStatesPrune(t *testing.T, b backend) {
	spec := b.fresh(t)
	s := open(t, spec)
	var old []record.StateChange
	for i := range 2500 { // more than one prune chunk
		old = append(old, change(fmt.Sprint("up", i%3), t0.Add(-time.Hour+time.Duration(i)*time.Millisecond), outlast.Healthy, outlast.Down))
	}
	writeStates(t, s, old...)
	edge, later := change("up", t0, outlast.Down, outlast.Probing), change("up", t0.Add(time.Minute), outlast.Probing, outlast.Recovering)
	writeStates(t, s, edge, later)
	write(t, s, request("r1", "", t0.Add(time.Hour), 200, 1))
	n, err := s.Prune(context.Background(), t0)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	// Prune counts requests; the one request is newer than the cut.
	if n != 0 {
		t.Errorf("Prune: got %d requests deleted, want 0", n)
	}
	// edge, at the cut itself, stays.
	if got, want := states(t, s, journal.StateQuery{}), []record.StateChange{storedChange(edge), storedChange(later)}; !reflect.DeepEqual(got, want) {
		t.Errorf("left: got %v, want %v", got, want)
	}
	if got := count(t, b, spec, "outlast_requests"); got != 1 {
		t.Errorf("requests left: got %d, want 1", got)
	}
}
