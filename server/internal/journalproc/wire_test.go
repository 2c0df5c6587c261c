package journalproc

import (
	"bufio"
	"bytes"
	"encoding/gob"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outlast-llm/outlast/record"
)

// fill sets every field v holds, however deep, to a value of its own that
// is not the zero value, counting on *n to tell the values apart.
func fill(t testing.TB, v reflect.Value, n *int) {
	*n++
	switch v.Type() {
	case reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(time.Unix(1_700_000_000+int64(*n), int64(*n)*1001).UTC()))
		return
	case reflect.TypeFor[http.Header]():
		v.Set(reflect.ValueOf(http.Header{
			"X-One": {"a" + strings.Repeat("b", *n)},
			"X-Two": {"c", "d"},
		}))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("s" + strings.Repeat("x", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n) * -1_000_003) // negative, and over a byte
	case reflect.Uint8:
		v.SetUint(uint64(*n))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(t, v.Index(i), n)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			fill(t, v.Field(i), n)
		}
	default:
		t.Fatalf("fill: a field of type %s: teach fill and the pipe's encoding about it", v.Type())
	}
}

// diff names the fields of got and want, however deep, that differ.
func diff(path string, got, want reflect.Value) []string {
	if got.Type() == reflect.TypeFor[time.Time]() {
		if !got.Interface().(time.Time).Equal(want.Interface().(time.Time)) {
			return []string{path}
		}
		return nil
	}
	switch got.Kind() {
	case reflect.Struct:
		var d []string
		for i := range got.NumField() {
			d = append(d, diff(path+"."+got.Type().Field(i).Name, got.Field(i), want.Field(i))...)
		}
		return d
	case reflect.Slice:
		if got.Len() != want.Len() {
			return []string{path}
		}
		var d []string
		for i := range got.Len() {
			d = append(d, diff(path+"[]", got.Index(i), want.Index(i))...)
		}
		return d
	}
	if !reflect.DeepEqual(got.Interface(), want.Interface()) {
		return []string{path}
	}
	return nil
}

func roundTrip(t *testing.T, m *message) *message {
	t.Helper()
	b := appendMessage(nil, m)
	var got message
	if _, err := readMessage(bufio.NewReader(bytes.NewReader(b)), nil, &got); err != nil {
		t.Fatalf("reading back the frame written: %v", err)
	}
	return &got
}

// TestEveryFieldCrosses checks that every field of a record, of its
// attempts, moves and continuations, and of a state change, crosses the
// pipe unchanged: a field added to them fails it until wire.go encodes it.
func TestEveryFieldCrosses(t *testing.T) {
	var n int
	var want message
	want.Requests = make([]record.Request, 2)
	fill(t, reflect.ValueOf(&want.Requests).Elem(), &n)
	got := roundTrip(t, &message{Requests: want.Requests})
	for _, f := range diff("Request", reflect.ValueOf(got.Requests), reflect.ValueOf(want.Requests)) {
		t.Errorf("%s did not cross the pipe", f)
	}
	if got.States != nil {
		t.Errorf("a batch of records came out with state changes: %v", got.States)
	}

	want.States = make([]record.StateChange, 3)
	fill(t, reflect.ValueOf(&want.States).Elem(), &n)
	got = roundTrip(t, &message{States: want.States})
	for _, f := range diff("StateChange", reflect.ValueOf(got.States), reflect.ValueOf(want.States)) {
		t.Errorf("%s did not cross the pipe", f)
	}
	if got.Requests != nil {
		t.Errorf("a batch of state changes came out with records: %v", got.Requests)
	}
}

// TestZeroValuesCross checks the values fill never makes: zero times, a
// nil header, no attempts, and entries whose every field is zero, the
// smallest the reader's bounds on a count allow, come back as they went;
// and an empty batch, the parent's first write, is a batch of no records.
func TestZeroValuesCross(t *testing.T) {
	for _, want := range []message{
		{Requests: []record.Request{{ID: "a"}, {ID: "b", Header: http.Header{}}}},
		// Each list alone, of entries at their smallest, so that a
		// bound set too high on a count refuses it.
		{Requests: make([]record.Request, 3)},
		{Requests: []record.Request{{Attempts: make([]record.Attempt, 3)}}},
		{Requests: []record.Request{{Moves: make([]record.Move, 3)}}},
		{Requests: []record.Request{{Continuations: make([]record.Continuation, 3)}}},
		{States: make([]record.StateChange, 3)},
	} {
		if got := roundTrip(t, &want); !reflect.DeepEqual(*got, want) {
			t.Errorf("got %+v, want %+v", *got, want)
		}
	}
	got := roundTrip(t, &message{})
	if len(got.Requests) != 0 || len(got.States) != 0 {
		t.Errorf("the empty batch came back as %+v", got)
	}
}

