package journal_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/journal"
	"github.com/outlast-llm/outlast/record"
)

// TestObserver checks what the journal's observer keeps of a finished
// request: its headers only when asked, and its attempts as they were at
// Done, whatever the gateway does with its own list afterwards.
func TestObserver(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cfg        journal.ObserverConfig
		wantHeader http.Header
	}{
		// The default keeps no header: storing them was most of the cost.
		{"no headers", journal.ObserverConfig{}, http.Header{}},
		// Headers as the gateway reports them; the store still drops a
		// credential the gateway should not have left.
		{"headers", journal.ObserverConfig{Headers: true}, http.Header{"Content-Type": {"application/json"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := open(t, sqliteBackend.fresh(t))
			w := journal.NewWriter(s, journal.WriterConfig{Logger: quiet})
			r := request("r1", "", t0, 503, 2)
			r.Header = http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer sk"}}
			r.Attempts[0].Class = outlast.ClassStatus5xx
			want := stored(r)
			want.Header = tt.wantHeader

			journal.Observer(w, tt.cfg).Done(&r)
			// The gateway's list is its own: a change after Done must not
			// reach the record.
			r.Attempts[0].Class = outlast.ClassOther
			closeWriter(t, w)
			if got := get(t, s, "r1"); !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestObserverStates checks that the observer keeps each change of an
// upstream's state, through the writer, in the order the gateway told it.
func TestObserverStates(t *testing.T) {
	t.Parallel()
	s := open(t, sqliteBackend.fresh(t))
	w := journal.NewWriter(s, journal.WriterConfig{Logger: quiet})
	obs := journal.Observer(w, journal.ObserverConfig{})
	var want []record.StateChange
	for _, c := range outage("up") {
		obs.UpstreamState(c)
		want = append(want, storedChange(c))
	}
	closeWriter(t, w)
	if got := states(t, s, journal.StateQuery{}); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}
