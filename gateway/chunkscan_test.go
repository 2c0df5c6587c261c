package gateway

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// chunkSeeds are events as OpenAI and Anthropic send them, and texts
// that encoding/json reads in ways a scanner could miss: keys in another
// case or escaped, keys given twice, values of other types, nulls.
var chunkSeeds = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel\u006co \"x\"\n"},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`,
	`{"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
	`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":""}}]}}]}`,
	`{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}`,
	`{"id":"c","choices":[{"index":1,"delta":{"content":"b"}},{"index":0,"delta":{"content":"a"}}]}`,
	`{"error":{"message":"overloaded","type":"server_error"}}`,
	`{"ID":"upper","Choices":[{"Index":0,"Delta":{"Content":"x"}}]}`,
	`{"\u0069d":"escaped","choices":null}`,
	`{"id":"a","id":"b"}`,
	`{"choices":[{"delta":{"content":"a"},"delta":{"role":"r"}}]}`,
	`{"choices":[null,{"index":null,"delta":null,"finish_reason":null}]}`,
	`{"choices":[{"index":1e0}]}`,
	`{"choices":[{"index":-0}]}`,
	`{"choices":[{"index":9223372036854775808}]}`,
	`{"choices":{"index":0}}`,
	`{"id":5}`,
	`{"choices":[{"delta":{"content":"\xff\xfe"}}]}`,
	`{"choſces":[]}`,
	`null`,
	`[1]`,
	`{"id":"x"} trailing`,
	`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[]}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi \ud83d\ude00"}}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`,
	`{"type":"message_stop"}`,
	`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
	`{"type":"content_block_delta","Index":2,"delta":{"Type":"text_delta"}}`,
	`{"message":null,"content_block":"text","delta":{"stop_reason":1}}`,
}

// FuzzReadOAChunk checks readOAChunk against encoding/json: whatever the
// text, it reads what json.Unmarshal reads, and fails where it fails.
func FuzzReadOAChunk(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want oaChunk
		var j oaChunkJSON
		wantErr := json.Unmarshal(data, &j)
		if wantErr == nil {
			j.into(&want)
		}
		got := oaChunk{Choices: make([]oaChoice, 1, 4)} // room from an earlier chunk
		err := readOAChunk(data, &got, true)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("readOAChunk(%q): error %v, json.Unmarshal's %v", data, err, wantErr)
		}
		// A first event's walk reads the chunk and the probe's object and
		// type at once; when it is sure, it reads them as encoding/json.
		first := oaChunk{Choices: make([]oaChoice, 1, 4)}
		var object, typ string
		sure := scanFirst(data, &first, true, &object, &typ)
		if sure && wantErr != nil {
			t.Fatalf("scanFirst(%q) is sure of a text json.Unmarshal fails on: %v", data, wantErr)
		}
		if err != nil {
			return
		}
		if got.ID != want.ID || !bytes.Equal(got.Error, want.Error) || len(got.Choices) != len(want.Choices) {
			t.Fatalf("readOAChunk(%q) = %+v, json.Unmarshal reads %+v", data, got, want)
		}
		for i := range got.Choices {
			if !reflect.DeepEqual(normal(got.Choices[i]), normal(want.Choices[i])) {
				t.Fatalf("readOAChunk(%q): choice %d is %+v, json.Unmarshal reads %+v", data, i, got.Choices[i], want.Choices[i])
			}
		}
		if !sure {
			return
		}
		var probe struct {
			Object string `json:"object"`
			Type   string `json:"type"`
		}
		if json.Unmarshal(data, &probe) != nil || probe.Object != object || probe.Type != typ {
			t.Fatalf("scanFirst(%q): object %q, type %q; json.Unmarshal reads %+v", data, object, typ, probe)
		}
		if !reflect.DeepEqual(first, got) {
			t.Fatalf("scanFirst(%q) = %+v, readOAChunk reads %+v", data, first, got)
		}
	})
}

// normal makes a choice's empty raw values nil, as encoding/json leaves
// an absent one.
func normal(c oaChoice) oaChoice {
	if len(c.ToolCalls) == 0 {
		c.ToolCalls = nil
	}
	if len(c.FunctionCall) == 0 {
		c.FunctionCall = nil
	}
	return c
}

// FuzzReadAnEvent checks readAnEvent, and detectAPI's scanProbe, against
// encoding/json, as FuzzReadOAChunk does readOAChunk.
func FuzzReadAnEvent(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var j anEventJSON
		wantErr := json.Unmarshal(data, &j)
		want := anEvent{Type: j.Type, Index: j.Index, MessageID: j.Message.ID, BlockType: j.ContentBlock.Type,
			DeltaType: j.Delta.Type, Text: j.Delta.Text, StopReason: j.Delta.StopReason != nil}
		var got anEvent
		err := readAnEvent(data, &got)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("readAnEvent(%q): error %v, json.Unmarshal's %v", data, err, wantErr)
		}
		if err == nil && got != want {
			t.Fatalf("readAnEvent(%q) = %+v, json.Unmarshal reads %+v", data, got, want)
		}
		// detectAPI's probe, read the same way.
		var probe struct {
			Object string `json:"object"`
			Type   string `json:"type"`
		}
		var object, typ string
		if scanProbe(data, &object, &typ) {
			if !json.Valid(data) || json.Unmarshal(data, &probe) != nil || probe.Object != object || probe.Type != typ {
				t.Fatalf("scanProbe(%q) = %q, %q; json.Unmarshal reads %+v", data, object, typ, probe)
			}
		}
	})
}

// TestReadChunkScans checks that the events providers send are read by
// the scanner, not handed to encoding/json: the scanner is what keeps a
// stream's chunks from allocating for each field.
func TestReadChunkScans(t *testing.T) {
	for _, s := range chunkSeeds[:8] {
		var c oaChunk
		if !scanOAChunk([]byte(s), &c, true) {
			t.Errorf("scanOAChunk(%s): not sure", s)
		}
	}
	for _, s := range chunkSeeds[23:29] {
		var e anEvent
		if !scanAnEvent([]byte(s), &e) {
			t.Errorf("scanAnEvent(%s): not sure", s)
		}
	}
	if raceOn {
		return // the counts below mean nothing under the race detector
	}
	data := []byte(chunkSeeds[1])
	var c oaChunk
	readOAChunk(data, &c, false)
	if n := testing.AllocsPerRun(100, func() { readOAChunk(data, &c, false) }); n > 1 {
		t.Errorf("reading a chunk with an escaped text: %v allocations, want at most 1 (its text)", n)
	}
	data = []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"plain"},"finish_reason":null}]}`)
	if n := testing.AllocsPerRun(100, func() { readOAChunk(data, &c, false) }); n > 1 {
		t.Errorf("reading a chunk: %v allocations, want at most 1 (its text)", n)
	}
}

// FuzzJSONString checks jsonString against encoding/json on any string
// token: escapes, surrogate pairs whole and broken, bytes that are not
// UTF-8.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{`plain`, `a\nb\"c\\d\/e\tf\u00e9`, `\ud83d\ude00`, `\ud83d`, `\ud83dx`, `\ude00\ud83d`, `\ud83d\u0041`, "\xff\xfe", `\x`, `\u12`, "tab\there", `quote"inside`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v := append(append([]byte{'"'}, raw...), '"')
		var want string
		if json.Unmarshal(v, &want) != nil {
			return // not a string token: jsonString's raw fallback is its own
		}
		if got := jsonString(v); got != want {
			t.Fatalf("jsonString(%s) = %q, json.Unmarshal reads %q", v, got, want)
		}
	})
}