// TestFramesInARow checks that frames written one after another are read
// one at a time, and that the end of the pipe between two is io.EOF.
func TestFramesInARow(t *testing.T) {
	var b []byte
	for _, id := range []string{"a", "b", "c"} {
		b = appendMessage(b, &message{Requests: []record.Request{{ID: id}}})
	}
	r := bufio.NewReader(bytes.NewReader(b))
	var buf []byte
	for _, id := range []string{"a", "b", "c"} {
		var m message
		var err error
		if buf, err = readMessage(r, buf, &m); err != nil {
			t.Fatal(err)
		}
		if len(m.Requests) != 1 || m.Requests[0].ID != id {
			t.Fatalf("got %+v, want record %s", m.Requests, id)
		}
	}
	if _, err := readMessage(r, buf, new(message)); err != io.EOF {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
}

// TestBadFrames checks that a frame cut short or out of step is an error
// that says what was wrong, never a record made up.
func TestBadFrames(t *testing.T) {
	good := appendMessage(nil, &message{Requests: batch("r", 2)})
	for _, tc := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"cut in the length", []byte{0x80}, "frame's length"},
		{"cut in the body", good[:len(good)-3], "reading a frame of"},
		{"over the bound", []byte{0xff, 0xff, 0xff, 0xff, 0x7f}, "over the bound"},
		{"unknown kind", []byte{2, 'X', 0}, "unknown kind"},
		{"count over the frame", []byte{3, 'R', 0xff, 0x01}, "more than the frame"},
		{"left over", append([]byte{3}, 'R', 0, 9), "left over"},
		{"bad boolean", []byte{6, 'S', 1, 0, 2, 0, 0}, "a boolean of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m message
			_, err := readMessage(bufio.NewReader(bytes.NewReader(tc.frame)), nil, &m)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error saying %q", err, tc.want)
			}
			if err == io.EOF || errors.Is(err, io.EOF) {
				t.Errorf("a broken frame read as the pipe's end: %v", err)
			}
		})
	}
}

// FuzzReadMessage checks that no input crashes the reader or makes it
// allocate beyond the input's size, and that what it accepts it reads
// back the same once written again.
func FuzzReadMessage(f *testing.F) {
	f.Add(appendMessage(nil, &message{Requests: batch("r", 2)}))
	f.Add(appendMessage(nil, &message{States: []record.StateChange{{Upstream: "u", At: t0, To: 2}}}))
	var n int
	var full message
	full.Requests = make([]record.Request, 1)
	fill(f, reflect.ValueOf(&full.Requests).Elem(), &n)
	f.Add(appendMessage(nil, &full))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m message
		if _, err := readMessage(bufio.NewReader(bytes.NewReader(b)), nil, &m); err != nil {
			return
		}
		again := appendMessage(nil, &m)
		var m2 message
		if _, err := readMessage(bufio.NewReader(bytes.NewReader(again)), nil, &m2); err != nil {
			t.Fatalf("a message read could not be read once written again: %v", err)
		}
		if d := diff("message", reflect.ValueOf(m2), reflect.ValueOf(m)); len(d) > 0 {
			t.Fatalf("written again, these changed: %v", d)
		}
	})
}

// BenchmarkEncodeBatch compares the pipe's encoding of a full batch of
// typical records with encoding/gob's, which it replaced: the parent,
// the gateway's process, pays for it.
func BenchmarkEncodeBatch(b *testing.B) {
	recs := make([]record.Request, 256) // the journal's Writer's batch
	for i := range recs {
		recs[i] = record.Request{
			ID: "019a8f2e-4b1c-7d3e-9f00-0123456789ab", Method: "POST", Path: "/v1/chat/completions",
			Upstream: "openai", Model: "gpt-4o-mini", Start: t0, End: t0.Add(300 * time.Millisecond),
			Status: 200, Committed: true, Bytes: 512,
			Attempts: []record.Attempt{{
				CallID: "019a8f2e-4b1c-7d3e-9f00-0123456789ac", N: 1, Upstream: "openai",
				Start: t0, End: t0.Add(280 * time.Millisecond), Status: 200, Bytes: 512,
			}},
		}
	}
	m := &message{Requests: recs}
	b.Run("gob", func(b *testing.B) {
		w := bufio.NewWriterSize(io.Discard, 64<<10)
		enc := gob.NewEncoder(w)
		b.ReportAllocs()
		for b.Loop() {
			if err := enc.Encode(m); err != nil {
				b.Fatal(err)
			}
			w.Flush()
		}
	})
	b.Run("wire", func(b *testing.B) {
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			buf = appendMessage(buf[:0], m)
		}
	})
}
